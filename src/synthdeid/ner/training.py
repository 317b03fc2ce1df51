"""Fine-tuning a token-classification model for de-identification.

The recipe of VetSynth (section 2.5): AdamW (learning rate 2e-5, weight decay
0.01), batch size 16, up to 8 epochs, class-weighted cross-entropy, 512-token
windows with stride 64, mixed precision on a GPU, early stopping with a
patience of 2 epochs. The checkpoint kept is the one with the lowest
document-level leakage on the validation notes, then the highest span-overlap
F1 (``checkpoint: f1`` puts F1 first); after training the ``O`` threshold is
set on the same notes (:mod:`synthdeid.ner.operating_point`).

On a CPU the optimizer is the fused AdamW kernel and batches are
length-bucketed, so little time goes to padding. A compute-matched mixture
gives ``max_steps``: training then runs exactly that many optimizer steps,
whatever the number of epochs that takes.

With a resume folder (:mod:`synthdeid.ner.resume`) the whole training state is
saved after every epoch, and a stopped run started again goes on from its
last finished epoch to the same model.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from synthdeid.compute_env import describe_machine
from synthdeid.encoders import bundled_encoder, describe_model_name, resolve_model_name
from synthdeid.errors import ConfigError, InputError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.ner.batching import collate, padding_share, shuffled_bucket_batches
from synthdeid.ner.casing import enable_case_types
from synthdeid.ner.decoding import INITIAL_MODES
from synthdeid.ner.distillation import (
    Distillation,
    SoftLabels,
    collate_targets,
    note_targets,
    soft_cross_entropy,
    window_targets,
)
from synthdeid.ner.model import DeidTagger, NerSettings
from synthdeid.ner.operating_point import OperatingPointRule, set_operating_point
from synthdeid.ner.resume import ResumeFolder
from synthdeid.ner.tagging import IGNORE_INDEX, Window, make_windows, tag_names
from synthdeid.notes import Note
from synthdeid.runtime import (
    check_seed,
    pick_device,
    set_seed,
    set_threads,
    warn_if_bf16_emulated,
)
from synthdeid.scoring.metrics import headline_metrics

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "fp16", "bf16")
# how the epoch whose weights are kept is chosen on the validation notes (selection_key)
CHECKPOINT_RULES = {
    "leakage": "lowest validation leakage, then highest span-overlap F1",
    "f1": "highest validation span-overlap F1, then lowest leakage",
}


@dataclass(frozen=True)
class TrainingConfig:
    """Hyperparameters of one training run (config key ``ner.training``)."""

    # hub id, local directory or bundled encoder (synthdeid.encoders); None = bundled-minilm
    model: str | None = None
    labels: tuple[str, ...] | None = None  # None = the labels present in the data
    max_length: int = 512
    stride: int = 64
    epochs: int = 8
    max_steps: int | None = None
    batch_size: int = 16
    eval_batch_size: int = 32
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    class_weight_power: float = 0.5
    patience: int = 2
    seed: int = 1
    # auto: bf16 on a GPU with bf16 (else fp16) or a CPU with native bf16 (AVX512-BF16 or
    # AMX), fp32 otherwise (synthdeid.runtime.resolve_precision); fp32, fp16 (GPU), bf16
    precision: str = "auto"
    device: str = "auto"
    threads: int | None = None
    operating_point: OperatingPointRule = field(default_factory=OperatingPointRule)
    regex_detectors: tuple[str, ...] = ()
    case_feature: bool = False
    initials: str = "off"
    # the epoch kept: "leakage" (lowest validation leakage, then F1) or "f1" (highest
    # span-overlap F1, then leakage)
    checkpoint: str = "leakage"
    # with soft labels (train-ner --soft-labels): the share of the loss they carry and the
    # temperature (synthdeid.ner.distillation)
    distill_alpha: float = 0.5
    distill_temperature: float = 1.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrainingConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"ner.training: unknown keys {sorted(unknown)}")
        values = dict(data)
        if "operating_point" in values:
            values["operating_point"] = OperatingPointRule.from_mapping(values["operating_point"])
        for key in ("labels", "regex_detectors"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        config = cls(**values)
        config.check()
        return config

    def check(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"ner.training.precision: {self.precision!r} not in {PRECISIONS}")
        for name in ("epochs", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ner.training.{name} must be at least 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("ner.training.max_steps must be at least 1 (or null)")
        check_seed(self.seed, "ner.training.seed")
        if self.checkpoint not in CHECKPOINT_RULES:
            raise ConfigError(
                f"ner.training.checkpoint: {self.checkpoint!r} is not one of {tuple(CHECKPOINT_RULES)}"
            )
        Distillation(self.distill_alpha, self.distill_temperature).check()
        if self.initials not in INITIAL_MODES:
            raise ConfigError(
                f"ner.training.initials: {self.initials!r} is not one of {INITIAL_MODES}"
            )
        if self.labels is not None:
            unknown = set(self.labels) - set(CANONICAL_LABELS)
            if unknown:
                raise ConfigError(f"ner.training.labels: not canonical labels {sorted(unknown)}")
        bundled = bundled_encoder(self.model)
        if self.case_feature and bundled is not None and not bundled.token_types:
            raise ConfigError(
                f"ner.training.case_feature: the encoder {bundled.name!r} has no token type "
                "embeddings to carry word casing; set case_feature: false for this model"
            )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["operating_point"] = asdict(self.operating_point)
        return data


@dataclass
class TrainingResult:
    tagger: DeidTagger
    history: list[dict[str, Any]]
    best_epoch: int
    validation: dict[str, float]  # at the chosen operating point
    sweep: list[dict[str, float]]
    class_weights: dict[str, float]
    timing: dict[str, float]
    # the code, CPU, vector instructions and device it trained with (describe_machine)
    environment: dict[str, Any]


def labels_in(notes: Sequence[Note]) -> tuple[str, ...]:
    """Labels with at least one gold span, in canonical order."""
    present = {span.label for note in notes for span in note.spans}
    return tuple(label for label in CANONICAL_LABELS if label in present)


def class_weights(windows: Sequence[Window], n_tags: int, power: float) -> np.ndarray:
    """Inverse-frequency tag weights raised to ``power`` (0 = unweighted, 1 = balanced).

    Tags never seen get the largest weight of the seen ones; the weights are
    scaled so that their token-weighted mean is 1 (the loss keeps its scale).
    """
    counts = np.zeros(n_tags, dtype=np.float64)
    for window in windows:
        assert window.tags is not None
        tags = window.tags[window.tags != IGNORE_INDEX]
        counts += np.bincount(tags, minlength=n_tags)
    seen = counts > 0
    weights = np.ones(n_tags, dtype=np.float64)
    if power > 0 and seen.any():
        weights[seen] = (counts.sum() / (seen.sum() * counts[seen])) ** power
        weights[~seen] = weights[seen].max()
        weights /= (weights * counts).sum() / counts.sum()
    return weights


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for a precision setting (None = full fp32).

    :func:`synthdeid.runtime.resolve_precision` decides: ``auto`` is bf16 on
    a GPU with bf16 (else fp16) or a CPU with native bf16, fp32 otherwise.
    """
    from synthdeid.runtime import resolve_precision

    return resolve_precision(precision, device, setting="ner.training.precision").autocast_dtype


