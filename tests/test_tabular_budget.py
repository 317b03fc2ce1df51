"""Epsilon bookkeeping of the DP tabular synthesizers, with real SmartNoise and SDV fits."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from synthdeid.errors import ConfigError, StepError
from synthdeid.tabular.budget import EpsilonBudget, accounted_epsilon, plan_budget, settle
from synthdeid.tabular.spec import parse_spec
from synthdeid.tabular.synthesizers import (
    SYNTHESIZERS,
    check_environment,
    domain_frame,
    fit_smartnoise,
    fit_synthesizer,
    synthesizer_info,
)

SPEC = parse_spec(
    {
        "name": "tiny",
        "variables": [
            # "rare" is in the spec but never in the training rows
            {"name": "grade", "kind": "categorical", "categories": ["low", "mid", "high", "rare"]},
            {
                "name": "size",
                "kind": "binned",
                "bins": [[0, 10], [10, 20], [20, 30]],
                "allow_missing": True,
            },
        ],
    },
    "tiny.yaml",
)


def tiny_train(rows=120, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "record_id": [f"r-{i}" for i in range(rows)],
            "grade": rng.choice(["low", "mid", "high"], rows),
            "size": rng.choice(["0-10", "10-20", "unknown"], rows),
            "not_a_variable": rng.normal(size=rows),
        }
    )


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------ the plan


def test_budget_shares():
    budget = EpsilonBudget(3.0, 0.5)
    assert budget.synthesizer == 2.5
    assert budget.preprocessor + budget.synthesizer == budget.total
    assert EpsilonBudget(1.0).synthesizer == 1.0
    assert EpsilonBudget(1.0).preprocessor == 0.0


@pytest.mark.parametrize("total", [0.0, -1.0, float("inf"), float("nan")])
def test_budget_total_must_be_positive(total):
    with pytest.raises(ConfigError, match="epsilon must be a positive number"):
        EpsilonBudget(total)


@pytest.mark.parametrize("preprocessor", [3.0, 3.5, -0.1, float("nan")])
def test_budget_preprocessor_share(preprocessor):
    with pytest.raises(ConfigError, match=r"preprocessor_epsilon must be in \[0, epsilon=3.0\)"):
        EpsilonBudget(3.0, preprocessor)


def test_plan_budget():
    assert plan_budget(3, 0, preprocessor_needs_budget=False) == EpsilonBudget(3.0, 0.0)
    assert plan_budget(3, 0.5, preprocessor_needs_budget=True) == EpsilonBudget(3.0, 0.5)
    with pytest.raises(ConfigError, match=r"preprocessor_epsilon is 0\.5 but .* needs no budget"):
        plan_budget(3.0, 0.5, preprocessor_needs_budget=False)
    with pytest.raises(ConfigError, match="set preprocessor_epsilon > 0"):
        plan_budget(3.0, 0.0, preprocessor_needs_budget=True)
    with pytest.raises(ConfigError, match="epsilon must be a positive number"):
        plan_budget(0.0, 0.0, preprocessor_needs_budget=False)


# ------------------------------------------------------------------ settling a fit


def test_settle_sums_to_total():
    record = settle(
        EpsilonBudget(3.0, 0.5),
        preprocessor_spent=0.5,
        synthesizer_epsilon=2.5,
        delta=1e-9,
        library_reported=2.4,
        what="mst",
    )
    data = record.as_dict()
    assert data["sums_to_total"] is True
    assert data["epsilon_total"] == 3.0
    assert data["preprocessor_epsilon_planned"] == 0.5
    assert data["preprocessor_epsilon_spent"] == 0.5
    assert data["synthesizer_epsilon"] == 2.5
    assert data["delta"] == 1e-9
    assert data["library_reported_epsilon"] == 2.4
    # the accountant's figure below its budget is what the fit is accounted to spend
    assert data["epsilon_accounted"] == pytest.approx(0.5 + 2.4)
    assert accounted_epsilon({"dp": True, **data}) == pytest.approx(2.9)


def test_accounted_epsilon_of_each_kind_of_privacy_record():
    # MST / AIM: no accountant of their own, they spend exactly their share
    assert accounted_epsilon({"dp": True, "epsilon_total": 3.0}) == 3.0
    # DP-CTGAN written before the accounted figure was recorded: from its parts
    older = {"dp": True, "epsilon_total": 3.0, "library_reported_epsilon": 0.878}
    assert accounted_epsilon(older) == pytest.approx(0.878)
    assert accounted_epsilon({"dp": False, "epsilon_total": None}) is None


def test_settle_within_float_tolerance():
    record = settle(
        EpsilonBudget(0.3, 0.1),
        preprocessor_spent=0.1,
        synthesizer_epsilon=0.3 - 0.1,
        delta=None,
        library_reported=None,
        what="mst",
    )
    assert record.as_dict()["sums_to_total"] is True


def test_settle_refuses_preprocessor_overspend():
    with pytest.raises(StepError) as caught:
        settle(
            EpsilonBudget(3.0, 0.5),
            preprocessor_spent=0.75,
            synthesizer_epsilon=2.25,
            delta=None,
            library_reported=None,
            what="aim",
        )
    assert "aim" in str(caught.value)
    assert "0.75" in str(caught.value)
    assert "0.5" in str(caught.value)


def test_settle_refuses_a_sum_that_does_not_match():
    with pytest.raises(StepError) as caught:
        settle(
            EpsilonBudget(3.0, 0.5),
            preprocessor_spent=0.5,
            synthesizer_epsilon=3.0,  # the total passed to both: charged twice
            delta=None,
            library_reported=None,
            what="mst",
        )
    message = str(caught.value)
    assert "preprocessor 0.5 + synthesizer 3 = 3.5" in message
    assert "configured epsilon 3.0" in message


def test_settle_refuses_a_library_overspend():
    with pytest.raises(StepError) as caught:
        settle(
            EpsilonBudget(3.0),
            preprocessor_spent=0.0,
            synthesizer_epsilon=3.0,
            delta=1e-5,
            library_reported=3.2,
            what="dp_ctgan",
        )
    assert "dp_ctgan" in str(caught.value)
    assert "3.2" in str(caught.value)
    assert "its budget 3" in str(caught.value)


# ------------------------------------------------------------------ real SmartNoise fits


def test_smartnoise_preprocessor_spend_is_taken_from_the_total():
    from snsynth.transform.table import TableTransformer

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "grade": rng.choice(["a", "b", "c"], 300),
            "size": rng.normal(20.0, 5.0, 300),
        }
    )
    # style "cube" gives the continuous column a BinTransformer without bounds (smartnoise-synth
    # 1.0.8): it must learn them from the data, which costs epsilon, and MST then works on bins.
    transformer = TableTransformer.create(
        frame, style="cube", categorical_columns=["grade"], continuous_columns=["size"]
    )
    assert transformer.needs_epsilon
    assert not transformer.fit_complete
    fitted = fit_smartnoise(
        SYNTHESIZERS["mst"],
        frame,
        EpsilonBudget(3.0, 0.5),
        transformer,
        {},
        categorical_columns=["grade"],
        continuous_columns=["size"],
    )
    record = fitted.privacy
    assert record is not None
    assert 0 < record.preprocessor_epsilon_spent <= 0.5
    assert record.preprocessor_epsilon_spent + record.synthesizer_epsilon == pytest.approx(
        3.0, abs=1e-9
    )
    assert record.epsilon_total == 3.0
    assert record.as_dict()["sums_to_total"] is True
    sample = fitted.sample(20, seed=0)
    assert list(sample.columns) == ["grade", "size"]
    assert len(sample) == 20


def test_smartnoise_refuses_a_share_for_a_prefitted_transformer():
    from snsynth.transform.table import TableTransformer

    domain = domain_frame(SPEC)
    transformer = TableTransformer.create(
        domain, style="cube", categorical_columns=list(domain.columns)
    )
    transformer.fit(domain, epsilon=0.0)
    with pytest.raises(ConfigError, match="needs no budget"):
        fit_smartnoise(
            SYNTHESIZERS["mst"], tiny_train()[SPEC.names], EpsilonBudget(3.0, 0.5), transformer, {}
        )


@pytest.fixture(scope="module")
def mst_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_synthesizer(
            SYNTHESIZERS["mst"], tiny_train(), SPEC, budget=EpsilonBudget(3.0), options={}, seed=0
        )


def test_domain_frame_holds_every_category():
    frame = domain_frame(SPEC)
    assert list(frame.columns) == SPEC.names
    for variable in SPEC.variables:
        assert set(frame[variable.name]) == set(variable.domain)


def test_mst_on_the_spec_domain_spends_nothing_on_preprocessing(mst_fit):
    record = mst_fit.privacy
    assert record is not None
    assert record.preprocessor_epsilon_planned == 0.0
    assert record.preprocessor_epsilon_spent == 0.0
    assert record.synthesizer_epsilon == 3.0
    assert record.epsilon_total == 3.0
    assert mst_fit.columns == SPEC.names
    assert mst_fit.fit_seconds > 0


def test_mst_knows_categories_absent_from_the_data(mst_fit):
    assert "rare" not in set(tiny_train()["grade"])
    cardinality = mst_fit.model._transformer.cardinality
    assert cardinality == [len(v.domain) for v in SPEC.variables]
    sample = mst_fit.sample(300, seed=1)
    assert list(sample.columns) == SPEC.names
    for variable in SPEC.variables:
        assert set(sample[variable.name]) <= set(variable.domain), variable.name


def test_mst_samples_are_seeded(mst_fit):
    first = mst_fit.sample(100, seed=5)
    assert first.equals(mst_fit.sample(100, seed=5))
    assert not first.equals(mst_fit.sample(100, seed=6))


# ------------------------------------------------------------------ configuration


def test_fit_synthesizer_budget_must_match_the_kind():
    train = tiny_train(20)
    with pytest.raises(ConfigError, match="mst is differentially private: it needs an epsilon"):
        fit_synthesizer(SYNTHESIZERS["mst"], train, SPEC, budget=None, options={}, seed=0)
    with pytest.raises(ConfigError, match="gaussian_copula is not differentially private"):
        fit_synthesizer(
            SYNTHESIZERS["gaussian_copula"],
            train,
            SPEC,
            budget=EpsilonBudget(1.0),
            options={},
            seed=0,
        )


def test_synthesizer_info():
    assert synthesizer_info("mst").library == "smartnoise"
    assert synthesizer_info("gaussian_copula").dp is False
    with pytest.raises(ConfigError) as caught:
        synthesizer_info("nope")
    assert "'nope'" in str(caught.value)
    for name in SYNTHESIZERS:
        assert name in str(caught.value)


def test_unknown_option_is_a_config_error():
    with pytest.raises(ConfigError, match=r"synth\.tabular\.options\.gaussian_copula"):
        fit_synthesizer(
            SYNTHESIZERS["gaussian_copula"],
            tiny_train(20),
            SPEC,
            budget=None,
            options={"no_such_option": 1},
            seed=0,
        )


def test_dpgan_family_refused_under_opacus_1():
    import opacus

    if opacus.__version__.startswith("0.14"):
        pytest.skip("this is the dpgan environment")
    for name in ("dp_ctgan", "pate_ctgan"):
        with pytest.raises(ConfigError) as caught:
            check_environment(SYNTHESIZERS[name])
        assert "opacus 0.14" in str(caught.value)
        assert "dpgan" in str(caught.value)
        assert opacus.__version__ in str(caught.value)
    # fit_synthesizer checks the environment before fitting anything
    with pytest.raises(ConfigError, match=r"opacus 0\.14"):
        fit_synthesizer(
            SYNTHESIZERS["dp_ctgan"],
            tiny_train(20),
            SPEC,
            budget=EpsilonBudget(1.0),
            options={},
            seed=0,
        )
    check_environment(SYNTHESIZERS["mst"])  # main-environment synthesizers pass


# ------------------------------------------------------------------ SDV baseline


@pytest.fixture(scope="module")
def copula_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_synthesizer(
            SYNTHESIZERS["gaussian_copula"], tiny_train(), SPEC, budget=None, options={}, seed=0
        )


def test_gaussian_copula_samples_spec_columns_in_the_domain(copula_fit):
    assert copula_fit.privacy is None
    sample = copula_fit.sample(200, seed=3)
    assert list(sample.columns) == SPEC.names
    assert len(sample) == 200
    for variable in SPEC.variables:
        assert set(sample[variable.name]) <= set(variable.domain), variable.name


def test_gaussian_copula_samples_are_seeded(copula_fit):
    first = copula_fit.sample(200, seed=3)
    again = copula_fit.sample(200, seed=3)
    pd.testing.assert_frame_equal(first, again)
    assert not first.equals(copula_fit.sample(200, seed=4))
