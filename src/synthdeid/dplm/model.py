"""The causal language model: built from a config or loaded, made Opacus-ready, saved.

Two sources, one config key (``synth.dplm.model``):

- a pretrained model named as :func:`synthdeid.llm.models.resolve_model`
  accepts: ``bundled:smollm2`` (the GGUF inside a pip package, dequantized
  into a torch model once, :mod:`synthdeid.llm.conversion`), a GGUF file, a
  Hugging Face directory, or a hub id (``microsoft/biogpt`` on a node with
  the hub or its cache), loaded with ``from_pretrained``. The control-code and
  placeholder tokens are added; for full fine-tuning the embeddings are
  resized (new rows at the mean embedding, then trained), for LoRA the new
  rows live beside the frozen matrix (:mod:`synthdeid.dplm.adapters`);
- ``null``: a small GPT-2 initialised from ``synth.dplm.scratch`` with a
  byte-level BPE tokenizer trained on the training text. The tokenizer is fit
  on private text without noise, so its vocabulary is *not* covered by the DP
  guarantee; ``min_frequency`` (default 5) keeps strings seen in fewer notes
  than that out of the merges, and privacy.json records the caveat.

Opacus preparation (:func:`prepare_for_opacus`): GPT-2's ``Conv1D`` layers
are swapped for equivalent ``nn.Linear`` layers (Opacus computes their
per-sample gradients with a faster kernel), the LM head is untied from the
input embeddings for ghost clipping (which refuses shared parameters), and
``ModuleValidator`` must report no incompatible module; one it can fix is
fixed, anything else is an error naming the module. :func:`save_lm` swaps
the ``Conv1D`` layers back, so the saved directory is a standard Hugging Face
checkpoint.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from synthdeid.errors import ConfigError
from synthdeid.settings import settings_from_mapping

log = logging.getLogger(__name__)

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"


@dataclass(frozen=True)
class ScratchConfig:
    """A small GPT-2 built from a config (CPU runs and tests)."""

    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    n_positions: int = 256
    vocab_size: int = 1000
    min_frequency: int = 5

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ScratchConfig:
        config = settings_from_mapping(cls, data, "synth.dplm.scratch")
        if config.n_embd % config.n_head:
            raise ConfigError(
                f"synth.dplm.scratch: n_embd {config.n_embd} is not a multiple of "
                f"n_head {config.n_head}"
            )
        return config


def train_bpe_tokenizer(
    texts: Iterable[str], *, vocab_size: int, min_frequency: int, special_tokens: Sequence[str]
) -> Any:
    """A byte-level BPE tokenizer (any text encodes) with the given added special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    return tokenizer


