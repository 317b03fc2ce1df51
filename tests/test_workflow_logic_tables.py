"""The workflow's tables: teachers, tabular fits, synthesis settings, corpora, CLI arguments.

The whole-config tests build the tables from config/config.yaml validated
against the schema (which fills in its defaults), as the Snakefile does.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config, validate

from synthdeid.errors import ConfigError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.workflow import arguments, corpora, synthesis, tabular
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.outputs import RuleOutputs
from synthdeid.workflow.tables import Tables
from synthdeid.workflow.teachers import Teachers, model_argument, silver_argument

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))


def validated(override: dict[str, Any] | None = None) -> dict[str, Any]:
    """config.yaml with ``override`` merged over it, validated and with the schema's defaults."""
    config = copy.deepcopy(DEFAULT)
    update_config(config, override or {})
    validate(config, str(SCHEMA))
    return config


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def demo(monkeypatch_module: pytest.MonkeyPatch) -> Tables:
    monkeypatch_module.chdir(REPO)  # the demo key check resolves the demo corpus path
    return Tables.from_config(validated())


# ---------------------------------------------------------------- the whole demo config


def test_the_demo_tables(demo: Tables, rule_outputs: RuleOutputs) -> None:
    assert (demo.corpus, demo.table) == ("demo", "breast_cancer")
    assert demo.runs.reference_run == "real_only"
    assert demo.runs.ensembles == {"real_surrogate_ensemble": ["real_only", "surrogate_aug"]}
    assert set(demo.teachers.entries) == {"model", "rules", "ensemble"}
    assert rule_outputs.path(demo.pools["silver_ensemble"].file, corpus="demo") == (
        "results/combine_teachers/demo/ensemble/pool/silver.parquet"
    )
    assert list(demo.evaluation_corpora) == ["demo_external"]
    assert len(demo.tabular_runs) == 6


def test_the_demo_targets(demo: Tables, rule_outputs: RuleOutputs) -> None:
    targets = demo.targets(rule_outputs)
    assert "results/evaluate_ner/demo/silver_student/metrics.json" in targets
    assert "results/report_errors/demo/real_only/summary.json" in targets
    assert "results/evaluate_tabular/breast_cancer/comparison.json" in targets
    assert targets[-4:] == [
        "results/measure_silver_noise/demo/model/silver_noise.md",
        "results/measure_silver_noise/demo/rules/silver_noise.md",
        "results/measure_silver_noise/demo/ensemble/silver_noise.md",
        "results/compare_teacher/demo/ensemble/distillation.md",
    ]


