"""Archived runs: what a study table needs of each run, small enough to commit.

A study trains many runs, hours each on a CPU; the models and predictions stay
on the machine that made them. What the study table and its forest plot read
of a run is small: evaluate-ner's per-document counts, the run's arm, the
sizes build-mixture realized, the DP budget its data passed through, the
time its training took and the settings it trained with (epochs, precision,
seed...: two runs of one name from two configurations are told apart). ``archive-run`` writes exactly that into one folder
per run::

    <archive>/<run>/per_document.parquet   counts per evaluation note
    <archive>/<run>/run.json               arm, sizes, budget, train time and
                                           settings, provenance

Note ids are replaced by a 64-bit BLAKE2b hash (hex): runs still pair note by
note, and no corpus identifier leaves the machine. ``compare-ner --archive``
and ``tabulate-study --archive`` read a folder of such folders, so a reviewer
regenerates the table and the figure from the committed archive alone, and a
study can be trained over several machines, each adding the runs it finished.
"""

from __future__ import annotations

import csv
import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from synthdeid.artifacts import (
    atomic_directory,
    code_version,
    write_json_atomic,
)
from synthdeid.errors import InputError, read_error_detail
from synthdeid.evaluation.report import PER_DOCUMENT, read_per_document, write_per_document
from synthdeid.hashset import hash64
from synthdeid.ner.mixtures import read_mixture_summary
from synthdeid.scoring.metrics import CountTable

RUN_RECORD = "run.json"
FORMAT = "synthdeid.archived_run/1"
NOTE_ID_DOMAIN = b"archived-note"
# what a build-mixture summary must hold for the study table
SIZE_FIELDS = ("n_train_total", "realized_synthetic_fraction")
# the sizes an archived run keeps of it (the rest stays behind)
MIXTURE_FIELDS = (
    "regime",
    "n_train_total",
    "n_real",
    "n_synthetic",
    "realized_synthetic_fraction",
    "max_steps",
    "digest",
)
# mixture fields that runs archived before they were recorded lack
LATER_MIXTURE_FIELDS = frozenset({"digest"})
PRIVACY_FIELDS = ("epsilon", "delta")


@dataclass(frozen=True)
class TrainTime:
    """Wall and CPU seconds of a run's training, from its Snakemake benchmark file."""

    wall_s: float
    cpu_s: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s}


@dataclass(frozen=True)
class ArchivedRun:
    """One run of an archive: its folder and what its ``run.json`` records."""

    name: str
    arm: str
    folder: Path
    mixture: dict[str, Any] | None
    privacy: dict[str, Any] | None
    train: TrainTime | None
    record: dict[str, Any]


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``; an unreadable file or another JSON value is an InputError."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # undecodable bytes and bad JSON are ValueErrors
        raise InputError(path, None, f"cannot read the {what}: {read_error_detail(exc)}") from None
    if not isinstance(document, dict):
        raise InputError(path, None, f"the {what} is not a JSON object")
    return document


def read_sizes(path: Path) -> dict[str, Any]:
    """The sizes of a mixture, from a build-mixture summary.json."""
    summary = read_mixture_summary(path)
    if any(key not in summary for key in SIZE_FIELDS):
        raise InputError(
            path,
            None,
            f"not a build-mixture summary: no {' / '.join(SIZE_FIELDS)}",
            "pass the summary.json that build-mixture wrote",
        )
    return summary


def read_privacy(path: Path) -> dict[str, Any]:
    """The budget a train-dp-lm privacy.json records."""
    record = read_json(path, "privacy record")
    if any(key not in record for key in PRIVACY_FIELDS):
        raise InputError(
            path, None, "not a train-dp-lm privacy record: no epsilon / delta", "pass privacy.json"
        )
    return record


def training_history(model_dir: Path) -> Path:
    """The training_history.json of a train-ner model folder."""
    from synthdeid.ner.model_card import HISTORY_FILE  # imports torch: only when asked

    return model_dir / HISTORY_FILE


def read_training_config(path: Path) -> dict[str, Any]:
    """The training settings a train-ner training_history.json records.

    Where the history records the number format the ``precision`` setting
    came to (``auto`` resolves per machine), it is added as
    ``precision_resolved``.
    """
    history = read_json(path, "training history")
    config = history.get("config")
    if not isinstance(config, dict) or "precision" not in config:
        raise InputError(
            path,
            None,
            "not a train-ner training history: no config with a precision",
            "pass the model folder train-ner wrote",
        )
    precision = history.get("precision")
    if isinstance(precision, dict) and isinstance(precision.get("resolved"), str):
        config = {**config, "precision_resolved": precision["resolved"]}
    return config


def hashed_note_id(note_id: str) -> str:
    """The archived form of a note id: 16 hex digits of its BLAKE2b hash."""
    return f"{hash64(note_id, domain=NOTE_ID_DOMAIN):016x}"


def hashed_counts(table: CountTable, path: Path) -> CountTable:
    """``table`` with every note id hashed; two ids with one hash stop the archive."""
    hashed = [hashed_note_id(note_id) for note_id in table.note_ids]
    if len(set(hashed)) != len(hashed):
        raise InputError(path, None, "two note ids share a 64-bit hash; cannot archive this run")
    return replace(table, note_ids=tuple(hashed))


