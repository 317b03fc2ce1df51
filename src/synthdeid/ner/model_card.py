"""Writing a trained model directory, with its model card, in one atomic step.

The directory is assembled under a temporary name next to the target and
renamed into place, so a crash never leaves a half-written model that a later
rule would take for a finished one.

The number format training ran in is recorded in three places: the card's
``precision`` line (``auto -> bf16 (native bf16 on this CPU)``), the
``training_precision`` of ``synthdeid_ner.json`` and the ``precision`` of
``training_history.json`` (the setting, the format and why). The card also
says how to de-identify one's own notes with the directory
(:func:`deid_usage_lines`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synthdeid.artifacts import atomic_directory
from synthdeid.ner.model import NerSettings
from synthdeid.ner.training import CHECKPOINT_RULES, TrainingConfig, TrainingResult
from synthdeid.reporting import markdown_table, number_or_na
from synthdeid.runtime import ResolvedPrecision, resolve_precision
from synthdeid.scoring.vocabulary import label, select

HISTORY_FILE = "training_history.json"
CARD_FILE = "README.md"

CARD_METRICS: tuple[str, ...] = select(
    "leakage_overlap_all",
    "detection_recall",
    "detection_precision",
    "span_overlap_f1",
    "span_exact_f1",
)


def card_metrics_table(values: Mapping[str, float]) -> list[str]:
    """The :data:`CARD_METRICS` of ``values`` as a two-column table (n/a where undefined)."""
    return markdown_table(
        ["metric", "value"],
        [[label(key), number_or_na(values[key], ".4f")] for key in CARD_METRICS],
    )


def decoding_lines(settings: NerSettings, validation: Mapping[str, float]) -> list[str]:
    """The end of a card's operating-point section, and the validation figures at it."""
    return [
        f"- regex detectors unioned at inference: {', '.join(settings.regex_detectors) or 'none'}",
        f"- initials before predicted names: {settings.initials}",
        "",
        "## Validation metrics at the operating point",
        *card_metrics_table(validation),
    ]


def deid_usage_lines() -> list[str]:
    """The card's section on de-identifying one's own notes with the model directory.

    The model alone does not make synthdeid's spans: the ``O`` threshold of
    ``synthdeid_ner.json`` and the decoding rules do, which a generic pipeline
    does not apply.
    """
    return [
        "## De-identify your own notes",
        "To de-identify a folder of `.txt` notes (or a CSV or JSONL file of them) with this "
        "model at its operating point, each predicted PHI span becoming `[LABEL]` "
        "(`--mode surrogate`: a keyed surrogate) and the spans listed in `deid/spans.jsonl` "
        "and `deid/spans.parquet`:",
        "",
        "```",
        "synthdeid deid --model <dir> notes/ --out deid/",
        "```",
        "",
        'The plain transformers `pipeline("token-classification")` ignores the O threshold '
        "chosen on validation (and the decoding rules above), so it gives different spans "
        "from this model than `synthdeid deid` and `synthdeid predict-ner` do.",
    ]


def training_precision(result: TrainingResult, config: TrainingConfig) -> ResolvedPrecision:
    """The number format ``train`` computed in: ``config.precision`` on the tagger's device.

    ``train`` resolves the setting the same way (``autocast_dtype``), on this machine.
    """
    return resolve_precision(
        config.precision, result.tagger.device, setting="ner.training.precision"
    )


