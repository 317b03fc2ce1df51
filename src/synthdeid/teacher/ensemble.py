"""Combining several teachers' labels for the same notes into one ensemble label set.

Each member (a named teacher) proposes non-overlapping spans for a note. The
ensemble combines them label by label (:func:`combine`):

1. **Clusters.** For one label, the spans of all members with that label are
   grouped into clusters: the connected components of the overlap relation
   (``a.start < b.end and b.start < a.end``), so a chain of overlapping spans is
   one cluster even where its ends do not overlap each other.
2. **Votes.** A cluster's votes are the number of *distinct* members with a
   span in it: several spans of one member in a cluster count one vote.
3. **Policy**, per label (:class:`EnsemblePolicy`, ``default`` for labels not
   named):

   * ``union`` keeps every cluster. It is recall-oriented, which is what
     de-identification wants: PHI that any member found is covered.
   * ``vote`` keeps a cluster only when its votes reach the required number,
     ``min_votes`` or, when that is unset, a strict majority of the members
     (``n // 2 + 1``). It is precision-oriented; each cluster it drops is
     counted in ``vote_dropped``. ``min_votes`` above the number of members is
     a :class:`~synthdeid.errors.ConfigError`.

   The choice is per label: e.g. ``vote`` for ``DATE`` where one member
   over-fires on numbers, ``union`` elsewhere.
4. **Extent.** A kept cluster becomes one span from the smallest start to the
   largest end of its spans (the union extent). It covers every member's
   boundary, so a kept span never leaves uncovered a PHI character that a
   member saw, whichever member's boundaries were tighter.
5. **Confidence** of a kept span is its vote share, ``votes / members`` (a
   float in (0, 1]); the members' own confidences are not used, since they are
   not comparable across teachers.
6. **Cross-label overlaps.** Kept spans of different labels that overlap are
   resolved by :func:`~synthdeid.teacher.silver.resolve_overlaps` (so the
   higher vote share wins, then the longer span, ...); each span dropped there
   is counted in ``overlap_dropped``.

Over notes (:func:`combine_notes`), a note gets labels only when every member
labelled it with status ``ok``; otherwise it gets status ``member_failed``, no
spans, and a detail naming the members that failed or missed it (names only,
never note text). A note one member failed on would otherwise look like the
others' labels were the whole truth. Token use of an ensemble note is the sum
over its members' known counts (``None`` when no member reported any), for
failed notes too: the tokens were spent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.teacher.silver import NoteLabels, ScoredSpan, label_rank, resolve_overlaps

UNION = "union"
VOTE = "vote"
POLICIES: tuple[str, ...] = (UNION, VOTE)
MEMBER_FAILED = "member_failed"


@dataclass(frozen=True)
class EnsemblePolicy:
    """Per-label combination policy (``union`` or ``vote``) and the votes a ``vote`` needs."""

    default: str = UNION
    per_label: Mapping[str, str] = field(default_factory=dict)
    min_votes: int | None = None

    def __post_init__(self) -> None:
        for key, value in {"default": self.default, **self.per_label}.items():
            if value not in POLICIES:
                raise ConfigError(
                    f"ensemble policy {key!r} must be one of {', '.join(POLICIES)}, not {value!r}"
                )
        if self.min_votes is not None and (
            isinstance(self.min_votes, bool)
            or not isinstance(self.min_votes, int)
            or self.min_votes < 1
        ):
            raise ConfigError(
                f"ensemble policy 'min_votes' must be a positive integer, not {self.min_votes!r}"
            )
        object.__setattr__(self, "per_label", dict(self.per_label))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> EnsemblePolicy:
        """From config such as ``{"default": "union", "DATE": "vote", "min_votes": 2}``."""
        values = dict(mapping or {})
        default = values.pop("default", UNION)
        min_votes = values.pop("min_votes", None)
        return cls(default=default, per_label=values, min_votes=min_votes)

    def policy(self, label: str) -> str:
        return self.per_label.get(label, self.default)

    def required_votes(self, members: int) -> int:
        """Votes a ``vote`` cluster needs among ``members`` members."""
        if members < 1:
            raise ConfigError("an ensemble needs at least one member")
        if self.min_votes is None:
            return members // 2 + 1
        if self.min_votes > members:
            raise ConfigError(
                f"ensemble policy 'min_votes' is {self.min_votes}, "
                f"but the ensemble has only {members} member(s)"
            )
        return self.min_votes

    def as_dict(self) -> dict[str, Any]:
        return {"default": self.default, **self.per_label, "min_votes": self.min_votes}


def _clusters(spans: list[tuple[str, ScoredSpan]]) -> list[list[tuple[str, ScoredSpan]]]:
    """Connected components of overlap among ``(member, span)`` pairs of one label.

    Sorted by (start, end), a span overlaps some span of the current component
    exactly when its start lies before the component's largest end: the span
    reaching that end starts no later than it (and strictly earlier when the
    span is empty), so the sweep matches the pairwise definition.
    """
    ordered = sorted(spans, key=lambda pair: (pair[1].start, pair[1].end, pair[0]))
    clusters: list[list[tuple[str, ScoredSpan]]] = []
    reach = 0
    for pair in ordered:
        span = pair[1]
        if clusters and span.start < reach:
            clusters[-1].append(pair)
            reach = max(reach, span.end)
        else:
            clusters.append([pair])
            reach = span.end
    return clusters


def combine(
    members: Mapping[str, Sequence[ScoredSpan]], policy: EnsemblePolicy
) -> tuple[list[ScoredSpan], dict[str, int]]:
    """One note's ensemble spans (sorted) and ``{"vote_dropped", "overlap_dropped"}`` counts."""
    n_members = len(members)
    required = policy.required_votes(n_members)
    by_label: dict[str, list[tuple[str, ScoredSpan]]] = {}
    for name, spans in members.items():
        for span in spans:
            by_label.setdefault(span.label, []).append((name, span))
    kept: list[ScoredSpan] = []
    vote_dropped = 0
    for label in sorted(by_label, key=label_rank):
        voting = policy.policy(label) == VOTE
        for cluster in _clusters(by_label[label]):
            votes = len({name for name, _ in cluster})
            if voting and votes < required:
                vote_dropped += 1
                continue
            kept.append(
                ScoredSpan(
                    start=min(span.start for _, span in cluster),
                    end=max(span.end for _, span in cluster),
                    label=label,
                    confidence=votes / n_members,
                )
            )
    resolved, overlap_dropped = resolve_overlaps(kept)
    return resolved, {"vote_dropped": vote_dropped, "overlap_dropped": overlap_dropped}


