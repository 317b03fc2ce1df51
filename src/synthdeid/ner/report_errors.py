"""A tagger's span errors on development notes: missed, mislabelled, spurious.

Each error carries its text in context and the model's probability of ``O``
over its tokens; :func:`development_notes` chooses the notes (never a
holdout note, from whichever file). The ``report-errors`` stage (:mod:`synthdeid.stages.report_errors`)
writes them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synthdeid.errors import ConfigError, InputError
from synthdeid.local_only import LOCAL_ONLY_METADATA
from synthdeid.ner.mixtures import HOLDOUT_SPLIT
from synthdeid.notes import Note, Span
from synthdeid.scoring.matching import intersection
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
    validation_path: str | Path = "--validation",
) -> list[Note]:
    """The notes of ``parts`` and the validation notes, less any the run trained on.

    Never a holdout note, whatever file it comes from: the holdout part is
    refused (ConfigError), and so is a holdout note among the validation notes
    (InputError naming ``validation_path``, the count and the first note's id).
    ``stage`` names the step in the refusals.
    """
    if "holdout" in parts or not set(parts) <= set(PARTS):
        raise ConfigError(
            f"{stage} reads development parts only (seed, train), not {list(parts)}: "
            "the holdout is for the final scores"
        )
    refuse_holdout_notes(validation, validation_path, stage)
    wanted = set(parts)
    chosen = [n for n in notes if n.split in wanted] + list(validation)
    unique: dict[str, Note] = {}
    for note in chosen:
        if note.note_id not in trained:
            unique.setdefault(note.note_id, note)
    return list(unique.values())


def refuse_holdout_notes(notes: Sequence[Note], path: str | Path, stage: str) -> None:
    """InputError when any of ``notes`` (read from ``path``) is a holdout note."""
    holdout = [note.note_id for note in notes if note.split == HOLDOUT_SPLIT]
    if not holdout:
        return
    which = "a holdout note" if len(holdout) == 1 else f"the first of {len(holdout)} holdout notes"
    raise InputError(
        path,
        f"note {holdout[0]!r}",
        f"{which}: {stage} reads development notes only (the holdout is for the final scores)",
        "pass the run's validation table (build_mixture), not the split notes",
    )
