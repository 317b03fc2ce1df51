"""Information extraction from reports (Lorenzo et al. 2026, sec. 4): answers, scores, shots,
the test reports of real rows, and the stage end to end with a fine-tuned encoder and LLM
baselines answered by a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import llm_server
from llm_server import ok_body
from synthdeid import cli
from synthdeid.errors import InputError
from synthdeid.local_only import LOCAL_ONLY_KEY
from synthdeid.tabular.expert_rules import parse_rules
from synthdeid.tabular.extraction import (
    Example,
    category_of_answer,
    few_shot_examples,
    holdout_examples,
    macro_f1,
    score_extraction,
    split_validation,
    stated_value,
    training_examples,
)
from synthdeid.tabular.extraction_llm import extraction_requests, load_extraction_prompt
from synthdeid.tabular.faithfulness import check_report
from synthdeid.tabular.spec import MISSING, load_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC_PATH = ROOT / "resources" / "tabular" / "breast_cancer.yaml"
PROMPT = ROOT / "resources" / "prompts" / "tabular_extraction.yaml"
SPEC = load_spec(SPEC_PATH)
RULES = [{"kind": "draw_within", "variable": "mean_area", "decimals": 0}]

chat_server = llm_server.chat_server  # the fixture


def row(**values: str) -> dict[str, str]:
    """A row of the spec: each variable's first category unless given."""
    return {v.name: values.get(v.name, v.domain[0]) for v in SPEC.variables}


def test_answers_are_read_as_spec_categories() -> None:
    diagnosis = SPEC.variable("diagnosis")
    radius = SPEC.variable("mean_radius")
    assert category_of_answer(diagnosis, "Benign.") == "benign"
    assert category_of_answer(diagnosis, "carcinoma") == "malignant"  # a phrase of malignant
    assert category_of_answer(diagnosis, "benign or malignant") is None  # two categories
    assert category_of_answer(diagnosis, "") is None
    assert category_of_answer(diagnosis, {"value": "benign"}) is None
    assert category_of_answer(diagnosis, "Not reported") == MISSING
    assert category_of_answer(radius, "13.2 um") == "12-15"
    assert category_of_answer(radius, 15) == "15-20"  # a bin is [low, high)
    assert category_of_answer(radius, "between 12 and 15") == "12-15"
    assert category_of_answer(radius, "45") is None  # outside every bin
    assert category_of_answer(radius, "large") is None


def test_scores_per_variable_and_overall_with_na() -> None:
    assert macro_f1(["a", "a", "b"], ["a", None, "b"]) == pytest.approx((2 / 3 + 1) / 2)
    assert macro_f1([], []) is None
    gold = [
        Example("r1", "", row(diagnosis="benign")),
        Example("r2", "", row(diagnosis="malignant")),
    ]
    predicted = [row(diagnosis="benign"), {**row(), "diagnosis": None}]
    scores = score_extraction(gold, predicted, SPEC, resamples=200, seed=0)
    diagnosis = scores.per_variable["diagnosis"]
    assert (diagnosis.reports, diagnosis.answered, diagnosis.accuracy) == (2, 1, 0.5)
    assert diagnosis.f1 == pytest.approx(0.5)  # benign F1 1, malignant F1 0
    assert scores.per_variable["mean_radius"].accuracy == 1.0
    n = len(SPEC.names)
    assert scores.accuracy is not None
    assert scores.accuracy.estimate == pytest.approx((1 + (n - 1) / n) / 2)
    assert scores.accuracy.lo <= scores.accuracy.estimate <= scores.accuracy.hi
    # a variable no test report carries is n/a, not 0
    partial = [Example("r1", "", {"diagnosis": "benign"})]
    found = score_extraction(partial, [{"diagnosis": "benign"}], SPEC, resamples=10, seed=0)
    assert found.per_variable["mean_radius"].accuracy is None
    assert found.per_variable["mean_radius"].f1 is None
    with pytest.raises(ValueError, match="predictions for"):
        score_extraction(gold, predicted[:1], SPEC, resamples=10, seed=0)


