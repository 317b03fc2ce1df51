"""Task-adaptive pretraining (TAPT): continued masked-language-model training of the encoder.

Zecevic et al. (section 4.8.3) continue the MLM pretraining of the downstream
encoder on the synthetic corpus before fine-tuning it for de-identification
(learning rate 1e-4, 1000 warmup steps, 100 epochs). Here the length of the
run is a number of optimizer steps (``max_steps``), so TAPT runs of different
corpora can be compute-matched.

Data. Texts with fewer than ``min_words`` whitespace-separated words are
skipped (and counted). The rest are tokenized without special tokens and
*concatenated and chunked*, as Hugging Face's ``run_mlm.py`` does in
``group_texts``: the token stream (texts joined by ``[SEP]``) is cut into
consecutive, non-overlapping pieces of ``max_length - 2`` tokens, each wrapped
as ``[CLS] ... [SEP]`` like the NER windows. Unlike ``group_texts`` the last,
shorter piece is kept (it is padded in its batch), so a small corpus loses
nothing. A chunk may therefore span the end of one note and the start of the
next.

Held-out check. A deterministic share of the chunks (``heldout_fraction``, at
least one when there are two or more chunks) is kept out of training. Those
chunks are masked once with a generator seeded by ``seed`` and the MLM loss on
exactly these masked inputs is measured before and after training; the
output records both, so a checkpoint says whether TAPT lowered held-out MLM
loss. Held-out chunks come from the same concatenated stream, so they may
share a note with a training chunk: the check is a sanity check of the run,
not an estimate of generalisation to new notes.

Training. Dynamic masking (``DataCollatorForLanguageModeling``, seeded),
AdamW (fused kernel on CPU and CUDA; no weight decay on biases and LayerNorm
weights), a linear warmup then linear decay to zero, gradient clipping, and
exactly ``max_steps`` optimizer steps, cycling over the training chunks with a
fresh shuffle each epoch. Autocast runs in the number format ``precision``
resolves to (:func:`synthdeid.runtime.resolve_precision`; ``auto``: bf16 where
the GPU or CPU has it natively, fp32 otherwise); ``synthdeid_tapt.json``
records the setting, the format and why.

Output. ``out_dir`` is a Hugging Face directory (``save_pretrained`` of the
MLM model and the tokenizer) plus ``synthdeid_tapt.json``; it is assembled in
a temporary sibling directory and renamed into place. NER training starts from
it by setting ``ner.training.model`` to the directory: the MLM head is dropped
and a token-classification head initialised on the adapted encoder.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from synthdeid.artifacts import atomic_directory
from synthdeid.encoders import describe_model_name, resolve_model_name
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.training import PRECISIONS, optimizer_step
from synthdeid.runtime import (
    pick_device,
    resolve_precision,
    set_seed,
    set_threads,
    warn_if_bf16_emulated,
)

log = logging.getLogger(__name__)

TAPT_CONFIG_FILE = "synthdeid_tapt.json"
IGNORE_INDEX = -100

_INT_KEYS = (
    "max_steps",
    "warmup_steps",
    "batch_size",
    "max_length",
    "seed",
    "min_words",
    "log_every",
)
_FLOAT_KEYS = (
    "learning_rate",
    "weight_decay",
    "mlm_probability",
    "heldout_fraction",
    "max_grad_norm",
)


@dataclass(frozen=True)
class TaptConfig:
    """Hyperparameters of one TAPT run (config key ``ner.tapt``)."""

    model: str | None = None  # hub id, directory or bundled encoder; None = bundled-minilm
    max_steps: int = 200
    learning_rate: float = 1e-4
    warmup_steps: int = 0  # clamped to max_steps - 1
    weight_decay: float = 0.01
    batch_size: int = 16
    max_length: int = 128  # chunk length in tokens, [CLS] and [SEP] included
    mlm_probability: float = 0.15
    seed: int = 0
    min_words: int = 5  # shorter texts are skipped
    heldout_fraction: float = 0.05  # share of chunks kept out to measure MLM loss
    max_grad_norm: float = 1.0
    # auto: bf16 on a GPU with bf16 (else fp16) or a CPU with native bf16 (AVX512-BF16 or
    # AMX), fp32 otherwise (synthdeid.runtime.resolve_precision); fp32, fp16 (GPU), bf16
    precision: str = "auto"
    log_every: int = 50  # log the mean training loss every this many steps

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TaptConfig:
        """Build and check a config; unknown keys and wrong types are :class:`ConfigError`."""
        if not isinstance(data, Mapping):
            raise ConfigError("ner.tapt must be a mapping")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"ner.tapt: unknown keys {sorted(unknown)}")
        values = dict(data)
        for key in _INT_KEYS:
            if key in values and (
                isinstance(values[key], bool) or not isinstance(values[key], int)
            ):
                raise ConfigError(f"ner.tapt.{key} must be an integer, not {values[key]!r}")
        for key in _FLOAT_KEYS:
            if key in values:
                value = values[key]
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigError(f"ner.tapt.{key} must be a number, not {value!r}")
                values[key] = float(value)
        if values.get("model") is not None and not isinstance(values["model"], str):
            raise ConfigError(f"ner.tapt.model must be a string or null, not {values['model']!r}")
        config = cls(**values)
        config.check()
        return config

    def check(self) -> None:
        """Raise :class:`ConfigError` for values that cannot work."""
        for name in ("max_steps", "batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ner.tapt.{name} must be at least 1")
        for name in ("warmup_steps", "min_words"):
            if getattr(self, name) < 0:
                raise ConfigError(f"ner.tapt.{name} must not be negative")
        if self.max_length < 8:
            raise ConfigError("ner.tapt.max_length must be at least 8 tokens")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError("ner.tapt.mlm_probability must lie strictly between 0 and 1")
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ConfigError("ner.tapt.heldout_fraction must lie in [0, 1)")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ConfigError("ner.tapt.learning_rate must be a positive number")
        if self.weight_decay < 0:
            raise ConfigError("ner.tapt.weight_decay must not be negative")
        if self.max_grad_norm <= 0:
            raise ConfigError("ner.tapt.max_grad_norm must be positive")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"ner.tapt.precision: {self.precision!r} not in {PRECISIONS}")

    @property
    def effective_warmup_steps(self) -> int:
        """``warmup_steps`` clamped below ``max_steps`` (the schedule must reach its peak)."""
        return min(self.warmup_steps, self.max_steps - 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TaptResult:
    """What a TAPT run did; ``metadata`` is what ``synthdeid_tapt.json`` holds."""

    out_dir: Path
    n_texts: int
    n_skipped: int
    n_chunks: int
    n_train_chunks: int
    n_heldout_chunks: int
    steps: int
    epochs: int
    heldout_loss_before: float | None
    heldout_loss_after: float | None
    losses: list[float] = field(default_factory=list)  # training loss of every step
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def improved(self) -> bool | None:
        """Whether held-out MLM loss went down (None when it was not measured)."""
        if self.heldout_loss_before is None or self.heldout_loss_after is None:
            return None
        return self.heldout_loss_after < self.heldout_loss_before


def make_chunks(
    texts: Sequence[str], tokenizer: Any, max_length: int
) -> tuple[list[list[int]], int]:
    """Concatenate-and-chunk the tokenized texts; returns the chunks and the token count.

    Each chunk is ``[CLS] + up to max_length - 2 tokens + [SEP]``; texts are
    joined by ``[SEP]`` in the stream; the last, shorter chunk is kept.
    """
    if not texts:
        return [], 0
    encoded = tokenizer(
        list(texts), add_special_tokens=False, return_attention_mask=False, verbose=False
    )["input_ids"]
    stream: list[int] = []
    for i, ids in enumerate(encoded):
        if i:
            stream.append(tokenizer.sep_token_id)
        stream.extend(ids)
    body = max_length - 2
    chunks = [
        [tokenizer.cls_token_id, *stream[start : start + body], tokenizer.sep_token_id]
        for start in range(0, len(stream), body)
    ]
    return chunks, len(stream)


def heldout_indices(n_chunks: int, fraction: float, seed: int) -> list[int]:
    """Deterministic held-out chunk indices: ``round(fraction * n)``, at least 1 when n >= 2."""
    if n_chunks < 2 or fraction <= 0:
        return []
    n_heldout = min(n_chunks - 1, max(1, round(fraction * n_chunks)))
    order = np.random.default_rng([seed, 20_104]).permutation(n_chunks)
    return sorted(int(i) for i in order[:n_heldout])


def _load_mlm(name: str) -> tuple[Any, Any]:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForMaskedLM.from_pretrained(name)
    if tokenizer.mask_token_id is None or tokenizer.cls_token_id is None:
        raise ConfigError(f"ner.tapt.model {name!r}: the tokenizer has no [MASK] or [CLS] token")
    output, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if getattr(model.config, "tie_word_embeddings", False) and output is not None:
        if output.weight is not embeddings.weight:
            model.tie_weights()
        if output.weight is not embeddings.weight:
            raise ConfigError(f"ner.tapt.model {name!r}: MLM decoder not tied to the embeddings")
    return model, tokenizer


def _optimizer(
    model: torch.nn.Module, config: TaptConfig, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and LayerNorm weights (as the HF Trainer)."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if parameter.ndim < 2 or "LayerNorm" in name or "layer_norm" in name:
            no_decay.append(parameter)
        else:
            decay.append(parameter)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.learning_rate,
        fused=device.type in ("cpu", "cuda"),
    )


def _mlm_loss_sum(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    amp_dtype: torch.dtype | None,
    device: torch.device,
) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy over the masked positions, and their number."""
    inputs = {k: v.to(device) for k, v in batch.items()}
    labels = inputs.pop("labels")
    with torch.autocast(
        device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
    ):
        logits = model(**inputs).logits
    n_masked = int((labels != IGNORE_INDEX).sum())
    if n_masked == 0:  # nothing masked in this batch: a zero loss that still has a graph
        return logits.float().sum() * 0.0, 0
    loss = torch.nn.functional.cross_entropy(
        logits.float().view(-1, logits.shape[-1]),
        labels.view(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    return loss, n_masked


@torch.inference_mode()
def heldout_loss(
    model: torch.nn.Module,
    batches: Sequence[Mapping[str, torch.Tensor]],
    amp_dtype: torch.dtype | None,
    device: torch.device,
) -> float | None:
    """Mean MLM loss per masked token over pre-masked batches (None if nothing is masked)."""
    if not batches:
        return None
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        loss, n = _mlm_loss_sum(model, batch, amp_dtype, device)
        total += float(loss)
        count += n
    if was_training:
        model.train()
    return total / count if count else None


def _save_directory(
    model: torch.nn.Module, tokenizer: Any, metadata: Mapping[str, Any], out_dir: Path
) -> None:
    """Write weights, tokenizer and ``synthdeid_tapt.json``; replace ``out_dir`` atomically."""
    with atomic_directory(out_dir) as staging:
        model.save_pretrained(staging)  # type: ignore[operator]  # an HF model's method
        tokenizer.save_pretrained(staging)
        (staging / TAPT_CONFIG_FILE).write_text(json.dumps(metadata, indent=2) + "\n")


def continue_pretraining(
    texts: Sequence[str],
    config: TaptConfig,
    out_dir: Path,
    *,
    device: str = "auto",
    threads: int | None = None,
    progress: bool = True,
    provenance: Mapping[str, Any] | None = None,
) -> TaptResult:
    """Continue MLM pretraining on ``texts`` for ``config.max_steps`` steps; save to ``out_dir``.

    ``provenance`` (the corpus paths, digests and the like) is recorded
    verbatim under ``corpus`` in ``synthdeid_tapt.json``.
    """
    from transformers import DataCollatorForLanguageModeling, get_linear_schedule_with_warmup

    config.check()
    out_dir = Path(out_dir)
    kept = [text for text in texts if len(text.split()) >= config.min_words]
    n_skipped = len(texts) - len(kept)
    if n_skipped:
        log.info("skipped %d of %d texts under %d words", n_skipped, len(texts), config.min_words)
    if not kept:
        raise InputError(
            "TAPT corpus",
            None,
            f"no text with at least {config.min_words} words ({len(texts)} texts given)",
            "pass a non-empty corpus or lower ner.tapt.min_words",
        )

    set_seed(config.seed)  # before loading: the MLM head may be freshly initialised
    set_threads(threads)
    torch_device = pick_device(device)
    model_name = resolve_model_name(config.model)
    model, tokenizer = _load_mlm(model_name)
    max_positions = getattr(model.config, "max_position_embeddings", None)
    if max_positions is not None and config.max_length > max_positions:
        raise ConfigError(
            f"ner.tapt.max_length {config.max_length} exceeds the model's {max_positions} positions"
        )
    model.to(torch_device)

    started = time.perf_counter()
    chunks, n_tokens = make_chunks(kept, tokenizer, config.max_length)
    heldout = set(heldout_indices(len(chunks), config.heldout_fraction, config.seed))
    train_chunks = [chunk for i, chunk in enumerate(chunks) if i not in heldout]
    heldout_chunks = [chunk for i, chunk in enumerate(chunks) if i in heldout]

    # held-out chunks are masked once, so "before" and "after" see identical inputs
    heldout_collator = DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=config.mlm_probability, seed=config.seed
    )
    heldout_batches = [
        heldout_collator(
            [{"input_ids": ids} for ids in heldout_chunks[start : start + config.batch_size]]
        )
        for start in range(0, len(heldout_chunks), config.batch_size)
    ]
    collator = DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=config.mlm_probability, seed=config.seed + 1
    )
    precision = resolve_precision(config.precision, torch_device, setting="ner.tapt.precision")
    amp_dtype = precision.autocast_dtype
    if amp_dtype == torch.bfloat16:
        warn_if_bf16_emulated(torch_device, "tapt")
    optimizer = _optimizer(model, config, torch_device)
    warmup = config.effective_warmup_steps
    if warmup < config.warmup_steps:
        log.warning(
            "warmup_steps %d clamped to %d (max_steps %d)",
            config.warmup_steps,
            warmup,
            config.max_steps,
        )
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, config.max_steps)
    scaler = torch.amp.GradScaler(torch_device.type, enabled=amp_dtype == torch.float16)
    rng = np.random.default_rng(config.seed)
    steps_per_epoch = math.ceil(len(train_chunks) / config.batch_size)
    log.info(
        "TAPT of %s on %d texts (%d skipped): %d tokens in %d chunks of <= %d "
        "(%d train, %d held out); %d steps of batch %d (%.2f epochs), lr %g, warmup %d, "
        "device %s, precision %s",
        model_name,
        len(kept),
        n_skipped,
        n_tokens,
        len(chunks),
        config.max_length,
        len(train_chunks),
        len(heldout_chunks),
        config.max_steps,
        config.batch_size,
        config.max_steps / steps_per_epoch,
        config.learning_rate,
        warmup,
        torch_device,
        precision.describe(),
    )

    before = heldout_loss(model, heldout_batches, amp_dtype, torch_device)
    if before is not None:
        log.info("held-out MLM loss before TAPT: %.4f", before)

    model.train()
    losses: list[float] = []
    history: list[dict[str, Any]] = []
    step = 0
    epoch = 0
    bar = tqdm(total=config.max_steps, desc="tapt", unit="step", disable=not progress)
    while step < config.max_steps:
        epoch += 1
        order = rng.permutation(len(train_chunks))
        for start in range(0, len(order), config.batch_size):
            if step >= config.max_steps:
                break
            batch = collator(
                [{"input_ids": train_chunks[i]} for i in order[start : start + config.batch_size]]
            )
            loss_sum, n_masked = _mlm_loss_sum(model, batch, amp_dtype, torch_device)
            loss = loss_sum / max(n_masked, 1)
            optimizer_step(loss, model, optimizer, scaler, scheduler, config.max_grad_norm)
            step += 1
            losses.append(loss.detach().item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
            if step % config.log_every == 0 or step == config.max_steps:
                window = losses[-(step - (history[-1]["step"] if history else 0)) :]
                record = {
                    "step": step,
                    "epoch": epoch,
                    "train_loss": round(float(np.mean(window)), 6),
                    "learning_rate": scheduler.get_last_lr()[0],
                }
                history.append(record)
                log.info(
                    "step %d/%d (epoch %d): MLM loss %.4f, lr %.3g",
                    step,
                    config.max_steps,
                    epoch,
                    record["train_loss"],
                    record["learning_rate"],
                )
    bar.close()
    train_seconds = time.perf_counter() - started

    after = heldout_loss(model, heldout_batches, amp_dtype, torch_device)
    if before is not None and after is not None:
        log.info(
            "held-out MLM loss %.4f -> %.4f (%s)",
            before,
            after,
            "lowered" if after < before else "NOT lowered",
        )
    metadata: dict[str, Any] = {
        "config": config.to_json(),
        "base_model": describe_model_name(config.model),
        "base_model_path": model_name,
        "corpus": dict(provenance or {}),
        "n_texts": len(texts),
        "n_texts_used": len(kept),
        "n_skipped": n_skipped,
        "n_tokens": n_tokens,
        "n_chunks": len(chunks),
        "n_train_chunks": len(train_chunks),
        "n_heldout_chunks": len(heldout_chunks),
        "chunking": "concatenate-and-chunk ([SEP]-joined texts, [CLS] ... [SEP] chunks)",
        "steps": step,
        "epochs": epoch,
        "warmup_steps": warmup,
        "heldout_mlm_loss_before": before,
        "heldout_mlm_loss_after": after,
        "heldout_mlm_loss_lowered": None if before is None or after is None else after < before,
        "history": history,
        "device": str(torch_device),
        # the number format trained in: the setting, what it resolved to here, and why
        "precision": precision.record(),
        "train_seconds": round(train_seconds, 2),
    }
    _save_directory(model, tokenizer, metadata, out_dir)
    log.info("saved TAPT checkpoint (%d steps) -> %s", step, out_dir)
    return TaptResult(
        out_dir=out_dir,
        n_texts=len(texts),
        n_skipped=n_skipped,
        n_chunks=len(chunks),
        n_train_chunks=len(train_chunks),
        n_heldout_chunks=len(heldout_chunks),
        steps=step,
        epochs=epoch,
        heldout_loss_before=before,
        heldout_loss_after=after,
        losses=losses,
        metadata=metadata,
    )
