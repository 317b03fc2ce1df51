"""Hostile tries against sharding: shard records, provenance and the gather of shards.

Each try is refused with exit status 2 and one line on stderr naming the file,
the record and the problem (never a file's contents), and ``gather-shards``
writes none of its outputs when it refuses any of them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from synthdeid.artifacts import open_parquet, parquet_writer, read_parquet_with_provenance
from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError, read_error_detail
from synthdeid.local_only import local_path
from synthdeid.notes import (
    NOTES_SCHEMA,
    Note,
    Span,
    iter_notes,
    notes_to_table,
    read_notes,
    write_notes,
)
from synthdeid.shards import (
    MAX_SHARDS,
    Shard,
    gather_json,
    gather_parquet,
    shard_path,
    shard_paths,
    with_shard,
)
from synthdeid.surrogate.keying import SECRET_VARIABLE
from synthdeid.teacher.teachers import read_dictionary

PROVENANCE = {"step": "test", "params": {"seed": 1}}
KEY_A = "3e8b1f0c9d27a46e5b1c08f93d7a2e64c5b09a1f8e3d72c6b4a0f9e1d8c7b253"
KEY_B = "9c1d7e3a5b0f48d26e9a1c7b3f5d08e42a6c9b1e7f3d5a08c2e4b6d9f1a3c705"
SECRET_WORD = "Quillfeather"  # stands for PHI: no message may quote it


def notes(count: int) -> list[Note]:
    return [Note(f"n{i}", f"p{i}", f"text {i}", (), "synthetic-test") for i in range(count)]


def write_shards(folder: Path, count: int, total: int, name: str = "notes.parquet") -> list[Path]:
    """The ``count`` shards of ``name``, rows ``n0..`` split as a sharded step splits them."""
    paths = []
    for k in range(1, count + 1):
        shard = Shard(k, count)
        rows = shard.rows(total)
        path = Path(shard_path(str(folder / name), shard.label))
        with parquet_writer(path, NOTES_SCHEMA, PROVENANCE, metadata=shard.metadata(total)) as w:
            w.write(notes_to_table(notes(total)[rows.start : rows.stop]))
        paths.append(path)
    return paths


def write_json_shards(folder: Path, bodies: list[dict[str, Any]], total: int) -> list[Path]:
    count = len(bodies)
    paths = []
    for k, body in enumerate(bodies, start=1):
        path = Path(shard_path(str(folder / "summary.json"), Shard(k, count).label))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(with_shard(body, Shard(k, count), total)))
        paths.append(path)
    return paths


def set_shard_record(path: Path, record: Any) -> None:
    """Replace the ``synthdeid.shard`` record of a Parquet shard (a hand edit)."""
    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    metadata[b"synthdeid.shard"] = json.dumps(record).encode()
    pq.write_table(table.replace_schema_metadata(metadata), path)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``synthdeid argv``: exit status 2, one error line on stderr, no traceback; stderr."""
    capsys.readouterr()  # what earlier commands wrote
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse usage errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 or err.startswith("usage:"), err
    return err


# ---------------------------------------------------------------- messages without contents


def test_an_undecodable_shard_summary_is_named_by_byte_not_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_json_shards(tmp_path, [{"summary": {"notes": 1}}] * 2, 4)
    raw = f'{{"summary": "{SECRET_WORD} \xe9"}}'.encode("latin-1")
    paths[1].write_bytes(raw)
    log = tmp_path / "gather.log"
    err = refused(
        ["--log", str(log), "gather-shards", "--count", "2", str(tmp_path / "summary.json")],
        capsys,
    )
    assert "summary.shard-2-of-2.json" in err and f"byte {raw.index(0xE9)}" in err, err
    for text in (err, log.read_text()):
        assert SECRET_WORD not in text and "\\xe9" not in text and "0xe9" not in text
    assert not (tmp_path / "summary.json").exists()


