"""The causal language model: built from a config or loaded, made Opacus-ready, saved.

Two sources, one config key (``synth.dplm.model``):

- a hub id or local path (e.g. ``microsoft/biogpt`` on a GPU node) loaded
  with ``from_pretrained``; the control-code and placeholder tokens are added
  and the embeddings resized;
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
from collections.abc import Iterable, Mapping, Sequence
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


def load_pretrained_lm(name: str, special_tokens: Sequence[str]) -> tuple[Any, Any]:
    """``from_pretrained`` a causal LM; add the special tokens (and pad/bos/eos if missing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name)
    except OSError as exc:
        raise ConfigError(
            f"synth.dplm.model {name!r} could not be loaded ({exc}); give a local directory "
            "or a hub id reachable from this machine (HF_HUB_OFFLINE=1 forbids downloads)"
        ) from exc
    extra: dict[str, Any] = {"additional_special_tokens": list(special_tokens)}
    for role, token in (("bos_token", BOS), ("eos_token", EOS), ("pad_token", PAD)):
        if getattr(tokenizer, role) is None:
            extra[role] = token
    tokenizer.add_special_tokens(extra)
    model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def build_lm(
    name: str | None,
    scratch: ScratchConfig,
    texts: Sequence[str],
    special_tokens: Sequence[str],
    *,
    seed: int,
) -> tuple[Any, Any, dict[str, Any]]:
    """The model, its tokenizer and a description for provenance."""
    if name is None:
        model, tokenizer = build_scratch_lm(texts, scratch, special_tokens, seed)
        described = {
            "source": "scratch",
            "scratch": asdict(scratch),
            "tokenizer_fit_on_training_text": True,
        }
    else:
        model, tokenizer = load_pretrained_lm(name, special_tokens)
        described = {"source": name, "tokenizer_fit_on_training_text": False}
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    described["parameters"] = sum(p.numel() for p in model.parameters())
    described["vocabulary"] = len(tokenizer)
    return model, tokenizer, described


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
        n_in, n_out = conv.weight.shape
        linear = nn.Linear(n_in, n_out, device=conv.weight.device, dtype=conv.weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(conv.weight.t())
            linear.bias.copy_(conv.bias)
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
                with torch.no_grad():
                    conv.weight.copy_(child.weight.t())
                    conv.bias.copy_(child.bias)
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


def prepare_for_opacus(model: nn.Module, *, untie: bool) -> tuple[nn.Module, OpacusPreparation]:
    """Make ``model`` trainable by Opacus, or fail naming the module that is not."""
    from opacus.validators import ModuleValidator

    replaced = conv1d_to_linear(model)
    untied = untie_lm_head(model) if untie else False
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
    model = AutoModelForCausalLM.from_pretrained(directory).to(device)
    model.eval()
    return model, tokenizer
