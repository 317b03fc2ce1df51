"""Artifacts: temporary files of atomic writes (named, removed on failure, on signals and when
stale) and the column check of the table readers."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from synthdeid.artifacts import (
    HOST_TAG,
    MAX_LISTED_COLUMNS,
    TEMP_MARKER,
    atomic_directory,
    atomic_path,
    reading_record,
    remove_stale_temporaries,
    require_columns,
    write_parquet_atomic,
)
from synthdeid.cli import main
from synthdeid.errors import InputError
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Note, notes_to_table, read_notes, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE
from synthdeid.termination import (
    Terminated,
    raise_if_stopped,
    signals_as_exceptions,
    stops_deferred,
)

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "resources" / "demo" / "notes.jsonl"
STRONG_SECRET = "9c41d0e7a25b8f36e1c07d94b3a6f52e8d1b0c97a4e3f26d5b8c1a0e9f7d3b24"
COPIES = 40  # 40 x the demo notes: a run long enough to stop midway


def temporaries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(f"*{TEMP_MARKER}*"))


# --- naming and cleanup in-process


def test_temporary_file_is_beside_the_output_with_a_recognisable_name(tmp_path: Path) -> None:
    target = tmp_path / "x.parquet"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path
        assert tmp.name.startswith(f".x.parquet{TEMP_MARKER}{HOST_TAG}-{os.getpid()}-")
        tmp.write_text("partial")
    assert target.read_text() == "partial" and temporaries(tmp_path) == []


def test_staging_folder_has_the_same_pattern_and_goes_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with pytest.raises(RuntimeError), atomic_directory(target) as staging:
        assert staging.name.startswith(f".model{TEMP_MARKER}")
        (staging / "weights.bin").write_bytes(b"x")
        raise RuntimeError("crash")
    assert not target.exists() and temporaries(tmp_path) == []


def test_a_failed_write_removes_the_folders_it_made(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    for make in (atomic_path, atomic_directory):
        with pytest.raises(RuntimeError), make(tmp_path / "out" / "local" / "x") as tmp:
            assert tmp.parent == tmp_path / "out" / "local"
            raise RuntimeError("crash")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    with atomic_path(tmp_path / "kept" / "new" / "x.json") as tmp:
        tmp.write_text("{}")
    assert (tmp_path / "kept" / "new" / "x.json").is_file()


def test_a_signal_inside_a_write_removes_the_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "removed.parquet"
    with pytest.raises(Terminated) as exc, signals_as_exceptions(), atomic_path(target) as tmp:
        tmp.write_text("removed values")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert exc.value.exit_code == 128 + signal.SIGTERM
    assert not target.exists() and temporaries(tmp_path) == []


def _stopped_right_after(create: Callable[..., Any]) -> Callable[..., Any]:
    """``create`` (mkstemp, mkdtemp), then SIGTERM before the caller has the name it returned:
    the moment a stop sent as soon as the file appears can land."""

    def created_then_stopped(*args: Any, **kwargs: Any) -> Any:
        made = create(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecode for the pending handler to run in
            pass
        return made

    return created_then_stopped


@pytest.mark.parametrize(
    ("write", "create"), [(atomic_path, "mkstemp"), (atomic_directory, "mkdtemp")]
)
def test_a_signal_as_the_temporary_is_created_still_removes_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write: Callable[[Path], AbstractContextManager[Path]],
    create: str,
) -> None:
    monkeypatch.setattr(tempfile, create, _stopped_right_after(getattr(tempfile, create)))
    target = tmp_path / "new" / "removed.parquet"
    body_ran = False
    with pytest.raises(Terminated) as exc, signals_as_exceptions(), write(target):
        body_ran = True
    assert exc.value.signal_name == "SIGTERM" and not body_ran
    assert not target.exists() and temporaries(tmp_path) == []
    assert not (tmp_path / "new").exists()  # the folder made for it went too


def test_a_stop_inside_stops_deferred_waits_for_the_outermost_block_to_end() -> None:
    reached = []
    with pytest.raises(Terminated) as exc, signals_as_exceptions(), stops_deferred():
        with stops_deferred():
            os.kill(os.getpid(), signal.SIGTERM)  # not SIGHUP: ignored under nohup
            for _ in range(1000):
                pass
            reached.append("inner")
        reached.append("outer")
    assert reached == ["inner", "outer"] and exc.value.signal_name == "SIGTERM"


class _StoppedInFinalizer:
    """Sends SIGTERM from ``__del__``, where Python drops the handler's exception."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecode for the pending handler to run in, inside __del__
            pass


