"""Imports inside synthdeid point one way: from a layer to itself or to a lower one.

:data:`LAYERS` is the order, lowest first: each layer names the modules and
packages (relative to ``synthdeid``) it holds, and a name covers everything
under it. The stages (``synthdeid.stages``) are the top layer: they wire the
lower layers into commands.
Every import counts: at module level, inside a function, under
``if TYPE_CHECKING:``. Names of modules that do not exist (yet) are harmless.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

Layers = Sequence[tuple[str, Sequence[str]]]

LAYERS: Layers = (
    # the canonical notes table, reading and splitting corpora, and what every step
    # shares: artifacts, errors, settings, argument types, logging, the device, the
    # identifier grammar, statistics and report formatting, runtime flags, shards,
    # hashed sets of whole-corpus keys, files pinned by digest, the compute environment
    (
        "corpus",
        (
            "__init__",
            "errors",
            "artifacts",
            "hashset",
            "notes",
            "labels",
            "readers",
            "ingest",
            "split",
            "mentions",
            "settings",
            "cli_types",
            "logs",
            "termination",
            "local_only",
            "prompt_file",
            "detectors",
            "stats",
            "reporting",
            "figures",
            "runtime",
            "compute_env",
            "shards",
            "pinned",
            "code_identity",
            "privacy_ledger",
            "provenance_table",
        ),
    ),
    # placeholders for PHI, surrogate values, and the identifier scanner built on both
    ("masking", ("mask", "surrogate", "identifiers")),
    # synthetic notes and tables, the demo corpus; the LLM backends, bundled encoders
    # and sentence embeddings (near-duplicates, diagnostics) they use
    ("synthesis", ("synthesis", "dplm", "tabular", "demo", "llm", "encoders", "embeddings")),
    # span matching and precision / recall counts: notes against notes, no more; the
    # models pick their operating point and best epoch with them; the vocabulary names
    # every counter and metric (a model card's rows too)
    ("scoring", ("scoring",)),
    # de-identification models and the teachers that label notes for them
    ("models", ("ner", "teacher")),
    # bootstrap intervals, comparisons, reports and figures
    ("evaluation", ("evaluation", "corpus_overview")),
    # commands, which may import anything: the stages, the CLI, the workflow's logic
    ("entry", ("cli", "__main__", "stages", "workflow")),
)

PACKAGE = "synthdeid"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE


@dataclass(frozen=True)
class Import:
    """One import of one package module by another, where it is written."""

    importer: str  # dotted, relative to the package ("" is the package itself)
    imported: str
    path: Path  # from the folder that holds the package
    line: int


def module_names(root: Path) -> dict[str, Path]:
    """Every module under ``root`` by its dotted name relative to the package
    (a package is named by its folder; the top package is "")."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def package_imports(root: Path, package: str) -> Iterator[Import]:
    """Every import of a ``package`` module written in a module under ``root``."""
    modules = module_names(root)
    for name, path in modules.items():
        here = name.split(".") if name else []
        if path.name != "__init__.py":
            here = here[:-1]  # the package a relative import starts from
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join([package, *here[: len(here) - node.level + 1]])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                # `from a import b` imports the module a.b when there is one
                targets = [
                    f"{source}.{alias.name}"
                    if f"{source}.{alias.name}".removeprefix(f"{package}.") in modules
                    else source
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                if target == package or target.startswith(f"{package}."):
                    relative = target.removeprefix(package).removeprefix(".")
                    yield Import(name, relative, path.relative_to(root.parent), node.lineno)


def type_checking_lines(path: Path) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks (imports there never run)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def runtime_cycles(root: Path, package: str) -> list[list[str]]:
    """Groups of modules that import each other when they run (function-local imports
    included, ``TYPE_CHECKING`` ones not), each sorted; none in a clean package."""
    skipped = {path: type_checking_lines(path) for path in module_names(root).values()}
    graph: dict[str, set[str]] = {}
    for found in package_imports(root, package):
        if found.line not in skipped[root.parent / found.path] and found.imported != found.importer:
            graph.setdefault(found.importer, set()).add(found.imported)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return sorted(cycles)


def layer_of(module: str, layers: Layers) -> int | None:
    """The index in ``layers`` of a dotted module name (None when no layer holds it)."""
    parts = module.split(".") if module else ["__init__"]
    owners = {name: index for index, (_, names) in enumerate(layers) for name in names}
    for end in range(len(parts), 0, -1):
        owner = owners.get(".".join(parts[:end]))
        if owner is not None:
            return owner
    return None


def upward_imports(root: Path, package: str, layers: Layers) -> list[Import]:
    """The imports of a higher layer by a lower one, by file and line."""
    found = []
    for candidate in package_imports(root, package):
        low, high = (layer_of(m, layers) for m in (candidate.importer, candidate.imported))
        if low is None or high is None or high <= low:
            continue
        if candidate not in found:  # `from a import b, c` is one import of a
            found.append(candidate)
    return sorted(found, key=lambda f: (f.path, f.line))


def stage_imports(root: Path, package: str, stages: str = "stages") -> list[Import]:
    """The imports of one stage module by another (a stage's helpers belong in the domain
    packages, where every stage that needs them imports them from)."""
    found = []
    for candidate in package_imports(root, package):
        imported = candidate.imported
        of_a_stage = imported == stages or imported.startswith(f"{stages}.")
        if candidate.importer.startswith(f"{stages}.") and of_a_stage and candidate not in found:
            found.append(candidate)
    return sorted(found, key=lambda f: (f.path, f.line))


def describe(found: Import, package: str, layers: Layers) -> str:
    """``file:line: a (layer) imports b (layer)``."""
    low, high = (layer_of(m, layers) for m in (found.importer, found.imported))
    assert low is not None and high is not None
    importer = ".".join(filter(None, (package, found.importer)))
    return (
        f"{found.path.as_posix()}:{found.line}: {importer} ({layers[low][0]}) imports "
        f"{package}.{found.imported} ({layers[high][0]})"
    )


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in module_names(SRC) if layer_of(name, LAYERS) is None]
    assert not unplaced, f"add these modules to a layer in tests/test_layers.py: {unplaced}"