def test_shard_summaries_that_disagree_are_named_by_key_not_value(tmp_path: Path) -> None:
    bodies = [{"summary": {"teacher": "a"}}, {"summary": {"teacher": SECRET_WORD}}]
    with pytest.raises(InputError) as caught:
        gather_json(write_json_shards(tmp_path, bodies, 4), tmp_path / "summary.json")
    assert "summary.teacher" in str(caught.value) and SECRET_WORD not in str(caught.value)
    assert "summary.shard-2-of-2.json" in str(caught.value)


def test_the_read_error_detail_names_the_byte_and_never_the_bytes() -> None:
    raw = f"{SECRET_WORD} \xe9 more".encode("latin-1")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        detail = read_error_detail(exc)
    assert (
        detail == "UnicodeDecodeError: byte 13 does not decode as utf-8 (invalid continuation byte)"
    )
    try:
        int(SECRET_WORD)
    except ValueError as exc:
        assert read_error_detail(exc) == "ValueError"


def test_an_undecodable_teacher_dictionary_is_named_by_byte(tmp_path: Path) -> None:
    path = tmp_path / "names.txt"
    path.write_bytes(f"{SECRET_WORD}\n\xff\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        read_dictionary(path)
    assert "byte 13" in str(caught.value) and "0xff" not in str(caught.value)


@pytest.mark.parametrize(
    "reader", ["archive-record", "model-settings", "lm-settings", "mixture-summary"]
)
def test_json_readers_name_an_undecodable_byte(tmp_path: Path, reader: str) -> None:
    """Other JSON records read whole: one InputError naming the byte, not a traceback."""
    from synthdeid.dplm.training import LM_SETTINGS_FILE, read_lm_settings
    from synthdeid.evaluation.archive import read_json
    from synthdeid.ner.mixtures import read_mixture_summary
    from synthdeid.ner.model import NER_CONFIG_FILE, NerSettings

    raw = f'{{"labels": "{SECRET_WORD} \xe9"}}'.encode("latin-1")
    name = {
        "archive-record": "run.json",
        "model-settings": NER_CONFIG_FILE,
        "mixture-summary": "summary.json",
    }
    path = tmp_path / name.get(reader, LM_SETTINGS_FILE)
    path.write_bytes(raw)
    read = {
        "archive-record": lambda: read_json(path, "archived run record"),
        "model-settings": lambda: NerSettings.load(tmp_path),
        "lm-settings": lambda: read_lm_settings(tmp_path),
        "mixture-summary": lambda: read_mixture_summary(path),
    }[reader]
    with pytest.raises(InputError) as caught:
        read()
    message = str(caught.value)
    assert path.name in message and f"byte {raw.index(0xE9)}" in message, message
    assert SECRET_WORD not in message and "0xe9" not in message


# ---------------------------------------------------------------- readers refuse shards


def test_every_reader_refuses_a_shard_artifact_at_a_whole_table_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard written at the whole table's path is not read as the whole table."""
    monkeypatch.setenv(SECRET_VARIABLE, KEY_A)
    source = tmp_path / "in.parquet"
    write_notes(notes(8), source)
    out = tmp_path / "out.parquet"  # not a shard path
    assert main(["replace-surrogates", str(source), str(out), "--shard", "1/4"]) == 0
    message = r"out\.parquet: a shard artifact \(shard 1-of-4\), not a whole table"
    with pytest.raises(InputError, match=message + r" \(gather the shards"):
        read_notes(out)
    with pytest.raises(InputError, match=message):
        next(iter_notes(out))
    with pytest.raises(InputError, match=message):
        read_parquet_with_provenance(out)
    assert open_parquet(out, shard_artifact=True).metadata.num_rows == 2
    err = refused(["replace-surrogates", str(out), str(tmp_path / "again.parquet")], capsys)
    assert "a shard artifact (shard 1-of-4), not a whole table" in err
    assert not (tmp_path / "again.parquet").exists()


# ---------------------------------------------------------------- provenance of every output


def surrogate_shards(
    folder: Path, source: Path, count: int, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """replace-surrogates in ``count`` shards at the shard paths, side outputs by default."""
    monkeypatch.setenv(SECRET_VARIABLE, key)
    for shard in shard_paths(folder / "notes.parquet", count):
        label = shard.name.split(".")[1].removeprefix("shard-")
        assert main(["replace-surrogates", str(source), str(shard), "--shard", label]) == 0


def surrogate_notes(tmp_path: Path) -> Path:
    source = tmp_path / "in.parquet"
    made_up = []
    for i in range(12):
        text = f"Dr. Vale{i % 3} saw her."
        made_up.append(Note(f"n{i:02d}", f"p{i % 4}", text, (Span(4, 9, "DOCTOR"),), "test"))
    write_notes(made_up, source)
    return source


def side_outputs(folder: Path) -> list[Path]:
    """replace-surrogates' outputs for ``folder/notes.parquet``, side outputs at their defaults."""
    notes_out = folder / "notes.parquet"
    return [
        notes_out,
        folder / "notes.summary.json",
        local_path(notes_out, ".offsets.parquet"),
        local_path(notes_out, ".leftovers.json"),
    ]


def test_default_side_outputs_of_a_shard_are_where_the_gather_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = surrogate_notes(tmp_path)
    monkeypatch.setenv(SECRET_VARIABLE, KEY_A)
    whole = tmp_path / "whole"
    assert main(["replace-surrogates", str(source), str(whole / "notes.parquet")]) == 0
    surrogate_shards(tmp_path / "gathered", source, 3, monkeypatch, KEY_A)
    gathered = side_outputs(tmp_path / "gathered")
    for output in gathered:
        assert all(shard.is_file() for shard in shard_paths(output, 3)), output
    assert main(["gather-shards", "--count", "3", *map(str, gathered)]) == 0
    for one, joined in zip(side_outputs(whole), gathered, strict=True):
        assert joined.read_bytes() == one.read_bytes(), one.name


def test_leftovers_carry_the_provenance_of_their_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another corpus's (or key's) leftovers shard is not merged into this run's file."""
    source = surrogate_notes(tmp_path)
    surrogate_shards(tmp_path / "a", source, 2, monkeypatch, KEY_A)
    surrogate_shards(tmp_path / "b", source, 2, monkeypatch, KEY_B)
    outputs_a, outputs_b = side_outputs(tmp_path / "a"), side_outputs(tmp_path / "b")
    leftovers = json.loads(shard_paths(outputs_a[3], 2)[0].read_text())
    summary = json.loads(shard_paths(outputs_a[1], 2)[0].read_text())
    assert leftovers["provenance"] == summary["provenance"]
    # run b's second leftovers shard beside run a's first
    shutil.copy(shard_paths(outputs_b[3], 2)[1], shard_paths(outputs_a[3], 2)[1])
    err = refused(["gather-shards", "--count", "2", str(outputs_a[3])], capsys)
    assert "leftovers.shard-2-of-2.json: its provenance differs" in err
    assert not outputs_a[3].exists()


def test_one_gather_joins_only_outputs_of_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offsets made with key B are not joined to notes made with key A in one call."""
    source = surrogate_notes(tmp_path)
    surrogate_shards(tmp_path / "a", source, 2, monkeypatch, KEY_A)
    surrogate_shards(tmp_path / "b", source, 2, monkeypatch, KEY_B)
    notes_a, offsets_b = side_outputs(tmp_path / "a")[0], side_outputs(tmp_path / "b")[2]
    err = refused(["gather-shards", "--count", "2", str(notes_a), str(offsets_b)], capsys)
    assert "offsets.shard-1-of-2.parquet" in err and "notes.shard-1-of-2.parquet" in err, err
    assert "another run" in err
    assert not notes_a.exists() and not offsets_b.exists()


def test_gather_writes_no_output_when_a_later_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gather-shards A B with B's set lacking a shard: A is not written either."""
    write_shards(tmp_path, 2, 6)
    write_shards(tmp_path, 2, 6, name="copy.parquet")[1].unlink()
    outputs = [str(tmp_path / "notes.parquet"), str(tmp_path / "copy.parquet")]
    err = refused(["gather-shards", "--count", "2", *outputs], capsys)
    assert "copy.shard-2-of-2.parquet" in err
    assert not (tmp_path / "notes.parquet").exists()


def test_gather_writes_no_output_when_a_later_set_is_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_shards(tmp_path, 2, 6)
    bad = write_shards(tmp_path, 2, 6, name="copy.parquet")
    set_shard_record(bad[1], Shard(1, 2).record(6))  # shard 1 twice, shard 2 lacking
    outputs = [str(tmp_path / "notes.parquet"), str(tmp_path / "copy.parquet")]
    err = refused(["gather-shards", "--count", "2", *outputs], capsys)
    assert "given twice" in err
    assert not (tmp_path / "notes.parquet").exists()


# ---------------------------------------------------------------- models in provenance


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two saved (untrained) token-classification models that differ only in their weights."""
    import torch
    from transformers import AutoModelForTokenClassification

    from ner_helpers import tiny_encoder_dir
    from synthdeid.ner.model import NerSettings

    root = tmp_path_factory.mktemp("models")
    made = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        directory = tiny_encoder_dir(root / f"model{seed}")
        settings = NerSettings(labels=["DOCTOR"], max_length=64, stride=8)
        model = AutoModelForTokenClassification.from_pretrained(
            directory, num_labels=len(settings.tags)
        )
        model.save_pretrained(directory)
        settings.save(directory)
        made.append(directory)
    return made[0], made[1]


def test_predict_ner_shards_of_two_models_are_not_gathered(
    tmp_path: Path, two_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The model folder is swapped between two shard jobs: same path, other weights."""
    source = tmp_path / "notes.parquet"
    write_notes(notes(6), source)
    model = tmp_path / "model"
    out = tmp_path / "predictions.parquet"
    for k, made in ((1, two_models[0]), (2, two_models[1])):
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(made, model)
        argv = ["predict-ner", "--model", str(model), "--notes", str(source)]
        argv += ["--out", str(shard_paths(out, 2)[k - 1]), "--mode", "none", "--threads", "1"]
        assert main([*argv, "--device", "cpu", "--precision", "fp32", "--shard", f"{k}/2"]) == 0
    metadata = open_parquet(shard_paths(out, 2)[0], shard_artifact=True).schema_arrow.metadata
    provenance = json.loads(metadata[b"synthdeid.provenance"])
    assert provenance["inputs"]["model"]["digest"].startswith("sha256:")
    # the summary's default path is where the gather looks for it
    summary = out.with_suffix(".summary.json")
    assert all(path.is_file() for path in shard_paths(summary, 2))
    err = refused(["gather-shards", "--count", "2", str(out)], capsys)
    assert "predictions.shard-2-of-2.parquet: its provenance differs" in err
    assert not out.exists()


def test_label_teacher_shards_of_two_models_are_not_gathered(
    tmp_path: Path, two_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "notes.parquet"
    write_notes(
        [Note(n.note_id, n.patient_id, n.text, (), n.source, "seed") for n in notes(4)], source
    )
    model = tmp_path / "model"
    out = tmp_path / "teacher"
    for k, made in ((1, two_models[0]), (2, two_models[1])):
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(made, model)
        argv = ["label-teacher", "--notes", str(source), "--parts", "seed", "--teacher", "m"]
        argv += ["--settings", '{"kind": "model"}', "--model", str(model), "--device", "cpu"]
        assert main([*argv, "--out-dir", str(out), "--shard", f"{k}/2"]) == 0
    summary = json.loads((out / "summary.shard-1-of-2.json").read_text())
    assert summary["provenance"]["params"]["settings"]["model_digest"].startswith("sha256:")
    err = refused(["gather-shards", "--count", "2", str(out / "labels.parquet")], capsys)
    assert "labels.shard-2-of-2.parquet: its provenance differs" in err


# ---------------------------------------------------------------- hand-edited shard records


BAD_RECORDS: list[tuple[str, Any, str]] = [
    ("no-index", {"count": 2, "align": 1, "rows": [3, 6], "input_rows": 6}, "index"),
    ("a-list", [2, 2], "a JSON array, not an object"),
    ("count-a-string", {**Shard(2, 2).record(6), "count": "2"}, "count"),
    ("index-a-boolean", {**Shard(2, 2).record(6), "index": True}, "index"),
    ("rows-not-a-pair", {**Shard(2, 2).record(6), "rows": [3]}, "rows"),
    ("rows-a-lie", {**Shard(2, 2).record(6), "rows": [0, 6]}, "covers input rows [0, 6]"),
    ("index-past-count", {**Shard(2, 2).record(6), "index": 3}, "index"),
]


@pytest.mark.parametrize(
    ("record", "message"), [(r, m) for _, r, m in BAD_RECORDS], ids=[i for i, _, _ in BAD_RECORDS]
)
def test_a_hand_edited_shard_record_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Any, message: str
) -> None:
    shards = write_shards(tmp_path, 2, 6)
    set_shard_record(shards[1], record)
    err = refused(["gather-shards", "--count", "2", str(tmp_path / "notes.parquet")], capsys)
    assert "notes.shard-2-of-2.parquet" in err and message in err, err
    assert not (tmp_path / "notes.parquet").exists()


@pytest.mark.parametrize(
    ("record", "message"), [(r, m) for _, r, m in BAD_RECORDS], ids=[i for i, _, _ in BAD_RECORDS]
)
def test_a_hand_edited_summary_record_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Any, message: str
) -> None:
    paths = write_json_shards(tmp_path, [{"summary": {"notes": 3}}] * 2, 6)
    body = json.loads(paths[1].read_text())
    paths[1].write_text(json.dumps({**body, "shard": record}))
    err = refused(["gather-shards", "--count", "2", str(tmp_path / "summary.json")], capsys)
    assert "summary.shard-2-of-2.json" in err and message in err, err


