"""Archived runs: what a study table needs of each run, small enough to commit.

A study trains many runs, hours each on a CPU; the models and predictions stay
on the machine that made them. What the study table and its forest plot read
of a run is small: evaluate-ner's per-document counts, the run's arm, the
sizes build-mixture realized, the DP budget its data passed through, the
time its training took and the settings it trained with (epochs, precision,
seed...: two runs of one name from two configurations are told apart). ``archive-run`` writes exactly that into one folder
per run::

    <archive>/<run>/per_document.parquet   counts per evaluation note
    <archive>/<run>/run.json               arm, sizes, budget, train time,
                                           settings, the epoch kept and the
                                           machine it trained on, provenance

Note ids are replaced by a 64-bit BLAKE2b hash (hex) keyed by the scored notes
themselves (:func:`note_key`: a digest of their ids and texts): runs still pair
note by note, also when trained on several machines, since every machine that
scores the same notes derives the same key; and no corpus identifier leaves the
machine, since without the notes' text no one can derive the key and test a
guessed id (an unkeyed hash of a short id is reversed by trying every id). The
record names the key by a fingerprint (``note_key``), so runs scored on other
notes are refused together rather than paired on nothing. Archives of format 1
hashed without a key; :func:`rekey_archived_run` rewrites one to format 2 where
its corpus is at hand. ``compare-ner --archive``
and ``tabulate-study --archive`` read a folder of such folders, so a reviewer
regenerates the table and the figure from the committed archive alone, and a
study can be trained over several machines, each adding the runs it finished.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from synthdeid.artifacts import (
    atomic_directory,
    code_version,
    file_digest,
    open_parquet,
    require_columns,
    write_json_atomic,
)
from synthdeid.errors import InputError, read_error_detail
from synthdeid.evaluation.report import PER_DOCUMENT, read_per_document, write_per_document
from synthdeid.hashset import hash64, update_parts
from synthdeid.ner.mixtures import read_mixture_summary
from synthdeid.notes import iter_note_texts, note_texts
from synthdeid.scoring.metrics import CountTable

RUN_RECORD = "run.json"
FORMAT = "synthdeid.archived_run/2"
# format 1 hashed note ids without a key; read, paired only with other format-1 runs
UNKEYED_FORMAT = "synthdeid.archived_run/1"
NOTE_ID_DOMAIN = b"archived-note"
NOTE_KEY_DOMAIN = b"archive-note-key"
NOTE_KEY_ID_DOMAIN = b"archive-key-id"
KEY_ID = re.compile(r"[0-9a-f]{16}")
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
    # pool name -> SHA-256 of the pool file drawn from: whether an arm's seeds, trained
    # on several machines, drew from one pool
    "pool_digests",
)
# mixture fields that runs archived before they were recorded lack
LATER_MIXTURE_FIELDS = frozenset({"digest", "pool_digests"})
PRIVACY_FIELDS = ("epsilon", "delta")
# what a run record keeps of its training history (TrainingOutcome); runs archived before
# it was recorded have no "trained"
TRAINED_FIELDS = ("best_epoch", "epochs", "environment")


@dataclass(frozen=True)
class TrainTime:
    """Wall and CPU seconds of a run's training, from its Snakemake benchmark file."""

    wall_s: float
    cpu_s: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s}

    def with_earlier_calls(self, seconds_before: float | None) -> TrainTime:
        """The time of a run resumed after a stop (:mod:`synthdeid.ner.resume`): the
        benchmark's last call plus the training seconds of the calls before; their CPU
        time was not measured, so the CPU seconds are unknown (None)."""
        if seconds_before is None:
            return self
        return TrainTime(self.wall_s + seconds_before, None)


