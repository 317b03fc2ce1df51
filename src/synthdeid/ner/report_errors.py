"""Every missed and every spurious span of a model on development notes (report-errors).

The next lever for a de-identifier (more gold, another encoder, lexicons, a
threshold) should be chosen from its errors, not guessed. This stage tags
development notes (never the holdout: the run's validation notes and, by
default, the seed part, less any note the run trained on), decodes them as
``deid`` does (model, regex detectors, Safe Harbor ages) and lists, per span:

``missed``
    a gold span no prediction touches (label-agnostic: PHI left in the text);
``mislabelled``
    a gold span touched only by predictions of other labels (redacted, but with
    the wrong surrogate family);
``spurious``
    a prediction that touches no gold span (over-redaction).

Each row carries the span's text with 40 characters of context either side and
the model's probability of ``O`` over the span's tokens (min and mean), so a
miss at P(O) = 0.55 (a threshold question) reads apart from one at 0.999 (the
model never saw such a thing). The table holds real text: it is written to the
step's ``local/`` folder and marked local-only (:mod:`synthdeid.local_only`).
The summary beside it holds counts and P(O) quantiles only, no text, and is
releasable.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_json_atomic, write_parquet_atomic
from synthdeid.cli_types import (
    input_dir,
    input_file,
    optional_input_file,
    output_file,
    positive_int,
)
from synthdeid.errors import ConfigError, InputError
from synthdeid.evaluation.matching import intersection
from synthdeid.local_only import LOCAL_ONLY_METADATA, is_local_path
from synthdeid.notes import Note, Span, read_notes
from synthdeid.runtime import add_runtime_arguments, set_threads
from synthdeid.split import PARTS
from synthdeid.stats import quartiles

log = logging.getLogger(__name__)

CONTEXT_CHARS = 40
KINDS: tuple[str, ...] = ("missed", "mislabelled", "spurious")
ERRORS_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("part", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("gold_label", pa.string()),
        pa.field("predicted_label", pa.string()),
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("left_context", pa.string(), nullable=False),
        pa.field("right_context", pa.string(), nullable=False),
        pa.field("p_o_min", pa.float32()),
        pa.field("p_o_mean", pa.float32()),
    ],
    metadata=LOCAL_ONLY_METADATA,
)


@dataclass(frozen=True)
class SpanError:
    note_id: str
    part: str
    kind: str
    gold_label: str | None
    predicted_label: str | None
    start: int
    end: int
    p_o_min: float | None
    p_o_mean: float | None


def span_p_o(
    span: Span, offsets: np.ndarray, probs: np.ndarray
) -> tuple[float | None, float | None]:
    """Min and mean P(O) over the tokens that share a character with ``span`` (None: no token)."""
    inside = (
        (offsets[:, 0] < span.end) & (offsets[:, 1] > span.start) & (offsets[:, 1] > offsets[:, 0])
    )
    if not inside.any():
        return None, None
    p_o = probs[inside, 0]
    return float(p_o.min()), float(p_o.mean())


def note_errors(
    note: Note, predicted: Sequence[Span], offsets: np.ndarray, probs: np.ndarray
) -> list[SpanError]:
    """One note's missed, mislabelled and spurious spans, in text order."""
    errors = []
    for gold in sorted(note.spans):
        touching = [p for p in predicted if intersection(gold, p) > 0]
        if touching and any(p.label == gold.label for p in touching):
            continue
        kind = "mislabelled" if touching else "missed"
        labels = sorted({p.label for p in touching})
        errors.append(
            SpanError(
                note.note_id,
                note.split,
                kind,
                gold.label,
                "+".join(labels) or None,
                gold.start,
                gold.end,
                *span_p_o(gold, offsets, probs),
            )
        )
    for pred in sorted(predicted):
        if not any(intersection(gold, pred) > 0 for gold in note.spans):
            errors.append(
                SpanError(
                    note.note_id,
                    note.split,
                    "spurious",
                    None,
                    pred.label,
                    pred.start,
                    pred.end,
                    *span_p_o(pred, offsets, probs),
                )
            )
    return sorted(errors, key=lambda e: (e.start, e.end, e.kind))


def errors_table(errors: Sequence[SpanError], notes: dict[str, Note]) -> pa.Table:
    """The local-only table: every error with its text and context."""
    rows: dict[str, list[Any]] = {field.name: [] for field in ERRORS_SCHEMA}
    for e in errors:
        text = notes[e.note_id].text
        values = {
            "note_id": e.note_id,
            "part": e.part,
            "kind": e.kind,
            "gold_label": e.gold_label,
            "predicted_label": e.predicted_label,
            "start": e.start,
            "end": e.end,
            "text": text[e.start : e.end],
            "left_context": text[max(0, e.start - CONTEXT_CHARS) : e.start],
            "right_context": text[e.end : e.end + CONTEXT_CHARS],
            "p_o_min": e.p_o_min,
            "p_o_mean": e.p_o_mean,
        }
        for key, value in values.items():
            rows[key].append(value)
    return pa.Table.from_pydict(rows, schema=ERRORS_SCHEMA)


