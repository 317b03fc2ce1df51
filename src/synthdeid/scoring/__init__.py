"""Scoring predicted spans against gold spans: the counts, the metrics and their names.

:mod:`~synthdeid.scoring.matching` matches one note's predicted spans to its
gold spans (exact, overlap, detection, 80% coverage, token level);
:mod:`~synthdeid.scoring.metrics` turns the matches into per-document counts
and ratios (:func:`~synthdeid.scoring.metrics.headline_metrics` is what model
selection calls); :mod:`~synthdeid.scoring.vocabulary` names every counter and
every metric once (its key, its one label, its definition, what it is computed
from). The package sits below the models (``ner`` picks its operating point and
best epoch with it) and imports nothing above it; intervals, comparisons and
reports are :mod:`synthdeid.evaluation`.
"""
