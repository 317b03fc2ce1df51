"""Several trained models as one tagger: the mean of their token probabilities.

Models that share a tokenizer and a label set tag the same tokens, so their
per-token tag probabilities can be averaged before BIO decoding. The
ensemble then has an operating point of its own (the ``O`` threshold chosen
on validation notes that no member trained on): averaged probabilities are
calibrated differently from any member's.

An ensemble directory holds ``synthdeid_ensemble.json`` (its members, as
paths relative to the directory, and its decoding settings) and a model card;
the members' weights stay in their own directories.
:func:`synthdeid.ner.loading.load_tagger` opens any kind of model directory.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from synthdeid.artifacts import reading_record
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.model import NER_CONFIG_FILE, DeidTagger, NerSettings, SpanTagger
from synthdeid.ner.tagging import EncodedNote
from synthdeid.notes import Note

log = logging.getLogger(__name__)

ENSEMBLE_FILE = "synthdeid_ensemble.json"


@dataclass(frozen=True)
class EnsembleEncoding:
    """One note as each member encodes it (same tokens; casing types may differ)."""

    members: tuple[EncodedNote, ...]

    @property
    def note_id(self) -> str:
        return self.members[0].note_id

    @property
    def offsets(self) -> np.ndarray:
        return self.members[0].offsets

    @property
    def n_tokens(self) -> int:
        return self.members[0].n_tokens


def check_members(members: Sequence[tuple[str, DeidTagger]]) -> None:
    """Two or more distinctly named members that decode alike (labels, initials rule)."""
    if len(members) < 2:
        raise ConfigError(f"an ensemble needs at least two members, got {len(members)}")
    names = [name for name, _ in members]
    if len(set(names)) != len(names):
        raise ConfigError(f"ensemble members must have distinct names, got {names}")
    first_name, first = members[0]
    for name, tagger in members[1:]:
        for key in ("labels", "initials"):
            mine, theirs = getattr(tagger.settings, key), getattr(first.settings, key)
            if mine != theirs:
                raise ConfigError(
                    f"ensemble member {name!r} has {key} {mine!r} but {first_name!r} has "
                    f"{theirs!r}; members must decode alike"
                )


def ensemble_settings(
    members: Sequence[tuple[str, DeidTagger]], regex_detectors: Sequence[str] | None = None
) -> NerSettings:
    """Settings for decoding the members' mean: their shared labels and initials rule.

    The ``O`` threshold starts at argmax (0.5) until an operating point is chosen;
    the regex detectors default to the union of the members'.
    """
    check_members(members)
    first = members[0][1]
    if regex_detectors is None:
        regex_detectors = sorted({d for _, t in members for d in t.settings.regex_detectors})
    return NerSettings(
        labels=list(first.settings.labels),
        max_length=first.settings.max_length,
        stride=first.settings.stride,
        o_threshold=0.5,
        regex_detectors=list(regex_detectors),
        base_model="ensemble of " + ", ".join(name for name, _ in members),
        initials=first.settings.initials,
    )


class EnsembleTagger(SpanTagger):
    """Members applied one after the other; their token probabilities averaged."""

    def __init__(self, members: Sequence[tuple[str, DeidTagger]], settings: NerSettings) -> None:
        self.members = list(members)
        self.settings = settings

    @property
    def member_names(self) -> list[str]:
        return [name for name, _ in self.members]

    @classmethod
    def load(
        cls, directory: str | Path, *, device: str = "auto", precision: str = "fp32"
    ) -> EnsembleTagger:
        """An ensemble directory; every member on ``device`` in ``precision``."""
        directory = Path(directory)
        path = directory / ENSEMBLE_FILE
        with reading_record(path, "ensemble file"):
            data = json.loads(path.read_text())
            members = ensemble_members(directory, data)
            settings = NerSettings(**data["settings"])
        for name, member_dir in members:
            if not (member_dir / NER_CONFIG_FILE).is_file():
                raise InputError(
                    path,
                    f"member {name!r}",
                    f"model directory {member_dir} is missing or incomplete",
                )
        taggers = [
            (name, DeidTagger.load(member_dir, device=device, precision=precision))
            for name, member_dir in members
        ]
        check_members(taggers)  # retrained members may no longer decode alike
        return cls(taggers, settings)

    def encode(self, notes: Sequence[Note]) -> list[EnsembleEncoding]:
        """Each member's encoding of each note; members must tokenize every note alike."""
        per_member = [tagger.encode(notes) for _, tagger in self.members]
        first_name = self.members[0][0]
        for (name, _), encodings in zip(self.members[1:], per_member[1:], strict=True):
            for reference, encoded in zip(per_member[0], encodings, strict=True):
                if not (
                    np.array_equal(reference.input_ids, encoded.input_ids)
                    and np.array_equal(reference.offsets, encoded.offsets)
                ):
                    raise ConfigError(
                        f"ensemble members {first_name!r} and {name!r} tokenize note "
                        f"{encoded.note_id!r} differently; an ensemble needs members "
                        "with one tokenizer"
                    )
        return [EnsembleEncoding(tuple(encodings)) for encodings in zip(*per_member, strict=True)]

    def token_probabilities(
        self,
        encoded: Sequence[Any],
        *,
        batch_size: int = 32,
        progress: bool = False,
        length_sorted: bool = True,
    ) -> list[np.ndarray]:
        """Per note, the mean over members of their (n_tokens, n_tags) probabilities."""
        total: list[np.ndarray] | None = None
        for index, (name, tagger) in enumerate(self.members):
            if progress:
                log.info("ensemble member %d/%d: %s", index + 1, len(self.members), name)
            probabilities = tagger.token_probabilities(
                [e.members[index] for e in encoded],
                batch_size=batch_size,
                progress=progress,
                length_sorted=length_sorted,
            )
            if total is None:
                total = [p.astype(np.float64) for p in probabilities]
            else:
                for accumulated, p in zip(total, probabilities, strict=True):
                    accumulated += p
        assert total is not None
        return [(p / len(self.members)).astype(np.float32) for p in total]

    def member_records(self, member_dirs: Sequence[Path], *, target: Path) -> list[dict[str, str]]:
        """Each member's name and directory, relative to the ensemble's directory ``target``."""
        return [
            {"name": name, "path": os.path.relpath(Path(d).resolve(), Path(target).resolve())}
            for (name, _), d in zip(self.members, member_dirs, strict=True)
        ]

    def save(
        self,
        directory: Path,
        member_dirs: Sequence[Path],
        *,
        target: Path,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Write ``synthdeid_ensemble.json`` into ``directory``; member paths are relative
        to ``target``, the directory's final place when ``directory`` is a staging one."""
        data = {
            "members": self.member_records(member_dirs, target=target),
            "settings": asdict(self.settings),
            **(extra or {}),
        }
        (Path(directory) / ENSEMBLE_FILE).write_text(json.dumps(data, indent=2) + "\n")


def ensemble_members(directory: Path, data: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """Each member's name and directory, from an ensemble file (``data``, read in ``directory``)."""
    return [(str(m["name"]), directory / m["path"]) for m in data["members"]]


def is_ensemble_directory(directory: str | Path) -> bool:
    return (Path(directory) / ENSEMBLE_FILE).is_file()
