"""Choosing the decision threshold on the ``O`` class on validation notes.

De-identification is judged on what it misses, so the threshold is set for
recall, not left at argmax. Two rules, both evaluated over a grid of
thresholds on the validation part (real notes never used for training):

``recall``
    among thresholds whose detection precision is at least
    ``precision_floor``, the smallest whose label-agnostic detection recall
    reaches ``target_recall`` (the most precise model that still reaches it);
    when none reaches it, the one with the highest recall. When no threshold
    meets the floor, plain argmax (0.5): a threshold that buys recall by
    tagging everything is no operating point.
``leakage``
    the threshold with the lowest document-level leakage among those whose
    detection precision is at least ``precision_floor``; ties go to the higher
    span-overlap F1. When none meets the floor, the most precise threshold.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from synthdeid.errors import ConfigError
from synthdeid.notes import Note, Span
from synthdeid.scoring.metrics import headline_metrics

if TYPE_CHECKING:  # the model loads torch
    import numpy as np

    from synthdeid.ner.model import SpanTagger

log = logging.getLogger(__name__)

DEFAULT_GRID: tuple[float, ...] = (
    0.5,
    0.6,
    0.7,
    0.8,
    0.85,
    0.9,
    0.93,
    0.95,
    0.97,
    0.98,
    0.99,
    0.995,
    0.999,
)
MODES = ("recall", "leakage", "argmax")


@dataclass(frozen=True)
class OperatingPointRule:
    mode: str = "recall"
    target_recall: float = 0.97
    precision_floor: float = 0.8
    grid: tuple[float, ...] = DEFAULT_GRID

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> OperatingPointRule:
        rule = cls(
            mode=str(data.get("mode", cls.mode)),
            target_recall=float(data.get("target_recall", cls.target_recall)),
            precision_floor=float(data.get("precision_floor", cls.precision_floor)),
            grid=tuple(float(t) for t in data.get("grid", DEFAULT_GRID)),
        )
        if rule.mode not in MODES:
            raise ConfigError(f"ner.operating_point.mode: {rule.mode!r} is not one of {MODES}")
        if not rule.grid or any(not 0.0 < t < 1.0 for t in rule.grid):
            raise ConfigError("ner.operating_point.grid: thresholds must lie in (0, 1)")
        return rule


def sweep(
    gold: Sequence[Note],
    decode: Callable[[float], Mapping[str, Sequence[Span]]],
    grid: Sequence[float],
) -> list[dict[str, float]]:
    """Validation metrics at every threshold of the grid (ascending)."""
    rows = []
    for threshold in sorted(set(grid)):
        metrics = headline_metrics(gold, decode(threshold))
        rows.append({"o_threshold": threshold, **metrics})
    return rows


def choose(rows: Sequence[dict[str, float]], rule: OperatingPointRule) -> dict[str, float]:
    """The row of the sweep that the rule selects."""
    argmax = min(rows, key=lambda r: abs(r["o_threshold"] - 0.5))
    if rule.mode == "argmax":
        return argmax
    precise = [r for r in rows if r["detection_precision"] >= rule.precision_floor]
    if rule.mode == "recall":
        if not precise:
            return argmax
        reaching = [r for r in precise if r["detection_recall"] >= rule.target_recall]
        if reaching:
            return min(reaching, key=lambda r: r["o_threshold"])
        return max(precise, key=lambda r: (r["detection_recall"], -r["o_threshold"]))
    if precise:
        return min(
            precise,
            key=lambda r: (r["leakage_overlap_all"], -r["span_overlap_f1"], r["o_threshold"]),
        )
    # a threshold with no predictions has no precision (NaN): it ranks below every other
    return max(
        rows,
        key=lambda r: (
            -math.inf if math.isnan(r["detection_precision"]) else r["detection_precision"],
            -r["o_threshold"],
        ),
    )


@dataclass(frozen=True)
class OperatingPoint:
    """The sweep over the grid and the row the rule chose."""

    rule: OperatingPointRule
    sweep: list[dict[str, float]]
    chosen: dict[str, float]

    @property
    def o_threshold(self) -> float:
        return self.chosen["o_threshold"]

    def record(self) -> dict[str, Any]:
        """What a model directory keeps: the rule and the validation figures it chose by."""
        return {
            **asdict(self.rule),
            "o_threshold": self.chosen["o_threshold"],
            "validation_detection_recall": self.chosen["detection_recall"],
            "validation_detection_precision": self.chosen["detection_precision"],
            "validation_leakage_overlap_all": self.chosen["leakage_overlap_all"],
        }


def select_operating_point(
    gold: Sequence[Note],
    decode: Callable[[float], Mapping[str, Sequence[Span]]],
    rule: OperatingPointRule,
) -> OperatingPoint:
    """Sweep the rule's grid on validation notes and choose by the rule."""
    rows = sweep(gold, decode, rule.grid)
    point = OperatingPoint(rule, rows, choose(rows, rule))
    log.info(
        "operating point (%s): O threshold %.3f -> validation detection recall %.4f, "
        "precision %.4f, leakage %.4f",
        rule.mode,
        point.o_threshold,
        point.chosen["detection_recall"],
        point.chosen["detection_precision"],
        point.chosen["leakage_overlap_all"],
    )
    return point


def set_operating_point(
    tagger: SpanTagger,
    notes: Sequence[Note],
    encoded: Sequence[Any],
    probabilities: Sequence[np.ndarray],
    rule: OperatingPointRule,
) -> OperatingPoint:
    """Choose the tagger's ``O`` threshold on ``notes`` by the rule and set it on its settings.

    ``encoded`` and ``probabilities`` are the notes' encodings and per-token
    probabilities (for a stacked tagger, the out-of-fold ones); every threshold
    of the grid decodes them with ``tagger.decode``. The settings keep the
    chosen threshold and :meth:`OperatingPoint.record`.
    """

    def decode_at(threshold: float) -> dict[str, list[Span]]:
        return {
            note.note_id: tagger.decode(probs, enc, note.text, o_threshold=threshold)
            for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
        }

    point = select_operating_point(notes, decode_at, rule)
    tagger.settings.o_threshold = point.o_threshold
    tagger.settings.operating_point = point.record()
    return point
