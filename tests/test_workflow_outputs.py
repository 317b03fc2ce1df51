"""The tables name rule outputs; their paths are the rules' own declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import synthdeid.workflow as workflow_package
from synthdeid.errors import ConfigError
from synthdeid.workflow.outputs import BENCHMARK, Output, RuleOutputs, fill
from synthdeid.workflow.pools import POOLS, SEED_TEXT_NOTES, TAPT_MODELS
from synthdeid.workflow.tables import FINAL_OUTPUTS


def test_fill_replaces_the_named_wildcards_and_keeps_the_rest() -> None:
    pattern = "results/x/{corpus,demo|other}/{run,a\\-b|c}/{n,[0-9]{2}}/f.json"
    assert fill(pattern, {"run": "a-b"}) == "results/x/{corpus,demo|other}/a-b/{n,[0-9]{2}}/f.json"
    assert fill(pattern, {"corpus": "demo", "run": "c", "n": "07", "unused": "x"}) == (
        "results/x/demo/c/07/f.json"
    )
    assert fill("results/{table}/t.csv", {}) == "results/{table}/t.csv"


def test_an_output_fixes_more_wildcards_without_changing_itself() -> None:
    output = Output("label_teacher", "silver", {"teacher": "t"})
    fixed = output.fixing(subset="pool")
    assert fixed.wildcards == {"teacher": "t", "subset": "pool"}
    assert output.wildcards == {"teacher": "t"}


def test_paths_come_from_the_declarations() -> None:
    outputs = RuleOutputs(
        {("evaluate_ner", "metrics"): "results/evaluate_ner/{corpus}/{run}/m.json"}
    )
    metrics = Output("evaluate_ner", "metrics", {"run": "real"})
    assert outputs.pattern(metrics) == "results/evaluate_ner/{corpus}/real/m.json"
    assert outputs.path(metrics, corpus="demo") == "results/evaluate_ner/demo/real/m.json"


def test_an_undeclared_output_is_refused_naming_the_rule_and_the_output() -> None:
    outputs = RuleOutputs({("split_notes", "notes"): "results/split_notes/{corpus}/notes.parquet"})
    with pytest.raises(ConfigError, match=r"rule 'split_notes' declares no output named 'note'"):
        outputs.path(Output("split_notes", "note"), corpus="demo")
    with pytest.raises(ConfigError, match=r"rule 'split' declares no output named 'notes'"):
        outputs.pattern(Output("split", "notes"))


def test_every_output_the_tables_name_is_declared_by_its_rule(rule_outputs: RuleOutputs) -> None:
    """The real workflow, parsed: each pool, encoder, seed text and final target resolves,
    below its own rule's folder."""
    named = [
        *(pool.file for pool in POOLS.values()),
        *(pool.ids for pool in POOLS.values() if pool.ids is not None),
        *TAPT_MODELS.values(),
        *SEED_TEXT_NOTES.values(),
        *FINAL_OUTPUTS,
    ]
    for output in named:
        folder = output.rule.removeprefix("gather_")
        assert rule_outputs.pattern(output).startswith(f"results/{folder}/"), output


class _Rule:
    """A parsed rule as RuleOutputs.from_rules reads it."""

    def __init__(self, name: str, outputs: dict[str, str], benchmark: str | None) -> None:
        self.name, self.benchmark = name, benchmark
        self.output = type("Outputs", (), {**outputs, "keys": lambda _: outputs.keys()})()


def test_a_rules_benchmark_file_goes_by_its_own_name(rule_outputs: RuleOutputs) -> None:
    train = Output("train_ner", BENCHMARK)
    assert rule_outputs.path(train, corpus="demo", run="real") == (
        "benchmarks/train_ner/demo/real.tsv"
    )
    with pytest.raises(ConfigError, match="declares no output named 'benchmark'"):
        rule_outputs.pattern(Output("all", BENCHMARK))  # a rule without one
    clash = _Rule("x", {"benchmark": "results/x/b.tsv"}, None)
    with pytest.raises(ConfigError, match="rule 'x' names an output 'benchmark'"):
        RuleOutputs.from_rules([clash])
    plain = RuleOutputs.from_rules([_Rule("y", {"table": "results/y/t.csv"}, "benchmarks/y.tsv")])
    assert plain.pattern(Output("y", BENCHMARK)) == "benchmarks/y.tsv"
    assert plain.pattern(Output("y", "table")) == "results/y/t.csv"


def test_no_module_of_the_workflow_package_writes_a_result_path() -> None:
    """Paths of results and benchmarks are the rules' declarations, read through
    RuleOutputs, never spelled again in the tables or input helpers."""
    package = Path(workflow_package.__file__).parent
    spelled = re.compile(r"""f?["'](?:results|benchmarks)/""")
    found = [
        f"{path.name}:{number}"
        for path in sorted(package.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if spelled.search(line)
    ]
    assert found == []
