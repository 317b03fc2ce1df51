"""Bootstrap intervals, comparisons, reports and figures of de-identification models.

The counts and metrics themselves are :mod:`synthdeid.scoring` (one layer
below the models); here :mod:`~synthdeid.evaluation.bootstrap` adds
document-level bootstrap intervals and paired tests, and the ``evaluate-ner``
and ``compare-ner`` stages write the reports.
"""
