"""The privacy ledger's releases, from the config: which step released what, from whom.

Paths are the rules' outputs (train_dp_lm, fit_dp_tabular, fit_dp_gan_tabular), read
once every rule is defined. :func:`check_planned` composes the same releases at their
configured epsilons, so a budget is checked when the workflow is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from synthdeid.privacy_ledger import Release, check_budgets, compose
from synthdeid.tabular.synthesizers import SYNTHESIZERS
from synthdeid.workflow.outputs import RuleOutputs
from synthdeid.workflow.synthesis import dp_lm_privacy_file
from synthdeid.workflow.tabular import NON_DP, TabularRun, fit_file, fit_rule

DPLM_MECHANISM = "DP-SGD (Opacus, Poisson sampling, RDP accountant)"
DPLM_RELEASE = "train_dp_lm dp"


def corpus_population(corpus: str) -> str:
    return f"corpus {corpus}: seed part"


def table_population(table: str) -> str:
    return f"table {table}: train half"


def fit_release(run: TabularRun) -> str:
    return f"{fit_rule(run.synthesizer)} {run.synthesizer} {run.budget}"


def planned_releases(corpus: str, table: str, runs: Sequence[TabularRun]) -> list[dict[str, Any]]:
    """Each DP release of the config: its name, mechanism and the population it touches (the
    DP language model, each DP tabular fit; a non-DP baseline is no release)."""
    releases: list[dict[str, Any]] = [
        {
            "name": DPLM_RELEASE,
            "mechanism": DPLM_MECHANISM,
            "population": corpus_population(corpus),
        }
    ]
    for run in runs:
        if run.budget == NON_DP:
            continue
        info = SYNTHESIZERS[run.synthesizer]
        releases.append(
            {
                "name": fit_release(run),
                "mechanism": f"{info.library_name} ({info.library})",
                "population": table_population(table),
            }
        )
    return releases


def release_specs(
    corpus: str,
    table: str,
    runs: Sequence[TabularRun],
    verbalized: TabularRun,
    outputs: RuleOutputs,
) -> list[dict[str, Any]]:
    """Each DP release (:func:`planned_releases`) with its privacy.json and what is derived
    from it. ``verbalized`` is the fit whose samples verbalize_tabular turns into reports."""
    files = {DPLM_RELEASE: dp_lm_privacy_file(corpus, outputs)}
    derived = {
        DPLM_RELEASE: [
            "sample_dp_lm: samples, pools dplm_pii and dplm_no_pii",
            "tapt_encoder dplm: the encoder adapted to the samples",
            "ner runs with those pools or tapt: dplm",
        ]
    }
    for run in runs:
        if run.budget == NON_DP:
            continue
        files[fit_release(run)] = fit_file(table, run, "privacy", outputs)
        derived[fit_release(run)] = ["samples"]
        if run == verbalized:
            derived[fit_release(run)].append("verbalize_tabular: reports, pool tabular_reports")
    return [
        {**release, "file": files[release["name"]], "derived": derived[release["name"]]}
        for release in planned_releases(corpus, table, runs)
    ]


def budgets(corpus: str, table: str, configured: Mapping[str, float | None]) -> dict[str, Any]:
    """privacy.budgets (corpus, table), keyed by the populations they limit."""
    return {
        corpus_population(corpus): configured.get("corpus"),
        table_population(table): configured.get("table"),
    }


def check_planned(
    releases: Sequence[Mapping[str, Any]],
    dplm_epsilon: float | None,
    runs: Sequence[TabularRun],
    limits: Mapping[str, float | None],
) -> None:
    """ConfigError when the configured epsilons of ``releases`` (:func:`planned_releases`)
    already exceed a budget (a DP LM given a noise multiplier instead of a target is checked
    when its ledger is written)."""
    epsilons = {
        fit_release(run): float(run.budget.removeprefix("eps"))
        for run in runs
        if run.budget != NON_DP
    }
    if dplm_epsilon is not None:
        epsilons[DPLM_RELEASE] = dplm_epsilon
    planned = [
        Release(s["name"], s["mechanism"], s["population"], epsilons[s["name"]], 0.0)
        for s in releases
        if s["name"] in epsilons
    ]
    check_budgets(compose(planned, limits), "planned")
