"""Expert rules, prompt rendering and the seeded grammar reports of the tabular path."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from synthdeid.errors import ConfigError
from synthdeid.synthesis.placeholders import iter_placeholders, load_allowlist
from synthdeid.tabular.expert_rules import RuledRow, apply_rules, parse_rules
from synthdeid.tabular.faithfulness import CORRECT, check_report
from synthdeid.tabular.spec import MISSING, load_spec, parse_spec
from synthdeid.tabular.verbalize import (
    GRAMMAR,
    REPORT_PLACEHOLDERS,
    grammar_report,
    grammar_reports,
    load_report_prompt,
    prompt_variables,
    record_rng,
    stated_value,
)

REPO = Path(__file__).resolve().parents[1]
DEMO_SPEC = load_spec(REPO / "resources" / "tabular" / "breast_cancer.yaml")
REPORT_PROMPT = REPO / "resources" / "prompts" / "tabular_report.yaml"
ALLOWLIST = load_allowlist(REPO / "resources" / "placeholders.yaml")

RULE_SPEC = parse_spec(
    {
        "name": "pathology",
        "report_title": "Breast pathology report",
        "variables": [
            {
                "name": "diagnostic_test",
                "kind": "categorical",
                "label": "diagnostic test",
                "categories": ["lumpectomy", "biopsy"],
                "allow_missing": True,
            },
            {
                "name": "tumor_size",
                "kind": "binned",
                "label": "tumor size",
                "unit": "mm",
                "decimals": 1,
                "bins": [[0, 12], [12, 15], [15, 40]],
                "allow_missing": True,
            },
            {
                "name": "er_status",
                "kind": "categorical",
                "label": "ER status",
                "unit": "%",
                "categories": ["positive", "negative"],
            },
        ],
    },
    "pathology.yaml",
)
DIAGNOSTIC_TEST_RULE = {
    "kind": "conditional_default",
    "variable": "diagnostic_test",
    "if_present": "tumor_size",
    "then": "lumpectomy",
    "otherwise": "biopsy",
}
ER_RULE = {
    "kind": "draw_within",
    "variable": "er_status",
    "when": ["positive"],
    "range": [1, 100],
    "decimals": 0,
}
SIZE_RULE = {"kind": "draw_within", "variable": "tumor_size"}


def row(test="lumpectomy", size="12-15", er="positive"):
    return {"diagnostic_test": test, "tumor_size": size, "er_status": er}


# ------------------------------------------------------------------ expert rules


def test_parse_diagnostic_test_rule():
    (rule,) = parse_rules([DIAGNOSTIC_TEST_RULE], RULE_SPEC)
    assert rule.kind == "conditional_default"
    assert rule.variable == "diagnostic_test"
    assert rule.if_present == "tumor_size"
    assert rule.then == "lumpectomy"
    assert rule.otherwise == "biopsy"
    assert parse_rules([], RULE_SPEC) == ()
    assert parse_rules(None, RULE_SPEC) == ()


def test_conditional_default():
    rules = parse_rules([DIAGNOSTIC_TEST_RULE], RULE_SPEC)
    rng = random.Random(0)
    ruled = apply_rules(row(test=MISSING, size="12-15"), rules, RULE_SPEC, rng)
    assert ruled.values["diagnostic_test"] == "lumpectomy"
    assert ruled.applied == ("conditional_default:diagnostic_test",)
    assert ruled.drawn == {}
    ruled = apply_rules(row(test=MISSING, size=MISSING), rules, RULE_SPEC, rng)
    assert ruled.values["diagnostic_test"] == "biopsy"
    assert ruled.values["tumor_size"] == MISSING
    for known in ("lumpectomy", "biopsy"):
        for size in ("0-12", MISSING):
            ruled = apply_rules(row(test=known, size=size), rules, RULE_SPEC, rng)
            assert ruled.values["diagnostic_test"] == known
            assert ruled.applied == ()


def test_apply_rules_leaves_its_input_alone():
    rules = parse_rules([DIAGNOSTIC_TEST_RULE], RULE_SPEC)
    original = row(test=MISSING)
    apply_rules(original, rules, RULE_SPEC, random.Random(0))
    assert original["diagnostic_test"] == MISSING


def test_draw_within_categorical_range():
    rules = parse_rules([ER_RULE], RULE_SPEC)
    assert rules[0].range == (1.0, 100.0)
    assert rules[0].when == ("positive",)
    for i in range(50):
        ruled = apply_rules(row(er="positive"), rules, RULE_SPEC, record_rng(0, f"r-{i}"))
        text = ruled.drawn["er_status"]
        assert text.isdigit(), text
        assert 1 <= int(text) <= 100
        assert ruled.values["er_status"] == "positive"
        assert ruled.applied == ("draw_within:er_status",)
    ruled = apply_rules(row(er="negative"), rules, RULE_SPEC, record_rng(0, "r-0"))
    assert ruled.drawn == {}
    assert ruled.applied == ()


def test_draw_within_a_binned_variable_uses_the_rows_bin():
    rules = parse_rules([SIZE_RULE], RULE_SPEC)
    assert rules[0].range is None
    assert rules[0].decimals == 1  # the variable's decimals
    for label in ("0-12", "12-15", "15-40"):
        chosen = RULE_SPEC.variable("tumor_size").bin_of(label)
        for i in range(30):
            ruled = apply_rules(row(size=label), rules, RULE_SPEC, record_rng(1, f"r-{i}"))
            text = ruled.drawn["tumor_size"]
            assert len(text.split(".")[1]) == 1, text
            assert chosen.low <= float(text) <= chosen.high
    ruled = apply_rules(row(size=MISSING), rules, RULE_SPEC, record_rng(1, "r-0"))
    assert ruled.drawn == {}  # nothing is drawn for an unknown value


def test_draw_within_binned_with_explicit_range_and_decimals():
    rules = parse_rules([{**SIZE_RULE, "range": [2, 3], "decimals": 2}], RULE_SPEC)
    ruled = apply_rules(row(size="15-40"), rules, RULE_SPEC, record_rng(0, "x"))
    assert 2 <= float(ruled.drawn["tumor_size"]) <= 3
    assert len(ruled.drawn["tumor_size"].split(".")[1]) == 2


def test_draws_are_seeded_per_record():
    rules = parse_rules([DIAGNOSTIC_TEST_RULE, ER_RULE, SIZE_RULE], RULE_SPEC)

    def draws(seed, record_id):
        return apply_rules(row(), rules, RULE_SPEC, record_rng(seed, record_id)).drawn

    assert draws(0, "r-1") == draws(0, "r-1")
    across_records = {tuple(sorted(draws(0, f"r-{i}").items())) for i in range(20)}
    assert len(across_records) > 1
    across_seeds = {tuple(sorted(draws(seed, "r-1").items())) for seed in range(20)}
    assert len(across_seeds) > 1
    # the record's generator does not depend on the order records are drawn in
    first = record_rng(5, "b").random()
    record_rng(5, "a").random()
    assert record_rng(5, "b").random() == first


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ({**DIAGNOSTIC_TEST_RULE, "kind": "default"}, "kind must be one of"),
        ({k: v for k, v in DIAGNOSTIC_TEST_RULE.items() if k != "kind"}, "kind must be one of"),
        ("conditional_default", "kind must be one of"),
        ({**DIAGNOSTIC_TEST_RULE, "range": [1, 2]}, "unknown keys ['range']"),
        ({**ER_RULE, "then": "x"}, "unknown keys ['then']"),
        ({**DIAGNOSTIC_TEST_RULE, "variable": "test_type"}, "no variable 'test_type'"),
        ({**DIAGNOSTIC_TEST_RULE, "if_present": "size"}, "no variable 'size'"),
        ({**DIAGNOSTIC_TEST_RULE, "then": "mastectomy"}, ".then: 'mastectomy' is not a value"),
        ({**DIAGNOSTIC_TEST_RULE, "otherwise": "surgery"}, ".otherwise: 'surgery' is not a value"),
        ({**ER_RULE, "variable": "pr_status"}, "no variable 'pr_status'"),
        ({**ER_RULE, "when": ["weak"]}, ".when: ['weak'] are not values of er_status"),
        (
            {k: v for k, v in ER_RULE.items() if k != "range"},
            "a categorical variable needs a range",
        ),
        ({**ER_RULE, "range": [100, 1]}, ".range must be [low, high], two numbers with low < high"),
        ({**ER_RULE, "range": [5, 5]}, ".range must be [low, high], two numbers with low < high"),
        (
            {**ER_RULE, "range": [1, 2, 3]},
            ".range must be [low, high], two numbers with low < high",
        ),
        ({**SIZE_RULE, "range": [1]}, ".range must be [low, high], two numbers with low < high"),
    ],
)
def test_rule_config_errors(entry, fragment):
    with pytest.raises(ConfigError) as caught:
        parse_rules([DIAGNOSTIC_TEST_RULE, entry], RULE_SPEC)
    assert "synth.tabular.verbalize.rules[1]" in str(caught.value)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("bounds", [5, ["low", "high"]])
def test_malformed_range_is_a_config_error(bounds):
    # a typo in the range must name the key, like every other rule problem
    with pytest.raises(ConfigError, match=r"rules\[0\]\.range"):
        parse_rules([{**ER_RULE, "range": bounds}], RULE_SPEC)


# ------------------------------------------------------------------ prompt values


def test_stated_value():
    size = RULE_SPEC.variable("tumor_size")
    er = RULE_SPEC.variable("er_status")
    radius = DEMO_SPEC.variable("mean_radius")
    assert stated_value(radius, "12-15", None) == (
        "to be selected within the range of 12 to 15, depending on clinical consistency"
    )
    assert stated_value(size, "12-15", None) == (
        "to be selected within the range of 12 mm to 15 mm, depending on clinical consistency"
    )
    assert stated_value(radius, "12-15", "13.2") == "13.2"
    assert stated_value(size, "12-15", "13.2") == "13.2 mm"
    assert stated_value(er, "positive", "57") == "positive (57 %)"
    assert stated_value(er, "negative", None) == "negative"
    assert stated_value(size, MISSING, None) == "not reported"
    diagnosis = DEMO_SPEC.variable("diagnosis")
    assert stated_value(diagnosis, "malignant", None) == "malignant"
    smoothness = DEMO_SPEC.variable("mean_smoothness")
    assert "range of 0.085 to 0.1," in stated_value(smoothness, "0.085-0.1", None)


def test_prompt_variables():
    rules = parse_rules([DIAGNOSTIC_TEST_RULE, ER_RULE], RULE_SPEC)
    ruled = apply_rules(row(test=MISSING, size=MISSING), rules, RULE_SPEC, record_rng(0, "a"))
    text = prompt_variables(ruled, RULE_SPEC)
    lines = text.split("\n")
    assert lines[0] == "- diagnostic test: biopsy"
    assert lines[1] == "- tumor size: not reported"
    assert lines[2] == f"- ER status: positive ({ruled.drawn['er_status']} %)"
    assert len(lines) == 3


def test_load_report_prompt_and_messages():
    prompt = load_report_prompt(REPORT_PROMPT)
    assert prompt.name == "tabular_report"
    assert prompt.provenance()["version"] == prompt.version
    assert len(prompt.fingerprint) == 64
    values = {v.name: v.domain[i % len(v.domain)] for i, v in enumerate(DEMO_SPEC.variables)}
    ruled = RuledRow(values, {"mean_area": "612"}, ())
    system, user = prompt.messages(ruled, DEMO_SPEC)
    assert system.role == "system"
    assert user.role == "user"
    assert "$" not in user.content
    assert DEMO_SPEC.report_title in user.content
    for line in prompt_variables(ruled, DEMO_SPEC).split("\n"):
        assert line in user.content
    assert "- mean nuclear area: 612\n" in user.content
    for token in ("[[PATIENT_1]]", "[[DOCTOR_1]]", "[[DATE_1]]", "[[HOSPITAL_1]]"):
        assert token in user.content
    assert {f"[[{name}_1]]" for name in REPORT_PLACEHOLDERS} == {
        "[[PATIENT_1]]",
        "[[DOCTOR_1]]",
        "[[DATE_1]]",
        "[[HOSPITAL_1]]",
    }


def _prompt_file(tmp_path, user):
    path = tmp_path / "prompt.yaml"
    path.write_text(
        yaml.safe_dump({"name": "p", "version": "1", "system": "s", "user": user}),
        encoding="utf-8",
    )
    return path


def test_prompt_fields_are_checked(tmp_path):
    ok = _prompt_file(tmp_path, "Write $title: $variables with ${placeholders}; costs $$5")
    assert load_report_prompt(ok).name == "p"
    for user, fragment in [
        ("Write $title: $variables", "found ['$title', '$variables']"),
        ("Write $title: $variables $placeholders $patient", "'$patient'"),
        ("Write $title $variables ${placeholders} ${extra}", "'$extra'"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_report_prompt(_prompt_file(tmp_path, user))
        assert "prompt.yaml" in str(caught.value)
        assert fragment in str(caught.value)


def test_prompt_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_report_prompt(tmp_path / "absent.yaml")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "system": "s", "user": "u"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="a prompt needs the string keys"):
        load_report_prompt(path)


# ------------------------------------------------------------------ grammar (backend none)

MISSING_SPEC = parse_spec(
    {
        "name": "pathology",
        "report_title": "Surgical pathology report",
        "variables": [
            {
                "name": "diagnostic_test",
                "kind": "categorical",
                "label": "diagnostic test",
                "mentions": ["procedure"],
                "categories": ["lumpectomy", "biopsy"],
                "allow_missing": True,
            },
            {
                "name": "tumor_size",
                "kind": "binned",
                "label": "tumor size",
                "mentions": ["size"],
                "unit": "mm",
                "decimals": 1,
                "bins": [[0, 12], [12, 15], [15, 40]],
                "allow_missing": True,
            },
            {
                "name": "grade",
                "kind": "categorical",
                "label": "histologic grade",
                "categories": ["low", "intermediate", "high"],
                "phrases": {
                    "low": ["low grade", "well differentiated"],
                    "intermediate": ["intermediate grade", "moderately differentiated"],
                    "high": ["high grade", "poorly differentiated"],
                },
                "allow_missing": True,
            },
            {
                "name": "er_status",
                "kind": "categorical",
                "label": "estrogen receptor status",
                "categories": ["positive", "negative"],
            },
            {
                "name": "ki67",
                "kind": "binned",
                "label": "Ki-67 index",
                "unit": "%",
                "decimals": 0,
                "bins": [[0, 14], [14, 30], [30, 100]],
                "allow_missing": True,
            },
        ],
    },
    "pathology.yaml",
)


def random_rows(spec, count, seed):
    rng = random.Random(seed)
    return [
        (f"row-{i:04d}", RuledRow({v.name: rng.choice(v.domain) for v in spec.variables}, {}, ()))
        for i in range(count)
    ]


@pytest.mark.parametrize(("spec", "count"), [(DEMO_SPEC, 200), (MISSING_SPEC, 300)])
def test_grammar_reports(spec, count):
    rows = random_rows(spec, count, seed=11)
    if spec is MISSING_SPEC:
        assert sum(MISSING in ruled.values.values() for _, ruled in rows) > count // 2
    reports = grammar_reports(rows, spec, seed=3)
    assert len(reports) == count
    assert len(set(reports)) == count
    for (record_id, ruled), report in zip(rows, reports, strict=True):
        names = [match.name for match in iter_placeholders(report)]
        assert set(REPORT_PLACEHOLDERS) <= set(names), report
        assert all(name in ALLOWLIST for name in names), names
        assert report == grammar_report(ruled, spec, record_rng(3, record_id))
        verdicts = check_report(report, ruled.values, spec)
        wrong = [(v.variable, v.value, v.status) for v in verdicts if v.status != CORRECT]
        assert not wrong, (report, wrong)
        assert [v.variable for v in verdicts] == spec.names


def test_grammar_reports_states_missing_values():
    rows = random_rows(MISSING_SPEC, 300, seed=11)
    reports = grammar_reports(rows, MISSING_SPEC, seed=3)
    assert any("not assessed" in report for report in reports)
    assert any("was not reported" in report for report in reports)


def test_grammar_report_seeds():
    rows = random_rows(DEMO_SPEC, 20, seed=5)
    for record_id, ruled in rows:
        same = grammar_report(ruled, DEMO_SPEC, record_rng(0, record_id))
        assert same == grammar_report(ruled, DEMO_SPEC, record_rng(0, record_id))
        others = {grammar_report(ruled, DEMO_SPEC, record_rng(seed, record_id)) for seed in (1, 2)}
        assert same not in others
    assert GRAMMAR == "grammar"


def test_grammar_report_uses_drawn_numbers():
    rules = parse_rules([{"kind": "draw_within", "variable": "mean_area"}], DEMO_SPEC)
    _, ruled = random_rows(DEMO_SPEC, 1, seed=9)[0]
    ruled = apply_rules(ruled.values, rules, DEMO_SPEC, record_rng(0, "r"))
    report = grammar_report(ruled, DEMO_SPEC, record_rng(0, "r"))
    assert ruled.drawn["mean_area"] in report
    verdicts = check_report(report, ruled.values, DEMO_SPEC)
    assert all(v.status == CORRECT for v in verdicts)


def test_grammar_report_states_the_category_behind_a_drawn_number():
    # the receptor rule of Lorenzo et al. 2026: er_status positive -> a positivity percentage
    # is drawn. The grammar must still state the row's category (and the number with its
    # unit, as the prompt does), so that the rule-based checker finds er_status correct.
    rules = parse_rules([ER_RULE], RULE_SPEC)
    for i in range(20):
        ruled = apply_rules(row(), rules, RULE_SPEC, record_rng(0, f"r-{i}"))
        report = grammar_report(ruled, RULE_SPEC, record_rng(0, f"r-{i}"))
        assert f"{ruled.drawn['er_status']} %" in report, report
        verdicts = {v.variable: v.status for v in check_report(report, ruled.values, RULE_SPEC)}
        assert verdicts["er_status"] == CORRECT, report