def _load_model_and_tokenizer(name: str, tags: Sequence[str]) -> tuple[Any, Any]:
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForTokenClassification.from_pretrained(
        name,
        num_labels=len(tags),
        id2label=dict(enumerate(tags)),
        label2id={tag: i for i, tag in enumerate(tags)},
        ignore_mismatched_sizes=True,
    )
    return model, tokenizer


def _expand_copies(notes: Sequence[Note], copies: Sequence[int] | None) -> list[Note]:
    if copies is None:
        return list(notes)
    return [note for note, n in zip(notes, copies, strict=True) for _ in range(n)]


def _validation_metrics(
    tagger: DeidTagger, validation: Sequence[Note], encoded: Sequence[Any], batch_size: int
) -> tuple[list[np.ndarray], dict[str, float]]:
    probabilities = tagger.token_probabilities(encoded, batch_size=batch_size)
    predicted = {
        note.note_id: tagger.decode(probs, enc, note.text, o_threshold=0.5)
        for note, enc, probs in zip(validation, encoded, probabilities, strict=True)
    }
    return probabilities, headline_metrics(validation, predicted)


def _random_states(device: torch.device) -> dict[str, Any]:
    """The random states training draws from after setup: dropout (torch) and Python's."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: Mapping[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def selection_key(metrics: Mapping[str, float], rule: str = "leakage") -> tuple[float, float]:
    """Lower is better. ``leakage``: document-level leakage first, then span-overlap F1;
    ``f1``: span-overlap F1 first (a finer measure on a few hundred notes), then leakage."""
    if rule == "f1":
        return (-metrics["span_overlap_f1"], metrics["leakage_overlap_all"])
    return (metrics["leakage_overlap_all"], -metrics["span_overlap_f1"])


def optimizer_step(
    loss: torch.Tensor,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    scheduler: Any,
    max_grad_norm: float,
) -> None:
    """Backward (through the AMP grad scaler), clip the gradient norm, step, advance the schedule."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()


