"""Fit name and place lexicons as a calibrated stacker over a trained tagger (stack-lexicons).

``synthdeid stack-lexicons --model BASE_DIR --notes SPLIT_NOTES --parts seed
--validation VALIDATION.parquet --train TRAIN.parquet
--lexicons first_names,last_names,cities,states --out-dir DIR``

The stacker (:mod:`synthdeid.ner.stacker`) is fitted, and its ``O``
threshold chosen, on *development* notes only: the notes of ``--parts`` of
the split notes table (default the seed part) and the base run's validation
notes (``--validation``), less every note and every patient of the base
run's training mixture (``--train``). The holdout is refused, as a part and
as any note of the validation table: it is for the final scores.
``--config`` (JSON) may set ``operating_point`` (the ``ner.training`` rule,
default ``recall``), ``c_grid`` and ``max_folds`` (the grouped
cross-validation that chooses ``C``). The base directory may be a trained
model or an ensemble; the stacked directory points at it by a relative path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from synthdeid.cli_types import input_dir, input_file, optional_input_file, output_dir, positive_int
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.lexicons import check_names
from synthdeid.notes import Note, read_notes
from synthdeid.runtime import add_runtime_arguments, set_threads

if TYPE_CHECKING:  # the stacker and the model load torch: imported when the stage runs
    from synthdeid.ner.model import SpanTagger
    from synthdeid.ner.operating_point import OperatingPoint, OperatingPointRule
    from synthdeid.ner.stacker import StackedTagger, StackerFit, StackerFitSettings

log = logging.getLogger(__name__)

STAGE = "stack-lexicons"
CONFIG_KEYS = ("operating_point", "c_grid", "max_folds")


def lexicon_names(value: str) -> list[str]:
    """``first_names,last_names`` -> the registered lexicons, checked."""
    return check_names([name.strip() for name in value.split(",") if name.strip()])


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, type=input_dir, help="base model or ensemble directory"
    )
    parser.add_argument("--notes", required=True, type=input_file, help="split notes table")
    parser.add_argument(
        "--parts", nargs="*", default=["seed"], help="parts of --notes to fit on (default: seed)"
    )
    parser.add_argument(
        "--validation",
        type=optional_input_file,
        default=None,
        help="the base run's validation notes",
    )
    parser.add_argument(
        "--train",
        type=optional_input_file,
        default=None,
        help="the base run's training mixture: its notes and patients are left out",
    )
    parser.add_argument(
        "--lexicons",
        required=True,
        type=lexicon_names,
        help="comma-separated: first_names, last_names, cities, states, countries",
    )
    parser.add_argument(
        "--config", type=json.loads, default={}, help="JSON: operating_point, c_grid, max_folds"
    )
    parser.add_argument("--run", default="stacked", help="run name (model card)")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    parser.add_argument("--batch-size", type=positive_int, default=16, help="windows per batch")
    add_runtime_arguments(parser)


def stacker_config(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"--config must be a JSON object ({', '.join(CONFIG_KEYS)})")
    unknown = set(data) - set(CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"stacker config: unknown keys {sorted(unknown)}; known {CONFIG_KEYS}")
    return data


def choose_development_notes(
    notes: Sequence[Note],
    parts: Sequence[str],
    validation: Sequence[Note],
    training: Sequence[Note],
    *,
    validation_path: str = "--validation",
) -> tuple[list[Note], dict[str, Any]]:
    """The development notes less every note and patient the base trained on, and counts.

    Refuses the holdout part and any holdout note among the validation notes.
    """
    from synthdeid.ner.report_errors import development_notes  # loads the metrics

    offered = development_notes(
        notes, parts, validation, set(), stage=STAGE, validation_path=validation_path
    )
    trained_notes = {note.note_id for note in training}
    trained_patients = {note.patient_id for note in training}
    kept = [
        n
        for n in offered
        if n.note_id not in trained_notes and n.patient_id not in trained_patients
    ]
    counts = {
        "parts": list(parts),
        "offered": len(offered),
        "trained_on": len(offered) - len(kept),
        "kept": len(kept),
        "patients": len({n.patient_id for n in kept}),
    }
    if not kept:
        raise InputError(
            validation_path,
            None,
            f"no development note is left in parts {list(parts)} and the validation notes "
            "once the base run's training notes and patients are removed",
        )
    return kept, counts


@dataclasses.dataclass(frozen=True)
class StackingResult:
    """The stacked tagger, its fit, its operating point and the base's figures beside it."""

    tagger: StackedTagger
    fit: StackerFit
    point: OperatingPoint
    base_development: dict[str, float]


