"""One name per stage: rule ``x_y`` runs ``synthdeid x-y``, implemented by ``synthdeid.stages.x_y``.

A rule named after a stage runs that stage. The tables here list the
exceptions: rules that run a stage on other inputs (:data:`RULE_VARIANTS`),
rules that only gather targets (:data:`AGGREGATE_RULES`) and stages no rule
runs (:data:`CLI_ONLY_STAGES`). ``tests/test_stage_names.py`` checks the
workflow's rules against them; ``docs/stages/README.md`` documents them.
"""

from __future__ import annotations

from collections.abc import Mapping

from synthdeid.workflow.sharding import SHARDED_RULES

# rule -> the rule named after the stage it runs, on other inputs or with other settings
RULE_VARIANTS: dict[str, str] = {
    "ingest_eval_corpus": "ingest_corpus",
    "predict_ner_cross": "predict_ner",
    "evaluate_ner_cross": "evaluate_ner",
    "generate_control_templates": "generate_templates",
    "fill_control_templates": "fill_templates",
    "tapt_encoder_own": "tapt_encoder",
    "tapt_encoder_seeds": "tapt_encoder",
    "fit_dp_gan_tabular": "fit_dp_tabular",
    "evaluate_teacher": "evaluate_ner",
    "measure_silver_noise": "compare_teacher",
    "compare_ner_archive": "compare_ner",
    "tabulate_study_archive": "tabulate_study",
}
# rule -> the sharded rule whose shards it joins (synthdeid.workflow.sharding): it runs
# GATHER_STAGE and writes the artifacts that rule writes unsharded, in its folders
GATHER_RULES: dict[str, str] = {f"gather_{rule}": rule for rule in SHARDED_RULES}
GATHER_STAGE = "gather-shards"
# rules that run no command: they only ask for other rules' outputs
AGGREGATE_RULES: tuple[str, ...] = ("study", "archive", "all")
# stages run by hand, never by a rule
CLI_ONLY_STAGES: tuple[str, ...] = ("make-demo", "new-key", "deid", "serve-llm")


def stage_command(rule: str, variants: Mapping[str, str] = RULE_VARIANTS) -> str:
    """The subcommand a rule runs: ``predict_ner_cross`` -> ``predict-ner``."""
    if rule in GATHER_RULES:
        return GATHER_STAGE
    return variants.get(rule, rule).replace("_", "-")


def output_folder(rule: str) -> str:
    """The folder under results/, logs/ and benchmarks/ a rule writes into: its own name,
    or for a gather rule the name of the rule it gathers."""
    return GATHER_RULES.get(rule, rule)