def train(
    train_notes: Sequence[Note],
    validation: Sequence[Note],
    config: TrainingConfig,
    *,
    copies: Sequence[int] | None = None,
    soft_labels: tuple[Sequence[str], Mapping[str, SoftLabels]] | None = None,
    progress: bool = True,
    resume: ResumeFolder | None = None,
) -> TrainingResult:
    """Fine-tune, select the checkpoint, set the operating point; nothing is written
    but the per-epoch state in ``resume``, from which a stopped run goes on.

    ``soft_labels`` (a teacher's tag names and per-note soft labels,
    :mod:`synthdeid.ner.distillation`) adds the distillation term to the loss.
    """
    if not train_notes:
        raise InputError("training mixture", None, "no training notes")
    if not validation:
        raise InputError("validation part", None, "no validation notes: early stopping needs some")
    set_seed(config.seed)
    set_threads(config.threads)
    device = pick_device(config.device)
    environment = describe_machine(device)
    labels = config.labels or labels_in([*train_notes, *validation])
    if not labels:
        raise InputError("training mixture", None, "no gold spans at all: nothing to learn")
    tags = tag_names(labels)
    model_name = resolve_model_name(config.model)
    model, tokenizer = _load_model_and_tokenizer(model_name, tags)
    if config.case_feature:
        enable_case_types(model)
    model.to(device)
    settings = NerSettings(
        labels=list(labels),
        max_length=config.max_length,
        stride=config.stride,
        regex_detectors=list(config.regex_detectors),
        base_model=describe_model_name(config.model),
        case_feature=config.case_feature,
        initials=config.initials,
    )
    tagger = DeidTagger(model, tokenizer, settings, device)

    started = time.perf_counter()
    expanded = _expand_copies(train_notes, copies)
    encoded_train = tagger.encode(expanded, with_tags=True)
    windows = make_windows(
        encoded_train,
        max_length=config.max_length,
        stride=config.stride,
        cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id,
    )
    soft_targets: list[np.ndarray] | None = None
    if soft_labels is not None:
        teacher_tags, per_note = soft_labels
        soft_targets = window_targets(
            windows, note_targets(encoded_train, per_note, tags, teacher_tags)
        )
    validation_encoded = tagger.encode(validation)
    weights = class_weights(windows, len(tags), config.class_weight_power)
    loss_fn = torch.nn.CrossEntropyLoss(
        weight=torch.tensor(weights, dtype=torch.float32, device=device),
        ignore_index=IGNORE_INDEX,
    )
    rng = np.random.default_rng(config.seed)
    steps_per_epoch = math.ceil(len(windows) / config.batch_size)
    total_steps = config.max_steps or steps_per_epoch * config.epochs
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.learning_rate,
        weight_decay=config.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )
    from transformers import get_linear_schedule_with_warmup

    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(config.warmup_ratio * total_steps), total_steps
    )
    amp_dtype = autocast_dtype(config.precision, device)
    if amp_dtype == torch.bfloat16:
        warn_if_bf16_emulated(device, "train-ner")
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    log.info(
        "training %s on %d windows (%d notes, %s copies), %d validation notes, "
        "%d steps of batch %d, labels %s, device %s, autocast %s",
        model_name,
        len(windows),
        len(train_notes),
        len(expanded),
        len(validation),
        total_steps,
        config.batch_size,
        ",".join(labels),
        device,
        amp_dtype,
    )

    history: list[dict[str, Any]] = []
    best_state: dict[str, torch.Tensor] | None = None
    best_key: tuple[float, float] | None = None
    best_epoch = 0
    since_best = 0
    step = 0
    epoch = 0
    finished = False
    resumed_after, seconds_before = 0, 0.0
    saved = resume.load() if resume is not None else None
    if resume is not None and saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        rng.bit_generator.state = saved["batch_rng"]
        _set_random_states(saved["random"])
        history = json.loads(saved["history"])
        best_state = saved["best_model"]
        best_key = (float(saved["best_key"][0]), float(saved["best_key"][1]))
        best_epoch, since_best = int(saved["best_epoch"]), int(saved["since_best"])
        step, epoch, finished = int(saved["step"]), int(saved["epoch"]), bool(saved["finished"])
        seconds_before = float(saved["train_seconds"])
        started -= seconds_before
        resumed_after = epoch
        log.info("resumed after epoch %d (%d steps) from %s", epoch, step, resume.path)
    while not finished and step < total_steps:
        epoch += 1
        model.train()
        batches = shuffled_bucket_batches(windows, config.batch_size, rng)
        epoch_started = time.perf_counter()
        losses: list[float] = []
        bar = tqdm(batches, desc=f"epoch {epoch}", unit="step", disable=not progress)
        for batch in bar:
            if step >= total_steps:
                break
            inputs = {
                k: v.to(device) for k, v in collate(windows, batch, tokenizer.pad_token_id).items()
            }
            target = inputs.pop("labels")
            with torch.autocast(
                device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
            ):
                logits = model(**inputs).logits
            loss = loss_fn(logits.float().view(-1, len(tags)), target.view(-1))
            if soft_targets is not None:
                soft = collate_targets(soft_targets, batch, logits.shape[1]).to(device)
                loss = (1 - config.distill_alpha) * loss + config.distill_alpha * (
                    soft_cross_entropy(logits.float(), soft, config.distill_temperature)
                )
            optimizer_step(loss, model, optimizer, scaler, scheduler, config.max_grad_norm)
            step += 1
            losses.append(loss.detach().item())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        _, metrics = _validation_metrics(
            tagger, validation, validation_encoded, config.eval_batch_size
        )
        record = {
            "epoch": epoch,
            "steps": step,
            "train_loss": float(np.mean(losses)) if losses else float("nan"),
            "seconds": round(time.perf_counter() - epoch_started, 2),
            "padding_share": round(padding_share(windows, batches), 4),
            **{f"validation_{k}": v for k, v in metrics.items()},
        }
        history.append(record)
        key = selection_key(metrics, config.checkpoint)
        improved = best_key is None or key < best_key
        log.info(
            "epoch %d: loss %.4f, validation leakage %.4f, span-overlap F1 %.4f, "
            "detection recall %.4f%s",
            epoch,
            record["train_loss"],
            metrics["leakage_overlap_all"],
            metrics["span_overlap_f1"],
            metrics["detection_recall"],
            " (best)" if improved else "",
        )
        if improved:
            best_key, best_epoch, since_best = key, epoch, 0
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            since_best += 1
        finished = step >= total_steps or (
            config.max_steps is None and (epoch >= config.epochs or since_best >= config.patience)
        )
        if resume is not None:
            assert best_state is not None and best_key is not None
            resume.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(),
                    "batch_rng": rng.bit_generator.state,
                    "random": _random_states(device),
                    "history": json.dumps(history),
                    "best_model": best_state,
                    "best_key": [float(best_key[0]), float(best_key[1])],
                    "best_epoch": best_epoch,
                    "since_best": since_best,
                    "step": step,
                    "epoch": epoch,
                    "finished": finished,
                    "train_seconds": time.perf_counter() - started,
                }
            )
    train_seconds = time.perf_counter() - started

    assert best_state is not None
    model.load_state_dict(best_state)
    probabilities = tagger.token_probabilities(
        validation_encoded, batch_size=config.eval_batch_size
    )

    point = set_operating_point(
        tagger, validation, validation_encoded, probabilities, config.operating_point
    )
    return TrainingResult(
        tagger=tagger,
        history=history,
        best_epoch=best_epoch,
        validation=copy.deepcopy(point.chosen),
        sweep=point.sweep,
        class_weights={tag: float(w) for tag, w in zip(tags, weights, strict=True)},
        timing={
            "train_seconds": round(train_seconds, 2),
            "steps": step,
            "epochs": epoch,
            # a stopped run went on from this epoch's saved state (synthdeid.ner.resume),
            # with the training seconds of the calls before (also in train_seconds)
            **(
                {
                    "resumed_after_epoch": resumed_after,
                    "seconds_before_resume": round(seconds_before, 2),
                }
                if resumed_after
                else {}
            ),
        },
        environment=environment,
    )
