"""The digest of the code a stage runs: its module and every synthdeid module it imports."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from synthdeid import code_identity
from synthdeid.artifacts import make_provenance
from synthdeid.cli import STAGES
from synthdeid.code_identity import (
    ROOT,
    code_closure,
    code_digest,
    imported_modules,
    running,
    running_code_digest,
    stage_code_digest,
    stage_module,
)


def names(paths: list[Path]) -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in paths}


def test_a_stage_closure_holds_what_it_imports_and_the_packages_on_the_way() -> None:
    closure = names(code_closure(stage_module("build-mixture")))
    assert {"stages/build_mixture.py", "ner/mixtures.py", "ner/__init__.py"} <= closure
    assert {"__init__.py", "stages/__init__.py", "notes.py", "artifacts.py"} <= closure
    # what it does not import stays out: another stage, the training loop
    assert "stages/train_ner.py" not in closure and "ner/training.py" not in closure


def test_imports_are_read_from_the_source_function_local_ones_included() -> None:
    # `from synthdeid.ner import mixtures` names a module; the CLI imports stages lazily
    assert "synthdeid.ner.mixtures" in imported_modules("synthdeid.stages.build_mixture")
    assert imported_modules("synthdeid.not_a_module") == frozenset()


def test_every_stage_has_a_digest_and_stages_differ() -> None:
    digests = {stage: stage_code_digest(stage) for stage in STAGES}
    assert all(d.startswith("sha256:") and len(d) == 71 for d in digests.values())
    assert digests["build-mixture"] != digests["train-ner"]
    with pytest.raises(ValueError, match="not a module"):
        code_digest("synthdeid.stages.no_such_stage")


def test_the_digest_follows_the_bytes_of_any_file_in_the_closure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the package: the same bytes give the same digest; one changed byte in an
    imported module (not the stage's own file) gives another."""
    copy = tmp_path / "synthdeid"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = stage_module("build-mixture")
    before = code_digest(module)

    def digest_in(root: Path) -> str:
        monkeypatch.setattr(code_identity, "ROOT", root)
        for cached in (code_identity.code_digest, code_identity.imported_modules):
            cached.cache_clear()
        try:
            return code_identity.code_digest(module)
        finally:
            monkeypatch.setattr(code_identity, "ROOT", ROOT)
            for cached in (code_identity.code_digest, code_identity.imported_modules):
                cached.cache_clear()

    assert digest_in(copy) == before
    mixtures = copy / "ner" / "mixtures.py"
    mixtures.write_text(mixtures.read_text() + "\n# a behaviour change\n")
    assert digest_in(copy) != before
    # a module build-mixture does not import changes nothing
    mixtures.write_text((ROOT / "ner" / "mixtures.py").read_text())
    training = copy / "ner" / "training.py"
    training.write_text(training.read_text() + "\n# elsewhere\n")
    assert digest_in(copy) == before


def test_provenance_records_the_running_stage_digest_not_the_commit() -> None:
    assert make_provenance("x", {})["code_digest"] is None  # outside a stage
    with running(stage_module("split-notes")):
        assert running_code_digest() == stage_code_digest("split-notes")
        record = make_provenance("split", {"seed": 1})
    assert record["code_digest"] == stage_code_digest("split-notes")
    assert "+g" not in record["code_version"]  # no git commit in the bytes
    assert running_code_digest() is None


def parsed_imports(module: str) -> frozenset[str]:
    """The synthdeid modules a module imports, from a full parse of its source."""
    path = code_identity.module_file(module)
    assert path is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(n for n in found if code_identity.module_file(n) is not None)


def test_the_line_scan_finds_what_a_parse_finds_in_every_module() -> None:
    modules = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert len(modules) > 100
    for module in modules:
        assert imported_modules(module) == parsed_imports(module), module


def test_the_line_scan_reads_every_form_of_import(tmp_path: Path, monkeypatch) -> None:
    source = (
        "import synthdeid.stats, synthdeid.labels as labels\n"
        "from synthdeid.scoring import (\n"
        "    metrics,  # a module\n"
        "    vocabulary as v,\n"
        ")\n"
        "def f():\n"
        "    from synthdeid.notes import Note\n"
        "# from synthdeid.mask import nothing (a comment is not an import)\n"
    )
    package = tmp_path / "synthdeid"
    shutil.copytree(ROOT, package)
    (package / "probe.py").write_text(source)
    monkeypatch.setattr(code_identity, "ROOT", package)
    code_identity.imported_modules.cache_clear()
    try:
        found = imported_modules("synthdeid.probe")
    finally:
        code_identity.imported_modules.cache_clear()
    assert found == {
        "synthdeid.stats",
        "synthdeid.labels",
        "synthdeid.scoring",
        "synthdeid.scoring.metrics",
        "synthdeid.scoring.vocabulary",
        "synthdeid.notes",
    }