def build_scratch_lm(
    texts: Sequence[str], scratch: ScratchConfig, special_tokens: Sequence[str], seed: int
) -> tuple[Any, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = train_bpe_tokenizer(
        texts,
        vocab_size=scratch.vocab_size,
        min_frequency=scratch.min_frequency,
        special_tokens=special_tokens,
    )
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_layer=scratch.n_layer,
        n_head=scratch.n_head,
        n_embd=scratch.n_embd,
        n_positions=scratch.n_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    return model, tokenizer


@dataclass
class BuiltLm:
    """A model ready to train, its tokenizer, and where the pipeline's tokens begin."""

    model: Any
    tokenizer: Any
    described: dict[str, Any]
    base_vocabulary: int  # rows before the pipeline's tokens were added


def load_pretrained_lm(spec: object, special_tokens: Sequence[str], *, resize: bool) -> BuiltLm:
    """``from_pretrained`` a causal LM; add the special tokens (and pad/bos/eos if missing).

    ``resize``: grow the embeddings for the added tokens (full fine-tuning);
    without it the model keeps exactly one row per original token, and
    :func:`synthdeid.dplm.adapters.apply_lora` gives the added ones their own.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from synthdeid.llm.conversion import load_advice, pretrained_location
    from synthdeid.llm.models import resolve_model

    ref = resolve_model(spec, where="synth.dplm.model")
    location, options = pretrained_location(ref)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **options)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=torch.float32, **options)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"synth.dplm.model {ref.name!r} could not be loaded: {load_advice(ref, exc)}"
        ) from exc
    base_vocabulary = len(tokenizer)
    if model.get_input_embeddings().num_embeddings != base_vocabulary:
        # padded vocabularies: the added tokens must not land in untrained padding rows
        model.resize_token_embeddings(base_vocabulary, mean_resizing=False)
    extra: dict[str, Any] = {"additional_special_tokens": list(special_tokens)}
    for role, token in (("bos_token", BOS), ("eos_token", EOS), ("pad_token", PAD)):
        if getattr(tokenizer, role) is None:
            extra[role] = token
    tokenizer.add_special_tokens(extra)
    if resize:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    described = {"source": ref.describe(), "tokenizer_fit_on_training_text": False}
    return BuiltLm(model, tokenizer, described, base_vocabulary)


def build_lm(
    spec: object,
    scratch: ScratchConfig,
    texts: Sequence[str],
    special_tokens: Sequence[str],
    *,
    seed: int,
    resize: bool = True,
) -> BuiltLm:
    """The model, its tokenizer and a description for provenance (``spec`` None: scratch)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if spec is None:
            model, tokenizer = build_scratch_lm(texts, scratch, special_tokens, seed)
            built = BuiltLm(
                model,
                tokenizer,
                {
                    "source": "scratch",
                    "scratch": asdict(scratch),
                    "tokenizer_fit_on_training_text": True,
                },
                len(tokenizer),
            )
        else:
            built = load_pretrained_lm(spec, special_tokens, resize=resize)
    built.model.generation_config.pad_token_id = built.tokenizer.pad_token_id
    built.described["parameters"] = sum(p.numel() for p in built.model.parameters())
    built.described["vocabulary"] = len(built.tokenizer)
    return built


def _conv1d_class() -> type[nn.Module]:
    from transformers.pytorch_utils import Conv1D

    return Conv1D


def _swap_children(model: nn.Module, match: type[nn.Module], make: Any) -> int:
    swapped = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is match:
                setattr(parent, child_name, make(child))
                swapped += 1
    return swapped


def conv1d_to_linear(model: nn.Module) -> int:
    """Replace every ``Conv1D`` (weight in x out) by the same ``nn.Linear``; returns the count."""

    def make(conv: nn.Module) -> nn.Linear:
        weight, bias = conv.weight, conv.bias
        assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
        n_in, n_out = weight.shape
        linear = nn.Linear(n_in, n_out, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight.t())
            linear.bias.copy_(bias)
        return linear

    return _swap_children(model, _conv1d_class(), make)


def linear_to_conv1d(
    model: nn.Module, names: Sequence[str] = ("c_attn", "c_proj", "c_fc", "q_attn")
) -> int:
    """Undo :func:`conv1d_to_linear` for GPT-2's projection layers (by attribute name)."""
    conv_class = _conv1d_class()
    swapped = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child_name in names:
                conv = conv_class(child.out_features, child.in_features)
                conv.to(device=child.weight.device, dtype=child.weight.dtype)
                weight, bias = conv.weight, conv.bias
                assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
                with torch.no_grad():
                    weight.copy_(child.weight.t())
                    bias.copy_(child.bias)
                setattr(parent, child_name, conv)
                swapped += 1
    return swapped


def untie_lm_head(model: Any) -> bool:
    """Give the LM head its own copy of the tied input embeddings; True if they were tied."""
    head = model.get_output_embeddings()
    embeddings = model.get_input_embeddings()
    if head is None or head.weight is not embeddings.weight:
        return False
    head.weight = nn.Parameter(embeddings.weight.detach().clone())
    model.config.tie_word_embeddings = False
    return True


@dataclass(frozen=True)
class OpacusPreparation:
    conv1d_replaced: int
    untied: bool
    fixed_modules: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def prepare_for_opacus(
    model: nn.Module, *, untie: bool, adapt: Callable[[nn.Module], nn.Module] | None = None
) -> tuple[nn.Module, OpacusPreparation]:
    """Make ``model`` trainable by Opacus, or fail naming the module that is not.

    ``adapt`` (e.g. adding LoRA adapters) runs after the ``Conv1D`` swap and before
    the validation, which then judges the adapted model.
    """
    from opacus.validators import ModuleValidator

    replaced = conv1d_to_linear(model)
    untied = untie_lm_head(model) if untie else False
    if adapt is not None:
        model = adapt(model)
    errors = ModuleValidator.validate(model, strict=False)
    fixed: list[str] = []
    if errors:
        fixed = sorted({type(e).__name__ + ": " + str(e) for e in errors})
        model = ModuleValidator.fix(model)
        remaining = ModuleValidator.validate(model, strict=False)
        if remaining:
            raise ConfigError(
                "Opacus cannot train this model and ModuleValidator could not fix it: "
                + "; ".join(str(e) for e in remaining)
            )
        log.info("ModuleValidator fixed: %s", fixed)
    return model, OpacusPreparation(replaced, untied, fixed)


def accepts_position_ids(model: nn.Module) -> bool:
    return "position_ids" in inspect.signature(model.forward).parameters


def save_lm(model: Any, tokenizer: Any, directory: Path) -> None:
    """A standard Hugging Face checkpoint (``Conv1D`` restored for GPT-2)."""
    if getattr(model.config, "model_type", "") == "gpt2":
        linear_to_conv1d(model)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def load_lm(directory: str | Path, device: torch.device) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    # functools.wraps types transformers' .to as unbound (self first)
    model = AutoModelForCausalLM.from_pretrained(directory).to(device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer
