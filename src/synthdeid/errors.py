"""Errors raised on bad input: each names the file, the record and the problem."""

from __future__ import annotations

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