def _token_sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def combine_notes(
    members: Mapping[str, Mapping[str, NoteLabels]], policy: EnsemblePolicy
) -> tuple[list[NoteLabels], dict[str, int]]:
    """Ensemble labels per note, and totals ``{"vote_dropped", "overlap_dropped", "member_failed"}``.

    Notes are the union of the members' note ids, in the first member's order,
    then each further member's new ids in its order.
    """
    # checks the policy against the ensemble size even when no note gets combined
    policy.required_votes(len(members))
    note_ids: dict[str, None] = {}
    for labels in members.values():
        note_ids.update(dict.fromkeys(labels))
    totals = {"vote_dropped": 0, "overlap_dropped": 0, "member_failed": 0}
    result: list[NoteLabels] = []
    for note_id in note_ids:
        present = {name: labels[note_id] for name, labels in members.items() if note_id in labels}
        input_tokens = _token_sum([note.input_tokens for note in present.values()])
        output_tokens = _token_sum([note.output_tokens for note in present.values()])
        failed = [name for name, note in present.items() if not note.ok]
        missing = [name for name in members if name not in present]
        if failed or missing:
            parts = []
            if failed:
                parts.append(f"failed: {', '.join(failed)}")
            if missing:
                parts.append(f"missing: {', '.join(missing)}")
            totals["member_failed"] += 1
            result.append(
                NoteLabels(
                    note_id=note_id,
                    spans=[],
                    status=MEMBER_FAILED,
                    detail="; ".join(parts),
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                )
            )
            continue
        spans, counts = combine({name: note.spans for name, note in present.items()}, policy)
        totals["vote_dropped"] += counts["vote_dropped"]
        totals["overlap_dropped"] += counts["overlap_dropped"]
        note = NoteLabels(
            note_id=note_id,
            spans=spans,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        note.count("overlap_dropped", counts["overlap_dropped"])
        result.append(note)
    return result, totals
