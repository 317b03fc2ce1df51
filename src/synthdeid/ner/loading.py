"""Opening any kind of model directory: a trained model, an ensemble, a lexicon stacker.

A trained model (:class:`~synthdeid.ner.model.DeidTagger`) stands alone; an
ensemble (:mod:`synthdeid.ner.ensemble`) names its members' directories; a
lexicon stacker (:mod:`synthdeid.ner.stacker`) names its base, which may be
any of the three. This module knows all three kinds, so neither the ensemble
nor the stacker module imports the other: :func:`load_tagger` hands the
stacker a loader for its base.
"""

from __future__ import annotations

import hashlib
import json
from functools import partial
from pathlib import Path

from synthdeid.artifacts import files_digest, reading_record
from synthdeid.errors import InputError
from synthdeid.ner.ensemble import (
    ENSEMBLE_FILE,
    EnsembleTagger,
    ensemble_members,
    is_ensemble_directory,
)
from synthdeid.ner.model import NER_CONFIG_FILE, DeidTagger, SpanTagger
from synthdeid.ner.stacker import (
    STACKER_FILE,
    StackedTagger,
    is_stacked_directory,
    stacked_base,
)


def is_model_directory(directory: str | Path) -> bool:
    """A trained model, ensemble or stacker directory (its defining file is there)."""
    directory = Path(directory)
    return (
        (directory / NER_CONFIG_FILE).is_file()
        or is_ensemble_directory(directory)
        or is_stacked_directory(directory)
    )


def load_tagger(
    directory: str | Path, *, device: str = "auto", precision: str = "fp32"
) -> SpanTagger:
    """A trained model, ensemble or lexicon-stacker directory, ready to tag notes."""
    if is_stacked_directory(directory):
        load = partial(_load_stacker_base, Path(directory), device=device, precision=precision)
        return StackedTagger.load(directory, load)
    if is_ensemble_directory(directory):
        return EnsembleTagger.load(directory, device=device, precision=precision)
    return DeidTagger.load(directory, device=device, precision=precision)


def _load_stacker_base(stacked: Path, base: Path, *, device: str, precision: str) -> SpanTagger:
    if not is_model_directory(base):
        raise InputError(
            stacked / STACKER_FILE, "base", f"model directory {base} is missing or incomplete"
        )
    return load_tagger(base, device=device, precision=precision)


def linked_models(directory: str | Path) -> list[Path]:
    """The model directories ``directory`` loads besides itself: an ensemble's
    members, a stacker's base (they may lie outside it); none for a trained model."""
    directory = Path(directory)
    if is_stacked_directory(directory):
        path = directory / STACKER_FILE
        with reading_record(path, "stacker file"):
            return [stacked_base(directory, json.loads(path.read_text()))]
    if is_ensemble_directory(directory):
        path = directory / ENSEMBLE_FILE
        with reading_record(path, "ensemble file"):
            return [
                member for _, member in ensemble_members(directory, json.loads(path.read_text()))
            ]
    return []


def model_digest(directory: str | Path) -> str:
    """One digest of everything :func:`load_tagger` loads from ``directory``.

    Each model directory's files, names (relative to it) and contents
    (:func:`~synthdeid.artifacts.files_digest`: weights, tokenizer, settings,
    card), ``directory``'s first and then those of the directories it links
    (:func:`linked_models`, at any depth, each once). Two taggers that could
    tag differently have different digests; a model copied elsewhere keeps its
    digest. Reads every file once.
    """
    digests = []
    pending: list[Path] = [Path(directory)]
    seen: set[Path] = set()
    while pending:
        folder = pending.pop(0)
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        digests.append(files_digest(files, folder))
        pending += linked_models(folder)
    if len(digests) == 1:
        return digests[0]
    joined = "\n".join(digests).encode()
    return f"sha256:{hashlib.sha256(joined).hexdigest()}"
