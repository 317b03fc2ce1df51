"""Config cross-checks the schema cannot express, run when the workflow is parsed.

Each raises :class:`~synthdeid.errors.ConfigError` naming the key and the fix;
common.smk turns it into Snakemake's WorkflowError, so no job is planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.labels import LabelMap
from synthdeid.split import check_fractions
from synthdeid.teacher.teachers import check_settings as check_teacher_settings
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.pools import silver_pool, silver_teacher
from synthdeid.workflow.teachers import Teachers

# a node of the dependency graph between teachers and runs: ("teacher" | "run", name)
Node = tuple[str, str]
# keys that belong to a trained run, never to an ensemble or a stacked run
TRAINED_RUN_KEYS = ("pools", "tapt", "training", "distill_from")


def check_split(fractions: Mapping[str, float]) -> None:
    """split.fractions: known parts, non-negative, summing to 1."""
    try:
        check_fractions(fractions)
    except ConfigError as exc:
        raise ConfigError(f"config: {exc}") from None


def require_trained(runs: NerRuns, name: str, role: str, other: str) -> None:
    """The run a run builds on (an ensemble's member, a stacked run's base) is a trained run."""
    trained = runs.trained
    if other not in trained:
        raise ConfigError(
            f"ner run {name!r}: {role} {other!r} is not a trained run (one with a "
            f"mixture): {sorted(trained)}"
        )


def refuse_trained_run_keys(runs: NerRuns, name: str, why: str) -> None:
    """A run built on trained runs has none of their settings (``why`` says whose they are)."""
    if any(runs.runs[name].get(key) for key in TRAINED_RUN_KEYS):
        raise ConfigError(f"ner run {name!r} {why}")


def check_ensemble_runs(runs: NerRuns) -> None:
    """Members are trained runs; an ensemble has none of a trained run's settings."""
    for name, members in runs.ensembles.items():
        for member in members:
            require_trained(runs, name, "member", member)
        refuse_trained_run_keys(
            runs,
            name,
            "is an ensemble: pools, tapt, training and distill_from belong to its member runs",
        )


def check_stacked_runs(runs: NerRuns) -> None:
    """A stacked run's base is a trained run; it has none of a trained run's settings."""
    for name, base in runs.stacked.items():
        require_trained(runs, name, "base", base)
        refuse_trained_run_keys(
            runs,
            name,
            f"stacks lexicons over {base!r}: mixture, pools, tapt, training and distill_from "
            "belong to its base run",
        )


def check_distilled_runs(runs: NerRuns) -> None:
    """A distilled run's teacher (``distill_from``) is another run, which does not depend on
    its student through distill_from, members or base. Run after the ensemble and stacked
    checks (only a trained run has distill_from)."""
    for name, entry in runs.runs.items():
        teacher = entry.get("distill_from")
        if not teacher:
            continue
        resolved = runs.distill_teacher(name)
        if resolved is None:
            raise ConfigError(
                f"ner run {name!r}: distill_from {teacher!r} is neither a run of ner.runs nor "
                f"an arm: runs {sorted(runs.runs)}"
            )
        if resolved == name:
            raise ConfigError(
                f"ner run {name!r}: distill_from {teacher!r} is the run itself; name another "
                "run (a trained, ensemble or stacked run) as its teacher"
            )
    for name in runs.runs:
        check_no_run_cycle(runs, name)


def check_no_run_cycle(runs: NerRuns, name: str) -> None:
    """A run may not need itself through any chain of teachers (distill_from), members and
    bases (cycles through teacher.teachers' silver pools: :func:`check_no_cycle`)."""
    seen: set[str] = set()
    todo = [what for kind, what in run_dependencies(runs, name) if kind == "run"]
    while todo:
        run = todo.pop()
        if run == name:
            raise ConfigError(
                f"ner run {name!r} depends on itself through distill_from, members or base: "
                "its teacher may not learn from it"
            )
        if run in seen or run not in runs.runs:
            continue
        seen.add(run)
        todo += [what for kind, what in run_dependencies(runs, run) if kind == "run"]


def check_error_report(runs: NerRuns, report_runs: Sequence[str]) -> None:
    """ner.error_report.runs are trained runs (their validation notes are development notes)."""
    trained = runs.trained
    for run in report_runs:
        if run not in trained:
            raise ConfigError(
                f"ner.error_report.runs: {run!r} is not a trained run: {sorted(trained)}"
            )


