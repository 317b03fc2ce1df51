"""Argument types of the ``synthdeid`` command: input and output paths, counts.

Every path argument of a stage uses one of the path types here, so the command
knows which arguments a stage reads and which it writes. With that it refuses
two arguments that name the same file before the stage runs (an output that
would overwrite an input or another output), and removes stale temporary
files of the outputs. The types also check what can be checked before any
work: a folder where a file is expected (and the reverse), an input that is
not a regular file or folder (a FIFO or a device would block a stage or
never end), an output under a file, a count that must be positive.

This module imports nothing heavy: ``synthdeid --help`` and every stage's
argument parser use it.
"""

from __future__ import annotations

import argparse
import json
import math
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, cast

from synthdeid.errors import ConfigError

Role = Literal["input", "output"]
Kind = Literal["file", "directory", "any"]

_ConcretePath = type(Path())


class InputPath(_ConcretePath):  # type: ignore[valid-type,misc]
    """A path a stage reads (a cache folder, which it also adds to, counts as one)."""


class OutputPath(_ConcretePath):  # type: ignore[valid-type,misc]
    """A path a stage writes."""


@dataclass(frozen=True)
class PathArgument:
    """An argparse ``type`` for a path argument: checks the path, marks its role.

    An input that exists must be of the expected kind, and a regular file or
    a folder (:func:`special_file_kind`); one that does not is left to the
    stage, which says what it expected there. An output must not
    be a folder where a file is written (or the reverse) and must not lie under
    a file. With ``empty_is_none`` an empty value means "not given" (rules pass
    ``--key-file=`` when there is no key file).
    """

    role: Role
    kind: Kind
    empty_is_none: bool = False

    @property
    def __name__(self) -> str:  # argparse names a type by its __name__
        return f"{self.role} {self.kind}"

    def __call__(self, value: str) -> InputPath | OutputPath | None:
        if not value:
            if self.empty_is_none:
                return None
            raise argparse.ArgumentTypeError("empty path")
        path: InputPath | OutputPath = (
            InputPath(value) if self.role == "input" else OutputPath(value)
        )
        if self.role == "input":
            special = special_file_kind(path)
            if special is not None:
                raise argparse.ArgumentTypeError(
                    f"{value} is not a regular file ({special}): reading it could block or "
                    "never end; give a file or folder"
                )
        if self.kind == "file" and path.is_dir():
            raise argparse.ArgumentTypeError(f"{value} is a folder; expected a file")
        if self.kind == "directory" and path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{value} is a file; expected a folder")
        if self.role == "output":
            blocking = _file_above(path)
            if blocking is not None:
                raise argparse.ArgumentTypeError(
                    f"{value} cannot be written: {blocking} is a file, not a folder"
                )
        return path


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder
    (``"a FIFO"``, ``"a character device"``, ...), following symlinks; None otherwise.

    Reading such an input blocks (a FIFO without a writer) or never ends
    (``/dev/zero``), so stages refuse them before they open anything.
    """
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):  # missing, unreadable folder, or a name the system refuses
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((what for test, what in _SPECIAL_KINDS if test(mode)), "not a file or folder")


def _file_above(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a folder, else None."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


input_file = PathArgument("input", "file")
input_dir = PathArgument("input", "directory")
input_path = PathArgument("input", "any")
optional_input_file = PathArgument("input", "file", empty_is_none=True)
output_file = PathArgument("output", "file")
output_dir = PathArgument("output", "directory")


def named(value: str, path_type: PathArgument, form: str = "NAME=PATH") -> tuple[str, Path]:
    """``NAME=PATH`` -> (name, path of ``path_type``); the first ``=`` splits."""
    name, sep, rest = value.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"expected {form}, got {value!r}")
    path = path_type(rest)
    if path is None:
        raise argparse.ArgumentTypeError(f"expected {form}, got {value!r}")
    return name, path


def named_input_file(value: str) -> tuple[str, Path]:
    """``NAME=PATH`` of an input file."""
    return named(value, input_file)


def named_input_dir(value: str) -> tuple[str, Path]:
    """``NAME=DIR`` of an input folder."""
    return named(value, input_dir, "NAME=DIR")


def name_pair(value: str) -> tuple[str, str]:
    """``NAME=VALUE`` of two names (``--arm RUN=ARM``); the first ``=`` splits."""
    name, sep, rest = value.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {value!r}")
    return name, rest


def positive_int(value: str) -> int:
    """A count or size that must be at least 1 (batch sizes, threads, repeats, ...)."""
    number = _int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def _json(value: str, kind: type, what: str) -> Any:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(parsed, kind):
        raise argparse.ArgumentTypeError(f"must be a JSON {what}, got {type(parsed).__name__}")
    return parsed


def json_object(value: str) -> dict[str, Any]:
    """A JSON object argument (``--budgets '{"a": 1}'``)."""
    return cast(dict[str, Any], _json(value, dict, "object"))


def json_list(value: str) -> list[Any]:
    """A JSON list argument (``--releases '[...]'``)."""
    return cast(list[Any], _json(value, list, "list"))


def positive_float(value: str) -> float:
    """A finite figure above 0 (``--mde-target``)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {value!r}") from None
    if not 0 < number < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def probability(value: str) -> float:
    """A figure strictly between 0 and 1 (``--alpha``)."""
    number = float(value)
    if not 0.0 < number < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value}")
    return number