@dataclass(frozen=True)
class TrainingOutcome:
    """How a run's training went, from its train-ner ``training_history.json``: the epoch
    whose weights were kept, the epochs run, and the code and machine it trained with
    (:func:`synthdeid.compute_env.describe_machine`; None: trained before histories
    recorded it). The number format is in the training settings (``precision_resolved``
    of :func:`read_training_config`)."""

    best_epoch: int
    epochs: int
    environment: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "best_epoch": self.best_epoch,
            "epochs": self.epochs,
            "environment": self.environment,
        }

    @classmethod
    def from_dict(cls, value: Any, path: Path) -> TrainingOutcome:
        """The outcome a run record holds; anything else is an InputError naming ``path``."""
        if (
            not isinstance(value, dict)
            or set(value) != set(TRAINED_FIELDS)
            or not all(isinstance(value[key], int) for key in ("best_epoch", "epochs"))
            or not 1 <= value["best_epoch"] <= value["epochs"]
            or not isinstance(value["environment"], dict | None)
        ):
            raise InputError(
                path,
                None,
                f"trained must be null or hold {list(TRAINED_FIELDS)}, with 1 <= best_epoch "
                "<= epochs",
            )
        return cls(value["best_epoch"], value["epochs"], value["environment"])


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
    # the epoch kept and the machine (None: not a trained run, or archived before recorded)
    trained: TrainingOutcome | None = None

    @property
    def number_format(self) -> str | None:
        """The number format the run trained in (None: not recorded, or not trained)."""
        return number_format(self.record.get("training_config"))

    @property
    def note_key(self) -> str | None:
        """The fingerprint of the key its note ids are hashed with (None: format 1, unkeyed)."""
        key = self.record.get("note_key")
        return key if isinstance(key, str) else None


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
    return training_config_of(read_json(path, "training history"), path)