def test_a_stop_dropped_inside_a_finalizer_still_stops_the_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "removed.parquet"
    with pytest.raises(Terminated) as exc, signals_as_exceptions(), atomic_path(target) as tmp:
        tmp.write_text("removed values")
        finalized = _StoppedInFinalizer()
        del finalized  # the Terminated raised in __del__ goes nowhere
        tmp.write_text("the step carried on")
    assert exc.value.signal_name == "SIGTERM"
    assert not target.exists() and temporaries(tmp_path) == []
    assert "Terminated" not in capsys.readouterr().err


def test_a_finished_context_forgets_an_earlier_stop(tmp_path: Path) -> None:
    with pytest.raises(Terminated), signals_as_exceptions():
        del_later = _StoppedInFinalizer()
        del del_later
        raise_if_stopped()
    with signals_as_exceptions(), atomic_path(tmp_path / "kept.json") as tmp:
        tmp.write_text("{}")
    assert (tmp_path / "kept.json").is_file()


def test_signal_handlers_are_restored_and_ignored_signals_stay_ignored() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_as_exceptions():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        for sig, handler in before.items():
            assert signal.getsignal(sig) is handler
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, hup)


def finished_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_remove_stale_temporaries_removes_only_those_of_the_given_outputs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead, alive = finished_pid(), os.getppid()
    out = tmp_path / "a.parquet"
    stale_file = tmp_path / f".a.parquet{TEMP_MARKER}123-abc"  # made by hand: stale
    stale_dir = tmp_path / f".a.parquet{TEMP_MARKER}{HOST_TAG}-{dead}-def"
    running = tmp_path / f".a.parquet{TEMP_MARKER}{HOST_TAG}-{alive}-ghi"
    other = tmp_path / f".b.parquet{TEMP_MARKER}{HOST_TAG}-{dead}-abc"  # another output's
    lookalike = tmp_path / f".a.parquetX{TEMP_MARKER}1-x"
    stale_file.write_text("secret surface")
    stale_dir.mkdir()
    (stale_dir / "part").write_text("secret surface")
    for path in (running, other, lookalike):
        path.write_text("x")
    folder = tmp_path / "model"
    inside = folder / "sub" / f".weights.bin{TEMP_MARKER}{HOST_TAG}-{dead}-z"
    inside_running = folder / f".card.json{TEMP_MARKER}{HOST_TAG}-{alive}-z"
    inside_other_host = folder / f".card.json{TEMP_MARKER}elsewhere-{dead}-z"
    inside.parent.mkdir(parents=True)
    for path in (inside, inside_running, inside_other_host):
        path.write_text("x")
    with caplog.at_level(logging.INFO, logger="synthdeid.artifacts"):
        assert remove_stale_temporaries([out, folder, tmp_path / "absent" / "c.json"]) == 3
    kept = [running, other, lookalike, inside_running, inside_other_host]
    assert temporaries(tmp_path) == sorted(kept)
    assert "secret" not in caplog.text
    assert "removed 2 stale temporary file(s)" in caplog.text


# --- a stage run stopped by a signal, in a process of its own


