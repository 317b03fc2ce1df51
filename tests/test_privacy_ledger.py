"""The privacy ledger: DP releases composed per population, budgets refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.errors import ConfigError, StepError
from synthdeid.privacy_ledger import Release, check_budgets, compose, release_from_record
from synthdeid.workflow.ledger import budgets, check_planned, planned_releases, release_specs
from synthdeid.workflow.outputs import RuleOutputs
from synthdeid.workflow.tabular import TabularRun


def release(name: str, population: str, epsilon: float, delta: float = 1e-5) -> Release:
    return Release(name, "m", population, epsilon, delta)


def test_releases_on_one_population_compose_by_summing() -> None:
    totals = compose(
        [release("lm", "corpus", 4.0), release("mst", "table", 3.0), release("aim", "table", 1.5)],
        {"table": 5.0},
    )
    assert [(t.population, t.epsilon, t.releases) for t in totals] == [
        ("corpus", 4.0, ("lm",)),
        ("table", 4.5, ("mst", "aim")),
    ]
    assert totals[1].delta == pytest.approx(2e-5)
    assert not any(t.over_budget for t in totals)
    check_budgets(totals, "measured")
    over = compose([release("mst", "table", 3.0), release("aim", "table", 3.0)], {"table": 5.0})
    with pytest.raises(StepError, match=r"table: epsilon 6 over the budget 5 \(mst, aim\)"):
        check_budgets(over, "measured")
    with pytest.raises(ConfigError, match="planned"):
        check_budgets(over, "planned")


def test_a_release_reads_either_privacy_record() -> None:
    spec = {"name": "x", "mechanism": "m", "population": "p", "derived": ["pool"]}
    assert release_from_record(spec, {"epsilon": 3.99, "delta": 4e-4}).epsilon == 3.99
    tabular = release_from_record(spec, {"epsilon_total": 3.0, "delta": None})
    assert (tabular.epsilon, tabular.delta, tabular.derived) == (3.0, 0.0, ("pool",))
    with pytest.raises(ValueError, match="no epsilon"):
        release_from_record(spec, {"noise_multiplier": 1.0})
    with pytest.raises(ValueError, match="positive"):
        Release("x", "m", "p", 0.0, 0.0)


RUNS = [
    TabularRun("mst_eps3", "mst", "eps3"),
    TabularRun("pate_ctgan_eps3", "pate_ctgan", "eps3"),
    TabularRun("ctgan_non_dp", "ctgan", "non_dp"),
]


def test_the_workflow_lists_every_dp_release_and_checks_the_plan(
    rule_outputs: RuleOutputs,
) -> None:
    specs = release_specs("c", "t", RUNS, RUNS[1], rule_outputs)
    assert [s["name"] for s in specs] == [
        "train_dp_lm dp",
        "fit_dp_tabular mst eps3",
        "fit_dp_gan_tabular pate_ctgan eps3",
    ]  # the non-DP baseline is no release
    assert specs[0]["file"] == "results/train_dp_lm/c/dp/privacy.json"
    assert specs[1]["file"] == "results/fit_dp_tabular/t/mst/eps3/privacy.json"
    assert specs[2]["file"] == "results/fit_dp_gan_tabular/t/pate_ctgan/eps3/privacy.json"
    assert not any("verbalize_tabular" in d for d in specs[1]["derived"])
    assert any("verbalize_tabular" in d for d in specs[2]["derived"])
    # what the parse checks: the same releases, without their files
    planned = planned_releases("c", "t", RUNS)
    assert planned == [{k: s[k] for k in ("name", "mechanism", "population")} for s in specs]
    limits = budgets("c", "t", {"corpus": 4.0, "table": 6.0})
    check_planned(planned, 4.0, RUNS, limits)
    check_planned(planned, None, RUNS, limits)  # a noise multiplier: checked when measured
    with pytest.raises(ConfigError, match=r"corpus c: seed part: epsilon 8"):
        check_planned(planned, 8.0, RUNS, limits)
    with pytest.raises(ConfigError, match=r"table t: train half: epsilon 6 over the budget 5"):
        check_planned(planned, 4.0, RUNS, budgets("c", "t", {"table": 5.0}))


def test_the_stage_writes_the_ledger_or_nothing(tmp_path: Path) -> None:
    lm, fit = tmp_path / "lm.json", tmp_path / "fit.json"
    lm.write_text(json.dumps({"epsilon": 3.995, "delta": 4.5e-4}))
    fit.write_text(json.dumps({"epsilon_total": 3.0, "delta": 1e-9}))
    releases = [
        {"name": "train_dp_lm dp", "mechanism": "DP-SGD", "population": "corpus", "file": str(lm)},
        {"name": "mst", "mechanism": "MST", "population": "table", "file": str(fit)},
    ]
    out = tmp_path / "ledger"
    argv = ["ledger-privacy", "--releases", json.dumps(releases), "--out-dir", str(out)]
    assert main([*argv, "--budgets", json.dumps({"corpus": 4.0})]) == 0
    record = json.loads((out / "ledger.json").read_text())
    assert [p["epsilon"] for p in record["populations"]] == [3.995, 3.0]
    table = (out / "ledger.md").read_text()
    assert "| corpus | 1 | 3.995 |" in table and "| table | 1 | 3.000 | 1e-09 | n/a |" in table
    refused = tmp_path / "refused"
    argv[-1] = str(refused)
    assert main([*argv, "--budgets", json.dumps({"corpus": 3.0})]) == 2
    assert not refused.exists()
    assert main([*argv, "--budgets", "[1]"]) == 2  # not an object: a usage error
    fit.write_text(json.dumps({"rows": 10}))
    assert main(argv) == 2
    assert not refused.exists()
