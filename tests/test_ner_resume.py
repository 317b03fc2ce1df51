"""A stopped training run goes on from its last finished epoch to the model an uninterrupted
run writes; a state saved for other inputs, settings or code is never resumed."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.cli import main
from synthdeid.ner.mixtures import MixtureNote, write_mixture
from synthdeid.ner.model import NER_CONFIG_FILE
from synthdeid.ner.model_card import HISTORY_FILE
from synthdeid.ner.resume import STATE_FILE, ResumeFolder, resume_fingerprint
from synthdeid.ner.training import TrainingConfig, TrainingResult, train
from synthdeid.notes import Note, write_notes
from synthdeid.termination import Terminated

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

DOCTORS = ("Abernathy", "Lindqvist", "Okonkwo", "Castellano", "Tsang", "Verhoeven", "Dunmore")


def made_up(i: int) -> Note:
    pieces: list[str | tuple[str, str]] = [
        "Seen by Dr. ",
        (DOCTORS[i % len(DOCTORS)], "DOCTOR"),
        " on ",
        (f"{i % 12 + 1}/{(5 * i) % 28 + 1}", "DATE"),
        ". Vitals stable, plan unchanged." * (1 + i % 3),
    ]
    return note_from_pieces(f"n{i:02d}", f"p{i % 5}", pieces)


NOTES = [made_up(i) for i in range(20)]
TRAIN, VALIDATION = NOTES[:16], NOTES[16:]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_encoder_dir(tmp_path_factory.mktemp("tiny") / "encoder")


def config_for(encoder: Path) -> TrainingConfig:
    # three epochs whatever the validation says (patience 3); the tiny BERT has dropout, so
    # the torch random state matters as much as the batch order
    return TrainingConfig.from_mapping(
        {
            "model": str(encoder),
            "max_length": 32,
            "stride": 8,
            "epochs": 3,
            "patience": 3,
            "batch_size": 4,
            "learning_rate": 1e-3,
            "seed": 7,
        }
    )


def stop_in_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    """Training is stopped (SIGTERM's exception) while epoch ``epoch`` is validated."""
    import synthdeid.ner.training as training

    original = training._validation_metrics
    calls = []

    def stopping(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == epoch:
            raise Terminated(15)
        return original(*args, **kwargs)

    monkeypatch.setattr(training, "_validation_metrics", stopping)


def without_seconds(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in record.items() if k != "seconds"} for record in history]


def assert_same_model(resumed: TrainingResult, reference: TrainingResult) -> None:
    got = resumed.tagger.model.state_dict()
    want = reference.tagger.model.state_dict()
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name
    assert resumed.best_epoch == reference.best_epoch
    assert without_seconds(resumed.history) == without_seconds(reference.history)
    assert resumed.tagger.settings.o_threshold == reference.tagger.settings.o_threshold
    assert resumed.validation == reference.validation


@pytest.fixture(scope="module")
def reference(encoder: Path) -> TrainingResult:
    return train(TRAIN, VALIDATION, config_for(encoder), progress=False)


@pytest.mark.parametrize("stopped_in", [2, 3])
def test_a_run_stopped_midway_goes_on_to_the_model_of_an_uninterrupted_run(
    encoder: Path,
    reference: TrainingResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    stopped_in: int,
) -> None:
    resume = ResumeFolder(tmp_path / "resume", resume_fingerprint({"run": "a"}))
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, stopped_in)
        with pytest.raises(Terminated):
            train(TRAIN, VALIDATION, config_for(encoder), progress=False, resume=resume)
    assert (tmp_path / "resume" / STATE_FILE).is_file()
    with caplog.at_level(logging.INFO, logger="synthdeid.ner.training"):
        resumed = train(TRAIN, VALIDATION, config_for(encoder), progress=False, resume=resume)
    assert f"resumed after epoch {stopped_in - 1}" in caplog.text
    assert resumed.timing["resumed_after_epoch"] == stopped_in - 1
    assert 0 < resumed.timing["seconds_before_resume"] <= resumed.timing["train_seconds"]
    assert "resumed_after_epoch" not in reference.timing
    assert_same_model(resumed, reference)