def test_a_shard_copied_over_another_gives_no_duplicate_note_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shard 1's rows under shard 2's record: every record checks out, the note ids do not."""
    shards = write_shards(tmp_path, 2, 120)
    shutil.copy(shards[0], shards[1])
    set_shard_record(shards[1], Shard(2, 2).record(120))
    err = refused(["gather-shards", "--count", "2", str(tmp_path / "notes.parquet")], capsys)
    assert "notes.shard-2-of-2.parquet: note 'n0'" in err, err
    assert not (tmp_path / "notes.parquet").exists()


# ---------------------------------------------------------------- adversarial counts


def test_a_huge_shard_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for count in (MAX_SHARDS + 1, 10**5, 10**6):
        err = refused(["gather-shards", "--count", str(count), "out.parquet"], capsys)
        assert f"at most {MAX_SHARDS}" in err and len(err) < 1000
    with pytest.raises(ConfigError, match=f"at most {MAX_SHARDS}"):
        Shard(1, MAX_SHARDS + 1)


def test_many_missing_shards_are_listed_briefly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = write_shards(tmp_path, 50, 100)
    with pytest.raises(InputError) as caught:
        gather_parquet(shards[:1], tmp_path / "out.parquet")
    message = str(caught.value)
    assert "lacks 2-of-50, 3-of-50, 4-of-50, 5-of-50, 6-of-50 and 44 more" in message, message
    err = refused(
        ["gather-shards", "--count", str(MAX_SHARDS), str(tmp_path / "none.parquet")], capsys
    )
    assert f"and {MAX_SHARDS - 5} more are missing" in err and len(err) < 2000, err