def test_training_pairs_keep_faithful_values_and_refuse_values_outside_the_spec(tmp_path) -> None:
    pairs = pd.DataFrame(
        {
            "record_id": ["a", "b"],
            "report": ["report a", "report b"],
            "kept_json": [json.dumps({"diagnosis": "benign"}), json.dumps({})],
        }
    )
    examples = training_examples(pairs, SPEC, tmp_path / "pairs.parquet")
    assert examples == [Example("a", "report a", {"diagnosis": "benign"})]  # b taught nothing
    bad = pairs.assign(kept_json=[json.dumps({"diagnosis": "huge"}), "{}"])
    with pytest.raises(InputError, match=r"pairs\.parquet.*a.*not in the spec") as error:
        training_examples(bad, SPEC, tmp_path / "pairs.parquet")
    assert "huge" not in str(error.value)  # the message quotes no value of the file


def test_test_reports_are_the_rows_written_by_the_grammar_and_state_every_value() -> None:
    rows = pd.DataFrame(
        [
            {"record_id": "h1", **row(diagnosis="benign")},
            {"record_id": "h2", **row(diagnosis="malignant", mean_radius="20-30")},
        ]
    )
    rules = parse_rules(RULES, SPEC)
    first = holdout_examples(rows, SPEC, rules, seed=1)
    again = holdout_examples(rows.iloc[::-1], SPEC, rules, seed=1)
    assert [e.report for e in first] == [e.report for e in reversed(again)]  # order-free
    assert holdout_examples(rows, SPEC, rules, seed=2)[0].report != first[0].report
    for example, (_, source) in zip(first, rows.iterrows(), strict=True):
        assert dict(example.values) == {n: source[n] for n in SPEC.names}
        verdicts = check_report(example.report, example.values, SPEC)
        assert all(v.correct for v in verdicts)  # every gold value is stated


def test_a_shot_answers_with_the_number_its_report_states() -> None:
    rows = pd.DataFrame([{"record_id": "h1", **row(mean_radius="12-15")}])
    example = holdout_examples(rows, SPEC, parse_rules(RULES, SPEC), seed=1)[0]
    value, reference = stated_value(example, SPEC.variable("mean_radius"), SPEC)
    assert value in reference and reference in example.report
    assert SPEC.variable("mean_radius").discretize(value) == "12-15"
    assert value != "13.5"  # the number the report states, not the bin's midpoint
    category, passage = stated_value(example, SPEC.variable("diagnosis"), SPEC)
    assert category == example.values["diagnosis"] and passage in example.report
    unstated = Example("x", "Nothing is measured here.", {"mean_radius": "12-15"})
    assert stated_value(unstated, SPEC.variable("mean_radius"), SPEC) == ("13.5", "")