def test_the_first_failing_check_stops_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    config = validated({"split": {"fractions": {"holdout": 0.4}}, "ner": {"reference_run": "x"}})
    with pytest.raises(ConfigError, match=r"^config: split\.fractions"):
        Tables.from_config(config)
    with pytest.raises(ConfigError, match=r"^ner\.reference_run 'x'"):
        Tables.from_config(validated({"ner": {"reference_run": "x"}}))
    with pytest.raises(ConfigError, match=r"^ner\.error_report\.runs: 'real_surrogate_ensemble'"):
        Tables.from_config(
            validated({"ner": {"error_report": {"runs": ["real_surrogate_ensemble"]}}})
        )
    corpora = [{**DEFAULT["evaluation"]["corpora"][0], "name": "demo"}]
    with pytest.raises(ConfigError, match=r"^evaluation\.corpora: 'demo' is the corpus itself"):
        Tables.from_config(validated({"evaluation": {"corpora": corpora}}))
    # a student whose teacher is itself (the demo's runs and one more)
    mixture = {"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}
    student = {"name": "student", "distill_from": "student", "mixture": mixture}
    runs = [*DEFAULT["ner"]["runs"], student]
    with pytest.raises(ConfigError, match=r"^ner run 'student': distill_from 'student' is the run"):
        Tables.from_config(validated({"ner": {"runs": runs}}))


# ---------------------------------------------------------------- teachers


def teacher_table(noise: bool = True) -> Teachers:
    return Teachers.from_config(
        {
            "parts": ["seed"],
            "noise": noise,
            "teachers": [
                {"name": "model", "kind": "model", "model": "real"},
                {"name": "path", "kind": "model", "model": "/models/deid"},
                {"name": "llm", "kind": "llm", "backend": {"kind": "transformers"}},
                {"name": "http", "kind": "llm", "backend": {"kind": "openai"}},
                {"name": "union", "kind": "ensemble", "members": ["model", "llm"], "student": "s"},
            ],
        }
    )


def real_runs() -> NerRuns:
    mixture = {"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}
    return NerRuns.from_config(
        {
            "runs": [
                {"name": "real", "mixture": mixture},
                {"name": "s", "pools": ["silver_union"], "mixture": mixture},
            ],
            "training_seeds": [1],
            "arm_seeds": {},
            "reference_run": None,
            "training": {},
        }
    )


def test_teacher_outputs_settings_and_gpus(rule_outputs: RuleOutputs) -> None:
    table = teacher_table()
    assert table.step("model") == "label_teacher"
    assert table.step("union") == "combine_teachers"
    assert rule_outputs.path(table.labels("union", "holdout", "summary"), corpus="demo") == (
        "results/combine_teachers/demo/union/holdout/summary.json"
    )
    assert rule_outputs.path(table.silver_pools()["union"], corpus="demo") == (
        "results/combine_teachers/demo/union/pool/silver.parquet"
    )
    assert table.settings("union") == {"kind": "ensemble", "members": ["model", "llm"]}
    assert [table.gpus(name) for name in table.entries] == [1, 1, 1, 0, 0]


def test_teacher_inputs_and_the_files_other_rules_read(rule_outputs: RuleOutputs) -> None:
    table, runs = teacher_table(), real_runs()
    assert table.inputs("model", "demo", runs, rule_outputs) == {
        "notes": "results/split_notes/demo/notes.parquet",
        "model": "results/train_ner/demo/real-seed1/model",
    }
    assert table.inputs("path", "demo", runs, rule_outputs)["model"] == "/models/deid"
    assert "model" not in table.inputs("llm", "demo", runs, rule_outputs)
    assert table.member_files("union", "pool", "demo", rule_outputs) == {
        "model": "results/label_teacher/demo/model/pool/metadata.parquet",
        "llm": "results/label_teacher/demo/llm/pool/metadata.parquet",
    }
    assert table.labels_file("union", "holdout", "demo", rule_outputs) == (
        "results/combine_teachers/demo/union/holdout/labels.parquet"
    )
    assert table.labels_file("model", "pool", "demo", rule_outputs) == (
        "results/label_teacher/demo/model/pool/silver.parquet"
    )
    # the student names an arm: its first training seed is the run compared
    assert table.student_metrics("union", "demo", runs, rule_outputs) == (
        "results/evaluate_ner/demo/s-seed1/metrics.json"
    )
    with pytest.raises(ConfigError, match=r"teacher\.teachers\[model\]: no student run"):
        table.student_metrics("model", "demo", runs, rule_outputs)


def test_teacher_cli_arguments() -> None:
    table, runs = teacher_table(), real_runs()
    members = {"model": "x/model/pool/metadata.parquet", "llm": "x/llm/pool/metadata.parquet"}
    assert table.member_arguments("union", members) == (
        "--member model=x/model/pool --member llm=x/llm/pool"
    )
    inputs = {"teacher": "t/union/holdout/metrics.json", "student": "e/s-seed1/metrics.json"}
    assert table.distillation_arguments("union", runs, inputs) == (
        "--teacher union=t/union/holdout --student s-seed1=e/s-seed1"
    )
    assert model_argument({"notes": "n", "model": "my models/m"}) == "--model 'my models/m'"
    assert model_argument({"notes": "n"}) == ""
    assert silver_argument("union", "e/union/pool/metrics.json") == "--silver union=e/union/pool"


def test_teacher_targets_follow_noise_and_students(rule_outputs: RuleOutputs) -> None:
    assert teacher_table().targets("demo", rule_outputs)[:2] == [
        "results/measure_silver_noise/demo/model/silver_noise.md",
        "results/measure_silver_noise/demo/path/silver_noise.md",
    ]
    quiet = teacher_table(noise=False).targets("demo", rule_outputs)
    assert quiet[0] == "results/label_teacher/demo/model/pool/silver.parquet"
    assert quiet[-1] == "results/compare_teacher/demo/union/distillation.md"
    assert len(quiet) == 5


# ---------------------------------------------------------------- tabular


TABULAR = {
    "table": {"name": "cancer"},
    "synthesizers": ["mst", "pate_ctgan", "ctgan"],
    "epsilons": [1.0, 2.5],
    "subsample": {"synthesizer": "pate_ctgan", "epsilon": None},
}


def test_tabular_runs_budgets_and_labels(rule_outputs: RuleOutputs) -> None:
    assert tabular.budgets("mst", [1.0, 2.5]) == ["eps1", "eps2.5"]
    assert tabular.budgets("ctgan", [1.0]) == ["non_dp"]
    runs = tabular.tabular_runs(TABULAR)
    assert [(r.key, r.label) for r in runs] == [
        ("mst_eps1", "mst (eps 1)"),
        ("mst_eps2_5", "mst (eps 2.5)"),
        ("pate_ctgan_eps1", "pate_ctgan (eps 1)"),
        ("pate_ctgan_eps2_5", "pate_ctgan (eps 2.5)"),
        ("ctgan_non_dp", "ctgan"),
    ]
    files = tabular.sample_files("cancer", runs, rule_outputs)
    assert files["mst_eps1"] == "results/fit_dp_tabular/cancer/mst/eps1/samples.parquet"
    assert files["pate_ctgan_eps1"] == (
        "results/fit_dp_gan_tabular/cancer/pate_ctgan/eps1/samples.parquet"
    )
    words = shlex.split(tabular.run_arguments(runs, files))
    assert words[:2] == ["--run", f"mst (eps 1)={files['mst_eps1']}"]
    assert words[-1] == f"ctgan={files['ctgan_non_dp']}"


def test_each_synthesizer_fits_in_one_rule_family() -> None:
    assert {tabular.fit_rule(n) for n in tabular.MAIN_ENV_SYNTHESIZERS} == {"fit_dp_tabular"}
    assert {tabular.fit_rule(n) for n in tabular.DPGAN_ENV_SYNTHESIZERS} == {"fit_dp_gan_tabular"}
    assert set(tabular.MAIN_ENV_SYNTHESIZERS).isdisjoint(tabular.DPGAN_ENV_SYNTHESIZERS)


def test_budget_arguments_and_source_files() -> None:
    assert tabular.budget_arguments("non_dp", 0.5) == ""
    assert tabular.budget_arguments("eps2.5", 0.5) == "--epsilon 2.5 --preprocessor-epsilon 0.5"
    assert tabular.source_files({"sklearn": "breast_cancer"}) == {}
    assert tabular.source_files({"path": "t.csv"}) == {"source": "t.csv"}


def test_the_verbalized_samples_are_the_subsample_synthesizers(
    rule_outputs: RuleOutputs,
) -> None:
    def samples(settings: dict[str, Any]) -> str:
        run = tabular.verbalized_run(settings)
        assert run in tabular.tabular_runs(settings)
        return tabular.fit_file("cancer", run, "samples", rule_outputs)

    assert samples(TABULAR) == "results/fit_dp_gan_tabular/cancer/pate_ctgan/eps1/samples.parquet"
    chosen = {**TABULAR, "subsample": {"synthesizer": "mst", "epsilon": 2.5}}
    assert samples(chosen) == "results/fit_dp_tabular/cancer/mst/eps2.5/samples.parquet"
    baseline = {**TABULAR, "subsample": {"synthesizer": "ctgan", "epsilon": None}}
    assert samples(baseline).endswith("/ctgan/non_dp/samples.parquet")
    missing = {**TABULAR, "subsample": {"synthesizer": "aim", "epsilon": None}}
    with pytest.raises(ConfigError) as err:
        tabular.verbalized_run(missing)
    assert str(err.value) == (
        "synth.tabular.subsample.synthesizer 'aim' is not one of synth.tabular.synthesizers "
        "['mst', 'pate_ctgan', 'ctgan']"
    )


def test_verbalize_settings_leave_the_prompt_out() -> None:
    verbalize = {key: key for key in (*tabular.VERBALIZE_KEYS, "prompt")}
    assert set(tabular.verbalize_settings(verbalize)) == set(tabular.VERBALIZE_KEYS)


# ---------------------------------------------------------------- synthesis settings


def test_template_settings_and_the_control_backend() -> None:
    template = {key: key for key in (*synthesis.TEMPLATE_KEYS, "pools", "prompt")}
    assert set(synthesis.template_settings(template)) == set(synthesis.TEMPLATE_KEYS)
    control = synthesis.template_settings(template, backend={"kind": "none"})
    assert control["backend"] == {"kind": "none"} and control["seed"] == "seed"
    assert synthesis.backend_gpus({"kind": "transformers"}) == 1
    assert synthesis.backend_gpus({"kind": "openai"}) == synthesis.backend_gpus({}) == 0


def test_dplm_training_settings_by_privacy_and_lora() -> None:
    dplm = {k: k for k in ("model", "scratch", "control_codes", "training", "privacy", "tapt")}
    assert list(synthesis.dplm_training_settings({**dplm, "lora": None}, "non_dp")) == [
        "model",
        "scratch",
        "control_codes",
        "training",
    ]
    assert list(synthesis.dplm_training_settings({**dplm, "lora": {"r": 8}}, "dp"))[-2:] == [
        "lora",
        "privacy",
    ]
    assert synthesis.dplm_models({"baseline": True}) == ["dp", "non_dp"]
    assert synthesis.dplm_models({"baseline": False}) == ["dp"]
    assert synthesis.tapt_settings({"max_steps": 4, "model": "x"}, None) == {
        "max_steps": 4,
        "model": None,
    }


def test_audit_inputs_and_arguments(rule_outputs: RuleOutputs) -> None:
    inputs = synthesis.audit_inputs(["dp", "non_dp"], "demo", rule_outputs)
    assert inputs == {
        "samples_dp": "results/sample_dp_lm/demo/dp/samples.parquet",
        "model_dp": "results/train_dp_lm/demo/dp/model",
        "samples_non_dp": "results/sample_dp_lm/demo/non_dp/samples.parquet",
        "model_non_dp": "results/train_dp_lm/demo/non_dp/model",
    }
    assert synthesis.audit_arguments(["dp"], inputs) == (
        "--run dp=results/sample_dp_lm/demo/dp/samples.parquet:results/train_dp_lm/demo/dp/model"
    )


# ---------------------------------------------------------------- corpora


def test_a_corpus_path_from_the_config_or_the_environment(tmp_path: Path) -> None:
    assert corpora.corpus_path({"name": "demo", "path": "notes.jsonl"}) == Path("notes.jsonl")
    settings = {"name": "physionet", "path_env": "CORPUS_DIR", "format": "jsonl"}
    assert corpora.corpus_path(settings, {"CORPUS_DIR": str(tmp_path)}) == tmp_path
    with pytest.raises(ConfigError) as err:
        corpora.corpus_path(settings, {})
    assert str(err.value) == (
        "corpus 'physionet': path_env is 'CORPUS_DIR' but that environment variable is not "
        "set; export CORPUS_DIR=/path/to/the/corpus"
    )


def test_reader_files_must_exist(tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    assert corpora.reader_files({"name": "x", "format": "jsonl", "path": str(notes)}) == [
        str(notes)
    ]
    with pytest.raises(ConfigError) as err:
        corpora.reader_files({"name": "x", "format": "brat", "path": str(tmp_path)})
    assert str(err.value) == f"corpus 'x': no brat corpus files found at {tmp_path}"


def test_evaluation_corpora_by_name() -> None:
    entries = [{"name": "a", "format": "jsonl"}, {"name": "b", "format": "brat"}]
    assert corpora.evaluation_corpora(entries) == {"a": entries[0], "b": entries[1]}
    assert corpora.evaluation_corpora([]) == {}


# ---------------------------------------------------------------- anchors


def test_anchors_are_scored_runs_of_the_tables(
    monkeypatch: pytest.MonkeyPatch, rule_outputs: RuleOutputs
) -> None:
    monkeypatch.chdir(REPO)
    anchors = [{"name": "deidpl", "path": "a.jsonl"}, {"name": "other", "path_env": "OTHER"}]
    tables = Tables.from_config(validated({"evaluation": {"anchors": anchors}}))
    assert list(tables.anchors) == ["deidpl", "other"]
    assert tables.anchors["other"]["path_env"] == "OTHER"
    targets = tables.targets(rule_outputs)
    assert "results/evaluate_ner/demo/deidpl/metrics.json" in targets
    assert "results/evaluate_ner/demo/other/metrics.json" in targets
    assert Tables.from_config(validated()).anchors == {}


@pytest.mark.parametrize(
    ("anchors", "message"),
    [
        (
            [{"name": "a", "path": "x"}, {"name": "a", "path": "y"}],
            r"^evaluation\.anchors: names \['a'\] are given twice",
        ),
        ([{"name": "real_only", "path": "x"}], r"^evaluation\.anchors: 'real_only' is the name"),
    ],
)
def test_anchor_names_are_their_own(
    anchors: list[dict[str, str]], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError, match=message):
        Tables.from_config(validated({"evaluation": {"anchors": anchors}}))


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "x"},
        {"name": "a"},
        {"name": "a", "path": "x", "format": "jsonl"},
        {"name": "-a", "path": "x"},
    ],
)
def test_the_schema_refuses_an_anchor_without_name_or_file(entry: dict[str, str]) -> None:
    with pytest.raises(WorkflowError):
        validated({"evaluation": {"anchors": [entry]}})


