"""The Snakemake workflow's logic as importable, tested Python.

workflow/rules/common.smk builds :class:`~synthdeid.workflow.tables.Tables`
from the validated config once (every cross-check the schema cannot express
raises :class:`~synthdeid.errors.ConfigError`, which common.smk turns into a
WorkflowError); the rules' input and params functions are thin calls into:

- :mod:`~synthdeid.workflow.tables`: every table, built after every check
- :mod:`~synthdeid.workflow.outputs`: rule outputs by name; their paths are the rules' own
- :mod:`~synthdeid.workflow.checks`: the cross-checks
- :mod:`~synthdeid.workflow.ner_runs`: the expanded NER runs, arms and kinds of run
- :mod:`~synthdeid.workflow.ner_inputs`: inputs, settings and arguments of the NER rules
- :mod:`~synthdeid.workflow.pools`: the labelled pools and adapted encoders runs train from
- :mod:`~synthdeid.workflow.teachers`: teachers, their folders, inputs and targets
- :mod:`~synthdeid.workflow.synthesis`: template, DP language model and TAPT settings
- :mod:`~synthdeid.workflow.tabular`: the tabular synthesizer fits and budgets
- :mod:`~synthdeid.workflow.corpora`: corpus locations and files, evaluation corpora
- :mod:`~synthdeid.workflow.surrogate_key`: the key's fingerprint, the demo key's refusal
- :mod:`~synthdeid.workflow.arguments`: JSON params, repeated NAME=VALUE flags, folders
- :mod:`~synthdeid.workflow.environment`: the ``synthdeid`` command on PATH
- :mod:`~synthdeid.workflow.stage_names`: which stage each rule runs (rule ``x_y``: ``synthdeid x-y``)
- :mod:`~synthdeid.workflow.dry_run`: what a dry run plans (its job table, the files it reads)
"""
