"""The workflow's config cross-checks: each refusal, with the message the workflow shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from synthdeid.errors import ConfigError
from synthdeid.surrogate.keying import DEMO_KEY_FILE, SECRET_VARIABLE
from synthdeid.workflow import checks
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.surrogate_key import (
    check_demo_key,
    key_fingerprint,
    uses_embedded_demo_corpus,
)
from synthdeid.workflow.teachers import Teachers

REPO = Path(__file__).resolve().parents[1]
MIXTURE = {"regime": "augmentation", "synthetic_fraction": 0.5, "seed": 1}
REAL = {"name": "real", "mixture": {**MIXTURE, "synthetic_fraction": 0.0}}
SURROGATE = {"name": "surrogate", "pools": ["surrogates"], "mixture": MIXTURE}
ENSEMBLE = {"name": "both", "members": ["real", "surrogate"]}
STACKED = {"name": "real_lexicons", "base": "real", "lexicons": ["first_names"]}
STUDENT = {"name": "student", "pools": ["silver_union"], "mixture": MIXTURE}


def runs(*entries: dict[str, Any]) -> NerRuns:
    return NerRuns.from_config(
        {
            "runs": list(entries),
            "training_seeds": None,
            "arm_seeds": {},
            "reference_run": None,
            "training": {"model": "encoder"},
        }
    )


def teachers(*entries: dict[str, Any]) -> Teachers:
    return Teachers.from_config({"teachers": list(entries), "parts": ["seed"], "noise": True})


def refusal(check: Any, *args: Any) -> str:
    with pytest.raises(ConfigError) as err:
        check(*args)
    return str(err.value)


MODEL_TEACHER = {"name": "model", "kind": "model", "model": "real"}
RULES_TEACHER = {"name": "rules", "kind": "rules", "detectors": ["DATE"]}
UNION_TEACHER = {
    "name": "union",
    "kind": "ensemble",
    "members": ["model", "rules"],
    "student": "student",
}


# ---------------------------------------------------------------- split and runs


def test_split_fractions_are_refused_with_the_config_prefix() -> None:
    checks.check_split({"seed": 0.3, "train": 0.4, "holdout": 0.3})
    message = refusal(checks.check_split, {"seed": 0.3, "train": 0.4, "holdout": 0.4})
    assert message.startswith("config: split.fractions must be non-negative and sum to 1")


def test_good_runs_pass_every_run_check() -> None:
    table = runs(REAL, SURROGATE, ENSEMBLE, STACKED)
    checks.check_ensemble_runs(table)
    checks.check_stacked_runs(table)
    checks.check_error_report(table, ["real", "surrogate"])


def test_an_ensemble_member_must_be_a_trained_run() -> None:
    message = refusal(
        checks.check_ensemble_runs, runs(REAL, {"name": "both", "members": ["real", "x"]})
    )
    assert message == (
        "ner run 'both': member 'x' is not a trained run (one with a mixture): ['real']"
    )


@pytest.mark.parametrize("key", ["pools", "tapt", "training", "distill_from"])
def test_an_ensemble_has_no_trained_run_settings(key: str) -> None:
    value = {
        "pools": ["surrogates"],
        "tapt": "own",
        "training": {"epochs": 1},
        "distill_from": "real",
    }[key]
    message = refusal(checks.check_ensemble_runs, runs(REAL, SURROGATE, {**ENSEMBLE, key: value}))
    assert message == (
        "ner run 'both' is an ensemble: pools, tapt, training and distill_from belong to its "
        "member runs"
    )


def test_a_stacked_base_must_be_a_trained_run() -> None:
    message = refusal(
        checks.check_stacked_runs, runs(REAL, SURROGATE, ENSEMBLE, {**STACKED, "base": "both"})
    )
    assert message == (
        "ner run 'real_lexicons': base 'both' is not a trained run (one with a mixture): "
        "['real', 'surrogate']"
    )


@pytest.mark.parametrize(("key", "value"), [("tapt", "own"), ("distill_from", "real")])
def test_a_stacked_run_has_no_trained_run_settings(key: str, value: str) -> None:
    message = refusal(checks.check_stacked_runs, runs(REAL, {**STACKED, key: value}))
    assert message == (
        "ner run 'real_lexicons' stacks lexicons over 'real': mixture, pools, tapt, "
        "training and distill_from belong to its base run"
    )


def distilled(name: str, teacher: str) -> dict[str, Any]:
    """A trained run that learns ``teacher``'s soft labels."""
    return {"name": name, "distill_from": teacher, "mixture": MIXTURE}


def test_a_student_of_any_kind_of_run_or_of_an_arm_passes() -> None:
    seeded = {**SURROGATE, "training_seeds": [1, 2]}
    table = runs(
        REAL,
        seeded,
        ENSEMBLE | {"members": ["real", "surrogate-seed1"]},
        STACKED,
        distilled("of_trained", "real"),
        distilled("of_ensemble", "both"),
        distilled("of_stacked", "real_lexicons"),
        distilled("of_arm", "surrogate"),
        distilled("of_student", "of_ensemble"),
    )
    checks.check_ensemble_runs(table)
    checks.check_stacked_runs(table)
    checks.check_distilled_runs(table)
    assert checks.run_dependencies(table, "of_arm") == [("run", "surrogate-seed1")]
    assert checks.run_dependencies(table, "of_student") == [("run", "of_ensemble")]


