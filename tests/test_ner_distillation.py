"""Distillation: soft labels travel by character offsets, the soft loss, the file, training with it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError
from synthdeid.local_only import LOCAL_ONLY_KEY
from synthdeid.ner.distillation import (
    SoftLabels,
    align,
    collate_targets,
    note_targets,
    read_soft_labels,
    soft_cross_entropy,
    window_targets,
    write_soft_labels,
)
from synthdeid.ner.tagging import EncodedNote, Window
from synthdeid.ner.training import TrainingConfig, selection_key, train
from synthdeid.notes import Note, write_notes

TAGS = ["O", "B-DOCTOR", "I-DOCTOR"]


def soft(
    offsets: list[tuple[int, int]], probs: list[list[float]], note_id: str = "n"
) -> SoftLabels:
    return SoftLabels(
        note_id, np.asarray(offsets, dtype=np.int64), np.asarray(probs, dtype=np.float32)
    )


def test_a_student_token_takes_the_first_teacher_token_that_overlaps_it() -> None:
    # teacher: "Dr" "." "Welsh" as [0,2) [2,3) [4,9); student: "Dr." [0,3), "Wel" [4,7),
    # "sh" [7,9), and a token [10,12) that no teacher token covers
    teacher = soft([(0, 2), (2, 3), (4, 9)], [[1, 0, 0], [0.9, 0.1, 0], [0.1, 0.8, 0.1]])
    student = np.asarray([[0, 3], [4, 7], [7, 9], [10, 12]])
    aligned = align(student, teacher)
    np.testing.assert_allclose(aligned[0], [1, 0, 0])
    np.testing.assert_allclose(aligned[1], [0.1, 0.8, 0.1])
    np.testing.assert_allclose(aligned[2], [0.1, 0.8, 0.1])
    np.testing.assert_array_equal(aligned[3], [0, 0, 0])  # learns from gold alone


def test_alignment_of_empty_notes_is_empty() -> None:
    assert align(np.zeros((0, 2), dtype=np.int64), soft([(0, 1)], [[1, 0, 0]])).shape == (0, 3)
    empty_teacher = SoftLabels("n", np.zeros((0, 2), np.int64), np.zeros((0, 3), np.float32))
    assert not align(np.asarray([[0, 1]]), empty_teacher).any()


def test_soft_cross_entropy_is_cross_entropy_on_one_hot_targets_and_skips_empty_rows() -> None:
    logits = torch.tensor([[[2.0, -1.0, 0.5], [0.3, 0.2, 0.1], [5.0, 5.0, 5.0]]])
    targets = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    expected = torch.nn.functional.cross_entropy(logits[0, :2], torch.tensor([1, 0]))
    assert soft_cross_entropy(logits, targets, 1.0).item() == pytest.approx(expected.item())
    assert soft_cross_entropy(logits, torch.zeros_like(targets), 1.0).item() == 0.0


def test_temperature_softens_both_sides_and_scales_by_its_square() -> None:
    logits = torch.tensor([[[2.0, -1.0, 0.5]]])
    teacher = torch.tensor([[[0.7, 0.2, 0.1]]])
    t = 2.0
    sharpened = teacher[0, 0] ** (1 / t)
    sharpened /= sharpened.sum()
    expected = -(sharpened * torch.log_softmax(logits[0, 0] / t, dim=-1)).sum() * t**2
    assert soft_cross_entropy(logits, teacher, t).item() == pytest.approx(expected.item(), 1e-5)


def test_window_targets_put_zero_rows_at_the_special_tokens_and_pad_with_zeros() -> None:
    note = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]  # 4 tokens
    windows = [
        Window(0, 0, np.arange(4), None),  # [CLS] t0 t1 [SEP]
        Window(0, 2, np.arange(4), None),  # [CLS] t2 t3 [SEP]
    ]
    targets = window_targets(windows, [note])
    assert not targets[0][0].any() and not targets[0][-1].any()
    np.testing.assert_array_equal(targets[1][1:3], note[2:4])
    batch = collate_targets(targets, [1, 0], 6)
    assert batch.shape == (2, 6, 3)
    assert not batch[:, 4:].any()


def test_note_targets_refuse_other_tags_and_notes_without_soft_labels() -> None:
    encoded = [EncodedNote("a", np.asarray([1]), np.asarray([[0, 2]]), None)]
    labels = {"a": soft([(0, 2)], [[1, 0, 0]], "a")}
    with pytest.raises(ConfigError, match="tags"):
        note_targets(encoded, labels, TAGS, ["O", "B-DATE", "I-DATE"])
    with pytest.raises(InputError, match="no soft labels"):
        note_targets(encoded, {}, TAGS, TAGS)
    assert note_targets(encoded, labels, TAGS, TAGS)[0].shape == (1, 3)


def test_the_soft_labels_file_round_trips_is_local_only_and_refuses_other_tables(
    tmp_path: Path,
) -> None:
    items = [soft([(0, 2), (3, 8)], [[1, 0, 0], [0.2, 0.7, 0.1]], "a"), soft([], [], "b")]
    items[1] = SoftLabels("b", np.zeros((0, 2), np.int64), np.zeros((0, 3), np.float32))
    path = tmp_path / "local" / "soft.parquet"
    write_soft_labels(items, TAGS, path, {"step": "test"})
    tags, read = read_soft_labels(path)
    assert tags == TAGS and sorted(read) == ["a", "b"]
    np.testing.assert_allclose(read["a"].probs, items[0].probs)
    np.testing.assert_array_equal(read["a"].offsets, items[0].offsets)
    assert pq.read_schema(path).metadata[LOCAL_ONLY_KEY] == b"true"
    other = tmp_path / "notes.parquet"
    write_notes([note_from_pieces("n", "p", ["text"])], other)
    with pytest.raises(InputError, match="soft-labels table"):
        read_soft_labels(other)


def test_checkpoint_rules_order_epochs_as_documented() -> None:
    early = {"leakage_overlap_all": 0.02, "span_overlap_f1": 0.60}
    late = {"leakage_overlap_all": 0.03, "span_overlap_f1": 0.80}
    assert selection_key(early, "leakage") < selection_key(late, "leakage")
    assert selection_key(late, "f1") < selection_key(early, "f1")
    with pytest.raises(ConfigError, match="checkpoint"):
        TrainingConfig.from_mapping({"checkpoint": "last"})
    with pytest.raises(ConfigError, match="distill_alpha"):
        TrainingConfig.from_mapping({"distill_alpha": 0.0})


# --- training with soft labels ------------------------------------------------------------

SURNAMES = ("Welsh", "Moreno", "Okafor", "Lindqvist", "Haddad", "Petrov")


def notes(split: str, n: int, prefix: str) -> list[Note]:
    return [
        note_from_pieces(
            f"{prefix}{i}",
            f"{prefix}p{i % 3}",
            ["Seen by Dr. ", (SURNAMES[i % len(SURNAMES)], "DOCTOR"), " today, stable."],
            split,
        )
        for i in range(n)
    ]


@pytest.fixture()
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_a_student_of_a_teacher_that_sees_no_phi_stops_predicting_it(tmp_path: Path) -> None:
    """Gold alone teaches the names; soft labels saying "O" everywhere (alpha 1) unteach them."""
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    train_notes, validation = notes("train", 24, "t"), notes("train", 6, "v")
    config = TrainingConfig.from_mapping(
        {
            "model": str(encoder),
            "epochs": 6,
            "patience": 6,
            "max_length": 32,
            "stride": 4,
            "learning_rate": 5e-3,
            "batch_size": 4,
            "threads": 1,
            "labels": ["DOCTOR"],
            "distill_alpha": 1.0,
            "operating_point": {"mode": "argmax"},
        }
    )
    gold_only = train(train_notes, validation, config, progress=False)
    assert gold_only.validation["detection_recall"] > 0.5
    silent = {
        note.note_id: SoftLabels(
            note.note_id,
            np.asarray([[0, len(note.text)]]),
            np.asarray([[1.0, 0.0, 0.0]], dtype=np.float32),
        )
        for note in train_notes
    }
    student = train(train_notes, validation, config, soft_labels=(TAGS, silent), progress=False)
    assert student.validation["n_predicted_spans"] == 0


@pytest.mark.usefixtures("one_thread")
def test_soft_label_ner_and_train_ner_distil_through_the_cli(tmp_path: Path) -> None:
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    notes_path = tmp_path / "notes.parquet"
    write_notes([*notes("train", 18, "t"), *notes("holdout", 4, "h")], notes_path)
    mixture = tmp_path / "mixture"
    spec = '{"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}'
    assert (
        main(
            [
                "build-mixture",
                "--notes",
                str(notes_path),
                "--spec",
                spec,
                "--out-train",
                str(mixture / "train.parquet"),
                "--out-validation",
                str(mixture / "validation.parquet"),
                "--summary",
                str(mixture / "summary.json"),
            ]
        )
        == 0
    )
    config = {"model": str(encoder), "epochs": 1, "max_length": 32, "stride": 4, "threads": 1}

    def train_ner(out: Path, *extra: str) -> int:
        return main(
            [
                "train-ner",
                "--train",
                str(mixture / "train.parquet"),
                "--validation",
                str(mixture / "validation.parquet"),
                "--settings",
                json.dumps(config),
                "--out-dir",
                str(out),
                "--no-progress",
                *extra,
            ]
        )

    assert train_ner(tmp_path / "teacher") == 0

    def soft_label_ner(out: Path) -> int:
        teacher, train = str(tmp_path / "teacher"), str(mixture / "train.parquet")
        argv = ["soft-label-ner", "--teacher", teacher, "--train", train, "--out", str(out)]
        return main([*argv, "--no-progress"])

    released = tmp_path / "soft.parquet"
    assert soft_label_ner(released) == 2 and not released.exists()  # not in local/: refused
    local = tmp_path / "local" / "soft.parquet"
    code = soft_label_ner(local)
    assert code == 0
    tags, labels = read_soft_labels(local)
    assert tags[0] == "O" and len(labels) >= 10
    assert all(
        math.isclose(row.sum(), 1.0, abs_tol=1e-4) for v in labels.values() for row in v.probs
    )
    assert train_ner(tmp_path / "student", "--soft-labels", str(local)) == 0
    assert (tmp_path / "student" / "synthdeid_ner.json").is_file()