def test_an_anchor_path_from_the_config_or_the_environment(tmp_path: Path) -> None:
    assert corpora.anchor_path({"name": "a", "path": "../x/a.jsonl"}) == "../x/a.jsonl"
    settings = {"name": "a", "path": "ignored", "path_env": "ANCHOR"}
    assert corpora.anchor_path(settings, {"ANCHOR": str(tmp_path)}) == str(tmp_path)
    with pytest.raises(ConfigError) as err:
        corpora.anchor_path(settings, {})
    assert str(err.value) == (
        "evaluation.anchors[a]: path_env is 'ANCHOR' but that environment variable is not "
        "set; export ANCHOR=/path/to/the/predictions.jsonl"
    )


# ---------------------------------------------------------------- CLI arguments


def test_json_params_and_label_maps() -> None:
    assert arguments.as_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert json.loads(arguments.label_map_json({"Doctor": "DOCTOR"})) == {"Doctor": "DOCTOR"}
    assert json.loads(arguments.label_map_json({})) == {label: label for label in CANONICAL_LABELS}
    assert json.loads(arguments.label_map_json(None)) == json.loads(arguments.label_map_json({}))


def test_flags_quote_each_pair_and_joined_drops_empty_parts() -> None:
    assert arguments.flags("--run", [("a", "x/y"), ("b c", "z")]) == "--run a=x/y --run 'b c=z'"
    assert arguments.flags("--run", []) == ""
    assert arguments.joined("--a 1", "", "--b 2") == "--a 1 --b 2"
    assert arguments.parent("results/x/demo/metrics.json") == "results/x/demo"


def test_folder_of_names_the_output_whose_folder_it_gives() -> None:
    folder = arguments.folder_of("metrics")
    assert folder(None, {"metrics": "results/r/demo/metrics.json"}) == "results/r/demo"


def test_beside_output_names_a_folder_next_to_the_output() -> None:
    beside = arguments.beside_output("model", "resume")
    assert beside(None, {"model": "results/train_ner/demo/r1/model"}) == (
        "results/train_ner/demo/r1/resume"
    )