def test_a_teacher_must_be_a_run_or_an_arm() -> None:
    message = refusal(checks.check_distilled_runs, runs(REAL, distilled("student", "nobody")))
    assert message == (
        "ner run 'student': distill_from 'nobody' is neither a run of ner.runs nor an arm: "
        "runs ['real', 'student']"
    )


def test_a_run_is_not_its_own_teacher() -> None:
    message = refusal(checks.check_distilled_runs, runs(REAL, distilled("student", "student")))
    assert message == (
        "ner run 'student': distill_from 'student' is the run itself; name another run "
        "(a trained, ensemble or stacked run) as its teacher"
    )


@pytest.mark.parametrize(
    "others",
    [
        # two students of each other
        [distilled("student", "other"), distilled("other", "student")],
        # the student is a member of its teacher
        [distilled("student", "both"), {"name": "both", "members": ["real", "student"]}],
        # ... or the base of a stacked teacher, through another student
        [
            distilled("student", "middle"),
            distilled("middle", "lex"),
            {**STACKED, "name": "lex", "base": "student"},
        ],
    ],
)
def test_a_teacher_depending_on_its_student_is_refused(others: list[dict[str, Any]]) -> None:
    table = runs(REAL, *others)
    checks.check_ensemble_runs(table)
    checks.check_stacked_runs(table)
    message = refusal(checks.check_distilled_runs, table)
    assert re.fullmatch(
        r"ner run '\w+' depends on itself through distill_from, members or base: its "
        r"teacher may not learn from it",
        message,
    )


def test_a_cycle_through_a_teachers_silver_pool_and_distill_from_is_refused() -> None:
    # union -> model teacher -> distilled run -> its teacher, the student -> silver_union
    model = {"name": "model", "kind": "model", "model": "distilled"}
    table = runs(REAL, STUDENT, distilled("distilled", "student"))
    checks.check_distilled_runs(table)
    assert checks.run_dependencies(table, "distilled") == [("run", "student")]
    message = refusal(checks.check_teachers, teachers(model, RULES_TEACHER, UNION_TEACHER), table)
    assert re.match(r"teacher '(union|model)' depends on its own silver labels", message)


def test_error_report_runs_must_be_trained() -> None:
    message = refusal(checks.check_error_report, runs(REAL, SURROGATE, ENSEMBLE), ["real", "both"])
    assert message == ("ner.error_report.runs: 'both' is not a trained run: ['real', 'surrogate']")


# ---------------------------------------------------------------- evaluation corpora

OTHER = {"name": "other", "format": "jsonl", "path": "x.jsonl", "labels": {"mapping": {}}}


def test_evaluation_corpora_with_own_names_and_good_mappings_pass() -> None:
    checks.check_evaluation_corpora([OTHER, {**OTHER, "name": "third"}], "demo")
    checks.check_evaluation_corpora([], "demo")


def test_an_evaluation_corpus_named_like_the_corpus_is_refused() -> None:
    message = refusal(checks.check_evaluation_corpora, [{**OTHER, "name": "demo"}], "demo")
    assert message == (
        "evaluation.corpora: 'demo' is the corpus itself (its holdout is always scored); "
        "give the other corpus another name"
    )


def test_evaluation_corpora_sharing_a_name_are_refused() -> None:
    message = refusal(checks.check_evaluation_corpora, [OTHER, OTHER], "demo")
    assert message == "evaluation.corpora: two corpora share a name; names must be unique"


def test_an_evaluation_corpus_mapping_onto_unknown_labels_is_refused() -> None:
    bad = {**OTHER, "labels": {"mapping": {"Name": "NAME"}}}
    message = refusal(checks.check_evaluation_corpora, [bad], "demo")
    assert message.startswith(
        "evaluation.corpora[other]: labels.mapping maps onto non-canonical labels {'Name': 'NAME'}"
    )


# ---------------------------------------------------------------- teachers


def test_good_teachers_pass() -> None:
    checks.check_teachers(
        teachers(MODEL_TEACHER, RULES_TEACHER, UNION_TEACHER), runs(REAL, SURROGATE, STUDENT)
    )


def test_teacher_settings_are_checked_with_the_teacher_named() -> None:
    bad = {**RULES_TEACHER, "backend": {"kind": "none"}}
    message = refusal(checks.check_teachers, teachers(bad), runs(REAL))
    assert message.startswith(
        "teacher.teachers[rules]: unknown key(s) ['backend'] for kind 'rules'"
    )


def test_an_ensemble_teacher_member_must_be_a_teacher() -> None:
    union = {**UNION_TEACHER, "members": ["rules", "llm"]}
    message = refusal(checks.check_teachers, teachers(RULES_TEACHER, union), runs(REAL, STUDENT))
    assert message == "teacher.teachers[union]: member 'llm' is not a teacher"


