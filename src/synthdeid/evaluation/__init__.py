"""Scoring a de-identification (NER) model against gold spans.

:mod:`~synthdeid.evaluation.matching` matches one note's predicted spans to
its gold spans (exact, overlap, detection, 80% coverage, token level);
:mod:`~synthdeid.evaluation.metrics` turns the matches into per-document
counts and ratios (:func:`~synthdeid.evaluation.metrics.headline_metrics` is
what model selection calls); :mod:`~synthdeid.evaluation.bootstrap` adds
document-level bootstrap intervals and paired tests; the ``evaluate-ner`` and
``compare-ner`` stages write the reports.
"""
