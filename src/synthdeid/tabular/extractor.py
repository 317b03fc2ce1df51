"""The fine-tuned extractor: an encoder with one classification head per spec variable.

Lorenzo et al. 2026 (sec. 4) fine-tune Mistral-7B with LoRA to answer one
variable at a time. On two CPU cores the project fine-tunes a sentence encoder
instead (the bundled MiniLM by default, any ``from_pretrained`` encoder
otherwise): the report is encoded once, mean-pooled, and a linear head per
variable picks one of the variable's spec categories (``unknown`` included
where the spec allows it). The loss is the sum over variables of the
cross-entropy of the variables a training report is labelled with (an
unfaithful variable is left out, as the paper's training pairs leave it
out). Every epoch is scored on the validation examples (accuracy over their
labelled variables); the best epoch's weights are kept, so the epoch is chosen
on synthetic reports only, never on the test reports.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer

from synthdeid.encoders import describe_model_name, resolve_model_name
from synthdeid.runtime import resolve_precision, set_seed, warn_if_bf16_emulated
from synthdeid.tabular.extraction import Example
from synthdeid.tabular.spec import TableSpec

log = logging.getLogger(__name__)

IGNORE = -100


@dataclass(frozen=True)
class ExtractorSettings:
    """synth.tabular.extraction.model: the encoder and how it is fine-tuned."""

    model: str | None = None  # None: the bundled MiniLM
    epochs: int = 12
    batch_size: int = 8
    learning_rate: float = 5e-5
    head_learning_rate: float = 1e-3
    max_length: int = 384
    validation_fraction: float = 0.2
    seed: int = 0
    precision: str = "auto"

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 8:
            raise ValueError("epochs and batch_size must be positive, max_length at least 8")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError("validation_fraction must lie in [0, 1)")


class VariableHeads(nn.Module):
    """An encoder, mean pooling and one linear head per variable."""

    def __init__(self, encoder: nn.Module, hidden: int, domains: dict[str, tuple[str, ...]]):
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict({name: nn.Linear(hidden, len(d)) for name, d in domains.items()})

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return {name: head(pooled) for name, head in self.heads.items()}


@dataclass
class TrainedExtractor:
    """A fine-tuned extractor and how it was trained."""

    model: VariableHeads
    tokenizer: Any
    domains: dict[str, tuple[str, ...]]
    device: torch.device
    settings: ExtractorSettings
    precision: str
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "model": describe_model_name(self.settings.model),
            "precision": self.precision,
            "best_epoch": self.best_epoch,
            "history": self.history,
        }

    def predict(self, reports: Sequence[str], batch_size: int = 16) -> list[dict[str, str]]:
        """The category of every variable for each report."""
        self.model.eval()
        out: list[dict[str, str]] = []
        with torch.inference_mode():
            for start in range(0, len(reports), batch_size):
                inputs = self._encode(reports[start : start + batch_size])
                logits = self.model(**inputs)
                choices = {name: value.argmax(-1).tolist() for name, value in logits.items()}
                for i in range(len(inputs["input_ids"])):
                    out.append({n: self.domains[n][choices[n][i]] for n in self.domains})
        return out

    def _encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        encoded = self.tokenizer(
            list(texts),
            truncation=True,
            max_length=self.settings.max_length,
            padding=True,
            return_tensors="pt",
        )
        return {k: encoded[k].to(self.device) for k in ("input_ids", "attention_mask")}


def _targets(examples: Sequence[Example], domains: dict[str, tuple[str, ...]]) -> torch.Tensor:
    """(examples x variables) category indices; IGNORE where a report is unlabelled."""
    rows = [
        [d.index(e.values[n]) if n in e.values else IGNORE for n, d in domains.items()]
        for e in examples
    ]
    return torch.tensor(rows, dtype=torch.long)


def validation_accuracy(extractor: TrainedExtractor, examples: Sequence[Example]) -> float | None:
    """Accuracy over the labelled variables of ``examples``; None without any."""
    predicted = extractor.predict([e.report for e in examples])
    hits = [
        p[n] == v for e, p in zip(examples, predicted, strict=True) for n, v in e.values.items()
    ]
    return float(np.mean(hits)) if hits else None


def train_extractor(
    train: Sequence[Example],
    validation: Sequence[Example],
    spec: TableSpec,
    settings: ExtractorSettings,
    device: torch.device,
    *,
    progress: bool = True,
) -> TrainedExtractor:
    """Fine-tune the encoder and heads on ``train``; keep the best epoch on ``validation``
    (the last epoch when there is no validation example)."""
    if not train:
        raise ValueError("the extractor needs at least one training report")
    set_seed(settings.seed)
    name = resolve_model_name(settings.model)
    tokenizer = AutoTokenizer.from_pretrained(name)
    encoder = AutoModel.from_pretrained(name)
    domains = {v.name: v.domain for v in spec.variables}
    model = VariableHeads(encoder, int(encoder.config.hidden_size), domains).to(device)
    precision = resolve_precision(settings.precision, device, setting="extraction precision")
    if precision.name == "bf16":
        warn_if_bf16_emulated(device, "extract-tabular")
    extractor = TrainedExtractor(model, tokenizer, domains, device, settings, precision.describe())
    optimizer = torch.optim.AdamW(
        [
            {"params": model.encoder.parameters(), "lr": settings.learning_rate},
            {"params": model.heads.parameters(), "lr": settings.head_learning_rate},
        ]
    )
    loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE, reduction="sum")
    targets = _targets(train, domains)
    rng = random.Random(settings.seed)
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    log.info(
        "fine-tuning %s on %d reports (%d for validation), %d variables, %d epochs, %s",
        describe_model_name(settings.model),
        len(train),
        len(validation),
        len(domains),
        settings.epochs,
        precision.describe(),
    )
    for epoch in range(1, settings.epochs + 1):
        model.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        batches = [
            order[i : i + settings.batch_size] for i in range(0, len(order), settings.batch_size)
        ]
        started = time.perf_counter()
        losses = []
        for batch in tqdm(batches, desc=f"epoch {epoch}", unit="batch", disable=not progress):
            inputs = extractor._encode([train[i].report for i in batch])
            target = targets[batch].to(device)
            with torch.autocast(
                device.type,
                dtype=precision.autocast_dtype or torch.float32,
                enabled=precision.autocast_dtype is not None,
            ):
                logits = model(**inputs)
            labelled = int((target != IGNORE).sum())
            per_variable = [loss_fn(logits[n].float(), target[:, j]) for j, n in enumerate(domains)]
            loss = torch.stack(per_variable).sum() / max(labelled, 1)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
        accuracy = validation_accuracy(extractor, validation) if validation else None
        extractor.history.append(
            {
                "epoch": epoch,
                "train_loss": float(np.mean(losses)),
                "validation_accuracy": accuracy,
                "seconds": round(time.perf_counter() - started, 2),
            }
        )
        improved = best is None or (accuracy is not None and accuracy > best[0])
        log.info(
            "epoch %d: loss %.4f, validation accuracy %s%s",
            epoch,
            np.mean(losses),
            "n/a" if accuracy is None else f"{accuracy:.3f}",
            " (best)" if improved and accuracy is not None else "",
        )
        if accuracy is None:
            extractor.best_epoch = epoch
        elif improved:
            state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            best = (accuracy, state)
            extractor.best_epoch = epoch
    if best is not None:
        model.load_state_dict(best[1])
    return extractor
