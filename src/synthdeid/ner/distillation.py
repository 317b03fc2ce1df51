"""Soft labels from a teacher tagger, and the loss a student learns them with.

Knowledge distillation (Hinton et al. 2015): a trained teacher -- one model, or
an ensemble of several training seeds (:mod:`synthdeid.ner.ensemble`) -- gives
every token of the training notes its distribution over the BIO tags, and the
student is trained on a mix of the gold tags and those distributions::

    loss = (1 - alpha) * CE_weighted(student, gold) + alpha * T^2 * CE(teacher_T, student_T)

where ``_T`` divides the logits by the temperature ``T`` (the teacher's
probabilities are sharpened or softened as ``p^(1/T)``, renormalized). The
soft term carries what the gold tags cannot: how sure the teacher is, and
which label it would give a word it is unsure of; a student of an ensemble
of seeds learns their consensus, so it varies less between its own seeds
than any member did, at the inference cost of one model.

Teacher and student need not share a tokenizer. Probabilities travel by
character offsets: a student token takes the distribution of the first
teacher token that overlaps it; a student token that no teacher token
overlaps keeps its gold tag only. Both taggers must have the same tags.

The soft labels of a set of notes are a Parquet table (one row per note:
``note_id``, the teacher tokens' character ``starts`` and ``ends`` and their
``probs``, row-major ``n_tokens x n_tags`` float32) whose metadata names the
tags. It holds no text, but it says where the teacher saw PHI in real notes:
it is written under a ``local/`` folder like every artifact that reveals
where PHI is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from synthdeid.artifacts import read_parquet_with_provenance, require_columns, write_parquet_atomic
from synthdeid.errors import ConfigError, InputError
from synthdeid.local_only import LOCAL_ONLY_METADATA
from synthdeid.ner.model import SpanTagger
from synthdeid.ner.tagging import EncodedNote, Window
from synthdeid.notes import Note

TAGS_KEY = b"synthdeid.soft_label_tags"
SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("starts", pa.list_(pa.int32()), nullable=False),
        pa.field("ends", pa.list_(pa.int32()), nullable=False),
        pa.field("probs", pa.list_(pa.float32()), nullable=False),
    ]
)


@dataclass(frozen=True)
class SoftLabels:
    """One note's teacher tokens: character offsets and tag distributions."""

    note_id: str
    offsets: np.ndarray  # int64, (n_tokens, 2)
    probs: np.ndarray  # float32, (n_tokens, n_tags), rows sum to 1


@dataclass(frozen=True)
class Distillation:
    """How much of the loss the soft labels carry, and at what temperature."""

    alpha: float = 0.5
    temperature: float = 1.0

    def check(self) -> None:
        if not 0.0 < self.alpha <= 1.0:
            raise ConfigError("ner.training.distill_alpha must lie in (0, 1]")
        if self.temperature <= 0:
            raise ConfigError("ner.training.distill_temperature must be positive")


def teacher_soft_labels(
    teacher: SpanTagger, notes: Sequence[Note], *, batch_size: int = 32, progress: bool = False
) -> list[SoftLabels]:
    """The teacher's per-token tag probabilities on ``notes`` (an ensemble gives their mean)."""
    encoded = teacher.encode(notes)
    probabilities = teacher.token_probabilities(encoded, batch_size=batch_size, progress=progress)
    return [
        SoftLabels(note.note_id, np.asarray(enc.offsets, dtype=np.int64), probs.astype(np.float32))
        for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
    ]


def write_soft_labels(
    labels: Sequence[SoftLabels],
    tags: Sequence[str],
    path: str | Path,
    provenance: Mapping[str, Any],
) -> None:
    """The soft labels as one Parquet table (atomic), the tag names in its metadata."""
    for item in labels:
        if item.probs.shape != (len(item.offsets), len(tags)):
            raise ValueError(f"soft labels of {item.note_id}: shape {item.probs.shape}")
    table = pa.table(
        {
            "note_id": [item.note_id for item in labels],
            "starts": [item.offsets[:, 0].astype(np.int32) for item in labels],
            "ends": [item.offsets[:, 1].astype(np.int32) for item in labels],
            "probs": [item.probs.astype(np.float32).ravel() for item in labels],
        },
        schema=SCHEMA,
    )
    table = table.replace_schema_metadata(
        {
            **(table.schema.metadata or {}),
            **LOCAL_ONLY_METADATA,
            TAGS_KEY: json.dumps(list(tags)).encode(),
        }
    )
    write_parquet_atomic(table, path, provenance)


