"""The DP tabular branch's runs: one fit per synthesizer and budget, and what reads them.

A budget is ``eps<epsilon>`` for each configured epsilon of a DP synthesizer,
``non_dp`` for a baseline. SmartNoise's GAN synthesizers fit in their own
environment family (rule fit_dp_gan_tabular), the others in fit_dp_tabular.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.tabular.endpoint import POLICY_KEYS
from synthdeid.tabular.source import chosen_source
from synthdeid.tabular.synthesizers import DPGAN_ENV, SYNTHESIZERS
from synthdeid.workflow.arguments import flags
from synthdeid.workflow.outputs import Output, RuleOutputs

MAIN_ENV_SYNTHESIZERS = [name for name, info in SYNTHESIZERS.items() if info.env != DPGAN_ENV]
DPGAN_ENV_SYNTHESIZERS = [name for name, info in SYNTHESIZERS.items() if info.env == DPGAN_ENV]
NON_DP = "non_dp"
# settings of synth.tabular.verbalize that verbalize_tabular takes (not its prompt file)
VERBALIZE_KEYS = ("backend", "rules", "generation", "seed", "fill_seed", *POLICY_KEYS)


def budget(synthesizer: str, epsilon: float) -> str:
    """The budget a synthesizer is fitted at: eps<epsilon> when DP, else non_dp."""
    return f"eps{epsilon:g}" if SYNTHESIZERS[synthesizer].dp else NON_DP


def budgets(synthesizer: str, epsilons: Sequence[float]) -> list[str]:
    """eps<epsilon> for each epsilon of a DP synthesizer; non_dp for a baseline."""
    if SYNTHESIZERS[synthesizer].dp:
        return [budget(synthesizer, epsilon) for epsilon in epsilons]
    return [NON_DP]


@dataclass(frozen=True)
class TabularRun:
    """One fitted synthesizer: its input name in evaluate_tabular, synthesizer and budget."""

    key: str
    synthesizer: str
    budget: str

    @property
    def label(self) -> str:
        """The synthesizer as the comparison table shows it."""
        if self.budget == NON_DP:
            return self.synthesizer
        return f"{self.synthesizer} (eps {self.budget.removeprefix('eps')})"


def tabular_run(synthesizer: str, run_budget: str) -> TabularRun:
    """A synthesizer fitted at a budget, keyed as evaluate_tabular names its input."""
    return TabularRun(f"{synthesizer}_{run_budget}".replace(".", "_"), synthesizer, run_budget)


def tabular_runs(tabular: Mapping[str, Any]) -> list[TabularRun]:
    """Every fitted synthesizer of synth.tabular, in config order."""
    return [
        tabular_run(name, run_budget)
        for name in tabular["synthesizers"]
        for run_budget in budgets(name, tabular["epsilons"])
    ]


def fit_rule(synthesizer: str) -> str:
    """The rule that fits a synthesizer (by its environment family)."""
    return "fit_dp_gan_tabular" if SYNTHESIZERS[synthesizer].env == DPGAN_ENV else "fit_dp_tabular"


def fit_file(table: str, run: TabularRun, name: str, outputs: RuleOutputs) -> str:
    """A file of a fitted synthesizer (its fit rule's output ``samples`` or ``privacy``)."""
    return outputs.path(
        Output(fit_rule(run.synthesizer), name),
        table=table,
        synthesizer=run.synthesizer,
        budget=run.budget,
    )


def sample_files(table: str, runs: Sequence[TabularRun], outputs: RuleOutputs) -> dict[str, str]:
    """evaluate_tabular's inputs: every fitted synthesizer's samples."""
    return {run.key: fit_file(table, run, "samples", outputs) for run in runs}


def run_arguments(runs: Sequence[TabularRun], inputs: Mapping[str, str]) -> str:
    """--run LABEL=SAMPLES for every fitted synthesizer (labels as the table shows them)."""
    return flags("--run", ((run.label, inputs[run.key]) for run in runs))


def budget_arguments(run_budget: str, preprocessor_epsilon: float) -> str:
    """fit-dp-tabular's privacy flags for a budget (none for a baseline)."""
    if run_budget == NON_DP:
        return ""
    return (
        f"--epsilon {run_budget.removeprefix('eps')} --preprocessor-epsilon {preprocessor_epsilon}"
    )


def table_source(tabular: Mapping[str, Any]) -> dict[str, Any]:
    """synth.tabular.table.source with its null key dropped (:func:`chosen_source`)."""
    return chosen_source(tabular["table"]["source"])


def source_files(source: Mapping[str, Any]) -> dict[str, str]:
    """The source table file (nothing for a scikit-learn dataset), so a new file reruns."""
    chosen = chosen_source(source)
    return {"source": chosen["path"]} if "path" in chosen else {}


def verbalized_run(tabular: Mapping[str, Any]) -> TabularRun:
    """The fitted synthesizer whose rows are verbalized (Lorenzo et al. 2026: PATE-CTGAN)."""
    name = tabular["subsample"]["synthesizer"]
    if name not in tabular["synthesizers"]:
        raise ConfigError(
            f"synth.tabular.subsample.synthesizer {name!r} is not one of "
            f"synth.tabular.synthesizers {tabular['synthesizers']}"
        )
    epsilon = tabular["subsample"]["epsilon"] or tabular["epsilons"][0]
    return tabular_run(name, budget(name, epsilon))


def verbalize_settings(verbalize: Mapping[str, Any]) -> dict[str, Any]:
    """The verbalize_tabular slice of synth.tabular.verbalize."""
    return {key: verbalize[key] for key in VERBALIZE_KEYS}


def judge_policy(faithfulness: Mapping[str, Any]) -> dict[str, Any]:
    """Where check_faithfulness's judge may send the reports: the endpoint policy keys of
    synth.tabular.faithfulness (its --judge-policy)."""
    return {key: faithfulness[key] for key in POLICY_KEYS}


def extraction_settings(extraction: Mapping[str, Any]) -> dict[str, Any]:
    """The extract_tabular slice of synth.tabular.extraction (its --settings): everything
    but the prompt file, which the rule takes as an input."""
    return {key: value for key, value in extraction.items() if key != "prompt"}
