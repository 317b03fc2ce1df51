"""Every table the rules read, built once from the validated config after every cross-check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from synthdeid.workflow.checks import (
    check_anchors,
    check_distilled_runs,
    check_ensemble_runs,
    check_error_report,
    check_evaluation_corpora,
    check_split,
    check_stacked_runs,
    check_teachers,
)
from synthdeid.workflow.corpora import anchors, evaluation_corpora
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.outputs import Output, RuleOutputs
from synthdeid.workflow.pools import Pool, pool_table
from synthdeid.workflow.surrogate_key import check_demo_key
from synthdeid.workflow.tabular import TabularRun, tabular_runs
from synthdeid.workflow.teachers import Teachers

# what every config builds, besides the runs' and teachers' outputs (Tables.targets)
FINAL_OUTPUTS = (
    Output("ingest_corpus", "notes"),
    Output("split_notes", "notes"),
    Output("mask_seeds", "masked"),
    Output("plot_corpus_overview", "figure"),
    Output("gather_replace_surrogates", "notes"),
    Output("fill_templates", "pii"),
    Output("diagnose_synthetic", "json"),
    Output("audit_dp_lm", "json"),
    Output("evaluate_tabular", "json"),
    Output("check_faithfulness", "json"),
    Output("extract_tabular", "json"),
    Output("ledger_privacy", "record"),
)


@dataclass(frozen=True)
class Tables:
    """The runs, teachers, pools, further corpora, anchors and tabular fits of one config."""

    corpus: str
    table: str
    runs: NerRuns
    teachers: Teachers
    pools: dict[str, Pool]
    evaluation_corpora: dict[str, dict[str, Any]]
    tabular_runs: list[TabularRun]
    error_report_runs: list[str]
    # evaluation.anchors by name: external de-identifiers' predictions, scored as runs
    anchors: dict[str, dict[str, Any]]
    # ner.degenerate_arms: skip (train nothing for an arm that repeats another; plan_runs)
    skip_degenerate_arms: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Tables:
        """The tables of a config validated against the schema (defaults filled in).

        ConfigError for the first value that cannot work, checked in this order:
        split fractions, the demo key, the runs and the reference run, ensemble,
        stacked and distilled runs, error-report runs, evaluation corpora, anchors,
        teachers.
        """
        corpus = config["corpus"]["name"]
        check_split(config["split"]["fractions"])
        check_demo_key(config["corpus"], config["surrogate"]["key_file"])
        ner = config["ner"]
        runs = NerRuns.from_config(ner)
        check_ensemble_runs(runs)
        check_stacked_runs(runs)
        check_distilled_runs(runs)
        check_error_report(runs, ner["error_report"]["runs"])
        further = config.get("evaluation", {}).get("corpora", [])
        check_evaluation_corpora(further, corpus)
        anchor_entries = config.get("evaluation", {}).get("anchors", [])
        check_anchors(anchor_entries, runs)
        teachers = Teachers.from_config(config["teacher"])
        check_teachers(teachers, runs)
        tabular = config["synth"]["tabular"]
        table = tabular["table"]["name"]
        return cls(
            corpus=corpus,
            table=table,
            runs=runs,
            teachers=teachers,
            pools=pool_table(table, teachers.silver_pools(), teachers.parts),
            evaluation_corpora=evaluation_corpora(further),
            tabular_runs=tabular_runs(tabular),
            error_report_runs=list(ner["error_report"]["runs"]),
            anchors=anchors(anchor_entries),
            skip_degenerate_arms=ner.get("degenerate_arms") == "skip",
        )

    def targets(self, outputs: RuleOutputs) -> list[str]:
        """What `snakemake` (rule all) builds: every stage's final outputs."""
        corpus, table = self.corpus, self.table
        final = [*FINAL_OUTPUTS]
        # with degenerate arms skipped, compare_ner asks for the runs the plan keeps
        evaluated = [*([] if self.skip_degenerate_arms else self.runs.runs), *self.anchors]
        final += [Output("evaluate_ner", "metrics", {"run": run}) for run in evaluated]
        final += [
            Output("report_errors", "summary", {"run": run}) for run in self.error_report_runs
        ]
        final += [Output("compare_ner", "figure"), Output("tabulate_study", "figure")]
        return [
            *(outputs.path(output, corpus=corpus, table=table) for output in final),
            *self.teachers.targets(corpus, outputs),
        ]