def non_negative_int(value: str) -> int:
    """A count where 0 means "the default" (``--threads 0``, ``--rows 0``)."""
    number = _int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive integer, got {value}")
    return number


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class PathValue:
    """One path given to a command: the argument that holds it, its role, the path."""

    argument: str
    role: Role
    path: Path


def argument_name(action: argparse.Action) -> str:
    """How an argument appears in usage and errors: ``--out``, or ``output`` (a positional)."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    return str(action.metavar or action.dest)


def path_values(actions: Iterable[argparse.Action], args: argparse.Namespace) -> list[PathValue]:
    """Every path the parsed ``args`` hold, with its argument and role.

    Values of a :class:`PathArgument` type have its role (also a default that
    argparse did not convert); paths nested in ``NAME=PATH`` tuples and
    dataclasses count by their class (:class:`InputPath`, :class:`OutputPath`).
    """
    found = []
    for action in actions:
        value = getattr(args, action.dest, None)
        if value is None:
            continue
        role = action.type.role if isinstance(action.type, PathArgument) else None
        for path in _paths_in(value):
            path_role = _role_of(path) or role
            if path_role is not None:
                found.append(PathValue(argument_name(action), path_role, path))
    return found


def _role_of(path: Path) -> Role | None:
    if isinstance(path, OutputPath):
        return "output"
    if isinstance(path, InputPath):
        return "input"
    return None


def _paths_in(value: object) -> Iterator[Path]:
    if isinstance(value, Path):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _paths_in(item)
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            yield from _paths_in(getattr(value, f.name))


class PathCollision(ConfigError):
    """Two path arguments name the same file and at least one is written."""

    def __init__(self, first: PathValue, second: PathValue) -> None:
        self.arguments = (first.argument, second.argument)
        writes = second if second.role == "output" else first
        other = first if writes is second else second
        what = "the input" if other.role == "input" else "the other output"
        if first.argument == second.argument:
            where = f"{first.argument} is given twice as {first.path}"
        else:
            where = f"{first.argument} and {second.argument} name the same file ({first.path})"
        super().__init__(
            f"{where}: writing {writes.argument} would overwrite {what}; "
            "give each output its own path"
        )


def refuse_colliding_paths(values: Sequence[PathValue]) -> None:
    """Raise :class:`PathCollision` when an output resolves to the same file as any other path.

    Paths are compared resolved (``./a``, ``a`` and a symlink to ``a`` are one
    file); two inputs may be the same file.
    """
    seen: dict[Path, PathValue] = {}
    for value in values:
        resolved = value.path.resolve()
        earlier = seen.get(resolved)
        if earlier is None:
            seen[resolved] = value
            continue
        if earlier.role == "output" or value.role == "output":
            raise PathCollision(earlier, value)
        # two inputs: keep the first; an output after them still meets it
