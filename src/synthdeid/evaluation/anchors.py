"""An external de-identifier's span predictions as a run's predictions table (score-anchor).

An *anchor* is a de-identifier the project did not train, such as PhysioNet's
rule-based ``deid.pl``, whose predictions were computed elsewhere and kept as
JSONL, one object a note::

    {"patient_id": "1", "note_id": "1", "spans": [{"start": 48, "end": 64, "label": "LOCATION"}]}

The project's note id is ``<patient_id>-<note_id>`` (PhysioNet's convention);
ids are non-blank strings or integers. Offsets are character offsets into the
note text as the notes table holds it, ``end`` exclusive. Labels are the
canonical ones (:data:`~synthdeid.labels.CANONICAL_LABELS`) or ``NAME``: a
person's name whose kind (doctor or patient) the de-identifier did not say.
Other keys are ignored; blank lines are skipped.

The file is checked strictly, and the first problem stops the step with an
:class:`~synthdeid.errors.InputError` naming the file, the line and the
problem, never the note text: invalid JSON, a line that is not an object, a
missing or ill-typed key, an unknown label, two lines for one note, a note id
that is not in the notes table, another patient id than the table's, offsets
outside the note or empty, two spans of one note that overlap, and a note of
the scored parts without a line (silence and "not run" would look alike).

:class:`AnchorPredictions` turns the checked lines into rows of the notes
table (the note's own text, the anchor's spans) for the notes of the scored
parts, in the table's order: what ``predict-ner`` writes, so ``evaluate-ner``
and ``compare-ner`` score an anchor as they score a model.

**NAME** (see :func:`resolve_names`): label-agnostic figures (detection,
``leakage_detection_*``, coverage80 over all labels) never look at labels, so
a NAME span counts there as any prediction does. Label-consistent figures
(exact, overlap, token, ``leakage_overlap_*``) need a label, and a NAME span
that finds a doctor's or a patient's name should count as found: each NAME
span that overlaps a gold DOCTOR or PATIENT span takes that span's label (the
one it shares most characters with; ties: the earlier gold span), which is
exactly "NAME matches DOCTOR or PATIENT gold". A NAME span that overlaps no
such gold span stays NAME, a label no gold span has, so it is a false
positive in every label-consistent figure (and is listed as its own label in
the per-label tables). How many were resolved each way is in the summary.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synthdeid.errors import InputError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Note, Span, check_spans
from synthdeid.readers.base import read_lines
from synthdeid.readers.jsonl import json_kind
from synthdeid.scoring.matching import intersection

NAME = "NAME"
# the gold labels a NAME span is resolved to
NAME_LABELS: tuple[str, ...] = ("DOCTOR", "PATIENT")
ANCHOR_LABELS: tuple[str, ...] = (*CANONICAL_LABELS, NAME)
ENCODING = "utf-8"
SPAN_KEYS: tuple[str, ...] = ("start", "end", "label")
MAX_QUOTED = 40  # characters of a label quoted in an error


def _quoted(value: str) -> str:
    text = value if len(value) <= MAX_QUOTED else value[:MAX_QUOTED] + "..."
    return repr(text)


@dataclass(frozen=True)
class AnchorRecord:
    """One checked line: its number, the note's patient id and its spans (sorted).

    Offsets are checked against the note's text later (:class:`AnchorPredictions`).
    """

    line: int
    patient_id: str
    spans: tuple[Span, ...]

    @property
    def record(self) -> str:
        return f"line {self.line}"


def _id_field(obj: dict[str, Any], key: str, *, path: Path, record: str) -> str:
    if key not in obj:
        raise InputError(
            path, record, f"missing key {key!r}", "each line needs patient_id, note_id and spans"
        )
    value = obj[key]
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InputError(
            path, record, f"{key} must be a string or an integer, got a JSON {json_kind(value)}"
        )
    text = str(value)
    if not text.strip():
        raise InputError(path, record, f"{key} is blank")
    return text


def _span(raw: object, number: int, *, path: Path, record: str) -> Span:
    where = f"span {number}"
    if not isinstance(raw, dict):
        raise InputError(path, record, f"{where} is a JSON {json_kind(raw)}, not an object")
    for key in SPAN_KEYS:
        if key not in raw:
            raise InputError(path, record, f"{where}: missing key {key!r}")
    start, end, label = raw["start"], raw["end"], raw["label"]
    for key, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(
                path, record, f"{where}: {key} must be an integer, got a JSON {json_kind(value)}"
            )
    if not isinstance(label, str):
        raise InputError(
            path, record, f"{where}: label must be a string, got a JSON {json_kind(label)}"
        )
    if label not in ANCHOR_LABELS:
        raise InputError(
            path,
            record,
            f"{where} ({start}-{end}) has unknown label {_quoted(label)}",
            f"known labels: {', '.join(ANCHOR_LABELS)}",
        )
    return Span(start, end, label)


def parse_line(line: str, number: int, path: Path) -> tuple[str, AnchorRecord]:
    """One line as (project note id, record); InputError for anything but the format."""
    record = f"line {number}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(path, record, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise InputError(path, record, f"a line is a JSON {json_kind(obj)}, expected an object")
    patient_id = _id_field(obj, "patient_id", path=path, record=record)
    note_id = _id_field(obj, "note_id", path=path, record=record)
    project_id = f"{patient_id}-{note_id}"
    record = f"line {number} (note {project_id!r})"
    if "spans" not in obj:
        raise InputError(path, record, "missing key 'spans'", "a note with no prediction has []")
    raw_spans = obj["spans"]
    if not isinstance(raw_spans, list):
        raise InputError(path, record, f"spans must be a list, got a JSON {json_kind(raw_spans)}")
    spans = [_span(raw, k, path=path, record=record) for k, raw in enumerate(raw_spans, start=1)]
    return project_id, AnchorRecord(number, patient_id, tuple(sorted(spans)))


def read_anchor(path: str | Path) -> dict[str, AnchorRecord]:
    """Every line of an anchor file by project note id (``<patient_id>-<note_id>``).

    Checks what can be checked without the notes: JSON, keys, types, labels,
    one line per note. InputError names the file and the line.
    """
    path = Path(path)
    records: dict[str, AnchorRecord] = {}
    for number, line in enumerate(read_lines(path, ENCODING), start=1):
        if not line.strip():
            continue
        note_id, record = parse_line(line, number, path)
        first = records.get(note_id)
        if first is not None:
            raise InputError(
                path,
                f"line {number} (note {note_id!r})",
                f"a second line for the note, first at line {first.line}",
                "one line per note",
            )
        records[note_id] = record
    return records


def resolve_names(
    spans: Sequence[Span], gold: Sequence[Span], labels: Collection[str] = NAME_LABELS
) -> tuple[tuple[Span, ...], Counter[str]]:
    """Each NAME span with the label of the gold ``labels`` span it overlaps most (module docstring).

    Ties go to the earlier gold span (sorted order); a NAME span overlapping
    none stays NAME. Returns the spans (sorted) and how many NAME spans took
    each label (``NAME``: those left as they were).
    """
    candidates = sorted(span for span in gold if span.label in labels)
    counts: Counter[str] = Counter()
    resolved = []
    for span in spans:
        if span.label != NAME:
            resolved.append(span)
            continue
        best: Span | None = None
        best_shared = 0
        for candidate in candidates:
            shared = intersection(span, candidate)
            if shared > best_shared:
                best, best_shared = candidate, shared
        label = NAME if best is None else best.label
        counts[label] += 1
        resolved.append(Span(span.start, span.end, label))
    return tuple(sorted(resolved)), counts


@dataclass
class AnchorStats:
    """What one conversion read and wrote (no text, no note ids)."""

    lines: int = 0
    notes: int = 0  # notes written: the notes of the scored parts
    notes_not_scored: int = 0  # notes of the table outside the parts (checked, not written)
    predicted_spans: int = 0
    predicted_by_label: Counter[str] = field(default_factory=Counter)
    name_spans: int = 0
    name_resolved_as: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "notes": self.notes,
            "notes_not_scored": self.notes_not_scored,
            "predicted_spans": self.predicted_spans,
            "predicted_by_label": dict(sorted(self.predicted_by_label.items())),
            "name_spans": self.name_spans,
            "name_resolved_as": dict(sorted(self.name_resolved_as.items())),
        }


class AnchorPredictions:
    """An anchor file's predictions for the notes of ``parts`` (every note when empty).

    :meth:`batches` takes the notes table batch by batch (every note of it, so
    that each line is checked against its note) and yields the prediction rows
    of each batch; the checks that need the whole table (a line for no note of
    the table, a scored note without a line) raise when the last batch has
    been read. Consume it inside an atomic writer, so a refusal writes nothing.
    """

    def __init__(
        self, path: str | Path, records: dict[str, AnchorRecord], parts: Collection[str] = ()
    ) -> None:
        self.path = Path(path)
        self.records = records
        self.parts = frozenset(parts)
        self.stats = AnchorStats(lines=len(records))

    @classmethod
    def read(cls, path: str | Path, parts: Collection[str] = ()) -> AnchorPredictions:
        return cls(path, read_anchor(path), parts)

    def _predicted(self, note: Note, record: AnchorRecord) -> tuple[Span, ...]:
        where = f"{record.record} (note {note.note_id!r})"
        if record.patient_id != note.patient_id:
            raise InputError(
                self.path,
                where,
                f"patient_id {record.patient_id!r}, but the notes table gives the note to "
                f"patient {note.patient_id!r}",
            )
        return check_spans(note.text, record.spans, path=self.path, record=where)

    def batches(self, notes: Iterable[Sequence[Note]]) -> Iterator[list[Note]]:
        seen: set[str] = set()
        missing: list[str] = []
        for batch in notes:
            out = []
            for note in batch:
                record = self.records.get(note.note_id)
                scored = not self.parts or note.split in self.parts
                if record is None:
                    if scored:
                        missing.append(note.note_id)
                    continue
                seen.add(note.note_id)
                spans = self._predicted(note, record)
                if not scored:
                    self.stats.notes_not_scored += 1
                    continue
                spans, names = resolve_names(spans, note.spans)
                self.stats.notes += 1
                self.stats.predicted_spans += len(spans)
                self.stats.predicted_by_label.update(span.label for span in spans)
                self.stats.name_spans += sum(names.values())
                self.stats.name_resolved_as.update(names)
                out.append(note.with_text(note.text, spans))
            if out:
                yield out
        unknown = [note_id for note_id in self.records if note_id not in seen]
        if unknown:
            first = self.records[unknown[0]]
            raise InputError(
                self.path,
                f"{first.record} (note {unknown[0]!r})",
                f"note id not in the notes table ({len(unknown)} line(s) name notes it lacks)",
                "predictions of another corpus, or ids not as <patient_id>-<note_id>",
            )
        if missing:
            parts = sorted(self.parts) if self.parts else "every part"
            raise InputError(
                self.path,
                None,
                f"no line for {len(missing)} note(s) of {parts}; first: {missing[:5]}",
                "the anchor must give every scored note a line (spans [] when it found nothing)",
            )
