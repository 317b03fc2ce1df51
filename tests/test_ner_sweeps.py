"""Tests for sweeps and training seeds: one configured run expanded into named runs."""

from __future__ import annotations

import pytest

from synthdeid.errors import ConfigError
from synthdeid.ner.sweeps import arm_name, arms, expand_runs, training_seed_of, value_part

TEMPLATE = {
    "name": "template",
    "pools": ["template_pii"],
    "mixture": {"regime": "augmentation", "synthetic_fraction": 0.5, "seed": 1},
    "training": {"epochs": 2},
    "tapt": None,
}


def test_a_run_without_sweep_or_seeds_is_unchanged() -> None:
    [run] = expand_runs([TEMPLATE])
    assert run["name"] == "template"
    assert run["arm"] == "template"
    assert run["training_seed"] is None
    assert run["mixture"] == TEMPLATE["mixture"]
    assert run["training"] == {"epochs": 2}


def test_sweep_and_seeds_expand_into_readable_names_with_their_settings() -> None:
    runs = expand_runs(
        [{**TEMPLATE, "sweep": {"synthetic_fraction": [0.25, 0.9]}, "training_seeds": [1, 2]}]
    )
    assert [r["name"] for r in runs] == [
        "template-syn25-seed1",
        "template-syn25-seed2",
        "template-syn90-seed1",
        "template-syn90-seed2",
    ]
    first, last = runs[0], runs[-1]
    assert first["mixture"] == {"regime": "augmentation", "synthetic_fraction": 0.25, "seed": 1}
    assert last["mixture"]["synthetic_fraction"] == 0.9
    # the training seed sets training.seed; the mixture draw keeps mixture.seed
    assert first["training"] == {"epochs": 2, "seed": 1}
    assert runs[1]["training"] == {"epochs": 2, "seed": 2}
    assert runs[1]["mixture"]["seed"] == 1
    assert {r["arm"] for r in runs} == {"template-syn25", "template-syn90"}
    assert "sweep" not in first and "training_seeds" not in first
    assert arms(runs) == {
        "template-syn25": ["template-syn25-seed1", "template-syn25-seed2"],
        "template-syn90": ["template-syn90-seed1", "template-syn90-seed2"],
    }


def test_pools_tapt_and_regime_sweeps_set_the_run_keys() -> None:
    run = {
        **TEMPLATE,
        "mixture": {"regime": "fixed_n", "total_notes": 100, "real_fraction": 1.0, "seed": 1},
        "sweep": {
            "real_fraction": [1.0, 0.5, 0.0],
            "pools": [["template_pii", "template_no_pii"]],
            "tapt": [None, "dplm"],
        },
    }
    runs = expand_runs([run])
    names = [r["name"] for r in runs]
    assert names[0] == "template-template_pii+template_no_pii-tapt" + "none-real100"
    assert "template-template_pii+template_no_pii-tapt" + "dplm-real0" in names
    by_name = {r["name"]: r for r in runs}
    dplm = by_name["template-template_pii+template_no_pii-tapt" + "dplm-real50"]
    assert dplm["tapt"] == "dplm"
    assert dplm["pools"] == ["template_pii", "template_no_pii"]
    assert dplm["mixture"]["real_fraction"] == 0.5


def test_default_seeds_apply_to_runs_without_their_own() -> None:
    own = {**TEMPLATE, "name": "real_only", "training_seeds": [1, 2, 3]}
    runs = expand_runs([own, TEMPLATE], default_seeds=[1])
    assert [r["name"] for r in runs] == [
        "real_only-seed1",
        "real_only-seed2",
        "real_only-seed3",
        "template-seed1",
    ]


def test_adding_a_value_or_a_seed_keeps_every_existing_name_and_setting() -> None:
    before = expand_runs(
        [{**TEMPLATE, "sweep": {"synthetic_fraction": [0.25]}, "training_seeds": [1]}]
    )
    after = expand_runs(
        [{**TEMPLATE, "sweep": {"synthetic_fraction": [0.25, 0.5]}, "training_seeds": [1, 2]}]
    )
    old = {r["name"]: r for r in before}
    new = {r["name"]: r for r in after}
    assert set(old) < set(new)
    for name, run in old.items():
        assert new[name] == run


def test_fraction_names() -> None:
    assert value_part("synthetic_fraction", 0.125) == "12p5"
    assert value_part("real_fraction", 1) == "100"
    assert value_part("pii_fraction", 0.0) == "0"
    assert value_part("tapt", None) == "none"
    assert arm_name("fixed", {"regime": "fixed_n", "total_notes": 354}) == "fixed-fixed_n-n354"


def test_training_seed_of() -> None:
    assert training_seed_of("template-syn25-seed3", "template-syn25") == 3
    assert training_seed_of("template", "template") is None


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ([{**TEMPLATE, "sweep": {"epochs": [1, 2]}}], "cannot be swept"),
        ([{**TEMPLATE, "sweep": {"synthetic_fraction": []}}], "non-empty list"),
        ([{**TEMPLATE, "sweep": {"synthetic_fraction": [0.5, 0.50]}}], "repeats values"),
        ([{**TEMPLATE, "training_seeds": [1, 1]}], "distinct"),
        ([{**TEMPLATE, "sweep": {"regime": ["fixed_n"]}}], "template-fixed_n"),
        (
            [{**TEMPLATE, "training_seeds": [1]}, {**TEMPLATE, "name": "template-seed1"}],
            "both expand to a run named 'template-seed1'",
        ),
        (
            [{**TEMPLATE, "training_seeds": [1]}, {**TEMPLATE, "name": "template"}],
            "named like the arm",
        ),
        (
            [{"name": "both", "members": ["a", "b"], "training_seeds": [1]}],
            "is an ensemble",
        ),
    ],
)
def test_bad_sweeps_are_refused_with_the_run_named(runs: list[dict], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        expand_runs(runs)


def test_arm_seeds_give_one_arm_its_own_seeds() -> None:
    swept = {**TEMPLATE, "sweep": {"synthetic_fraction": [0.25, 0.5]}}
    runs = expand_runs([swept], default_seeds=[1], arm_seeds={"template-syn50": [1, 2, 3]})
    assert [r["name"] for r in runs] == [
        "template-syn25-seed1",
        "template-syn50-seed1",
        "template-syn50-seed2",
        "template-syn50-seed3",
    ]
    with pytest.raises(ConfigError, match=r"arm_seeds names arms no run expands to: \['nope'\]"):
        expand_runs([swept], arm_seeds={"nope": [1]})
    with pytest.raises(ConfigError, match="must be distinct"):
        expand_runs([swept], arm_seeds={"template-syn25": [2, 2]})


def test_a_stacked_run_is_not_expanded_and_takes_no_seeds() -> None:
    stacked = {"name": "lex", "base": "template", "lexicons": ["first_names"]}
    runs = expand_runs([TEMPLATE, stacked], default_seeds=[1, 2])
    assert [r["name"] for r in runs] == ["template-seed1", "template-seed2", "lex"]
    assert runs[-1] == stacked
    with pytest.raises(ConfigError, match="'lex' stacks lexicons over a trained run"):
        expand_runs([TEMPLATE, {**stacked, "training_seeds": [1]}])
    with pytest.raises(ConfigError, match="stacks lexicons"):
        expand_runs([TEMPLATE, stacked], arm_seeds={"lex": [1]})
