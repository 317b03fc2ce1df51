"""Replace labelled PHI spans by surrogates in one left-to-right pass.

Each span's surrogate comes from the operator configured for its label; the
new text is built piece by piece and every span's new offsets are recorded at
insertion, so ``text[start:end]`` is the surrogate by construction (and is
checked anyway). The offset map (old start/end -> new start/end for every
span) lets any other annotation layer be carried over with
:func:`project_offset`.

No surrogate may equal another original of its scope (a second doctor's real
name, another of the patient's dates), so the replacer first collects the
originals of all the notes (:meth:`SurrogateReplacer.collect_batches`, a pass
that keeps only hashes of the normalised surfaces, :class:`Originals`, and a
second one only where the date shift asks for it) and the operators avoid them
in their draws; any collision left is counted (``collisions``) and reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from synthdeid.errors import ConfigError, StepError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.mentions import surfaces_left
from synthdeid.notes import Note, Span, splice
from synthdeid.surrogate.keying import SurrogateKey
from synthdeid.surrogate.operators import Mention, SurrogateOperator, build_operator
from synthdeid.surrogate.operators.base import Originals

# label -> (operator, options): SHIELD section 2.2, with HIPAA age banding
DEFAULT_POLICIES: dict[str, dict[str, Any]] = {
    "DATE": {"operator": "date_shift", "options": {"min_days": 3, "max_days": 90}},
    "DOCTOR": {"operator": "name", "options": {}},
    "PATIENT": {"operator": "name", "options": {}},
    "PHONE": {"operator": "format_preserving", "options": {}},
    # a keyed one-way hash: an identifier's format can itself identify (SHIELD, sec. 2.2)
    "ID": {"operator": "hash", "options": {}},
    "LOCATION": {"operator": "location", "options": {}},
    "HOSPITAL": {"operator": "location", "options": {}},
    "AGE": {"operator": "age", "options": {}},
    "OTHER": {"operator": "redact", "options": {}},
}


@dataclass(frozen=True)
class OffsetEntry:
    """Where one span of the input note went in the output note."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int


class IdentityReplacementError(StepError):
    """An operator returned the original surface where that is not allowed."""


def project_offset(offset_map: Sequence[OffsetEntry], offset: int) -> int:
    """Map an offset of the input text to the output text.

    Offsets outside replaced spans move by the length change of the spans
    before them; an offset inside a replaced span maps to the corresponding
    boundary of its surrogate (its start, or its end when it is the span's end).
    """
    delta = 0
    for entry in offset_map:
        if offset <= entry.old_start:
            break
        if offset < entry.old_end:
            return entry.new_start
        delta = entry.new_end - entry.old_end
    return offset + delta


def carry_spans(spans: Iterable[Span], offset_map: Sequence[OffsetEntry]) -> list[Span]:
    """Re-project another annotation layer's spans onto the output text."""
    projected = []
    for span in spans:
        start = project_offset(offset_map, span.start)
        end = project_offset(offset_map, span.end)
        # an end inside a replaced span extends to that surrogate's end
        for entry in offset_map:
            if entry.old_start < span.end <= entry.old_end:
                end = entry.new_end
        projected.append(Span(start, max(start, end), span.label))
    return projected


@dataclass
class ReplacedNote:
    note: Note
    offset_map: list[OffsetEntry]
    # original surfaces that still occur (whole word) elsewhere in the output text
    surfaces_left: list[str] = field(default_factory=list)