def read_soft_labels(path: str | Path) -> tuple[list[str], dict[str, SoftLabels]]:
    """The tag names and each note's soft labels; a malformed file names its record."""
    table, _ = read_parquet_with_provenance(path)
    require_columns(path, table.column_names, SCHEMA.names, "a soft-labels table")
    raw_tags = (table.schema.metadata or {}).get(TAGS_KEY)
    if raw_tags is None:
        raise InputError(path, None, "no tag names in the metadata: not a soft-labels file")
    tags = [str(t) for t in json.loads(raw_tags)]
    labels: dict[str, SoftLabels] = {}
    for row in table.to_pylist():
        note_id = str(row["note_id"])
        starts, ends = row["starts"], row["ends"]
        probs = np.asarray(row["probs"], dtype=np.float32)
        if len(starts) != len(ends) or probs.size != len(starts) * len(tags):
            raise InputError(path, note_id, "offsets and probabilities disagree in length")
        if note_id in labels:
            raise InputError(path, note_id, "note id appears twice")
        offsets = np.stack([np.asarray(starts), np.asarray(ends)], axis=1).astype(np.int64)
        labels[note_id] = SoftLabels(
            note_id, offsets.reshape(-1, 2), probs.reshape(len(starts), len(tags))
        )
    return tags, labels


def align(student_offsets: np.ndarray, soft: SoftLabels) -> np.ndarray:
    """Teacher distributions on the student's tokens: (n_student, n_tags), zero rows where
    no teacher token overlaps (those tokens learn from their gold tag alone)."""
    n_tags = soft.probs.shape[1]
    out = np.zeros((len(student_offsets), n_tags), dtype=np.float32)
    if len(student_offsets) == 0 or len(soft.offsets) == 0:
        return out
    teacher_starts = soft.offsets[:, 0]
    teacher_ends = soft.offsets[:, 1]
    # the first teacher token whose end lies past the student token's start ...
    first = np.searchsorted(teacher_ends, student_offsets[:, 0], side="right")
    inside = first < len(teacher_ends)
    candidate = np.minimum(first, len(teacher_ends) - 1)
    # ... overlaps it when it also starts before the student token ends
    overlaps = inside & (teacher_starts[candidate] < student_offsets[:, 1])
    out[overlaps] = soft.probs[candidate[overlaps]]
    return out


def note_targets(
    encoded: Sequence[EncodedNote],
    soft: Mapping[str, SoftLabels],
    student_tags: Sequence[str],
    teacher_tags: Sequence[str],
) -> list[np.ndarray]:
    """Per encoded note, the teacher's distributions aligned to the student's tokens."""
    if list(student_tags) != list(teacher_tags):
        raise ConfigError(
            f"distillation: the teacher's tags {list(teacher_tags)} differ from the student's "
            f"{list(student_tags)}; train the student with the teacher's labels "
            "(ner.training.labels)"
        )
    missing = [enc.note_id for enc in encoded if enc.note_id not in soft]
    if missing:
        raise InputError(
            "soft labels",
            missing[0],
            f"{len(missing)} training note(s) have no soft labels; label the same notes "
            "the student trains on",
        )
    return [align(enc.offsets, soft[enc.note_id]) for enc in encoded]


def window_targets(windows: Sequence[Window], targets: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each window's soft targets, zero rows at its [CLS] and [SEP]."""
    out = []
    for window in windows:
        note = targets[window.note_index]
        body = note[window.token_start : window.token_start + window.n_content]
        edge = np.zeros((1, note.shape[1]), dtype=np.float32)
        out.append(np.concatenate([edge, body, edge]))
    return out


def collate_targets(
    targets: Sequence[np.ndarray], indices: Sequence[int], length: int
) -> torch.Tensor:
    """A batch of soft targets padded (with zero rows) to ``length`` tokens."""
    n_tags = targets[indices[0]].shape[1]
    batch = np.zeros((len(indices), length, n_tags), dtype=np.float32)
    for row, i in enumerate(indices):
        n = targets[i].shape[0]
        batch[row, :n] = targets[i]
    return torch.from_numpy(batch)


def soft_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Mean over tokens with a soft target of CE(teacher^(1/T) renormalized, softmax(z/T)) * T^2.

    Rows of zeros (special tokens, padding, tokens no teacher token covers)
    are skipped; with no target at all the loss is zero.
    """
    present = targets.sum(dim=-1) > 0
    if not bool(present.any()):
        return logits.sum() * 0.0
    teacher = targets[present]
    if temperature != 1.0:
        teacher = teacher.clamp_min(1e-12) ** (1.0 / temperature)
        teacher = teacher / teacher.sum(dim=-1, keepdim=True)
    log_student = torch.log_softmax(logits[present] / temperature, dim=-1)
    return -(teacher * log_student).sum(dim=-1).mean() * temperature**2