def quantiles(values: Sequence[float | None]) -> dict[str, float | None]:
    """P(O) quartiles over the errors that have tokens (None where there is none)."""
    defined = np.array([v for v in values if v is not None], dtype=float)
    if defined.size == 0:
        return {"n": 0, "q25": None, "median": None, "q75": None}
    q25, median, q75 = quartiles(defined)
    return {"n": int(defined.size), "q25": q25, "median": median, "q75": q75}


def summarize(errors: Sequence[SpanError], notes: Sequence[Note]) -> dict[str, Any]:
    """Counts per kind and label, and P(O) quartiles per kind: no text."""
    by_kind: dict[str, Any] = {}
    for kind in KINDS:
        of_kind = [e for e in errors if e.kind == kind]
        label_of: Callable[[SpanError], str | None] = (
            (lambda e: e.predicted_label) if kind == "spurious" else (lambda e: e.gold_label)
        )
        by_kind[kind] = {
            "count": len(of_kind),
            "by_label": dict(sorted(Counter(label_of(e) for e in of_kind).items())),
            "p_o_min": quantiles([e.p_o_min for e in of_kind]),
        }
    return {
        "notes": len(notes),
        "notes_by_part": dict(sorted(Counter(n.split for n in notes).items())),
        "gold_spans": sum(len(n.spans) for n in notes),
        "notes_with_a_miss": len({e.note_id for e in errors if e.kind == "missed"}),
        "errors": by_kind,
    }


def development_notes(
    notes: Sequence[Note],
    parts: Sequence[str],
    validation: Sequence[Note],
    trained: set[str],
    *,
    stage: str = "report-errors",
) -> list[Note]:
    """The notes of ``parts`` and the validation notes, less any the run trained on.

    ``stage`` names the step in the refusal of the holdout.
    """
    if "holdout" in parts or not set(parts) <= set(PARTS):
        raise ConfigError(
            f"{stage} reads development parts only (seed, train), not {list(parts)}: "
            "the holdout is for the final scores"
        )
    wanted = set(parts)
    chosen = [n for n in notes if n.split in wanted] + list(validation)
    unique: dict[str, Note] = {}
    for note in chosen:
        if note.note_id not in trained:
            unique.setdefault(note.note_id, note)
    return list(unique.values())


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, type=input_dir, help="model or ensemble folder")
    parser.add_argument("--notes", required=True, type=input_file, help="split notes table")
    parser.add_argument(
        "--parts", nargs="*", default=["seed"], help="parts of --notes to read (default: seed)"
    )
    parser.add_argument(
        "--validation", type=optional_input_file, default=None, help="the run's validation notes"
    )
    parser.add_argument(
        "--train",
        type=optional_input_file,
        default=None,
        help="the run's training mixture: its notes are left out",
    )
    parser.add_argument("--safe-harbor-ages", action="store_true", help="as in deid")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    add_runtime_arguments(parser, progress=False, device_default="cpu")
    parser.add_argument(
        "--out", required=True, type=output_file, help="errors table (Parquet, in a local/ folder)"
    )
    parser.add_argument("--summary", required=True, type=output_file, help="counts (JSON)")


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.deid_stage import add_regex_spans, drop_young_age_spans
    from synthdeid.ner.ensemble import load_tagger

    if not is_local_path(args.out):
        raise InputError(
            args.out, None, "the errors table holds note text: write it into a local/ folder"
        )
    set_threads(args.threads)
    validation = read_notes(args.validation) if args.validation else []
    trained = {n.note_id for n in read_notes(args.train)} if args.train else set()
    notes = development_notes(read_notes(args.notes), args.parts, validation, trained)
    if not notes:
        raise InputError(args.notes, None, f"no development notes in parts {args.parts}")
    tagger = load_tagger(args.model, device=args.device)
    encoded = tagger.encode(notes)
    probs = tagger.token_probabilities(encoded, batch_size=args.batch_size, progress=True)
    predicted = [
        tagger.decode(p, enc, note.text) for note, enc, p in zip(notes, encoded, probs, strict=True)
    ]
    if tagger.settings.regex_detectors:
        predicted, _ = add_regex_spans(notes, predicted, tagger.settings.regex_detectors)
    if args.safe_harbor_ages:
        predicted, _ = drop_young_age_spans(notes, predicted)
    errors = [
        error
        for note, enc, p, spans in zip(notes, encoded, probs, predicted, strict=True)
        for error in note_errors(note, spans, enc.offsets, p)
    ]
    params = {"parts": args.parts, "safe_harbor_ages": args.safe_harbor_ages}
    inputs: dict[str, str | Path] = {"model": args.model, "notes": args.notes}
    provenance = make_provenance("report-errors", params, inputs)
    write_parquet_atomic(errors_table(errors, {n.note_id: n for n in notes}), args.out, provenance)
    summary = summarize(errors, notes)
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    counts = {kind: summary["errors"][kind]["count"] for kind in KINDS}
    log.info("%d development notes: %s -> %s (local only)", len(notes), counts, args.out)
