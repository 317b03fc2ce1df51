"""The NER run table and what the NER rules read from it: inputs, settings, CLI arguments."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.iocontainers import InputFiles

from synthdeid.errors import ConfigError
from synthdeid.local_only import is_local_path
from synthdeid.workflow import ner_inputs
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.outputs import Output, RuleOutputs
from synthdeid.workflow.pools import (
    POOLS,
    SEED_TEXT_NOTES,
    SILVER_PREFIX,
    TAPT_MODELS,
    from_dp_language_model,
    pool_arguments,
    pool_files,
    pool_id_files,
    pool_parts,
    pool_table,
    silver_pool,
    silver_teacher,
    tapt_model,
)

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
MIXTURE = {"regime": "augmentation", "synthetic_fraction": 0.5, "seed": 1}
REAL = {"name": "real", "mixture": {**MIXTURE, "synthetic_fraction": 0.0}}
SWEPT = {
    "name": "dplm",
    "pools": ["dplm_pii"],
    "mixture": MIXTURE,
    "training": {"epochs": 3},
    "sweep": {"synthetic_fraction": [0.25, 0.5]},
    "training_seeds": [1, 2],
}
TAPT = {"name": "tapt", "tapt": "own", "mixture": MIXTURE, "operating_point": {"rule": "f1"}}
ENSEMBLE = {"name": "both", "members": ["real", "tapt"]}
STACKED = {"name": "lex", "base": "real", "lexicons": ["first_names"]}
TRAINING = {"model": "encoder", "epochs": 6, "operating_point": {"rule": "recall"}}


def ner(*runs: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {
        "runs": list(runs),
        "training_seeds": None,
        "arm_seeds": {},
        "reference_run": None,
        "training": TRAINING,
        **settings,
    }


@pytest.fixture(scope="module")
def table() -> NerRuns:
    return NerRuns.from_config(ner(REAL, SWEPT, TAPT, ENSEMBLE, STACKED))


# ---------------------------------------------------------------- the run table


def test_runs_are_expanded_with_arms_and_kinds(table: NerRuns) -> None:
    assert list(table.runs) == [
        "real",
        "dplm-syn25-seed1",
        "dplm-syn25-seed2",
        "dplm-syn50-seed1",
        "dplm-syn50-seed2",
        "tapt",
        "both",
        "lex",
    ]
    assert table.arms["dplm-syn25"] == ["dplm-syn25-seed1", "dplm-syn25-seed2"]
    assert table.arms["both"] == ["both"]
    assert table.ensembles == {"both": ["real", "tapt"]}
    assert table.stacked == {"lex": "real"}
    assert table.trained == [name for name in table.runs if name not in ("both", "lex")]
    assert table.dp_model_runs() == [name for name in table.runs if name.startswith("dplm")]


def test_the_reference_is_the_first_arm_unless_a_run_or_arm_is_named() -> None:
    runs = (SWEPT, REAL)
    first = NerRuns.from_config(ner(*runs))
    assert (first.reference_arm, first.reference_run) == ("dplm-syn25", "dplm-syn25-seed1")
    by_run = NerRuns.from_config(ner(*runs, reference_run="dplm-syn50-seed2"))
    assert (by_run.reference_arm, by_run.reference_run) == ("dplm-syn50", "dplm-syn50-seed1")
    by_arm = NerRuns.from_config(ner(*runs, reference_run="real"))
    assert (by_arm.reference_arm, by_arm.reference_run) == ("real", "real")


def test_a_reference_naming_neither_run_nor_arm_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        NerRuns.from_config(ner(REAL, reference_run="dplm"))
    assert str(err.value) == (
        "ner.reference_run 'dplm' is neither a run nor an arm: runs ['real'], arms ['real']"
    )


def test_a_bad_expansion_is_refused_with_the_config_prefix() -> None:
    with pytest.raises(ConfigError) as err:
        NerRuns.from_config(ner(REAL, {**STACKED, "training_seeds": [1, 2]}))
    assert str(err.value).startswith("config: ner run 'lex' stacks lexicons over a trained run")


def test_each_kind_of_run_has_its_model_folder(table: NerRuns, rule_outputs: RuleOutputs) -> None:
    assert table.model_dir("real", "demo", rule_outputs) == "results/train_ner/demo/real/model"
    assert table.model_dir("both", "demo", rule_outputs) == "results/ensemble_ner/demo/both/model"
    assert table.model_dir("lex", "demo", rule_outputs) == "results/stack_lexicons/demo/lex/model"


def test_training_and_operating_point_settings(table: NerRuns) -> None:
    assert table.training("real") == TRAINING
    assert table.training("dplm-syn50-seed2") == {**TRAINING, "epochs": 3, "seed": 2}
    assert table.operating_point("tapt") == {"rule": "f1"}
    assert table.operating_point("both") == {"rule": "recall"}
    no_rule = NerRuns.from_config({**ner(REAL), "training": {"model": "encoder"}})
    assert no_rule.operating_point("real") == {}


def test_a_name_gives_a_run_or_its_arms_first_seed(table: NerRuns) -> None:
    assert table.named_run("real") == "real"
    assert table.named_run("dplm-syn25-seed2") == "dplm-syn25-seed2"
    assert table.named_run("dplm-syn50") == "dplm-syn50-seed1"
    assert table.named_run("nobody") is None
    assert table.named_run(None) is None


# ---------------------------------------------------------------- pools and encoders


def test_pools_with_the_teachers_silver_pools(rule_outputs: RuleOutputs) -> None:
    union = Output("combine_teachers", "silver", {"teacher": "union", "subset": "pool"})
    pools = pool_table("breast_cancer", {"union": union}, ["seed", "train"])
    assert rule_outputs.path(pools["template_none"].file, corpus="demo") == (
        "results/fill_control_templates/demo/pii.parquet"
    )
    assert rule_outputs.path(pools["tabular_reports"].file) == (
        "results/verbalize_tabular/breast_cancer/pii.parquet"
    )
    assert pools["silver_union"].parts == ("seed", "train")
    names = ["surrogates", "dplm_pii", "silver_union"]
    assert pool_files(pools, names, "demo", rule_outputs) == {
        "surrogates": "results/replace_surrogates/demo/notes.parquet",
        "dplm_pii": "results/sample_dp_lm/demo/dp/pii.parquet",
        "silver_union": "results/combine_teachers/demo/union/pool/silver.parquet",
    }
    assert pool_id_files(pools, names, "demo", rule_outputs) == {
        "ids_surrogates": "results/replace_surrogates/demo/local/offsets.parquet"
    }
    assert pool_parts(pools, names) == ["seed", "synthetic", "train"]
    assert pool_parts(pools, []) == ["seed"]
    inputs = {"surrogates": "a b/notes.parquet", "dplm_pii": "pii.parquet"}
    assert pool_arguments(["surrogates", "dplm_pii"], inputs) == (
        "--pool 'surrogates=a b/notes.parquet' --pool dplm_pii=pii.parquet"
    )


def test_the_schema_offers_exactly_the_pools_and_encoders_there_are() -> None:
    defs = yaml.safe_load(SCHEMA.read_text())["$defs"]
    offered = defs["pools"]["items"]["anyOf"]
    assert offered[0]["enum"] == list(POOLS)
    assert offered[1]["pattern"].startswith(f"^{SILVER_PREFIX}")
    assert defs["tapt_source"]["enum"] == [None, *TAPT_MODELS]


def test_a_pool_says_whether_it_holds_the_dp_language_models_samples() -> None:
    assert [name for name in POOLS if from_dp_language_model(name)] == ["dplm_pii", "dplm_no_pii"]
    assert not from_dp_language_model(silver_pool("dplm_teacher"))
    assert silver_teacher(silver_pool("union")) == "union"
    assert silver_teacher("surrogates") is None


def test_adapted_encoders_lie_in_their_rules_folders(rule_outputs: RuleOutputs) -> None:
    assert tapt_model(None, "demo", "real", rule_outputs) is None
    assert tapt_model("own", "demo", "real", rule_outputs) == (
        "results/tapt_encoder_own/demo/real/model"
    )
    assert tapt_model("seeds_masked", "demo", "real", rule_outputs) == (
        "results/tapt_encoder_seeds/demo/masked/model"
    )
    assert (
        tapt_model("dplm", "demo", "real", rule_outputs) == "results/tapt_encoder/demo/dplm/model"
    )
    assert set(SEED_TEXT_NOTES) == {
        name.removeprefix("seeds_") for name in TAPT_MODELS if name.startswith("seeds_")
    }
    assert rule_outputs.path(SEED_TEXT_NOTES["masked"], corpus="demo") == (
        "results/mask_seeds/demo/masked.parquet"
    )


# ---------------------------------------------------------------- NER rule inputs


def test_training_inputs_and_settings_follow_tapt(
    table: NerRuns, rule_outputs: RuleOutputs
) -> None:
    assert ner_inputs.tapt_input(table, "real", "demo", rule_outputs) == {}
    assert ner_inputs.training_settings(table, "real", "demo", rule_outputs) == TRAINING
    own = "results/tapt_encoder_own/demo/tapt/model"
    assert ner_inputs.tapt_input(table, "tapt", "demo", rule_outputs) == {"tapt": own}
    assert ner_inputs.training_settings(table, "tapt", "demo", rule_outputs)["model"] == own


def test_ensemble_and_stacked_inputs_and_arguments(
    table: NerRuns, rule_outputs: RuleOutputs
) -> None:
    assert ner_inputs.stacked_inputs(table, "lex", "demo", rule_outputs) == {
        "model": "results/train_ner/demo/real/model",
        "validation": "results/build_mixture/demo/real/validation.parquet",
        "train": "results/build_mixture/demo/real/train.parquet",
    }
    inputs = ner_inputs.ensemble_inputs(table, "both", "demo", rule_outputs)
    assert list(inputs) == [
        "model_real",
        "validation_real",
        "train_real",
        "model_tapt",
        "validation_tapt",
        "train_tapt",
    ]
    assert inputs["train_tapt"] == "results/build_mixture/demo/tapt/train.parquet"
    words = shlex.split(ner_inputs.ensemble_arguments(table, "both", inputs))
    assert words[:6] == [
        "--member",
        "real=results/train_ner/demo/real/model",
        "--validation",
        "results/build_mixture/demo/real/validation.parquet",
        "--train",
        "results/build_mixture/demo/real/train.parquet",
    ]
    assert words[6:8] == ["--member", "tapt=results/train_ner/demo/tapt/model"]


# a student of the ensemble, and one of an arm (its first training seed)
STUDENT = {"name": "student", "distill_from": "both", "mixture": MIXTURE}
ARM_STUDENT = {"name": "arm_student", "distill_from": "dplm-syn25", "mixture": MIXTURE}
DISTILL = {"distill_alpha": 0.7, "distill_temperature": 2.0}


def test_only_a_distilled_run_reads_its_teachers_soft_labels(rule_outputs: RuleOutputs) -> None:
    distilled = NerRuns.from_config(
        ner(REAL, SWEPT, TAPT, ENSEMBLE, STUDENT, ARM_STUDENT, training={**TRAINING, **DISTILL})
    )
    assert distilled.distill_teacher("student") == "both"
    assert distilled.distill_teacher("arm_student") == "dplm-syn25-seed1"
    assert distilled.distill_teacher("real") is None
    soft_labels = "results/soft_label_ner/demo/student/local/soft_labels.parquet"
    assert is_local_path(soft_labels)
    assert ner_inputs.soft_labels_file("demo", "student", rule_outputs) == soft_labels
    assert ner_inputs.distill_input(distilled, "student", "demo", rule_outputs) == {
        "soft_labels": soft_labels
    }
    for run in ("real", "tapt", "dplm-syn25-seed1"):
        assert ner_inputs.distill_input(distilled, run, "demo", rule_outputs) == {}
    # soft_label_ner's teacher: the model folder of any kind of run
    assert ner_inputs.teacher_model(distilled, "student", "demo", rule_outputs) == (
        "results/ensemble_ner/demo/both/model"
    )
    assert ner_inputs.teacher_model(distilled, "arm_student", "demo", rule_outputs) == (
        "results/train_ner/demo/dplm-syn25-seed1/model"
    )
    with pytest.raises(ConfigError, match="'real' has no distill_from"):
        ner_inputs.teacher_model(distilled, "real", "demo", rule_outputs)
    # train-ner's flag, from Snakemake's input object (`in` looks at paths, not names)
    inputs = InputFiles(fromdict={"soft_labels": "a b/soft_labels.parquet", "train": "t"})
    assert ner_inputs.distill_arguments(inputs) == "--soft-labels 'a b/soft_labels.parquet'"
    assert ner_inputs.distill_arguments(InputFiles(fromdict={"train": "soft_labels"})) == ""
    # the distillation settings reach only the distilled runs: changing them reruns no other
    assert ner_inputs.training_settings(distilled, "student", "demo", rule_outputs) == {
        **TRAINING,
        **DISTILL,
    }
    assert ner_inputs.training_settings(distilled, "real", "demo", rule_outputs) == TRAINING


def test_compare_ner_gets_every_run_its_arm_and_every_cross_corpus_score(
    table: NerRuns, rule_outputs: RuleOutputs
) -> None:
    outputs = ner_inputs.evaluation_outputs(table, "demo", rule_outputs)
    assert outputs["real"] == "results/evaluate_ner/demo/real/metrics.json"
    words = shlex.split(ner_inputs.compare_arguments(table, outputs))
    assert words[:2] == ["--run", "real=results/evaluate_ner/demo/real"]
    assert words.count("--run") == len(table.runs)
    # only runs of an arm with seeds or a sweep say their arm
    assert words.count("--arm") == 4 and "dplm-syn25-seed1=dplm-syn25" in words
    cross = ner_inputs.cross_outputs(table, ["ext"], "demo", rule_outputs)
    assert cross["cross_ext_real"] == "results/evaluate_ner_cross/demo/real/ext/metrics.json"
    arguments = ner_inputs.cross_arguments("my corpus", ["ext"], table, cross)
    assert arguments.startswith(
        "--corpus-name 'my corpus' --cross ext real results/evaluate_ner_cross/demo/real/ext"
    )
    assert arguments.count("--cross") == len(table.runs)
    assert ner_inputs.cross_arguments("demo", [], table, {}) == "--corpus-name demo"


def test_compare_arguments_without_arms_end_with_the_runs() -> None:
    table = NerRuns.from_config(ner(REAL))
    assert ner_inputs.compare_arguments(table, {"real": "r/real/metrics.json"}) == (
        "--run real=r/real"
    )


def test_anchors_are_evaluated_from_their_own_predictions_and_compared_as_runs(
    rule_outputs: RuleOutputs,
) -> None:
    table = NerRuns.from_config(ner(REAL))
    assert ner_inputs.predictions_file("demo", "real", rule_outputs, ["deidpl"]) == (
        "results/predict_ner/demo/real/predictions.parquet"
    )
    assert ner_inputs.predictions_file("demo", "deidpl", rule_outputs, ["deidpl"]) == (
        "results/score_anchor/demo/deidpl/predictions.parquet"
    )
    outputs = ner_inputs.evaluation_outputs(table, "demo", rule_outputs, ["deidpl"])
    assert outputs == {
        "real": "results/evaluate_ner/demo/real/metrics.json",
        "deidpl": "results/evaluate_ner/demo/deidpl/metrics.json",
    }
    assert ner_inputs.compare_arguments(table, outputs, ["deidpl"]) == (
        "--run real=results/evaluate_ner/demo/real --run deidpl=results/evaluate_ner/demo/deidpl"
    )


def test_the_study_reads_mixtures_models_and_the_dp_privacy_where_used(
    table: NerRuns, rule_outputs: RuleOutputs
) -> None:
    inputs = ner_inputs.study_inputs(table, "demo", rule_outputs)
    assert inputs["mixture_real"] == "results/build_mixture/demo/real/summary.json"
    assert inputs["benchmark_real"] == "benchmarks/train_ner/demo/real.tsv"
    assert inputs["model_real"] == "results/train_ner/demo/real/model"
    assert "model_both" not in inputs  # an ensemble trains nothing: no outcome, n/a
    assert inputs["privacy"] == "results/train_dp_lm/demo/dp/privacy.json"
    assert "mixture_both" not in inputs and "mixture_lex" not in inputs
    words = shlex.split(ner_inputs.study_arguments(table, inputs))
    assert words.count("--mixture") == len(table.trained)
    assert words.count("--benchmark") == len(table.trained)
    assert words.count("--model") == len(table.trained)
    assert words.count("--privacy") == 4
    assert "dplm-syn25-seed1=results/train_dp_lm/demo/dp/privacy.json" in words
    plain = NerRuns.from_config(ner(REAL))
    plain_inputs = ner_inputs.study_inputs(plain, "demo", rule_outputs)
    assert "privacy" not in plain_inputs
    assert ner_inputs.study_arguments(plain, plain_inputs) == (
        "--mixture real=results/build_mixture/demo/real/summary.json"
        " --benchmark real=benchmarks/train_ner/demo/real.tsv"
        " --model real=results/train_ner/demo/real/model"
    )


def test_a_run_is_archived_with_what_it_has(table: NerRuns, rule_outputs: RuleOutputs) -> None:
    """archive_run reads a trained run's mixture, benchmark and model folder (its training
    settings), the DP record only where its data passed through the DP model, and records
    the MD5 of the run's configuration."""
    trained = ner_inputs.archive_inputs(table, "demo", "real", rule_outputs)
    assert trained == {
        "evaluation": "results/evaluate_ner/demo/real/metrics.json",
        "mixture": "results/build_mixture/demo/real/summary.json",
        "benchmark": "benchmarks/train_ner/demo/real.tsv",
        "model": "results/train_ner/demo/real/model",
    }
    # as Snakemake passes them: its input object, whose `in` looks at paths, not names
    # the rule adds the split the run was scored on (the key of its hashed note ids)
    notes = "results/split_notes/demo/notes.parquet"
    given = InputFiles(fromdict={**trained, "notes": notes})
    words = shlex.split(ner_inputs.archive_arguments(table, "real", given))
    assert words[:4] == ["--arm", "real", "--evaluation", "results/evaluate_ner/demo/real"]
    assert words[4:6] == ["--notes", notes]
    assert words[6:10] == ["--mixture", trained["mixture"], "--benchmark", trained["benchmark"]]
    assert words[10:12] == ["--model", trained["model"]]
    assert "--privacy" not in words
    digest = words[words.index("--config-md5") + 1]
    assert len(digest) == 32
    dp = ner_inputs.archive_inputs(table, "demo", "dplm-syn25-seed1", rule_outputs)
    assert dp["privacy"] == "results/train_dp_lm/demo/dp/privacy.json"
    dp_words = shlex.split(
        ner_inputs.archive_arguments(table, "dplm-syn25-seed1", {**dp, "notes": notes})
    )
    assert dp_words[1] == table.runs["dplm-syn25-seed1"]["arm"]
    assert dp_words[dp_words.index("--config-md5") + 1] != digest
    untrained = next(run for run in table.runs if run not in table.trained)
    assert set(ner_inputs.archive_inputs(table, "demo", untrained, rule_outputs)) <= {
        "evaluation",
        "privacy",
    }