def read_train_time(path: Path) -> TrainTime:
    """Wall seconds (``s``) and CPU seconds (``cpu_time``) of a Snakemake benchmark file.

    Several rows (a rule benchmarked with ``repeat``) are averaged; a CPU time
    Snakemake could not measure (``NA``) is None.
    """
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
    except OSError as exc:
        raise InputError(path, None, f"cannot read the benchmark file: {exc}") from None
    if not rows or "s" not in rows[0]:
        raise InputError(path, None, "not a Snakemake benchmark file: no 's' column")

    def mean(column: str) -> float | None:
        values = []
        for k, row in enumerate(rows, start=2):
            text = (row.get(column) or "").strip()
            if text in ("", "NA", "-"):
                return None
            try:
                values.append(float(text))
            except ValueError:
                raise InputError(path, f"line {k}", f"{column} is not a number: {text!r}") from None
        return sum(values) / len(values)

    wall = mean("s")
    if wall is None:
        raise InputError(path, None, "the benchmark file has no wall time ('s')")
    return TrainTime(wall, mean("cpu_time"))


def write_archived_run(
    out_dir: Path,
    *,
    run: str,
    arm: str,
    evaluation: Path,
    mixture: Mapping[str, Any] | None,
    privacy: Mapping[str, Any] | None,
    train: TrainTime | None,
    provenance: Mapping[str, Any],
    training_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``out_dir``/per_document.parquet and run.json (both or neither); returns the record."""
    source = evaluation / PER_DOCUMENT
    counts = hashed_counts(read_per_document(source), source)
    record: dict[str, Any] = {
        "format": FORMAT,
        "run": run,
        "arm": arm,
        "n_notes": len(counts.note_ids),
        "mixture": (
            {key: mixture.get(key) for key in MIXTURE_FIELDS} if mixture is not None else None
        ),
        "privacy": {key: privacy[key] for key in PRIVACY_FIELDS} if privacy is not None else None,
        "train": train.as_dict() if train is not None else None,
        # epochs, precision (and precision_resolved, the format it came to), seed ... as
        # train-ner ran them (null: not a trained run)
        "training_config": dict(training_config) if training_config is not None else None,
        "archived": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        # the package version and git commit that archived it: a record for readers (the
        # provenance's code digest, not the commit, is what reruns go by)
        "commit": code_version(),
        "provenance": dict(provenance),
    }
    with atomic_directory(out_dir) as staging:
        write_per_document(counts, staging / PER_DOCUMENT, dict(provenance))
        write_json_atomic(record, staging / RUN_RECORD)
    return record


def _read_record(path: Path) -> dict[str, Any]:
    record = read_json(path, "archived run record")
    if record.get("format") != FORMAT:
        raise InputError(
            path, None, f"not an archived run record (format {FORMAT!r})", "write it by archive-run"
        )
    for key in ("run", "arm"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise InputError(path, None, f"the record has no {key} name")
    for key, fields, later in (
        ("mixture", MIXTURE_FIELDS, LATER_MIXTURE_FIELDS),
        ("privacy", PRIVACY_FIELDS, frozenset()),
    ):
        value = record.get(key)
        if value is not None and (
            not isinstance(value, dict) or not set(fields) - later <= set(value) <= set(fields)
        ):
            raise InputError(path, None, f"{key} must be null or hold exactly {list(fields)}")
    train = record.get("train")
    if train is not None and (
        not isinstance(train, dict) or not isinstance(train.get("wall_s"), int | float)
    ):
        raise InputError(path, None, "train must be null or hold wall_s (and cpu_s)")
    return record


def read_archive(folder: Path) -> list[ArchivedRun]:
    """Every run archived under ``folder`` (one sub-folder each), sorted by run name."""
    if not folder.is_dir():
        raise InputError(folder, None, "no such archive folder")
    runs = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        path = sub / RUN_RECORD
        if not path.is_file():
            raise InputError(sub, None, f"an archive folder without {RUN_RECORD}")
        if not (sub / PER_DOCUMENT).is_file():
            raise InputError(sub, None, f"an archive folder without {PER_DOCUMENT}")
        record = _read_record(path)
        if record["run"] != sub.name:
            raise InputError(path, None, f"records run {record['run']!r} in folder {sub.name!r}")
        train = record.get("train")
        runs.append(
            ArchivedRun(
                name=record["run"],
                arm=record["arm"],
                folder=sub,
                mixture=record.get("mixture"),
                privacy=record.get("privacy"),
                train=TrainTime(train["wall_s"], train.get("cpu_s")) if train else None,
                record=record,
            )
        )
    if not runs:
        raise InputError(folder, None, "the archive holds no run")
    return runs


def read_archives(folders: Sequence[Path]) -> list[ArchivedRun]:
    """The runs of several archives, in order: a study trained over machines or recipes.

    A run in two archives is kept once, from the first, if its per-document
    counts are the same in both (the same run archived twice, or retrained
    with the same outcome); otherwise the archives disagree about it and are
    refused, naming both folders.
    """
    runs: dict[str, ArchivedRun] = {}
    for folder in folders:
        for archived in read_archive(folder):
            first = runs.get(archived.name)
            if first is None:
                runs[archived.name] = archived
                continue
            counts = read_per_document(first.folder / PER_DOCUMENT)
            again = read_per_document(archived.folder / PER_DOCUMENT)
            if counts.note_ids != again.note_ids or not (counts.values == again.values).all():
                raise InputError(
                    archived.folder,
                    None,
                    f"run {archived.name!r} is also in {first.folder.parent} with other "
                    "per-document counts",
                    "give each archive its own run names, or only one of them",
                )
    return list(runs.values())
