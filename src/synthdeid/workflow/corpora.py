"""The corpora the workflow reads: where each lies, its files, the evaluation corpora.

A corpus entry is ``config["corpus"]`` or one of ``evaluation.corpora``. The
anchors of ``evaluation.anchors`` (external de-identifiers' predictions on the
corpus, scored as runs) are located the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid.artifacts import file_digest
from synthdeid.errors import ConfigError
from synthdeid.readers import get_reader


def located(
    settings: Mapping[str, Any], where: str, example: str, environ: Mapping[str, str] | None
) -> str:
    """A file or folder from the environment variable named by path_env, or path (relative
    to the working directory); ``where`` names the entry and ``example`` the export's value
    in the error when the variable is not set."""
    environ = os.environ if environ is None else environ
    variable = settings.get("path_env")
    if variable:
        value = environ.get(variable)
        if not value:
            raise ConfigError(
                f"{where}: path_env is {variable!r} but that environment variable is not set; "
                f"export {variable}={example}"
            )
        return value
    return str(settings["path"])


def corpus_path(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Path:
    """A corpus location: from the environment variable named by path_env, or path."""
    where = f"corpus {settings['name']!r}"
    return Path(located(settings, where, "/path/to/the/corpus", environ))


def reader_files(
    settings: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> list[str]:
    """Every file a corpus reader will read, so that a changed file reruns its ingest."""
    path = corpus_path(settings, environ)
    files = get_reader(settings["format"]).input_files(path)
    if not files:
        raise ConfigError(
            f"corpus {settings['name']!r}: no {settings['format']} corpus files found at {path}"
        )
    return [str(f) for f in files]


def evaluation_reader_files(
    settings: Mapping[str, Any],
    corpus: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The files of the evaluation corpus ``settings`` (:func:`reader_files`), refused when
    they hold the same bytes as those of the main ``corpus``, whatever their paths: every
    run would be scored "across corpora" on its own training notes."""
    files = reader_files(settings, environ)
    if same_contents(files, reader_files(corpus, environ)):
        raise ConfigError(
            f"evaluation.corpora[{settings['name']}]: its files hold the same bytes as those "
            f"of the corpus {corpus['name']!r} (same SHA-256 digests), whose holdout is always "
            "scored; an evaluation corpus must be another corpus"
        )
    return files


def same_contents(first: Sequence[str], second: Sequence[str]) -> bool:
    """Whether two lists of files hold the same bytes, file for file in some order (sizes
    are compared first, so different corpora are told apart without reading them)."""
    if sorted(os.path.getsize(f) for f in first) != sorted(os.path.getsize(f) for f in second):
        return False
    return sorted(map(file_digest, first)) == sorted(map(file_digest, second))


def evaluation_corpora(entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """evaluation.corpora by name (a later entry of a repeated name wins; checks refuse it)."""
    return {entry["name"]: dict(entry) for entry in entries}


def anchors(entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """evaluation.anchors by name (a repeated name is refused by the checks)."""
    return {entry["name"]: dict(entry) for entry in entries}


def anchor_path(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """An anchor's predictions file: from the environment variable path_env names, or path
    (relative to the working directory)."""
    where = f"evaluation.anchors[{settings['name']}]"
    return located(settings, where, "/path/to/the/predictions.jsonl", environ)