def test_no_layer_names_a_module_twice() -> None:
    names = [name for _, members in LAYERS for name in members]
    assert len(names) == len(set(names))


def test_imports_point_down_the_layers() -> None:
    upward = [describe(f, PACKAGE, LAYERS) for f in upward_imports(SRC, PACKAGE, LAYERS)]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_no_modules_import_each_other_at_run_time() -> None:
    # the loader composes (ner.loading opens ensembles and stackers; neither imports the other)
    assert runtime_cycles(SRC, PACKAGE) == []


def test_runtime_cycles_finds_function_local_cycles_but_not_type_checking_ones(
    tmp_path: Path,
) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def f():\n    from toy import b\n",
            "b.py": "import toy.a\n",
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy.d import D\n",
            "d.py": "from toy.c import thing\n",
        },
    )
    assert runtime_cycles(package, "toy") == [["a", "b"]]


def test_no_stage_imports_another_stage() -> None:
    found = [
        f"{f.path.as_posix()}:{f.line}: {PACKAGE}.{f.importer} imports {PACKAGE}.{f.imported}"
        for f in stage_imports(SRC, PACKAGE)
    ]
    assert not found, "stages importing stages (move the helper to its domain module):\n" + (
        "\n".join(found)
    )


TOY_LAYERS: Layers = (("low", ("__init__", "low", "base")), ("high", ("high",)))


def write_package(root: Path, files: Mapping[str, str]) -> Path:
    package = root / "toy"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return package


def test_upward_imports_finds_function_level_type_checking_and_relative_imports(
    tmp_path: Path,
) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "high.py": "from toy.low import thing\n",
            "low.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from toy.high import Model
                def load() -> None:
                    import toy.high
                """,
            "base/__init__.py": "",
            "base/inner.py": "from .. import high\nfrom ..base import inner\n",
        },
    )
    found = [describe(f, "toy", TOY_LAYERS) for f in upward_imports(package, "toy", TOY_LAYERS)]
    assert found == [
        "toy/base/inner.py:1: toy.base.inner (low) imports toy.high (high)",
        "toy/low.py:3: toy.low (low) imports toy.high (high)",
        "toy/low.py:5: toy.low (low) imports toy.high (high)",
    ]


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("", "corpus"),
        ("surrogate.operators.dates", "masking"),
        ("embeddings", "synthesis"),
        ("ner.model", "models"),
        ("ner.report_errors", "models"),
        ("scoring.vocabulary", "scoring"),
        ("evaluation.study_table", "evaluation"),
        ("stages.predict_ner", "entry"),
        ("stages", "entry"),
        ("workflow.targets", "entry"),
        ("detectors", "corpus"),
        ("compute_env", "corpus"),
        ("surrogate.replace_table", "masking"),
        ("dplm.audit_report", "synthesis"),
        ("tabular.faithfulness_report", "synthesis"),
        ("synthesis.template_generation", "synthesis"),
        ("ner.lexicon_stacking", "models"),
        ("ner.untrained_notes", "models"),
        ("evaluation.teacher_comparison", "evaluation"),
        ("evaluation.teacher_figures", "evaluation"),
    ],
)
def test_layer_of(module: str, layer: str) -> None:
    index = layer_of(module, LAYERS)
    assert index is not None and LAYERS[index][0] == layer


def test_layer_of_an_unplaced_module_is_none() -> None:
    assert layer_of("nowhere.module", LAYERS) is None


def test_stage_imports_finds_one_stage_importing_another(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "",
            "stages/__init__.py": "from toy.stages import first\n",
            "stages/first.py": "from toy.low import thing\n",
            "stages/second.py": """\
                from toy.stages.first import helper
                def run() -> None:
                    from . import first
                    from toy import stages
                """,
        },
    )
    found = [(f.path.as_posix(), f.line, f.imported) for f in stage_imports(package, "toy")]
    assert found == [
        ("toy/stages/second.py", 1, "stages.first"),
        ("toy/stages/second.py", 3, "stages.first"),
        ("toy/stages/second.py", 4, "stages"),
    ]
