"""Lexicons stacked over a trained tagger: the stacker fitted on development notes, its threshold chosen.

:func:`stack_lexicons` encodes the development notes with the base tagger
(a model or an ensemble), fits the calibrated stacker of
:mod:`synthdeid.ner.stacker` on the base's probabilities and the lexicons'
features, and chooses the stacked tagger's ``O`` threshold on the
out-of-fold stacked probabilities (:mod:`synthdeid.ner.operating_point`).
Torch and the stacker are imported when it runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from synthdeid.ner.lexicons import check_names
from synthdeid.notes import Note

if TYPE_CHECKING:  # the stacker and the model load torch: imported when the stage runs
    from synthdeid.ner.model import SpanTagger
    from synthdeid.ner.operating_point import OperatingPoint, OperatingPointRule
    from synthdeid.ner.stacker import StackedTagger, StackerFit, StackerFitSettings


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

    from synthdeid.ner.operating_point import OperatingPointRule, set_operating_point
    from synthdeid.ner.stacker import (
        StackedTagger,
        fit_stacker,
        gold_phi,
        lexical_features,
        model_features,
        replace_o,
    )
    from synthdeid.scoring.metrics import headline_metrics

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

    point = set_operating_point(tagger, notes, encoded, held_out, rule)
    base_spans = {
        note.note_id: base.decode(p, enc, note.text)
        for note, enc, p in zip(notes, encoded, probabilities, strict=True)
    }
    return StackingResult(tagger, fit, point, headline_metrics(notes, base_spans))
