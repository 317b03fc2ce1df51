"""Combine trained models into an ensemble directory with its own operating point.

``synthdeid ensemble-ner --member NAME=DIR --member NAME=DIR
--validation V.parquet [--validation ...] --train T.parquet [--train ...]
--config JSON --run NAME --out-dir DIR``

The members' token probabilities are averaged (:mod:`synthdeid.ner.ensemble`)
and the ``O`` threshold is chosen on validation notes by the
``operating_point`` rule of ``--config`` (the ``ner.training`` rule). Those
notes are the members' validation parts, minus every note and every patient
that any member trained on (``--train``: the members' mixture tables), so
the threshold is never fitted on a training note. ``--config`` may also set
``regex_detectors`` (default: the union of the members').
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid.cli_types import input_file, named_input_dir, output_dir, positive_int
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import Note, read_notes
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
        "--config", type=json.loads, default={}, help="JSON: operating_point, regex_detectors"
    )
    parser.add_argument("--run", default="ensemble", help="run name (model card)")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    parser.add_argument("--batch-size", type=positive_int, default=16, help="windows per batch")
    add_runtime_arguments(parser)


def validation_notes(
    validation: Mapping[Path, Sequence[Note]], training: Mapping[Path, Sequence[Note]]
) -> tuple[list[Note], dict[str, int]]:
    """The validation notes of every member, once each, that no member trained on.

    A note or a patient present in any training table is dropped: a member has
    seen that note, or notes of that patient, so it would flatter the threshold.
    """
    seen_notes = {note.note_id for notes in training.values() for note in notes}
    seen_patients = {note.patient_id for notes in training.values() for note in notes}
    kept: dict[str, Note] = {}
    checked: dict[str, Note] = {}
    dropped = 0
    for path, notes in validation.items():
        for note in notes:
            previous = checked.get(note.note_id)
            if previous is not None:
                if previous.text != note.text or previous.spans != note.spans:
                    raise InputError(
                        path,
                        f"note {note.note_id!r}",
                        "differs from the note of that id in another validation table",
                    )
                continue
            checked[note.note_id] = note
            if note.note_id in seen_notes or note.patient_id in seen_patients:
                dropped += 1
                continue
            kept[note.note_id] = note
    counts = {"offered": len(checked), "trained_on": dropped, "kept": len(kept)}
    if not kept:
        raise InputError(
            ", ".join(str(p) for p in validation),
            None,
            "no validation note is left once the members' training notes and patients are "
            "removed; the operating point needs notes no member trained on",
        )
    return list(kept.values()), counts


def ensemble_config(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError("--config must be a JSON object (operating_point, regex_detectors)")
    unknown = set(data) - set(CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"ensemble config: unknown keys {sorted(unknown)}; known {CONFIG_KEYS}")
    return data


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.ensemble import EnsembleTagger, ensemble_settings
    from synthdeid.ner.ensemble_card import save_ensemble_directory
    from synthdeid.ner.mixtures import read_mixture
    from synthdeid.ner.model import DeidTagger
    from synthdeid.ner.operating_point import OperatingPointRule, select_operating_point

    config = ensemble_config(args.config)
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

    def decode_at(threshold: float) -> dict[str, list[Any]]:
        return {
            note.note_id: tagger.decode(probs, enc, note.text, o_threshold=threshold)
            for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
        }

    point = select_operating_point(notes, decode_at, rule)
    settings.o_threshold = point.o_threshold
    settings.operating_point = point.record()
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
