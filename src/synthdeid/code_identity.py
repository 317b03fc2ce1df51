"""The identity of the code a step runs: a digest of its stage module and of every
synthdeid module that module imports, directly or not.

Two uses, one digest. An artifact's provenance records it (``code_digest``) rather
than the git commit, so a step rerun on unchanged code writes the same bytes and its
dependants stay up to date (Snakemake compares checksums of regenerated outputs).
And every rule carries it as a parameter (the Snakefile adds ``params.code``), so a
change to the code a step runs, a behaviour change included, reruns that step:
Snakemake's params trigger, since a rule's shell command (``synthdeid <stage> ...``)
does not change with the code behind it.

Imports are read from the source by a line scan (every ``import synthdeid...`` and
``from synthdeid... import ...``, function-local ones included), never executed; the
digest covers each module's path relative to the package and its bytes, the
``__init__`` modules of the packages on the way included.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

PACKAGE = "synthdeid"
ROOT = Path(__file__).resolve().parent
STAGES_PACKAGE = f"{PACKAGE}.stages"

_running: list[str] = []


def stage_module(stage: str) -> str:
    """The module of a CLI stage: ``build-mixture`` -> ``synthdeid.stages.build_mixture``."""
    return f"{STAGES_PACKAGE}.{stage.replace('-', '_')}"


def module_file(module: str) -> Path | None:
    """The source file of a synthdeid module or package (None: no such module)."""
    if module == PACKAGE:
        return ROOT / "__init__.py"
    if not module.startswith(f"{PACKAGE}."):
        return None
    relative = Path(*module.split(".")[1:])
    for candidate in (ROOT / relative.with_suffix(".py"), ROOT / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _packages_of(module: str) -> list[str]:
    """The packages a module's import runs first: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


# an import statement at the start of a line (function-local ones indented): ``import a.b, c``
# or ``from synthdeid.x import y, z`` (a parenthesized list may span lines)
_IMPORT = re.compile(
    r"^[ \t]*(?:import[ \t]+(?P<plain>[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*)"
    rf"|from[ \t]+(?P<module>{PACKAGE}[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#]*))",
    re.MULTILINE,
)


@cache
def imported_modules(module: str) -> frozenset[str]:
    """The synthdeid modules one module imports (read from its source, not run).

    A line scan, not a parse: ten times faster, which the Snakefile needs (it
    digests every stage on each start). Every import statement starts a line,
    so none is missed; a line inside a string that reads like one can only add
    a module, so the digest may cover more code than runs, never less.
    """
    path = module_file(module)
    if path is None:
        return frozenset()
    found: set[str] = set()
    for match in _IMPORT.finditer(path.read_text(encoding="utf-8")):
        if match["plain"]:
            found.update(name.strip() for name in match["plain"].split(","))
            continue
        found.add(match["module"])
        # `from synthdeid.ner import mixtures` imports a module, not a name
        names = re.sub(r"#[^\n]*", "", match["names"]).strip().strip("()")
        for name in names.split(","):
            name = name.split(" as ")[0].strip()
            if name:
                found.add(f"{match['module']}.{name}")
    return frozenset(name for name in found if module_file(name) is not None)


def code_closure(module: str) -> list[Path]:
    """The source files of ``module`` and of everything it imports, sorted."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or module_file(name) is None:
            continue
        seen.add(name)
        todo.extend(_packages_of(name))
        todo.extend(imported_modules(name))
    files = {module_file(name) for name in seen}
    return sorted(path for path in files if path is not None)


@cache
def code_digest(module: str) -> str:
    """SHA-256 over the closure's files (path relative to the package, then bytes)."""
    if module_file(module) is None:
        raise ValueError(f"{module!r} is not a module of {PACKAGE}")
    digest = hashlib.sha256()
    for path in code_closure(module):
        digest.update(f"{path.relative_to(ROOT).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


def stage_code_digest(stage: str) -> str:
    """The code digest of a CLI stage (its module and what it imports)."""
    return code_digest(stage_module(stage))


@contextmanager
def running(module: str) -> Iterator[None]:
    """Within this block, artifacts are written by ``module`` (the CLI sets it per stage)."""
    _running.append(module)
    try:
        yield
    finally:
        _running.pop()


def running_code_digest() -> str | None:
    """The code digest of the stage running now; None outside a CLI stage."""
    return code_digest(_running[-1]) if _running else None
