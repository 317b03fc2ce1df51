"""A stage module holds only the command; the logic lives in the domain packages.

Every ``src/synthdeid/stages/*.py`` (but ``__init__.py``) is parsed with :mod:`ast`
and must:

- define ``register_arguments`` and ``run`` at module level;
- define no class (an ``argparse.Action`` subclass would be the one exception);
- not plot: import neither matplotlib nor :mod:`synthdeid.figures`;
- keep its other module-level functions to argument, input and output glue:
  private (``_name``), at most :data:`MAX_HELPER_LINES` lines each and
  :data:`MAX_HELPERS_LINES` lines together.

A stage that needs more moves the rest to a domain module (with its unit
tests), as ``compare-ner`` does with :mod:`synthdeid.evaluation.compare`.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from synthdeid.cli import build_parser
from synthdeid.cli_types import json_object

STAGES = Path(__file__).resolve().parents[1] / "src" / "synthdeid" / "stages"
REQUIRED = ("register_arguments", "run")
MAX_HELPER_LINES = 40
MAX_HELPERS_LINES = 120
PLOTTING = ("matplotlib", "synthdeid.figures")
ACTION_BASES = ("Action", "argparse.Action")


@dataclass(frozen=True)
class StageShape:
    """What a stage module defines: its command functions, helpers, classes and imports."""

    functions: dict[str, int]  # module-level function -> lines
    classes: list[tuple[str, list[str]]]  # every class -> its bases, as written
    imports: list[str]  # every imported module, at any depth


def stage_shape(source: str) -> StageShape:
    tree = ast.parse(source)
    functions = {
        node.name: (node.end_lineno or node.lineno) - node.lineno + 1
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    classes = [
        (node.name, [ast.unparse(base) for base in node.bases])
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imports += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return StageShape(functions, classes, imports)


def problems(source: str) -> list[str]:
    """Every way a stage module's source breaks the rule of the module docstring."""
    shape = stage_shape(source)
    found = [f"no module-level {name}()" for name in REQUIRED if name not in shape.functions]
    found += [
        f"class {name}: move it to a domain module"
        for name, bases in shape.classes
        if not bases or any(base not in ACTION_BASES for base in bases)
    ]
    found += [
        f"imports {module}: plotting belongs in a domain module"
        for module in dict.fromkeys(shape.imports)
        if any(module == p or module.startswith(f"{p}.") for p in PLOTTING)
    ]
    helpers = {n: lines for n, lines in shape.functions.items() if n not in REQUIRED}
    found += [f"{name}(): a helper is private (_{name})" for name in helpers if name[0] != "_"]
    found += [
        f"{name}(): {lines} lines, more than {MAX_HELPER_LINES}"
        for name, lines in helpers.items()
        if lines > MAX_HELPER_LINES
    ]
    if sum(helpers.values()) > MAX_HELPERS_LINES:
        found.append(f"helpers of {sum(helpers.values())} lines, more than {MAX_HELPERS_LINES}")
    return found


def stage_paths() -> list[Path]:
    return sorted(p for p in STAGES.glob("*.py") if p.name != "__init__.py")


def test_json_arguments_are_parsed_by_one_argument_type() -> None:
    """A JSON mapping argument is ``cli_types.json_object`` (a list, ``json_list``): it
    refuses anything else with the flag's name, so no stage checks the type again."""
    found = [p.name for p in stage_paths() if "type=json.loads" in p.read_text(encoding="utf-8")]
    assert not found, f"parse JSON arguments with cli_types.json_object in {found}"


# names once used for a stage's own settings mapping, which now always goes by --settings
SETTINGS_SYNONYMS = ("--config", "--options", "--spec", "--policy")


def test_a_stages_settings_mapping_goes_by_one_flag_name() -> None:
    """Every JSON-mapping flag of every stage, read from the real parser: a stage's own
    config section is ``--settings``; other JSON flags are named after the one value they
    carry (``--policies``, ``--budgets``)."""
    found = [
        (name, flag)
        for name, stage in _stage_parsers().items()
        for action in stage._actions
        if action.type is json_object
        for flag in action.option_strings
        if flag in SETTINGS_SYNONYMS
    ]
    assert not found, f"name the settings flag --settings: {found}"


def _stage_parsers() -> dict[str, argparse.ArgumentParser]:
    stages = build_parser().stage_parsers
    for stage in stages.values():
        stage.load()
    return dict(stages)


@pytest.mark.parametrize("path", stage_paths(), ids=lambda p: p.stem)
def test_a_stage_module_holds_only_its_command(path: Path) -> None:
    found = problems(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} is not a thin stage:\n" + "\n".join(found)


THIN = """
import argparse
from synthdeid.cli_types import output_dir

def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", type=output_dir)

def _write(path, text):
    path.write_text(text)

def run(args: argparse.Namespace) -> None:
    _write(args.out_dir / "x.txt", "x")
"""


def test_a_thin_stage_passes() -> None:
    assert problems(THIN) == []


def test_a_fat_stage_fails_on_each_count() -> None:
    body = "\n".join(f"    x = {k}" for k in range(MAX_HELPER_LINES))
    fat = (
        "from dataclasses import dataclass\n"
        "from synthdeid.figures import pyplot\n"
        "import matplotlib.pyplot as plt\n"
        "class Result:\n    pass\n"
        "class Pick(argparse.Action):\n    pass\n"
        f"def score():\n{body}\n"
        + "".join(f"def _h{k}():\n{body}\n" for k in range(3))
        + "def run(args):\n    pass\n"
    )
    assert problems(fat) == [
        "no module-level register_arguments()",
        "class Result: move it to a domain module",
        "imports synthdeid.figures: plotting belongs in a domain module",
        "imports synthdeid.figures.pyplot: plotting belongs in a domain module",
        "imports matplotlib.pyplot: plotting belongs in a domain module",
        "score(): a helper is private (_score)",
        f"score(): {MAX_HELPER_LINES + 1} lines, more than {MAX_HELPER_LINES}",
        f"_h0(): {MAX_HELPER_LINES + 1} lines, more than {MAX_HELPER_LINES}",
        f"_h1(): {MAX_HELPER_LINES + 1} lines, more than {MAX_HELPER_LINES}",
        f"_h2(): {MAX_HELPER_LINES + 1} lines, more than {MAX_HELPER_LINES}",
        f"helpers of {4 * (MAX_HELPER_LINES + 1)} lines, more than {MAX_HELPERS_LINES}",
    ]
