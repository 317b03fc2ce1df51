"""Faithfulness of reports to their rows: the rule-based checker, scores and judge parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthdeid.errors import ConfigError
from synthdeid.tabular.faithfulness import (
    CORRECT,
    INVALID_VERDICT,
    NOT_JUDGED,
    NOT_MENTIONED,
    REFERENCE_NOT_FOUND,
    WRONG,
    JudgeFailure,
    VariableVerdict,
    accuracy_bucket,
    bucket_shares,
    check_report,
    check_reports,
    document_accuracy,
    faithful_pairs,
    judge_request_messages,
    load_judge_prompt,
    locate_reference,
    overall_accuracy,
    parse_judge_answer,
    per_variable_accuracy,
    status_counts,
)
from synthdeid.tabular.spec import MISSING, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[1]
SPEC = load_spec(REPO / "resources" / "tabular" / "breast_cancer.yaml")
JUDGE_PROMPT = REPO / "resources" / "prompts" / "tabular_judge.yaml"

ROW = {
    "diagnosis": "malignant",
    "mean_radius": "12-15",
    "mean_texture": "16-20",
    "mean_perimeter": "75-100",
    "mean_area": "450-700",
    "mean_smoothness": "0.085-0.1",
    "mean_compactness": "0.07-0.12",
    "mean_concavity": "0.05-0.1",
    "mean_concave_points": "0.03-0.06",
    "mean_symmetry": "0.16-0.19",
    "worst_radius": "17-23",
    "worst_concave_points": "0.12-0.18",
}
FAITHFUL = (
    "Fine-needle aspirate of the left breast.\n"
    "Microscopy: the mean nuclear radius is 13.2 and the texture 18.4. "
    "The perimeter measures 85 and the nuclear area 1,250 in one field but 560 on average.\n"
    "Smoothness .09, compactness 0.1, concavity 0.07; concave points 0.04 on average. "
    "Symmetry 0.18.\n"
    "The largest nuclear radius reaches 19.5, with worst concave points of 0.15.\n"
    "Diagnosis:\n"
    "  Invasive carcinoma.\n"
)


def verdicts(text: str, **values: str) -> dict[str, VariableVerdict]:
    return {v.variable: v for v in check_report(text, {**ROW, **values}, SPEC)}


def quoted(text: str, verdict: VariableVerdict) -> str | None:
    return None if verdict.evidence is None else text[verdict.evidence[0] : verdict.evidence[1]]


def test_fully_faithful_report():
    result = check_report(FAITHFUL, ROW, SPEC)
    assert [v.variable for v in result] == SPEC.names
    assert all(v.correct and v.status == CORRECT for v in result), [
        v for v in result if not v.correct
    ]
    by_name = {v.variable: v for v in result}
    assert quoted(FAITHFUL, by_name["mean_radius"]) == "mean nuclear radius is 13.2"
    assert quoted(FAITHFUL, by_name["worst_radius"]) == "largest nuclear radius reaches 19.5"
    assert quoted(FAITHFUL, by_name["mean_smoothness"]) == "Smoothness .09"
    # a heading's window goes on to the next line
    assert quoted(FAITHFUL, by_name["diagnosis"]) == "Diagnosis:\n  Invasive carcinoma"
    assert document_accuracy(result) == 1.0
    assert accuracy_bucket(document_accuracy(result)) == "Perfect"


def test_number_outside_the_bin_is_wrong():
    text = "The mean nuclear radius is 10.5 on average."
    result = verdicts(text)["mean_radius"]
    assert (result.correct, result.status, quoted(text, result)) == (False, WRONG, "10.5")
    # thousands separator: 1,250 is one number, outside 450-700
    text = "Nuclear area 1,250."
    assert verdicts(text)["mean_area"].status == WRONG
    assert verdicts(text, mean_area="1000-2510")["mean_area"].correct


@pytest.mark.parametrize(
    ("sentence", "correct"),
    [
        ("The radius ranges from 12 to 15.", True),
        ("The radius is 12.5-14.", True),
        ("The radius is between 12.5 and 14 units.", True),
        ("The radius is 12 \u2013 15.", True),
        ("The radius is 10-14.", False),  # a range is one value: 14 alone does not count
        ("The radius is 13 to 16.", False),
        ("The radius is 15.", True),  # the bin is closed: an edge states it
        ("The radius is measured.", False),  # mentioned without a number
    ],
)
def test_ranges_and_edges(sentence, correct):
    result = verdicts(sentence)["mean_radius"]
    assert result.correct is correct
    assert result.status == (CORRECT if correct else WRONG)


def test_largest_nuclear_radius_is_not_the_mean_radius():
    text = "The largest nuclear radius is 13.5."
    result = verdicts(text, worst_radius="13-17")
    assert result["worst_radius"].correct
    assert result["mean_radius"].status == NOT_MENTIONED and not result["mean_radius"].correct
    text = "Mean nuclear radius 13, largest nuclear radius 21."
    result = verdicts(text)
    assert result["mean_radius"].correct and result["worst_radius"].correct
    assert quoted(text, result["mean_radius"]) == "Mean nuclear radius 13"
    swapped = verdicts(text, mean_radius="20-30", worst_radius="7-13")
    assert swapped["mean_radius"].status == WRONG and swapped["worst_radius"].status == WRONG


def test_window_stops_at_the_next_variable_and_the_sentence_end():
    # 14 belongs to texture (bin 9-16), not to radius
    text = "Radius was not recorded numerically, texture 14. Radius: see above; 13."
    result = verdicts(text, mean_texture="9-16")
    assert result["mean_texture"].correct
    assert result["mean_radius"].correct  # "13" after the second mention, same sentence
    text = "Radius was large. 13 nuclei were counted."
    assert verdicts(text)["mean_radius"].status == WRONG


def test_categorical_stated_without_its_mention():
    text = "Cytology shows a ductal carcinoma with necrosis."
    result = verdicts(text)["diagnosis"]
    assert result.correct and quoted(text, result) == "carcinoma"
    assert verdicts(text, diagnosis="benign")["diagnosis"].status == WRONG
    assert verdicts("Cellular smear.", diagnosis="benign")["diagnosis"].status == NOT_MENTIONED


def test_conflicting_categories_are_wrong():
    text = "Impression: benign, with malignant features."
    for value in ("benign", "malignant"):
        assert verdicts(text, diagnosis=value)["diagnosis"].status == WRONG
    text = "Benign-appearing ducts. Invasive carcinoma elsewhere."
    assert verdicts(text, diagnosis="malignant")["diagnosis"].status == WRONG


def test_negated_category_does_not_count():
    text = "Diagnosis: benign; no evidence of malignancy."
    assert verdicts(text, diagnosis="benign")["diagnosis"].correct
    assert verdicts(text, diagnosis="malignant")["diagnosis"].status == WRONG
    text = "Benign breast tissue, negative for carcinoma."
    assert verdicts(text, diagnosis="benign")["diagnosis"].correct


def test_phrases_containing_each_other_match_longest_first():
    spec = parse_spec(
        {
            "variables": [
                {
                    "name": "status",
                    "kind": "categorical",
                    "categories": ["malignant", "non_malignant"],
                    "phrases": {"non_malignant": ["non-malignant", "non malignant"]},
                    "mentions": ["status"],
                }
            ]
        },
        "t",
    )
    text = "Final: non-malignant lesion."
    assert check_report(text, {"status": "non_malignant"}, spec)[0].correct
    assert check_report(text, {"status": "malignant"}, spec)[0].status == WRONG
    assert check_report("Final: malignant.", {"status": "malignant"}, spec)[0].correct
    assert check_report("Status: malignant.", {"status": "non_malignant"}, spec)[0].status == WRONG


def test_unknown_values():
    text = "The texture was not assessed. Radius and perimeter could not be measured."
    result = verdicts(text, mean_texture=MISSING, mean_radius=MISSING, mean_perimeter=MISSING)
    assert result["mean_texture"].correct and quoted(text, result["mean_texture"]) == (
        "not assessed"
    )
    # the rest of the sentence counts: "Radius and perimeter could not be measured."
    assert result["mean_radius"].correct and result["mean_perimeter"].correct
    # not mentioned at all: correct, no evidence
    assert result["mean_area"].status == NOT_MENTIONED  # its row value is not unknown
    unknown_area = verdicts(text, mean_area=MISSING)["mean_area"]
    assert (unknown_area.correct, unknown_area.status, unknown_area.evidence) == (
        True,
        CORRECT,
        None,
    )
    # a value stated where the row says unknown is wrong
    text = "Texture 18.4."
    assert verdicts(text, mean_texture=MISSING)["mean_texture"].status == WRONG
    assert verdicts("Benign.", diagnosis=MISSING)["diagnosis"].status == WRONG
    assert verdicts("Diagnosis: unknown.", diagnosis=MISSING)["diagnosis"].correct
    assert verdicts("Cellular smear.", diagnosis=MISSING)["diagnosis"].correct
    # mentioned with neither a value nor a missing word
    assert verdicts("Texture was reviewed.", mean_texture=MISSING)["mean_texture"].status == WRONG


def test_rows_must_match_the_spec():
    with pytest.raises(ConfigError, match="lacks"):
        check_report("x", {"diagnosis": "benign"}, SPEC)
    with pytest.raises(ConfigError, match="outside its domain"):
        check_report("x", {**ROW, "mean_radius": "13-14"}, SPEC)


@pytest.mark.parametrize(
    ("fraction", "bucket"),
    [
        (1.0, "Perfect"),
        (0.999, "High"),
        (0.85, "High"),
        (17 / 20, "High"),
        (12 / 13, "High"),
        (0.8499, "Moderate"),
        (11 / 13, "Moderate"),
        (0.70, "Moderate"),
        (7 / 10, "Moderate"),
        (0.6999, "Low"),
        (0.50, "Low"),
        (0.4999, "Very Low"),
        (0.0, "Very Low"),
    ],
)
def test_bucket_edges(fraction, bucket):
    assert accuracy_bucket(fraction) == bucket


def test_bucket_out_of_range_is_an_error():
    with pytest.raises(ValueError):
        accuracy_bucket(1.2)


def report_verdicts(correct: int, total: int) -> list[VariableVerdict]:
    return [
        VariableVerdict(f"v{i}", "x", i < correct, CORRECT if i < correct else WRONG, None)
        for i in range(total)
    ]


def test_scores_per_variable_overall_and_buckets():
    by_report = {
        "r1": report_verdicts(20, 20),
        "r2": report_verdicts(17, 20),
        "r3": report_verdicts(14, 20),
        "r4": report_verdicts(10, 20),
    }
    accuracy = per_variable_accuracy(by_report)
    assert accuracy["v0"] == 1.0 and accuracy["v12"] == 0.75 and accuracy["v19"] == 0.25
    assert overall_accuracy(accuracy) == pytest.approx((20 + 17 + 14 + 10) / 80)
    shares = bucket_shares(by_report)
    assert shares == {"Perfect": 0.25, "High": 0.25, "Moderate": 0.25, "Low": 0.25, "Very Low": 0.0}
    assert list(shares) == ["Perfect", "High", "Moderate", "Low", "Very Low"]


def test_unjudged_pairs_are_left_out_and_nothing_judged_is_undefined():
    """A judge that failed on a pair measured nothing: n/a, not a wrong report."""
    unjudged = [VariableVerdict(f"v{k}", "x", False, NOT_JUDGED, None) for k in range(20)]
    by_report = {"r1": report_verdicts(20, 20), "r2": unjudged}
    accuracy = per_variable_accuracy(by_report)
    assert accuracy["v0"] == 1.0 and overall_accuracy(accuracy) == 1.0
    assert document_accuracy(unjudged) is None
    assert bucket_shares(by_report) == {
        "Perfect": 1.0,
        "High": 0.0,
        "Moderate": 0.0,
        "Low": 0.0,
        "Very Low": 0.0,
    }
    nothing = {"r2": unjudged}
    assert set(per_variable_accuracy(nothing).values()) == {None}
    assert overall_accuracy(per_variable_accuracy(nothing)) is None
    assert bucket_shares(nothing) is None


def test_faithful_pairs_drop_what_is_not_stated_correctly():
    text = "Mean nuclear radius 13, largest nuclear radius 30. Texture was not assessed."
    by_report = check_reports({"r1": text}, {"r1": {**ROW, "mean_texture": MISSING}}, SPEC)
    pairs = faithful_pairs(by_report)["r1"]
    assert pairs.kept == {"mean_radius": "12-15", "mean_texture": MISSING}
    assert "worst_radius" in pairs.dropped and "diagnosis" in pairs.dropped
    assert set(pairs.kept) | set(pairs.dropped) == set(SPEC.names)
    strict = faithful_pairs(by_report, keep_unknown=False)["r1"]
    assert strict.kept == {"mean_radius": "12-15"} and "mean_texture" in strict.dropped


# ---------------------------------------------------------------- judge


def judge_answer(**entries: dict[str, str]) -> str:
    return json.dumps(entries)


def test_judge_prompt_and_request_messages():
    prompt = load_judge_prompt(JUDGE_PROMPT)
    assert prompt.name == "tabular_judge" and prompt.version
    system, user = judge_request_messages("Report {with braces}.", ROW, SPEC, prompt)
    assert "JSON" in system
    assert "Report {with braces}." in user
    assert "mean_radius (mean nuclear radius): between 12 and 15" in user
    assert "diagnosis (cytological diagnosis): malignant" in user
    assert "mean_smoothness (mean smoothness): between 0.085 and 0.1" in user
    assert '{"variable_name": {"correct": "yes"' in user  # literal braces survive format


def test_judge_prompt_with_an_unknown_field_is_rejected(tmp_path):
    bad = tmp_path / "judge.yaml"
    bad.write_text('version: "1"\nsystem: s\nuser: "{report} {pairs} {extra}"\n')
    with pytest.raises(ConfigError, match="extra"):
        load_judge_prompt(bad)
    with pytest.raises(ConfigError):
        load_judge_prompt(tmp_path / "missing.yaml")


def test_judge_answer_in_a_fence_with_references():
    report = "Mean nuclear radius 13.\nDIAGNOSIS: invasive   carcinoma."
    entries = {name: {"correct": "no", "reference": ""} for name in SPEC.names}
    entries["mean_radius"] = {"correct": "yes", "reference": "Mean nuclear radius 13"}
    entries["diagnosis"] = {"correct": "Yes", "reference": "diagnosis: invasive carcinoma"}
    entries["mean_texture"] = {"correct": "no", "reference": "texture of 30"}
    answer = "```json\n" + json.dumps(entries) + "\n```"
    result = {v.variable: v for v in parse_judge_answer(answer, ROW, SPEC, report)}
    assert result["mean_radius"].correct and result["mean_radius"].evidence == (0, 22)
    diagnosis = result["diagnosis"]
    assert diagnosis.correct and quoted(report, diagnosis) == "DIAGNOSIS: invasive   carcinoma"
    texture = result["mean_texture"]
    assert (texture.correct, texture.status, texture.evidence, texture.note) == (
        False,
        WRONG,
        None,
        REFERENCE_NOT_FOUND,
    )
    assert result["mean_area"].note is None  # an empty reference is no claim
    counts = status_counts({"r": list(result.values())})
    assert counts[CORRECT] == 2 and counts[REFERENCE_NOT_FOUND] == 1


def test_judge_answer_failures_and_partial_answers():
    assert parse_judge_answer("not json at all", ROW, SPEC, "r") == JudgeFailure(
        "invalid_json", parse_judge_answer("not json at all", ROW, SPEC, "r").detail
    )
    assert parse_judge_answer('{"diagnosis": {"correct": "yes"', ROW, SPEC, "r").reason == (
        "invalid_json"
    )
    assert parse_judge_answer('["yes"]', ROW, SPEC, "r").reason == "not_an_object"
    answer = judge_answer(
        diagnosis={"correct": "maybe", "reference": "x"},
        MEAN_RADIUS={"correct": True, "reference": ""},
        mean_texture="yes",
        **{"mean_area (mean nuclear area)": {"Correct": "no", "Reference": "r"}},
    )
    result = {v.variable: v for v in parse_judge_answer("Here: " + answer, ROW, SPEC, "r")}
    assert result["diagnosis"].status == INVALID_VERDICT and not result["diagnosis"].correct
    assert result["mean_radius"].status == CORRECT  # keys case-insensitive, JSON booleans
    assert result["mean_texture"].status == INVALID_VERDICT
    assert result["mean_area"].status == WRONG and result["mean_area"].evidence == (0, 1)
    assert result["mean_perimeter"].status == NOT_JUDGED and not result["mean_perimeter"].correct
    assert len(result) == len(SPEC.names)


def test_locate_reference():
    report = "Line one.\nThe Radius  is 13."
    assert locate_reference("Radius  is 13", report) == (14, 27)
    assert locate_reference('"the radius is 13"', report) == (10, 27)
    assert locate_reference("radius is 14", report) is None
    assert locate_reference("  ", report) is None


def test_agreement_and_cohens_kappa():
    from synthdeid.tabular.faithfulness import NOT_JUDGED, VariableVerdict, agreement

    def verdicts(*flags):
        return [VariableVerdict(f"v{i}", "x", f, "correct" if f else "wrong", None)
                for i, f in enumerate(flags)]  # fmt: skip

    judge = [verdicts(True, True, False, False)]
    rules = [verdicts(True, False, False, True)]
    found = agreement(judge, rules)
    # observed 2/4; chance 0.5*0.5 + 0.5*0.5 = 0.5; kappa (0.5 - 0.5) / 0.5 = 0
    assert (found.pairs, found.observed, found.kappa) == (4, 0.5, 0.0)
    perfect = agreement([verdicts(True, False)], [verdicts(True, False)])
    assert perfect.kappa == pytest.approx(1.0)
    skipped = [[VariableVerdict("v0", "x", False, NOT_JUDGED, None)]]
    assert agreement(skipped, [verdicts(True)]).pairs == 0
    assert agreement(skipped, [verdicts(True)]).kappa is None


def test_all_zero_accuracies_are_said_plainly_with_n(tmp_path: Path) -> None:
    from synthdeid.tabular.faithfulness_report import accuracy_figure, uniform_finding

    zeros: dict[str, float | None] = {"diagnosis": 0.0, "mean_radius": 0.0, "mean_area": None}
    finding = uniform_finding(zeros, 91, "rules")
    assert (
        finding == "The rules checker found no variable stated correctly in any of the 91 reports"
    )
    assert uniform_finding({"a": 1.0, "b": None}, 5, "rules") == (
        "The rules checker found every variable stated correctly in all 5 reports"
    )
    assert uniform_finding({"a": None}, 5, "rules").startswith("n/a")
    assert uniform_finding({"a": 0.5, "b": 0.0}, 5, "rules") is None  # a real contrast
    buckets = {"Perfect": 0.0, "High": 0.0, "Moderate": 0.0, "Low": 0.0, "Very Low": 1.0}
    fig = accuracy_figure(zeros, buckets, tmp_path / "f.png", n_reports=91, checker="rules")
    assert (tmp_path / "f.png").stat().st_size > 5_000
    assert fig.get_suptitle().replace("\n", " ") == finding
    variables, documents = fig.axes
    assert "n = 91" in variables.get_title() and "n = 91" in documents.get_title()
    assert variables.get_xlabel() and variables.get_ylabel() == "variable"
    assert documents.get_xlabel() and documents.get_ylabel() == "% of documents"
    # zero bars carry their value and an unjudged variable says n/a
    assert [t.get_text() for t in variables.texts] == ["0.00", "0.00", "n/a"]
    mixed = accuracy_figure(
        {"a": 0.5, "b": 1.0}, buckets, tmp_path / "g.png", n_reports=4, checker="rules"
    )
    assert mixed.get_suptitle() == ""


def test_accuracy_table_is_written_exactly() -> None:
    from synthdeid.tabular.faithfulness_report import accuracy_table

    per_variable = {"radius": 0.75, "texture": None}
    buckets = {"Perfect": 0.5, "Partial": 0.125}
    assert accuracy_table(per_variable, 0.8125, buckets) == (
        "| Variable | Accuracy |\n"
        "|---|---|\n"
        "| radius | 0.750 |\n"
        "| texture | n/a |\n"
        "| **Overall** | **0.812** |\n"
        "\n"
        "| Document accuracy bucket | Share of documents |\n"
        "|---|---|\n"
        "| Perfect | 50.0% |\n"
        "| Partial | 12.5% |\n"
    )
    assert accuracy_table({"radius": None}, None, None).splitlines()[-1] == (
        "| (no document with a judged variable) | n/a |"
    )