def test_a_model_teacher_needs_a_model() -> None:
    message = refusal(
        checks.check_teachers, teachers({"name": "model", "kind": "model"}), runs(REAL)
    )
    assert message == "teacher.teachers[model]: a model teacher needs model (an ner run or a path)"


@pytest.mark.parametrize("student", ["surrogate", "nobody"])
def test_a_student_must_train_on_the_teachers_silver_pool(student: str) -> None:
    union = {**UNION_TEACHER, "student": student}
    message = refusal(
        checks.check_teachers, teachers(MODEL_TEACHER, RULES_TEACHER, union), runs(REAL, SURROGATE)
    )
    assert message == (
        f"teacher.teachers[union]: student {student!r} must be an ner run whose pools include "
        "silver_union"
    )


def test_a_silver_pool_must_name_a_teacher() -> None:
    message = refusal(checks.check_teachers, teachers(RULES_TEACHER), runs(REAL, STUDENT))
    assert message == "ner run 'student': pool silver_union names no teacher"


def test_a_teacher_applying_a_model_trained_on_its_own_labels_is_refused() -> None:
    own = {"name": "union", "kind": "model", "model": "student"}
    message = refusal(checks.check_teachers, teachers(own), runs(REAL, STUDENT))
    assert message == (
        "teacher 'union' depends on its own silver labels (through its model run or members); "
        "train its model on other pools"
    )


def test_a_cycle_through_members_ensembles_and_stacked_runs_is_refused() -> None:
    # union -> model teacher -> stacked run -> ensemble -> student -> silver_union
    model = {"name": "model", "kind": "model", "model": "lex"}
    ensemble = {"name": "mix", "members": ["real", "student"]}
    stacked = {"name": "lex", "base": "student", "lexicons": ["first_names"]}
    table = runs(REAL, STUDENT, ensemble, stacked)
    assert checks.run_dependencies(table, "lex") == [("run", "student")]
    assert checks.run_dependencies(table, "mix") == [("run", "real"), ("run", "student")]
    assert checks.run_dependencies(table, "student") == [("teacher", "union")]
    all_teachers = teachers(model, RULES_TEACHER, UNION_TEACHER)
    assert checks.teacher_dependencies(all_teachers, table, "union") == [
        ("teacher", "model"),
        ("teacher", "rules"),
    ]
    assert checks.teacher_dependencies(all_teachers, table, "model") == [("run", "lex")]
    assert checks.teacher_dependencies(all_teachers, table, "rules") == []
    message = refusal(checks.check_teachers, all_teachers, table)
    assert re.match(r"teacher '(union|model)' depends on its own silver labels", message)


def test_a_model_teacher_on_a_model_path_depends_on_no_run() -> None:
    path_teacher = {"name": "model", "kind": "model", "model": "/models/deid"}
    assert checks.teacher_dependencies(teachers(path_teacher), runs(REAL), "model") == []


# ---------------------------------------------------------------- the surrogate key

DEMO_CORPUS = {
    "name": "demo",
    "path": "resources/demo/notes.jsonl",
    "source": "demo-synthetic",
}


def test_the_demo_key_is_refused_for_any_corpus_but_the_demo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(REPO)
    assert uses_embedded_demo_corpus(DEMO_CORPUS)
    check_demo_key(DEMO_CORPUS, DEMO_KEY_FILE)
    # a copy of the demo key is recognised by its fingerprint, wherever it lies
    copy = tmp_path / "copied.key"
    copy.write_bytes((REPO / DEMO_KEY_FILE).read_bytes())
    real = {"name": "physionet", "path_env": "PHYSIONET_DEID_DIR", "source": "physionet-deid"}
    assert not uses_embedded_demo_corpus(real)
    message = refusal(check_demo_key, real, str(copy))
    assert "surrogate.key_file" in message and "corpus 'physionet'" in message
    # the demo notes copied elsewhere are another corpus
    elsewhere = {**DEMO_CORPUS, "path": str(tmp_path / "notes.jsonl")}
    assert not uses_embedded_demo_corpus(elsewhere)
    assert refusal(check_demo_key, elsewhere, DEMO_KEY_FILE) == message.replace(
        "'physionet'", "'demo'"
    )


def test_no_key_file_or_an_unreadable_one_is_left_to_the_rules(tmp_path: Path) -> None:
    real = {"name": "physionet", "path_env": "PHYSIONET_DEID_DIR"}
    check_demo_key(real, None)
    check_demo_key(real, str(tmp_path / "missing.key"))


def test_a_missing_key_is_refused_with_the_rule_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    message = refusal(key_fingerprint, None, "replace_surrogates")
    assert message.startswith("replace_surrogates: ") and SECRET_VARIABLE in message
    monkeypatch.chdir(REPO)
    fingerprint = key_fingerprint(DEMO_KEY_FILE, "replace_surrogates")
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint)