class SurrogateReplacer:
    """Applies one operator per label to notes.

    ``policies`` maps a canonical label to ``{"operator": name, "options": {...}}``
    (defaults: :data:`DEFAULT_POLICIES`); ``labels`` limits which labels are
    replaced (the others are copied unchanged, offsets re-projected).

    Call :meth:`collect_batches` (or :meth:`collect`) with every note before
    replacing any: surrogates then avoid the originals of their scope across
    the whole input, and a note's surrogates do not depend on the order the
    notes come in.
    """

    def __init__(
        self,
        key: SurrogateKey,
        policies: Mapping[str, Mapping[str, Any]] | None = None,
        labels: Iterable[str] | None = None,
        consistency: str = "patient",
    ) -> None:
        self.key = key  # also keys the released note and patient ids (release_ids)
        merged = {**DEFAULT_POLICIES, **(policies or {})}
        unknown = set(merged) - set(CANONICAL_LABELS)
        if unknown:
            raise ConfigError(f"surrogate policies for unknown labels {sorted(unknown)}")
        self.originals = Originals()
        self.labels = set(CANONICAL_LABELS if labels is None else labels)
        bad = self.labels - set(CANONICAL_LABELS)
        if bad:
            raise ConfigError(f"surrogate labels {sorted(bad)} are not canonical labels")
        self.operators: dict[str, SurrogateOperator] = {}
        for label in sorted(self.labels):
            policy = merged[label]
            options = {"consistency": consistency, **policy.get("options", {})}
            self.operators[label] = build_operator(key, policy["operator"], options, self.originals)
        self.originals.keep_scopes({op.consistency for op in self.operators.values()})
        self.replaced: Counter[str] = Counter()
        self.kept_deliberately: Counter[str] = Counter()
        # surrogates that still equal an original of their scope, by label
        self.collisions: Counter[str] = Counter()
        self._replacing = False
        self._collected = False

    def collect(self, notes: Collection[Note]) -> None:
        """Take in the originals of ``notes``: every note, in memory (see :meth:`collect_batches`)."""
        self.collect_batches(lambda: [notes])

    def collect_batches(self, read: Callable[[], Iterable[Iterable[Note]]]) -> None:
        """Take in the originals of every note, before replacing any; once.

        ``read()`` gives every note, batch by batch, the same ones each call. It
        is called once for the originals, and again for each further pass an
        operator asks for (:meth:`SurrogateOperator.looks_again`: the date
        shift, for the scopes where its first draw would move a date onto an
        original).
        """
        if self._replacing:
            raise RuntimeError("collect the originals of every note before replacing any")
        if self._collected:
            raise RuntimeError("collect the originals once, from every note")
        self._collected = True
        watching, look = dict(self.operators), 0
        while look == 0 or watching:  # the first pass reads every note even without operators
            for notes in read():
                for note in notes:
                    for span in note.spans:
                        surface = span.surface(note.text)
                        if look == 0:
                            self.originals.add(note.patient_id, surface)
                        operator = watching.get(span.label)
                        if operator is not None:
                            mention = Mention(surface, span.label, note.patient_id, note.note_id)
                            operator.observe(mention, look)
            look += 1
            watching = {label: op for label, op in watching.items() if op.looks_again(look)}

    def replace_note(self, note: Note) -> ReplacedNote:
        self._replacing = True
        surrogates = [self.surrogate_for(note, span) for span in note.spans]
        text, spans = splice(note.text, note.spans, surrogates)
        output = note.with_text(text, spans)
        # the invariant every consumer relies on, checked on every output
        for new, inserted in zip(spans, surrogates, strict=True):
            if text[new.start : new.end] != inserted:
                raise AssertionError(
                    f"note {note.note_id!r}: span {new} does not hold its surrogate"
                )
        offset_map = [
            OffsetEntry(old.start, old.end, new.start, new.end)
            for old, new in zip(note.spans, spans, strict=True)
        ]
        originals = {
            old.surface(note.text)
            for old, surrogate in zip(note.spans, surrogates, strict=True)
            if surrogate != old.surface(note.text)
        }
        return ReplacedNote(output, offset_map, surfaces_left(output, originals))

    def surrogate_for(self, note: Note, span: Span) -> str:
        """The surrogate of one span (its text when its label is not replaced)."""
        surface = span.surface(note.text)
        operator = self.operators.get(span.label)
        if operator is None:
            return surface
        mention = Mention(surface, span.label, note.patient_id, note.note_id)
        surrogate = operator.replace(mention)
        if surrogate != surface:
            self.replaced[span.label] += 1
            if operator.avoids_originals and operator.is_original(mention, surrogate):
                self.collisions[span.label] += 1
        elif operator.allows_identity(mention):
            self.kept_deliberately[span.label] += 1
        else:
            raise IdentityReplacementError(
                f"note {note.note_id!r}: operator {operator.name!r} returned the "
                f"original {span.label} span {span.start}-{span.end} unchanged"
            )
        return surrogate

    def operator_counts(self) -> dict[str, dict[str, int]]:
        return {label: dict(op.counts) for label, op in self.operators.items() if op.counts}