def check_evaluation_corpora(entries: Sequence[Mapping[str, Any]], corpus: str) -> None:
    """Further corpora have names of their own and label mappings that work."""
    names = [entry["name"] for entry in entries]
    if corpus in names:
        raise ConfigError(
            f"evaluation.corpora: {corpus!r} is the corpus itself (its holdout is always "
            "scored); give the other corpus another name"
        )
    if len(set(names)) != len(names):
        raise ConfigError("evaluation.corpora: two corpora share a name; names must be unique")
    for entry in entries:
        try:
            LabelMap(entry.get("labels", {}).get("mapping") or {})
        except ConfigError as exc:
            raise ConfigError(f"evaluation.corpora[{entry['name']}]: {exc}") from None


def check_anchors(entries: Sequence[Mapping[str, Any]], runs: NerRuns) -> None:
    """evaluation.anchors: names of their own, no run's or arm's name (they become runs)."""
    names = [entry["name"] for entry in entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(
            f"evaluation.anchors: names {repeated} are given twice; names must be unique"
        )
    for name in names:
        if name in runs.runs or name in runs.arms:
            raise ConfigError(
                f"evaluation.anchors: {name!r} is the name of an ner run or arm; an anchor is "
                "scored as a run of its own, so give it another name"
            )


def teacher_dependencies(teachers: Teachers, runs: NerRuns, name: str) -> list[Node]:
    """What a teacher needs: an ensemble its members, a model teacher its ner run."""
    entry = teachers.entries[name]
    if entry["kind"] == "ensemble":
        return [("teacher", member) for member in entry.get("members", [])]
    run = teachers.model_run(name, runs) if entry["kind"] == "model" else None
    return [("run", run)] if run else []


def run_dependencies(runs: NerRuns, run: str) -> list[Node]:
    """What a run needs: an ensemble its members, a stacked run its base, else its silver
    pools' teachers and the run it distils from (distill_from)."""
    entry = runs.runs[run]
    if "members" in entry:
        return [("run", member) for member in entry["members"]]
    if "base" in entry:
        return [("run", entry["base"])]
    distilled_from = runs.distill_teacher(run)
    return [
        ("teacher", teacher)
        for pool in entry.get("pools", [])
        if (teacher := silver_teacher(pool)) is not None
    ] + ([("run", distilled_from)] if distilled_from else [])


def check_teachers(teachers: Teachers, runs: NerRuns) -> None:
    """Every teacher's settings, members, student and model run, and no cycles."""
    for name, entry in teachers.entries.items():
        where = f"teacher.teachers[{name}]"
        check_teacher_settings(teachers.settings(name), where)
        for member in entry.get("members", []) if entry["kind"] == "ensemble" else []:
            if member not in teachers.entries:
                raise ConfigError(f"{where}: member {member!r} is not a teacher")
        if entry["kind"] == "model" and not entry.get("model"):
            raise ConfigError(f"{where}: a model teacher needs model (an ner run or a path)")
        student = entry.get("student")
        student_run = runs.named_run(student) if student else None
        student_pools = runs.runs[student_run].get("pools", []) if student_run else []
        if student and silver_pool(name) not in student_pools:
            raise ConfigError(
                f"{where}: student {student!r} must be an ner run whose pools include "
                f"{silver_pool(name)}"
            )
    for run in runs.runs:
        for kind, name in run_dependencies(runs, run):
            if kind == "teacher" and name not in teachers.entries:
                raise ConfigError(f"ner run {run!r}: pool {silver_pool(name)} names no teacher")
    for name in teachers.entries:
        check_no_cycle(teachers, runs, name)


def check_no_cycle(teachers: Teachers, runs: NerRuns, name: str) -> None:
    """A teacher may not need its own silver labels, through any chain of runs and teachers."""
    seen: set[Node] = set()
    todo = teacher_dependencies(teachers, runs, name)
    while todo:
        node = todo.pop()
        if node == ("teacher", name):
            raise ConfigError(
                f"teacher {name!r} depends on its own silver labels (through its "
                "model run or members); train its model on other pools"
            )
        if node in seen:
            continue
        seen.add(node)
        kind, what = node
        todo += (
            teacher_dependencies(teachers, runs, what)
            if kind == "teacher"
            else run_dependencies(runs, what)
        )