def training_config_of(history: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """:func:`read_training_config` on a history already read from ``path``."""
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


@dataclass(frozen=True)
class ModelHistory:
    """What a train-ner model folder's training_history.json tells a study: its path, the
    training settings (:func:`read_training_config`) and the outcome
    (:func:`read_training_outcome`)."""

    path: Path
    training_config: dict[str, Any]
    outcome: TrainingOutcome
    # a resumed run's training seconds before the call that finished it (None: not resumed)
    seconds_before_resume: float | None = None

    @property
    def number_format(self) -> str | None:
        """The number format the run trained in (None: not recorded)."""
        return number_format(self.training_config)


def read_model_history(model_dir: Path) -> ModelHistory:
    """The training settings and outcome a train-ner model folder records."""
    path = training_history(model_dir)
    history = read_json(path, "training history")
    timing = history.get("timing")
    before = timing.get("seconds_before_resume") if isinstance(timing, dict) else None
    if before is not None and (not isinstance(before, int | float) or before < 0):
        raise InputError(path, None, "timing.seconds_before_resume must be a number >= 0")
    return ModelHistory(
        path,
        training_config_of(history, path),
        training_outcome_of(history, path),
        float(before) if before is not None else None,
    )


def read_training_outcome(path: Path) -> TrainingOutcome:
    """The epoch kept, the epochs run and the machine a train-ner training_history.json
    records (histories written before the machine was recorded: environment None)."""
    return training_outcome_of(read_json(path, "training history"), path)


def training_outcome_of(history: Mapping[str, Any], path: Path) -> TrainingOutcome:
    """:func:`read_training_outcome` on a history already read from ``path``."""
    timing = history.get("timing")
    epochs = timing.get("epochs") if isinstance(timing, dict) else None
    environment = history.get("environment")
    return TrainingOutcome.from_dict(
        {
            "best_epoch": history.get("best_epoch"),
            "epochs": epochs,
            "environment": environment if isinstance(environment, dict) else None,
        },
        path,
    )


def number_format(training_config: Mapping[str, Any] | None) -> str | None:
    """The number format training settings say a run trained in (``precision_resolved``,
    which :func:`read_training_config` adds); None where they do not say."""
    resolved = (training_config or {}).get("precision_resolved")
    return resolved if isinstance(resolved, str) else None


def note_key(texts: Mapping[str, str]) -> bytes:
    """The key of an archive's note ids: BLAKE2b-256 of the scored notes' ids and texts.

    The same notes give the same key on any machine, in any order; a note
    more, less or changed gives another.
    """
    digest = hashlib.blake2b(digest_size=32, person=NOTE_KEY_DOMAIN)
    for note_id in sorted(texts):
        update_parts(digest, note_id, texts[note_id])
    return digest.digest()


def key_id(key: bytes) -> str:
    """The fingerprint a record names its key by: 16 hex digits, from which the key cannot be
    recovered."""
    return hashlib.blake2b(key, digest_size=8, person=NOTE_KEY_ID_DOMAIN).hexdigest()


def hashed_note_id(note_id: str, key: bytes | None) -> str:
    """The archived form of a note id: 16 hex digits of its BLAKE2b hash keyed by ``key``
    (None: format 1's unkeyed hash, for reading older archives)."""
    if key is None:
        return f"{hash64(note_id, domain=NOTE_ID_DOMAIN):016x}"
    digest = hashlib.blake2b(digest_size=8, key=key, person=NOTE_ID_DOMAIN)
    update_parts(digest, note_id)
    return digest.hexdigest()


def _hashed(note_ids: Sequence[str], key: bytes, path: Path) -> list[str]:
    hashed = [hashed_note_id(note_id, key) for note_id in note_ids]
    if len(set(hashed)) != len(hashed):
        raise InputError(path, None, "two note ids share a 64-bit hash; cannot archive this run")
    return hashed


def hashed_counts(table: CountTable, path: Path, key: bytes) -> CountTable:
    """``table`` with every note id hashed by ``key``; two ids with one hash stop the archive."""
    return replace(table, note_ids=tuple(_hashed(table.note_ids, key, path)))


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
    notes: Path,
    training_config: Mapping[str, Any] | None = None,
    trained: TrainingOutcome | None = None,
) -> dict[str, Any]:
    """Write ``out_dir``/per_document.parquet and run.json (both or neither); returns the record.

    ``notes``: a notes table holding every scored note (the split the run was
    evaluated on): the note ids are hashed with the key their texts give.
    """
    source = evaluation / PER_DOCUMENT
    live = read_per_document(source)
    key = note_key(note_texts(notes, live.note_ids))
    counts = hashed_counts(live, source, key)
    record: dict[str, Any] = {
        "format": FORMAT,
        "run": run,
        "arm": arm,
        "n_notes": len(counts.note_ids),
        "note_key": key_id(key),
        "mixture": (
            {key: mixture.get(key) for key in MIXTURE_FIELDS} if mixture is not None else None
        ),
        "privacy": {key: privacy[key] for key in PRIVACY_FIELDS} if privacy is not None else None,
        "train": train.as_dict() if train is not None else None,
        # epochs, precision (and precision_resolved, the format it came to), seed ... as
        # train-ner ran them (null: not a trained run)
        "training_config": dict(training_config) if training_config is not None else None,
        # the epoch kept of the epochs run, the code and machine (null: not trained)
        "trained": trained.as_dict() if trained is not None else None,
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
    if record.get("format") not in (FORMAT, UNKEYED_FORMAT):
        raise InputError(
            path, None, f"not an archived run record (format {FORMAT!r})", "write it by archive-run"
        )
    keyed = record["format"] == FORMAT
    if keyed and not (
        isinstance(record.get("note_key"), str) and KEY_ID.fullmatch(record["note_key"])
    ):
        raise InputError(path, None, "the record names no note key (16 hex digits)")
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
    pools = (record.get("mixture") or {}).get("pool_digests")
    if pools is not None and not (
        isinstance(pools, dict) and all(isinstance(v, str) for v in pools.values())
    ):
        raise InputError(path, None, "mixture.pool_digests must map pool names to digests")
    train = record.get("train")
    if train is not None and (
        not isinstance(train, dict) or not isinstance(train.get("wall_s"), int | float)
    ):
        raise InputError(path, None, "train must be null or hold wall_s (and cpu_s)")
    if record.get("trained") is not None:
        TrainingOutcome.from_dict(record["trained"], path)
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
                trained=TrainingOutcome.from_dict(record["trained"], path)
                if record.get("trained") is not None
                else None,
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
            _same_note_key(archived, next(iter(runs.values()), archived))
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


def _same_note_key(archived: ArchivedRun, first: ArchivedRun) -> None:
    """Refuse a run whose note ids are hashed with another key than the first run's."""
    if archived.note_key == first.note_key:
        return

    def key(run: ArchivedRun) -> str:
        return f"note key {run.note_key}" if run.note_key else "no note key (format 1)"

    raise InputError(
        archived.folder,
        None,
        f"run {archived.name!r} is archived under {key(archived)}, run {first.name!r} in "
        f"{first.folder.parent} under {key(first)}: their note ids do not pair",
        "read together only runs scored on the same notes and archived in one format "
        "(bench/rekey_archive.py rewrites a format-1 archive)",
    )


def rekey_archived_run(folder: Path, notes: Path) -> bool:
    """Rewrite a format-1 archived run (note ids hashed without a key) to this format.

    ``notes``: a notes table holding the run's scored notes. Only the note id
    column of ``per_document.parquet`` changes (its counts, schema and
    metadata stay), and ``run.json`` gains its format and ``note_key``; both
    files are replaced together. False, and nothing written, where the run is
    keyed already.
    """
    record = _read_record(folder / RUN_RECORD)
    if record["format"] == FORMAT:
        return False
    path = folder / PER_DOCUMENT
    table = open_parquet(path).read()
    require_columns(path, table.column_names, ["note_id"], "a per-document table")
    hashes = table.column("note_id").to_pylist()
    # format 1's unkeyed hash -> (note id, text), for the notes of the table among hashes
    wanted = set(hashes)
    found = {
        hashed: (note_id, text)
        for note_id, text in iter_note_texts(notes)
        if (hashed := hashed_note_id(note_id, None)) in wanted
    }
    unknown = sum(hashed not in found for hashed in hashes)
    if unknown:
        raise InputError(
            path,
            None,
            f"{unknown} of its {len(hashes)} note ids hash no note id of {notes}",
            "give the notes table the run was scored on",
        )
    known = [found[hashed][0] for hashed in hashes]
    key = note_key(dict(found[hashed] for hashed in hashes))
    column = table.column_names.index("note_id")
    rekeyed = table.set_column(column, table.field(column), pa.array(_hashed(known, key, path)))
    with atomic_directory(folder) as staging:
        pq.write_table(
            rekeyed.replace_schema_metadata(table.schema.metadata), staging / PER_DOCUMENT
        )
        write_json_atomic(
            {**record, "format": FORMAT, "note_key": key_id(key)}, staging / RUN_RECORD
        )
    return True


def add_training_outcome(folder: Path, history: Path) -> bool:
    """Add the training outcome of ``history`` to an archived run that predates it.

    ``history`` must be the very training_history.json the run was archived
    from: its digest must equal the one the record's provenance holds (inputs,
    ``training``). Only ``run.json`` changes. False, and nothing written, where
    the record has its outcome already.
    """
    path = folder / RUN_RECORD
    record = _read_record(path)
    if record.get("trained") is not None:
        return False
    recorded = ((record.get("provenance") or {}).get("inputs") or {}).get("training") or {}
    if recorded.get("digest") is None:
        raise InputError(path, None, "the record names no training history: not a trained run")
    if file_digest(history) != recorded["digest"]:
        raise InputError(
            history,
            None,
            f"not the training history run {record['run']!r} was archived from (its digest "
            "differs from the one the record holds)",
            "pass the model folder of the machine the run trained on",
        )
    outcome = read_training_outcome(history)
    write_json_atomic({**record, "trained": outcome.as_dict()}, path)
    return True
