"""One name per stage: rule ``x_y`` runs ``synthdeid x-y``, implemented by ``synthdeid.stages.x_y``.

The rules are read from ``workflow/rules/*.smk`` and the Snakefile as text
(:mod:`smk_rules`); the exceptions are the tables of
:mod:`synthdeid.workflow.stage_names`.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pytest

from smk_rules import (
    Rule,
    commands,
    literal_paths,
    read_rule_files,
    read_rules,
    resolved,
    shell_text,
)
from synthdeid.cli import STAGES
from synthdeid.workflow.stage_names import (
    AGGREGATE_RULES,
    CLI_ONLY_STAGES,
    GATHER_RULES,
    GATHER_STAGE,
    RULE_VARIANTS,
    output_folder,
    stage_command,
)

REPO = Path(__file__).resolve().parents[1]
SMK_FILES = [
    REPO / "workflow" / "Snakefile",
    *sorted((REPO / "workflow" / "rules").glob("*.smk")),
]
STAGES_DIR = REPO / "src" / "synthdeid" / "stages"
# where a rule writes: results/<rule>/..., logs/<rule>/..., benchmarks/<rule>/...
FOLDERS = {"output": "results", "log": "logs", "benchmark": "benchmarks"}


def rule_problems(
    rules: Mapping[str, Rule],
    stages: Collection[str],
    variants: Mapping[str, str] = RULE_VARIANTS,
    aggregates: Collection[str] = AGGREGATE_RULES,
) -> list[str]:
    """What breaks the mapping, one line per problem (empty: every rule keeps it)."""
    problems = []
    for name in rules:
        directives = resolved(dict(rules), name)
        if "shell" not in directives:
            if name not in aggregates:
                problems.append(f"rule {name}: no shell and not an aggregate rule")
            continue
        if name in aggregates:
            problems.append(f"rule {name}: an aggregate rule with a shell command")
        if name in variants and variants[name] not in rules:
            problems.append(f"rule {name}: a variant of {variants[name]}, which is no rule")
        expected = stage_command(name, variants)
        ran = commands(shell_text(directives["shell"]))
        if ran != [expected]:
            problems.append(f"rule {name}: runs {ran}, expected ['{expected}']")
        if expected not in stages:
            problems.append(f"rule {name}: runs {expected}, which is no stage")
        for directive, folder in FOLDERS.items():
            paths = literal_paths(directives.get(directive, ""))
            if directive != "benchmark" and not paths:
                problems.append(f"rule {name}: no {directive} path")
            for path in paths:
                own = output_folder(name)
                if not path.startswith(f"{folder}/{own}/"):
                    problems.append(f"rule {name}: {directive} {path} not under {folder}/{own}/")
    return problems


@pytest.fixture(scope="module")
def rules() -> dict[str, Rule]:
    return read_rule_files(SMK_FILES)


def test_every_rule_runs_the_stage_it_is_named_after_or_a_listed_one(
    rules: dict[str, Rule],
) -> None:
    assert len(rules) > 40
    assert rule_problems(rules, STAGES) == []


def test_every_stage_but_the_cli_only_ones_has_its_rule(rules: dict[str, Rule]) -> None:
    unruled = {name for name in STAGES if name.replace("-", "_") not in rules}
    assert unruled == {*CLI_ONLY_STAGES, GATHER_STAGE}


def test_every_sharded_rule_has_its_gather_rule(rules: dict[str, Rule]) -> None:
    assert GATHER_RULES and set(GATHER_RULES) <= set(rules)
    assert set(GATHER_RULES.values()) <= set(rules)
    assert GATHER_STAGE in STAGES


def test_the_tables_name_rules_and_stages_that_exist(rules: dict[str, Rule]) -> None:
    assert set(RULE_VARIANTS) | set(AGGREGATE_RULES) <= set(rules)
    assert {stage.replace("_", "-") for stage in RULE_VARIANTS.values()} <= set(STAGES)
    assert set(CLI_ONLY_STAGES) <= set(STAGES)
    assert not set(RULE_VARIANTS) & {name.replace("-", "_") for name in STAGES}


def test_every_stage_is_a_module_of_synthdeid_stages_and_every_module_a_stage() -> None:
    for name, stage in STAGES.items():
        assert stage.module == f"synthdeid.stages.{name.replace('-', '_')}"
    modules = {path.stem for path in STAGES_DIR.glob("*.py")} - {"__init__"}
    assert modules == {name.replace("-", "_") for name in STAGES}


def test_the_stage_index_lists_every_stage_and_every_variant_rule() -> None:
    index = (REPO / "docs" / "stages" / "README.md").read_text(encoding="utf-8")
    first_cells = set(re.findall(r"^\| `([\w-]+)` \|", index, flags=re.MULTILINE))
    assert first_cells == set(STAGES) | set(RULE_VARIANTS) | set(GATHER_RULES)


def test_stage_command_of_a_rule() -> None:
    assert stage_command("predict_ner") == "predict-ner"
    assert stage_command("predict_ner_cross") == "predict-ner"
    assert stage_command("measure_silver_noise") == "compare-teacher"
    assert stage_command("gather_predict_ner") == "gather-shards"
    assert output_folder("gather_predict_ner") == "predict_ner"
    assert output_folder("gather_label_teacher") == "label_teacher"
    assert output_folder("gather_generate_templates") == "generate_templates"


# ---------------------------------------------------------------- the checker itself

MADE_UP = textwrap.dedent(
    '''\
    rule tidy_notes:
        """Tidy notes.

        output: tidy.parquet
        """
        input:
            "results/other/notes.parquet",
        output:
            notes="results/tidy_notes/{corpus}/notes.parquet",
            html=report("results/tidy_notes/{corpus}/notes.html", caption="../report/x.rst"),
        log:
            "logs/tidy_notes/{corpus}.log",
        benchmark:
            "benchmarks/tidy_notes/{corpus}.tsv"
        shell:
            "synthdeid --log {log:q} tidy-notes --notes {input:q}"
            " --out {output.notes:q}"


    # the same on other notes
    use rule tidy_notes as tidy_other_notes with:
        output:
            notes="results/tidy_other_notes/{corpus}/notes.parquet",
        log:
            "logs/tidy_other_notes/{corpus}.log",
        benchmark:
            "benchmarks/tidy_other_notes/{corpus}.tsv"


    rule everything:
        input:
            "results/tidy_notes/demo/notes.parquet",
    '''
)
VARIANTS = {"tidy_other_notes": "tidy_notes"}


def made_up_problems(
    text: str, variants: Mapping[str, str] = VARIANTS, aggregates: Collection[str] = ("everything",)
) -> list[str]:
    return rule_problems(read_rules(text), {"tidy-notes"}, variants, aggregates)


def test_the_checker_passes_a_good_file() -> None:
    rules = read_rules(MADE_UP)
    assert set(rules) == {"tidy_notes", "tidy_other_notes", "everything"}
    assert rules["tidy_other_notes"].parent == "tidy_notes"
    assert "output" not in rules["tidy_notes"].directives["input"]  # the docstring is skipped
    assert made_up_problems(MADE_UP) == []


@pytest.mark.parametrize(
    ("change", "tables", "problem"),
    [
        (
            ("tidy-notes --notes", "tidy --notes"),
            {},
            "rule tidy_notes: runs ['tidy'], expected ['tidy-notes']",
        ),
        (
            ("{log:q} tidy-notes", "{log:q} tidy-notes-now"),
            {},
            "rule tidy_other_notes: runs ['tidy-notes-now'], expected ['tidy-notes']",
        ),
        (
            ("", ""),
            {"variants": {}},
            "rule tidy_other_notes: runs ['tidy-notes'], expected ['tidy-other-notes']",
        ),
        (("", ""), {"aggregates": ()}, "rule everything: no shell and not an aggregate rule"),
        (
            ('"logs/tidy_other_notes/{corpus}.log"', '"logs/tidy/{corpus}.log"'),
            {},
            "rule tidy_other_notes: log logs/tidy/{corpus}.log not under logs/tidy_other_notes/",
        ),
        (
            ('"benchmarks/tidy_other_notes/{corpus}.tsv"', '"benchmarks/x/{corpus}.tsv"'),
            {},
            "rule tidy_other_notes: benchmark benchmarks/x/{corpus}.tsv "
            "not under benchmarks/tidy_other_notes/",
        ),
        (
            ('report("results/tidy_notes/', 'report("results/notes/'),
            {},
            "rule tidy_notes: output results/notes/{corpus}/notes.html "
            "not under results/tidy_notes/",
        ),
    ],
)
def test_the_checker_names_a_bad_rule(
    change: tuple[str, str], tables: dict[str, Any], problem: str
) -> None:
    old, new = change
    text = MADE_UP.replace(old, new, 1) if old else MADE_UP
    assert problem in made_up_problems(text, **tables)


def test_a_variant_inherits_its_parents_paths_and_so_breaks_the_folders() -> None:
    """A `use rule` that keeps its parent's log writes under the parent's folder."""
    text = MADE_UP.replace('    log:\n        "logs/tidy_other_notes/{corpus}.log",\n', "")
    assert made_up_problems(text) == [
        "rule tidy_other_notes: log logs/tidy_notes/{corpus}.log not under logs/tidy_other_notes/"
    ]
