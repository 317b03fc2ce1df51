"""Combine trained models into an ensemble directory with its own operating point.

``synthdeid ensemble-ner --member NAME=DIR --member NAME=DIR
--validation V.parquet [--validation ...] --train T.parquet [--train ...]
--settings JSON --run NAME --out-dir DIR``

The members' token probabilities are averaged (:mod:`synthdeid.ner.ensemble`)
and the ``O`` threshold is chosen on validation notes by the
``operating_point`` rule of ``--settings`` (the ``ner.training`` rule). Those
notes are the members' validation parts, minus every note and every patient
that any member trained on (``--train``: the members' mixture tables), so
the threshold is never fitted on a training note. ``--settings`` may also set
``regex_detectors`` (default: the union of the members').
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from synthdeid.cli_types import input_file, json_object, named_input_dir, output_dir, positive_int
from synthdeid.errors import ConfigError
from synthdeid.ner.untrained_notes import validation_notes
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments, set_threads

log = logging.getLogger(__name__)

CONFIG_KEYS = ("operating_point", "regex_detectors")


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--member", type=named_input_dir, action="append", required=True, help="NAME=model dir"
    )
    parser.add_argument(
        "--validation", type=input_file, action="append", required=True, help="validation notes"
    )
    parser.add_argument(
        "--train",
        type=input_file,
        action="append",
        default=[],
        help="a member's training mixture: its notes and patients leave the validation notes",
    )
    parser.add_argument(
        "--settings", type=json_object, default={}, help="JSON: operating_point, regex_detectors"
    )
    parser.add_argument("--run", default="ensemble", help="run name (model card)")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    parser.add_argument("--batch-size", type=positive_int, default=16, help="windows per batch")
    add_runtime_arguments(parser)


def _ensemble_config(data: dict[str, Any]) -> dict[str, Any]:
    unknown = set(data) - set(CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"ensemble config: unknown keys {sorted(unknown)}; known {CONFIG_KEYS}")
    return data


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.ensemble import EnsembleTagger, ensemble_settings
    from synthdeid.ner.ensemble_card import save_ensemble_directory
    from synthdeid.ner.mixtures import read_mixture
    from synthdeid.ner.model import DeidTagger
    from synthdeid.ner.operating_point import OperatingPointRule, set_operating_point

    config = _ensemble_config(args.settings)
    rule = OperatingPointRule.from_mapping(config.get("operating_point") or {})
    set_threads(args.threads)
    notes, counts = validation_notes(
        {path: read_notes(path) for path in args.validation},
        {path: [m.note for m in read_mixture(path)] for path in args.train},
    )
    log.info(
        "ensemble %s: %d validation notes (of %d distinct offered; %d dropped as trained on)",
        args.run,
        counts["kept"],
        counts["offered"],
        counts["trained_on"],
    )
    members = [
        (name, DeidTagger.load(directory, device=args.device)) for name, directory in args.member
    ]
    settings = ensemble_settings(members, config.get("regex_detectors"))
    tagger = EnsembleTagger(members, settings)
    encoded = tagger.encode(notes)
    probabilities = tagger.token_probabilities(
        encoded, batch_size=args.batch_size, progress=not args.no_progress
    )

    point = set_operating_point(tagger, notes, encoded, probabilities, rule)
    save_ensemble_directory(
        tagger,
        [directory for _, directory in args.member],
        args.out_dir,
        point=point,
        validation_counts=counts,
        run=args.run,
    )
    log.info(
        "saved ensemble %s of %s: O threshold %.3f -> %s",
        args.run,
        ", ".join(tagger.member_names),
        point.o_threshold,
        args.out_dir,
    )