def model_card(
    result: TrainingResult,
    config: TrainingConfig,
    mixture: Mapping[str, Any],
    run: str,
    *,
    precision: ResolvedPrecision | None = None,
) -> str:
    """The README.md of a model directory; ``precision`` defaults to :func:`training_precision`."""
    settings = result.tagger.settings
    precision = precision or training_precision(result, config)
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: token-classification",
        "tags: [de-identification, clinical, synthdeid]",
        "---",
        f"# synthdeid de-identification model: run `{run}`",
        "",
        "A token-classification model that tags protected health information (PHI) in "
        "clinical notes with BIO tags. Built by the synthdeid workflow; load it with "
        "`synthdeid predict-ner --model <this directory>` or `transformers.AutoModelForTokenClassification`.",
        "",
        "## Data",
        f"- mixture regime: {mixture.get('regime', 'n/a')}, target synthetic fraction "
        f"{mixture.get('target_synthetic_fraction', 'n/a')}",
        f"- training notes: {mixture.get('n_train_total', 'n/a')} "
        f"(real {mixture.get('n_real', 'n/a')}, synthetic {mixture.get('n_synthetic', 'n/a')})",
        f"- validation notes (real only): {mixture.get('n_validation_notes', 'n/a')}",
        f"- labels: {', '.join(settings.labels)}",
        "",
        "## Training",
        f"- base model: {settings.base_model}",
        f"- windows: {config.max_length} tokens, stride {config.stride}",
        "- word casing as token types (lower / Title / UPPER): "
        f"{'yes' if settings.case_feature else 'no'}",
        f"- AdamW lr {config.learning_rate}, weight decay {config.weight_decay}, "
        f"batch {config.batch_size}, warmup {config.warmup_ratio}, class-weight power "
        f"{config.class_weight_power}, seed {config.seed}",
        f"- precision: {precision.describe()}",
        f"- ran {result.timing['epochs']} epochs / {result.timing['steps']} steps in "
        f"{result.timing['train_seconds']} s; kept epoch {result.best_epoch} "
        f"({CHECKPOINT_RULES[config.checkpoint]})",
        machine_line(result.environment),
        "",
        "## Operating point",
        f"- rule: {settings.operating_point.get('mode')}; O threshold "
        f"{settings.o_threshold} (tokens are PHI when P(O) is below it)",
        *decoding_lines(settings, result.validation),
        "",
        *deid_usage_lines(),
    ]
    lines += [
        "",
        "## Limitations",
        "- Scores are on validation notes from the training corpus; held-out figures are in "
        "the workflow's `evaluate_ner` results.",
        "- A missed identifier leaks the whole note: review output before any release.",
        "",
    ]
    return "\n".join(lines)


def machine_line(environment: Mapping[str, Any]) -> str:
    """The card's line on the code and machine the model trained with
    (:func:`synthdeid.compute_env.describe_machine`; n/a where not recorded)."""

    def known(key: str) -> str:
        value = environment.get(key)
        return "n/a" if value is None else str(value)

    bf16 = environment.get("cpu_native_bf16")
    native = "n/a" if bf16 is None else ("yes" if bf16 else "no")
    device = environment.get("device_name") or known("device")
    return (
        f"- trained on: {device}; CPU {known('cpu')} ({known('cpu_capability')} kernels, "
        f"native bf16: {native}), {known('threads')} threads; torch {known('torch')}, "
        f"synthdeid {known('code_version')}"
    )


def save_model_directory(
    result: TrainingResult,
    config: TrainingConfig,
    out_dir: str | Path,
    *,
    mixture: Mapping[str, Any],
    run: str,
) -> Path:
    """Save weights, tokenizer, settings, history and card; replace ``out_dir`` atomically.

    The tagger's settings get the resolved training precision before they are saved.
    """
    out_dir = Path(out_dir)
    precision = training_precision(result, config)
    with atomic_directory(out_dir) as staging:
        tagger = result.tagger
        tagger.settings.training_precision = precision.record()
        tagger.model.save_pretrained(staging)  # type: ignore[operator]  # an HF model's method
        tagger.tokenizer.save_pretrained(staging)
        tagger.settings.save(staging)
        history = {
            "run": run,
            "config": config.to_json(),
            "precision": precision.record(),
            "mixture": dict(mixture),
            "history": result.history,
            "best_epoch": result.best_epoch,
            "class_weights": result.class_weights,
            "operating_point_sweep": result.sweep,
            "validation_at_operating_point": result.validation,
            "timing": result.timing,
            "environment": result.environment,
        }
        (staging / HISTORY_FILE).write_text(json.dumps(history, indent=2) + "\n")
        (staging / CARD_FILE).write_text(
            model_card(result, config, mixture, run, precision=precision)
        )
    return out_dir