def stack_lexicons(
    base: SpanTagger,
    notes: Sequence[Note],
    lexicons: Sequence[str],
    *,
    rule: OperatingPointRule | None = None,
    fit_settings: StackerFitSettings | None = None,
    batch_size: int = 16,
    progress: bool = False,
) -> StackingResult:
    """Fit the stacker on ``notes`` (development notes) and choose its ``O`` threshold.

    The threshold is chosen on the out-of-fold stacked probabilities (see
    :mod:`synthdeid.ner.stacker`); the base's own figures at its own
    threshold, on the same notes, are returned for comparison.
    """
    import numpy as np

    from synthdeid.evaluation.metrics import headline_metrics
    from synthdeid.ner.operating_point import OperatingPointRule, select_operating_point
    from synthdeid.ner.stacker import (
        StackedTagger,
        fit_stacker,
        gold_phi,
        lexical_features,
        model_features,
        replace_o,
    )

    lexicons = check_names(list(lexicons))
    rule = rule or OperatingPointRule()
    encoded = base.encode(notes)
    probabilities = base.token_probabilities(encoded, batch_size=batch_size, progress=progress)
    lexical = [
        lexical_features(note.text, enc.offsets, lexicons)
        for note, enc in zip(notes, encoded, strict=True)
    ]
    features = np.vstack(
        [
            np.column_stack([model_features(p), x])
            for p, x in zip(probabilities, lexical, strict=True)
        ]
    )
    phi = np.concatenate(
        [gold_phi(enc.offsets, note.spans) for note, enc in zip(notes, encoded, strict=True)]
    )
    groups = np.concatenate(
        [
            np.full(enc.n_tokens, note.patient_id, dtype=object)
            for note, enc in zip(notes, encoded, strict=True)
        ]
    )
    fit = fit_stacker(features, phi, groups, lexicons, fit_settings)

    ends = np.cumsum([enc.n_tokens for enc in encoded])
    starts = ends - np.array([enc.n_tokens for enc in encoded], dtype=np.int64)
    held_out = [
        replace_o(p, fit.out_of_fold[a:b])
        for p, a, b in zip(probabilities, starts.tolist(), ends.tolist(), strict=True)
    ]
    settings = dataclasses.replace(
        base.settings,
        o_threshold=0.5,
        operating_point={},
        base_model=f"{base.settings.base_model}, with lexicons {', '.join(lexicons)}",
    )
    tagger = StackedTagger(base, fit.stacker, settings)

    def decode_at(threshold: float) -> dict[str, list[Any]]:
        return {
            note.note_id: tagger.decode(p, enc, note.text, o_threshold=threshold)
            for note, enc, p in zip(notes, encoded, held_out, strict=True)
        }

    point = select_operating_point(notes, decode_at, rule)
    settings.o_threshold = point.o_threshold
    settings.operating_point = point.record()
    base_spans = {
        note.note_id: base.decode(p, enc, note.text)
        for note, enc, p in zip(notes, encoded, probabilities, strict=True)
    }
    return StackingResult(tagger, fit, point, headline_metrics(notes, base_spans))


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.ensemble import load_tagger
    from synthdeid.ner.mixtures import read_mixture
    from synthdeid.ner.operating_point import OperatingPointRule
    from synthdeid.ner.stacker import StackerFitSettings
    from synthdeid.ner.stacker_card import save_stacked_directory

    config = stacker_config(args.config)
    rule = OperatingPointRule.from_mapping(config.get("operating_point") or {})
    fit_settings = StackerFitSettings.from_mapping(config)
    set_threads(args.threads)
    notes, counts = choose_development_notes(
        read_notes(args.notes),
        args.parts,
        read_notes(args.validation) if args.validation else [],
        [m.note for m in read_mixture(args.train)] if args.train else [],
        validation_path=str(args.validation or args.notes),
    )
    log.info(
        "%s %s: %d development notes of %d patients (%d of %d offered dropped as trained on)",
        STAGE,
        args.run,
        counts["kept"],
        counts["patients"],
        counts["trained_on"],
        counts["offered"],
    )
    base = load_tagger(args.model, device=args.device)
    result = stack_lexicons(
        base,
        notes,
        args.lexicons,
        rule=rule,
        fit_settings=fit_settings,
        batch_size=args.batch_size,
        progress=not args.no_progress,
    )
    save_stacked_directory(
        result.tagger,
        args.model,
        args.out_dir,
        fit=result.fit,
        point=result.point,
        development=counts,
        base_development=result.base_development,
        run=args.run,
    )
    log.info(
        "saved %s over %s: lexicons %s, O threshold %.3f -> %s",
        args.run,
        args.model,
        ", ".join(args.lexicons),
        result.point.o_threshold,
        args.out_dir,
    )
