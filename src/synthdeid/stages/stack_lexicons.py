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
``--settings`` (JSON) may set ``operating_point`` (the ``ner.training`` rule,
default ``recall``), ``c_grid`` and ``max_folds`` (the grouped
cross-validation that chooses ``C``). The base directory may be a trained
model or an ensemble; the stacked directory points at it by a relative path.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from synthdeid.cli_types import (
    input_dir,
    input_file,
    json_object,
    optional_input_file,
    output_dir,
    positive_int,
)
from synthdeid.errors import ConfigError
from synthdeid.ner.lexicon_stacking import stack_lexicons
from synthdeid.ner.lexicons import lexicon_names
from synthdeid.ner.untrained_notes import choose_development_notes
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments, set_threads

log = logging.getLogger(__name__)

STAGE = "stack-lexicons"
CONFIG_KEYS = ("operating_point", "c_grid", "max_folds")


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
        "--settings", type=json_object, default={}, help="JSON: operating_point, c_grid, max_folds"
    )
    parser.add_argument("--run", default="stacked", help="run name (model card)")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    parser.add_argument("--batch-size", type=positive_int, default=16, help="windows per batch")
    add_runtime_arguments(parser)


def _stacker_config(data: dict[str, Any]) -> dict[str, Any]:
    unknown = set(data) - set(CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"stacker config: unknown keys {sorted(unknown)}; known {CONFIG_KEYS}")
    return data


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.loading import load_tagger
    from synthdeid.ner.mixtures import read_mixture
    from synthdeid.ner.operating_point import OperatingPointRule
    from synthdeid.ner.stacker import StackerFitSettings
    from synthdeid.ner.stacker_card import save_stacked_directory

    config = _stacker_config(args.settings)
    rule = OperatingPointRule.from_mapping(config.get("operating_point") or {})
    fit_settings = StackerFitSettings.from_mapping(config)
    set_threads(args.threads)
    notes, counts = choose_development_notes(
        read_notes(args.notes),
        args.parts,
        read_notes(args.validation) if args.validation else [],
        [m.note for m in read_mixture(args.train)] if args.train else [],
        stage=STAGE,
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