@pytest.fixture(scope="module")
def big_notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo notes, ingested and copied until a surrogate run takes a few seconds."""
    folder = tmp_path_factory.mktemp("big")
    label_map = json.dumps({label: label for label in CANONICAL_LABELS})
    argv = ["ingest-corpus", "--corpus", str(DEMO), "--format", "jsonl", "--label-map", label_map]
    argv += ["--source", "demo", "--out", str(folder / "demo.parquet")]
    assert main([*argv, "--summary", str(folder / "demo.json")]) == 0
    notes = read_notes(folder / "demo.parquet")
    copies = [
        dataclasses.replace(n, note_id=f"{n.note_id}-{c}", patient_id=f"{n.patient_id}-{c}")
        for c in range(COPIES)
        for n in notes
    ]
    write_notes(copies, folder / "big.parquet")
    return folder


def start_surrogate(notes: Path, out: Path) -> subprocess.Popen[str]:
    env = {**os.environ, SECRET_VARIABLE: STRONG_SECRET, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "synthdeid", "replace-surrogates", str(notes), str(out)]
    return subprocess.Popen(
        [*command, "--batch-rows", "20"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_temporary(process: subprocess.Popen[str], folder: Path, name: str) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [p for p in temporaries(folder) if p.name.startswith(f".{name}{TEMP_MARKER}")]
        if found:
            return found[0]
        if process.poll() is not None:
            break
        time.sleep(0.01)
    process.kill()
    _, err = process.communicate()
    pytest.fail(f"no temporary file of {name} appeared while the step ran: {err[-2000:]}")


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_stage_stopped_midway_leaves_no_temporary_file(
    big_notes: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    if signal.getsignal(sig) is signal.SIG_IGN:
        pytest.skip(f"{sig.name} is ignored in this process, so the step would ignore it too")
    out = tmp_path / "out" / "notes.parquet"
    process = start_surrogate(big_notes / "big.parquet", out)
    wait_for_temporary(process, out.parent, out.name)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, err
    assert f"stopped by {sig.name}" in err and "Traceback" not in err
    assert temporaries(tmp_path) == []
    assert not out.exists() and not (out.parent / "local" / "notes.offsets.parquet").exists()


def test_a_killed_stage_leaves_temporaries_that_the_next_run_removes(
    big_notes: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out" / "notes.parquet"
    process = start_surrogate(big_notes / "big.parquet", out)
    wait_for_temporary(process, out.parent, out.name)
    process.kill()  # SIGKILL: nothing can clean up
    process.communicate(timeout=60)
    left = temporaries(tmp_path)
    assert left, "SIGKILL should leave the temporary files behind"
    monkeypatch.setenv(SECRET_VARIABLE, STRONG_SECRET)
    assert main(["replace-surrogates", str(big_notes / "demo.parquet"), str(out)]) == 0
    assert temporaries(tmp_path) == []
    assert out.is_file()
    assert "stale temporary file(s)" in capsys.readouterr().err


def test_a_rerun_removes_a_stale_temporary_of_the_mask_removed_values(
    big_notes: Path, tmp_path: Path
) -> None:
    removed = tmp_path / "local" / "removed.parquet"
    removed.parent.mkdir()
    stale = removed.parent / f".removed.parquet{TEMP_MARKER}4242-abcdefgh"
    stale.write_bytes(b"original surfaces")
    argv = ["mask-seeds", "--notes", str(big_notes / "demo.parquet"), "--parts", "unsplit"]
    argv += ["--out", str(tmp_path / "masked.parquet"), "--removed", str(removed)]
    assert main([*argv, "--summary", str(tmp_path / "summary.json")]) == 0
    assert not stale.exists() and removed.is_file()
    assert temporaries(tmp_path) == []


# --- the column check of table readers


def test_require_columns_names_the_file_the_table_and_the_missing_columns() -> None:
    with pytest.raises(InputError) as caught:
        require_columns("t.parquet", ["d", "a"], ["a", "b", "c", "d"], "a test table", "make it so")
    assert str(caught.value) == (
        "t.parquet: not a test table: missing columns ['b', 'c'] (make it so)"
    )
    assert (caught.value.path, caught.value.record) == ("t.parquet", None)


def test_require_columns_accepts_a_table_with_every_column() -> None:
    require_columns("t.parquet", ["b", "extra", "a"], ["a", "b"], "a test table")
    require_columns("t.parquet", [], [], "a test table")


def test_require_columns_lists_the_first_missing_columns_and_counts_the_rest() -> None:
    expected = [f"c{i}" for i in range(MAX_LISTED_COLUMNS + 3)]
    with pytest.raises(InputError, match=r"missing columns \['c0', .*'c7'\] and 3 more$"):
        require_columns("t.parquet", [], expected, "a test table")


def test_a_reader_refuses_a_table_without_its_columns(tmp_path: Path) -> None:
    table = notes_to_table([Note("n1", "p1", "Seen 3/14.", (), "demo")])
    write_parquet_atomic(table.drop_columns(["text"]), tmp_path / "notes.parquet")
    with pytest.raises(
        InputError, match=r"notes.parquet: not a notes table: missing columns \['text'\]"
    ):
        read_notes(tmp_path / "notes.parquet")


def test_reading_record_names_the_file_and_what_was_wrong(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    with (
        pytest.raises(InputError, match=r"record\.json: unreadable thing file: .*No such file"),
        reading_record(path, "thing file"),
    ):
        json.loads(path.read_text())
    path.write_text("{not json")
    with (
        pytest.raises(InputError, match=r"record\.json: not a valid thing file: JSONDecodeError"),
        reading_record(path, "thing file"),
    ):
        json.loads(path.read_text())
    path.write_text('{"a": 1}')
    with (
        pytest.raises(InputError, match=r"not a valid thing file: KeyError\('b'\)"),
        reading_record(path, "thing file"),
    ):
        json.loads(path.read_text())["b"]
    with reading_record(path, "thing file"):
        assert json.loads(path.read_text()) == {"a": 1}