def test_a_run_stopped_after_its_last_epoch_only_sets_the_operating_point(
    encoder: Path, reference: TrainingResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import synthdeid.ner.training as training

    resume = ResumeFolder(tmp_path / "resume", resume_fingerprint({"run": "a"}))
    with monkeypatch.context() as patch:

        def stopped(*args: Any, **kwargs: Any) -> Any:
            raise Terminated(1)

        patch.setattr(training, "set_operating_point", stopped)
        with pytest.raises(Terminated):
            train(TRAIN, VALIDATION, config_for(encoder), progress=False, resume=resume)
    validated = []
    original = training._validation_metrics
    monkeypatch.setattr(
        training,
        "_validation_metrics",
        lambda *a, **k: validated.append(1) or original(*a, **k),
    )
    resumed = train(TRAIN, VALIDATION, config_for(encoder), progress=False, resume=resume)
    assert validated == [] and resumed.timing["resumed_after_epoch"] == 3
    assert_same_model(resumed, reference)


def test_a_state_saved_for_another_fingerprint_is_not_resumed(
    encoder: Path,
    reference: TrainingResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / "resume"
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        with pytest.raises(Terminated):
            other = ResumeFolder(folder, resume_fingerprint({"settings": "other"}))
            train(TRAIN, VALIDATION, config_for(encoder), progress=False, resume=other)
    resume = ResumeFolder(folder, resume_fingerprint({"settings": "these"}))
    with caplog.at_level(logging.INFO, logger="synthdeid.ner"):
        assert resume.load() is None
        fresh = train(TRAIN, VALIDATION, config_for(encoder), progress=False, resume=resume)
    assert "saved for other inputs, settings or code; training starts from epoch 1" in caplog.text
    assert "resumed after" not in caplog.text and "resumed_after_epoch" not in fresh.timing
    assert_same_model(fresh, reference)
    assert resume.load() is not None  # replaced by this run's state


@pytest.mark.parametrize("content", [b"", b"not a torch file", b"PK\x03\x04 cut short"])
def test_an_unreadable_state_is_named_and_not_resumed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    resume = ResumeFolder(tmp_path, resume_fingerprint({}))
    (tmp_path / STATE_FILE).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="synthdeid.ner.resume"):
        assert resume.load() is None
    assert f"{tmp_path / STATE_FILE}: not a readable training state" in caplog.text


def test_a_state_holding_code_is_refused_not_run(tmp_path: Path) -> None:
    resume = ResumeFolder(tmp_path, resume_fingerprint({}))
    payload = {"version": 1, "fingerprint": resume.fingerprint, "state": {"x": Path("a")}}
    torch.save(payload, tmp_path / STATE_FILE)  # a pickled class: weights_only refuses it
    assert resume.load() is None


def test_the_fingerprint_changes_with_any_part() -> None:
    base = {"inputs": {"train": "sha256:a"}, "settings": {"seed": 1}, "code": "sha256:c"}
    assert resume_fingerprint(base) == resume_fingerprint(dict(reversed(base.items())))
    for changed in (
        {**base, "inputs": {"train": "sha256:b"}},
        {**base, "settings": {"seed": 2}},
        {**base, "code": "sha256:d"},
    ):
        assert resume_fingerprint(changed) != resume_fingerprint(base)


def test_train_ner_resumes_from_its_folder_and_removes_it_with_the_model_saved(
    encoder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_mixture([MixtureNote(note, "real") for note in TRAIN], tmp_path / "train.parquet")
    write_notes(VALIDATION, tmp_path / "validation.parquet")
    settings = config_for(encoder).to_json()
    resume_dir, out = tmp_path / "run" / "resume", tmp_path / "run" / "model"

    def train_ner(*extra: str) -> int:
        argv = ["train-ner", "--train", str(tmp_path / "train.parquet")]
        argv += ["--validation", str(tmp_path / "validation.parquet")]
        argv += ["--settings", json.dumps(settings), "--out-dir", str(out), "--no-progress"]
        return main([*argv, "--resume-dir", str(resume_dir), *extra])

    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        assert train_ner() == 128 + 15
    assert (resume_dir / STATE_FILE).is_file() and not out.exists()
    settings["learning_rate"] = 2e-3  # other settings: the saved state is not theirs
    capsys.readouterr()
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        assert train_ner() == 128 + 15
    assert "training starts from epoch 1" in capsys.readouterr().err
    assert train_ner() == 0
    assert "resumed after epoch 1" in capsys.readouterr().err
    assert not resume_dir.exists() and (out / NER_CONFIG_FILE).is_file()
    history = json.loads((out / HISTORY_FILE).read_text())
    assert history["timing"]["resumed_after_epoch"] == 1


# train-ner in a process of its own, killed (SIGKILL: nothing runs after it, as when the
# machine goes) while epoch 2 is validated
KILLED_IN_EPOCH_2 = """
import os, signal, sys
import synthdeid.ner.training as training
from synthdeid.cli import main

original, calls = training._validation_metrics, []

def validation_metrics(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

training._validation_metrics = validation_metrics
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_train_ner_process_goes_on_to_the_same_weights(
    encoder: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    write_mixture([MixtureNote(note, "real") for note in TRAIN], tmp_path / "train.parquet")
    write_notes(VALIDATION, tmp_path / "validation.parquet")
    settings = json.dumps(config_for(encoder).to_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def argv(run: str) -> list[str]:
        return [
            *("train-ner", "--train", str(tmp_path / "train.parquet")),
            *("--validation", str(tmp_path / "validation.parquet"), "--settings", settings),
            *("--out-dir", str(tmp_path / run / "model"), "--no-progress", "--threads", "1"),
            *("--resume-dir", str(tmp_path / run / "resume")),
        ]

    def synthdeid(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "synthdeid", *arguments]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    assert synthdeid(*argv("reference")).returncode == 0
    script = textwrap.dedent(KILLED_IN_EPOCH_2)
    killed = subprocess.run(
        [sys.executable, "-c", script, *argv("stopped")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (tmp_path / "stopped" / "resume" / STATE_FILE).is_file()
    assert not (tmp_path / "stopped" / "model").exists()
    again = synthdeid(*argv("stopped"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed after epoch 1" in again.stderr
    assert not (tmp_path / "stopped" / "resume").exists()
    got = load_file(tmp_path / "stopped" / "model" / "model.safetensors")
    want = load_file(tmp_path / "reference" / "model" / "model.safetensors")
    assert got.keys() == want.keys()
    assert all(torch.equal(got[name], want[name]) for name in want)
