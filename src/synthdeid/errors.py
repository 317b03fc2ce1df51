"""Errors raised on bad input: each names the file, the record and the problem."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


class InputError(ValueError):
    """Bad input data: says where (file, record) and what is wrong.

    ``record`` is whatever locates the problem inside the file for a person
    (``"line 12"``, ``"note 3/17"``, ``"T4"``); ``hint`` says how to fix it.
    """

    def __init__(
        self, path: str | Path, record: str | None, problem: str, hint: str | None = None
    ) -> None:
        self.path = str(path)
        self.record = record
        self.problem = problem
        self.hint = hint
        where = self.path if record is None else f"{self.path}: {record}"
        message = f"{where}: {problem}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class ConfigError(ValueError):
    """A configuration value that cannot work, with the key that holds it."""


class StepError(RuntimeError):
    """A step found its own result unsafe and stopped without writing it."""


def read_error_detail(exc: BaseException) -> str:
    """What went wrong reading or parsing a file, never the file's contents.

    A :class:`UnicodeDecodeError` holds the bytes it was decoding (its repr
    quotes all of them, its str the bad ones) and a ``ValueError`` of a
    conversion quotes the value (``int('...')``): both are told by kind and
    place only. The ``byte`` of a decode error counts from the start of what
    was decoded (the whole file, for a file read at once). A missing field, a
    wrong type and an operating-system error keep their message: it names a
    field, types or a path.
    """
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"UnicodeDecodeError: byte {exc.start} does not decode as {exc.encoding} ({exc.reason})"
        )
    if isinstance(exc, json.JSONDecodeError):  # its message and position hold no text
        return f"JSONDecodeError: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, KeyError):  # the field looked up
        return repr(exc)
    if isinstance(exc, TypeError | OSError):  # types and argument names; a path and why
        return f"{type(exc).__name__}: {exc}"
    return type(exc).__name__


def listed(items: Sequence[str], limit: int) -> str:
    """``items`` joined for a message: the first ``limit``, then how many more."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"