def test_shots_show_distinct_values_and_requests_carry_them() -> None:
    examples = [
        Example(f"s{i}", f"report {i}", {"diagnosis": "benign" if i % 4 else "malignant"})
        for i in range(12)
    ]
    shots = few_shot_examples(examples, "diagnosis", 3, seed=0)
    assert len(shots) == 3 and {s.values["diagnosis"] for s in shots} == {"benign", "malignant"}
    assert few_shot_examples(examples, "mean_radius", 3, seed=0) == []  # none labelled
    train, validation = split_validation(examples, 0.25, seed=0)
    assert len(validation) == 3 and not {e.record_id for e in train} & {
        e.record_id for e in validation
    }
    prompt = load_extraction_prompt(PROMPT)
    tests = [Example("t1", "The cytological diagnosis is benign.", row())]
    zero = extraction_requests(tests, examples, SPEC, prompt, shots=0, seed=0, max_tokens=32)
    three = extraction_requests(tests, examples, SPEC, prompt, shots=3, seed=0, max_tokens=32)
    assert len(zero) == len(three) == len(SPEC.names)
    assert [m.role for m in zero[0].messages] == ["system", "user"]
    assert [m.role for m in three[0].messages] == ["system", *["user", "assistant"] * 3, "user"]
    assert json.loads(three[0].messages[2].content)["value"] in {"benign", "malignant"}
    assert "Variable: diagnosis" in zero[0].messages[-1].content
    assert "one of: malignant, benign" in zero[0].messages[-1].content
    assert zero[0].temperature == 0.0 and zero[0].json_mode


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory) -> Path:
    """A prepared table, and the faithful pairs of 16 grammar reports of its train rows."""
    root = tmp_path_factory.mktemp("extraction")
    prepared = root / "prepared.parquet"
    spec = str(SPEC_PATH)
    source = '{"sklearn": "breast_cancer"}'
    summary = str(root / "prepared.json")
    assert (
        cli.main(
            [
                *("prepare-tabular", "--source", source, "--spec", spec),
                *("--out", str(prepared), "--summary", summary),
            ]
        )
        == 0
    )
    train = pd.read_parquet(prepared).query("split == 'train'").head(16)
    subsample = train.drop(columns="split").assign(sample=0)
    subsample.astype({"sample": "int32"}).to_parquet(root / "subsample.parquet", index=False)
    out = root / "verbalized"
    assert (
        cli.main(
            [
                "verbalize-tabular",
                "--subsample",
                str(root / "subsample.parquet"),
                "--spec",
                spec,
                "--allowlist",
                str(ROOT / "resources" / "placeholders.yaml"),
                "--prompt",
                str(ROOT / "resources" / "prompts" / "tabular_report.yaml"),
                "--settings",
                json.dumps({"rules": RULES}),
                "--reports",
                str(out / "reports.parquet"),
                "--pii",
                str(out / "pii.parquet"),
                "--no-pii",
                str(out / "no_pii.parquet"),
                "--removals",
                str(out / "removals.parquet"),
                "--summary",
                str(out / "summary.json"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert (
        cli.main(
            [
                *("check-faithfulness", "--reports", str(out / "reports.parquet"), "--spec", spec),
                *("--judge-prompt", str(ROOT / "resources" / "prompts" / "tabular_judge.yaml")),
                *("--out-dir", str(root / "faithfulness"), "--no-progress"),
            ]
        )
        == 0
    )
    return root


def extract(root: Path, out: str, settings: dict, *extra: str) -> int:
    return cli.main(
        [
            "extract-tabular",
            "--pairs",
            str(root / "faithfulness" / "pairs.parquet"),
            "--prepared",
            str(root / "prepared.parquet"),
            "--spec",
            str(SPEC_PATH),
            "--prompt",
            str(PROMPT),
            "--settings",
            json.dumps(settings),
            "--rules",
            json.dumps(RULES),
            "--out-dir",
            str(root / out),
            "--predictions",
            str(root / out / "local" / "predictions.parquet"),
            "--threads",
            "1",
            "--no-progress",
            *extra,
        ]
    )


DIAGNOSIS_SENTENCE = re.compile(r"(cytological diagnosis)\W+(?:is\s+)?(\w+)", re.IGNORECASE)


def test_the_stage_scores_the_fine_tuned_extractor_and_both_baselines_on_the_same_reports(
    pairs_dir: Path, chat_server
) -> None:
    def answer(request_json):
        messages = request_json["messages"]
        if len(messages) == 2:  # 0-shot: this model never answers in JSON
            return 200, ok_body("The value is probably benign."), {}
        report = llm_server.last_user_message(request_json)
        if "Variable: diagnosis" in report:
            found = DIAGNOSIS_SENTENCE.search(report)
            return 200, ok_body(json.dumps({"value": found.group(2), "reference": ""})), {}
        return 200, ok_body('{"value": "unknown", "reference": ""}'), {}

    chat_server.handler = answer
    backend = {"kind": "openai", "base_url": chat_server.url, "model": "scripted"}
    backend |= {"concurrency": 1, "max_retries": 0, "timeout_s": 10}
    settings = {
        "model": {"epochs": 1, "max_length": 128, "batch_size": 8},
        "test": {"max_reports": 10, "resamples": 100},
        "llm": {"backend": backend, "shots": [0, 3], "max_reports": 4},
    }
    assert extract(pairs_dir, "ie", settings) == 0
    variables = len(SPEC.names)
    assert len(chat_server.requests) == 2 * 4 * variables  # one per report and variable
    summary = json.loads((pairs_dir / "ie" / "extraction.json").read_text())
    assert summary["test_reports"] == 4 and summary["test_reports_written"] == 10
    extractors = summary["extractors"]
    assert set(extractors) == {"fine-tuned", "0-shot", "3-shot"}
    assert extractors["0-shot"]["accuracy"]["estimate"] == 0.0
    assert summary["llm_answers_naming_no_value"]["0-shot"] == {"invalid_json": 4 * variables}
    three = extractors["3-shot"]["per_variable"]
    assert three["diagnosis"]["accuracy"] == 1.0  # read from the report's own sentence
    assert three["mean_radius"] == {"reports": 4, "answered": 4, "accuracy": 0.0, "f1": 0.0}
    assert summary["fine_tuned_on_every_test_report"]["per_variable"]["diagnosis"]["reports"] == 10
    assert len(summary["fine_tuning"]["history"]) == 1
    table = (pairs_dir / "ie" / "extraction.md").read_text()
    assert "| Variable | Acc fine-tuned | Acc 0-shot | Acc 3-shot |" in table
    assert "real holdout rows" in table
    assert (pairs_dir / "ie" / "extraction.png").stat().st_size > 0
    predictions = pq.read_table(pairs_dir / "ie" / "local" / "predictions.parquet")
    assert predictions.schema.metadata[LOCAL_ONLY_KEY] == b"true"
    assert predictions.num_rows == 3 * 4 * variables
    released = (pairs_dir / "ie" / "extraction.json").read_text()
    first_report = holdout_examples(
        pd.read_parquet(pairs_dir / "prepared.parquet").query("split == 'holdout'"),
        SPEC,
        parse_rules(RULES, SPEC),
        seed=1,
    )[0].report
    assert first_report.splitlines()[-1] not in released  # no report text in the scores


def test_reports_of_real_rows_go_to_no_other_machine_and_bad_settings_write_nothing(
    pairs_dir: Path, capsys
) -> None:
    far = {"kind": "openai", "base_url": "http://10.1.2.3:8000/v1", "model": "m"}
    refused = {
        "far": ({"model": {"epochs": 1}, "llm": {"backend": far}}, "trusted"),
        "trusted": (
            {"llm": {"backend": far}, "trusted_hosts": ["10.1.2.3"], "model": {"epochs": 1}},
            "no known synthesizer.*not this machine",
        ),
        "bad": ({"model": {"validation_fraction": 1.5}}, "extraction.model.*validation_fraction"),
        "typo": ({"modle": {}}, "unknown keys"),
    }
    for name, (settings, message) in refused.items():
        assert extract(pairs_dir, name, settings) == 2, name
        assert re.search(message, capsys.readouterr().err), name
    public = pairs_dir / "public"
    code = cli.main(
        [
            "extract-tabular",
            "--pairs",
            str(pairs_dir / "faithfulness" / "pairs.parquet"),
            "--prepared",
            str(pairs_dir / "prepared.parquet"),
            "--spec",
            str(SPEC_PATH),
            "--prompt",
            str(PROMPT),
            "--out-dir",
            str(public),
            "--predictions",
            str(public / "predictions.parquet"),
        ]
    )
    assert code == 2 and "local/" in capsys.readouterr().err
    for name in (*refused, "public"):
        assert not (pairs_dir / name / "extraction.json").exists()
