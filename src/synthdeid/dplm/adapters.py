"""Parameter-efficient DP fine-tuning: LoRA adapters plus the added tokens' rows.

With ``synth.dplm.lora`` set, the pretrained weights stay frozen and DP-SGD
trains only (as in Yu et al. 2022, "Differentially private fine-tuning of
language models", and dp-transformers):

* low-rank adapters (``peft`` LoRA) on the attention projections named by
  ``target_modules`` (null: peft's default for the architecture, e.g.
  ``q_proj``/``v_proj`` for Llama-style models, ``c_attn`` for GPT-2);
* the rows of the tokens the pipeline adds (control codes, placeholders): the
  input embedding and the output head each get a small trainable
  ``nn.Embedding``/``nn.Linear`` of just those rows (:class:`AddedTokenEmbedding`,
  :class:`AddedTokenHead`) beside the frozen pretrained matrix, so the DP
  noise goes into a few thousand numbers, not the whole vocabulary.

Both are modules Opacus computes per-sample gradients for (``nn.Linear``,
``nn.Embedding``), with hooks or ghost clipping. :func:`merge_adapters`
folds everything back into a standard Hugging Face model (LoRA merged, the
embedding and head resized, the new rows copied in, the head untied), so a
saved LoRA model loads like any other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from synthdeid.errors import ConfigError
from synthdeid.settings import settings_from_mapping


@dataclass(frozen=True)
class LoraSettings:
    """``synth.dplm.lora``: the adapters DP-SGD trains (null in config: full fine-tuning)."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] | None = None  # None: peft's default for the model type

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LoraSettings:
        data = dict(data)
        if isinstance(data.get("target_modules"), list):
            data["target_modules"] = tuple(data["target_modules"])
        settings = settings_from_mapping(cls, data, "synth.dplm.lora")
        if settings.rank < 1:
            raise ConfigError(f"synth.dplm.lora.rank must be >= 1, got {settings.rank}")
        if settings.alpha <= 0:
            raise ConfigError(f"synth.dplm.lora.alpha must be > 0, got {settings.alpha}")
        if not 0 <= settings.dropout < 1:
            raise ConfigError(f"synth.dplm.lora.dropout must be in [0, 1), got {settings.dropout}")
        return settings

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class AddedTokenEmbedding(nn.Module):
    """A frozen embedding of the first ``base.num_embeddings`` ids plus trainable rows
    (``added``) for the ids after them."""

    def __init__(self, base: nn.Embedding, added: nn.Embedding) -> None:
        super().__init__()
        self.base = base
        self.added = added
        self.offset = base.num_embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        is_added = (input_ids >= self.offset).unsqueeze(-1)
        old = self.base(input_ids.clamp(max=self.offset - 1))
        new = self.added((input_ids - self.offset).clamp(min=0))
        return torch.where(is_added, new, old)


class AddedTokenHead(nn.Module):
    """The frozen output head's logits followed by those of the added tokens' rows."""

    def __init__(self, base: nn.Module, added: nn.Linear) -> None:
        super().__init__()
        self.base = base
        self.added = added

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.base(hidden), self.added(hidden)], dim=-1)


def attach_added_tokens(model: Any, base_vocabulary: int, vocabulary: int) -> int:
    """Freeze ``model``'s input embedding and output head at their first
    ``base_vocabulary`` rows and give the ``vocabulary - base_vocabulary`` added
    tokens trainable rows of their own, initialised to the mean pretrained
    embedding (and head row), as ``resize_token_embeddings`` does. Returns the
    number of added rows. ``model`` must not have been resized yet."""
    count = vocabulary - base_vocabulary
    embeddings = model.get_input_embeddings()
    head = model.get_output_embeddings()
    if not isinstance(embeddings, nn.Embedding) or embeddings.num_embeddings != base_vocabulary:
        raise ConfigError(
            f"cannot add token rows: the input embedding has "
            f"{getattr(embeddings, 'num_embeddings', '?')} rows, expected {base_vocabulary}"
        )
    if count <= 0:
        return 0
    weight = embeddings.weight
    embedding_rows = nn.Embedding(count, weight.shape[1], device=weight.device, dtype=weight.dtype)
    head_rows = nn.Linear(weight.shape[1], count, bias=False, device=weight.device)
    head_rows.to(dtype=weight.dtype)
    with torch.no_grad():
        embedding_rows.weight.copy_(weight.mean(dim=0).expand(count, -1))
        head_weight = head.weight if head is not None else weight
        head_rows.weight.copy_(head_weight.mean(dim=0).expand(count, -1))
    model.set_input_embeddings(AddedTokenEmbedding(embeddings, embedding_rows))
    model.set_output_embeddings(AddedTokenHead(head, head_rows))
    model.config.vocab_size = vocabulary
    return count


def apply_lora(model: Any, settings: LoraSettings, *, base_vocabulary: int, vocabulary: int) -> Any:
    """``model`` with frozen pretrained weights, LoRA adapters and trainable added-token
    rows (the only parameters left with ``requires_grad``)."""
    from peft import LoraConfig, get_peft_model

    for parameter in model.parameters():
        parameter.requires_grad_(False)
    attach_added_tokens(model, base_vocabulary, vocabulary)
    config = LoraConfig(
        r=settings.rank,
        # peft annotates an int, but only divides by it: a float scale is kept as given
        lora_alpha=settings.alpha,  # type: ignore[arg-type]
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules) if settings.target_modules else None,
        bias="none",
    )
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as error:
        raise ConfigError(f"synth.dplm.lora: {error}") from error
    # peft freezes everything but the adapters: the added rows train too
    for module in peft_model.modules():
        if isinstance(module, AddedTokenEmbedding | AddedTokenHead):
            module.added.weight.requires_grad_(True)
    return peft_model


def merge_adapters(model: Any) -> Any:
    """A standard Hugging Face model from :func:`apply_lora`'s: LoRA merged into the
    weights, the added rows appended to the embedding and the (untied) head."""
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    embeddings = merged.get_input_embeddings()
    head = merged.get_output_embeddings()
    if not isinstance(embeddings, AddedTokenEmbedding):
        return merged
    assert isinstance(head, AddedTokenHead)
    base_head_weight = head.base.weight
    assert isinstance(base_head_weight, torch.Tensor)  # the pretrained head's weight
    with torch.no_grad():
        embedding_weight = torch.cat([embeddings.base.weight, embeddings.added.weight])
        head_weight = torch.cat([base_head_weight, head.added.weight])
        head_bias = getattr(head.base, "bias", None)
    vocabulary, width = embedding_weight.shape
    new_embeddings = nn.Embedding(
        vocabulary, width, device=embedding_weight.device, dtype=embedding_weight.dtype
    )
    new_head = nn.Linear(width, vocabulary, bias=head_bias is not None)
    new_head.to(device=head_weight.device, dtype=head_weight.dtype)
    with torch.no_grad():
        new_embeddings.weight.copy_(embedding_weight)
        new_head.weight.copy_(head_weight)
        if head_bias is not None:
            new_head.bias.copy_(
                torch.cat([head_bias, head_bias.new_zeros(vocabulary - len(head_bias))])
            )
    merged.set_input_embeddings(new_embeddings)
    merged.set_output_embeddings(new_head)
    merged.config.vocab_size = vocabulary
    merged.config.tie_word_embeddings = False
    for parameter in merged.parameters():
        parameter.requires_grad_(False)
    return merged


_LAYER_NUMBER_RE = re.compile(r"\.\d+\.")


def trained_parameters(model: nn.Module, mode: str) -> dict[str, Any]:
    """What DP-SGD trained, for privacy.json: the mode, the counts and the parameter
    names with layer numbers folded (``model.layers.*.self_attn.q_proj.lora_A...``)."""
    names: list[str] = []
    trained = total = 0
    for name, parameter in model.named_parameters():
        total += parameter.numel()
        if parameter.requires_grad:
            trained += parameter.numel()
            names.append(_LAYER_NUMBER_RE.sub(".*.", name))
    return {
        "mode": mode,
        "trained": trained,
        "total": total,
        "share": trained / total if total else None,
        "tensors": len(names),
        "names": sorted(set(names)),
    }
