"""Row-range shards and their gather: complete sets only, the unsharded bytes back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from synthdeid.artifacts import parquet_writer
from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import NOTES_SCHEMA, Note, Span, notes_to_table, read_notes, write_notes
from synthdeid.shards import (
    MERGE_RULES,
    Shard,
    agreed,
    gather_json,
    gather_parquet,
    merge_summaries,
    shard_output,
    shard_path,
    unsharded_output,
    with_shard,
)
from synthdeid.surrogate.keying import SECRET_VARIABLE

PROVENANCE = {"step": "test", "params": {"seed": 1}}
STRONG_SECRET = "3e8b1f0c9d27a46e5b1c08f93d7a2e64c5b09a1f8e3d72c6b4a0f9e1d8c7b253"


@pytest.mark.parametrize(("total", "count"), [(10, 3), (2, 3), (0, 2), (7, 1), (100, 7)])
def test_shard_rows_tile_the_table_in_order(total: int, count: int) -> None:
    rows = [r for k in range(1, count + 1) for r in Shard(k, count).rows(total)]
    assert rows == list(range(total))
    sizes = [len(Shard(k, count).rows(total)) for k in range(1, count + 1)]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    ("total", "count", "align"), [(10, 3, 2), (10, 3, 4), (2, 3, 5), (0, 2, 3), (9000, 4, 2048)]
)
def test_aligned_shards_tile_the_table_in_whole_chunks(total: int, count: int, align: int) -> None:
    shards = [Shard(k, count, align) for k in range(1, count + 1)]
    rows = [r for shard in shards for r in shard.rows(total)]
    assert rows == list(range(total))
    chunks = [len(shard.rows(total)) // align for shard in shards]  # whole chunks each
    assert max(chunks) - min(chunks) <= 1
    for shard in shards:  # every chunk one job reads starts a shard's chunk too
        bounds = shard.rows(total)
        assert bounds.start % align == 0 and (bounds.stop % align == 0 or bounds.stop == total)
    assert Shard(2, 3, 1).rows(10) == Shard(2, 3).rows(10)
    with pytest.raises(ConfigError, match="alignment"):
        Shard(1, 2, 0)


@pytest.mark.parametrize("text", ["2/3", "2-of-3", " 2/3 "])
def test_shard_parses_both_spellings(text: str) -> None:
    assert Shard.parse(text) == Shard(2, 3) and Shard(2, 3).label == "2-of-3"


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0"])
def test_shard_refuses_what_is_no_shard(text: str) -> None:
    with pytest.raises(ConfigError, match="shard"):
        Shard.parse(text)


def notes(count: int) -> list[Note]:
    return [Note(f"n{i}", f"p{i}", f"text {i}", (), "synthetic-test") for i in range(count)]


def write_shards(
    folder: Path, count: int, total: int, provenance: dict = PROVENANCE, align: int = 1
) -> list[Path]:
    paths = []
    for k in range(1, count + 1):
        shard = Shard(k, count, align)
        rows = shard.rows(total)
        path = Path(shard_path(str(folder / "notes.parquet"), shard.label))
        with parquet_writer(path, NOTES_SCHEMA, provenance, metadata=shard.metadata(total)) as w:
            w.write(notes_to_table(notes(total)[rows.start : rows.stop]))
        paths.append(path)
    return paths


def test_gather_gives_the_bytes_of_one_write_in_any_order(tmp_path: Path) -> None:
    whole = tmp_path / "whole.parquet"
    with parquet_writer(whole, NOTES_SCHEMA, PROVENANCE) as writer:
        writer.write(notes_to_table(notes(20)))
    shards = write_shards(tmp_path, 3, 20)
    out = tmp_path / "gathered.parquet"
    assert gather_parquet(list(reversed(shards)), out) == 20
    assert out.read_bytes() == whole.read_bytes()


def test_gather_joins_shards_cut_on_whole_chunks(tmp_path: Path) -> None:
    # 20 rows in chunks of 4: 5 chunks over 3 shards, [0, 4) [4, 12) [12, 20), not the
    # unaligned [0, 6) [6, 13) [13, 20)
    assert Shard(1, 3, 4).rows(20) != Shard(1, 3).rows(20)
    whole = tmp_path / "whole.parquet"
    with parquet_writer(whole, NOTES_SCHEMA, PROVENANCE) as writer:
        writer.write(notes_to_table(notes(20)))
    out = tmp_path / "gathered.parquet"
    assert gather_parquet(write_shards(tmp_path / "aligned", 3, 20, align=4), out) == 20
    assert out.read_bytes() == whole.read_bytes()
    mixed = [*write_shards(tmp_path / "a", 3, 20, align=4)[:2]]
    mixed += write_shards(tmp_path / "b", 3, 20)[2:]
    with pytest.raises(InputError, match="aligned on 1"):
        gather_parquet(mixed, tmp_path / "mixed.parquet")


def test_gather_refuses_an_incomplete_set(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, 3, 20)
    with pytest.raises(InputError, match="lacks 2-of-3"):
        gather_parquet([shards[0], shards[2]], tmp_path / "out.parquet")
    with pytest.raises(InputError, match="given twice"):
        gather_parquet([shards[0], shards[1], shards[1]], tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_gather_refuses_shards_of_different_runs(tmp_path: Path) -> None:
    ours = write_shards(tmp_path / "a", 2, 20)
    theirs = write_shards(tmp_path / "b", 2, 20, {"step": "test", "params": {"seed": 2}})
    with pytest.raises(InputError, match="provenance differs"):
        gather_parquet([ours[0], theirs[1]], tmp_path / "out.parquet")
    other_size = write_shards(tmp_path / "c", 2, 21)
    with pytest.raises(InputError, match="does not belong"):
        gather_parquet([ours[0], other_size[1]], tmp_path / "out.parquet")


def test_gather_refuses_a_file_that_is_no_shard(tmp_path: Path) -> None:
    plain = tmp_path / "plain.parquet"
    with parquet_writer(plain, NOTES_SCHEMA, PROVENANCE) as writer:
        writer.write(notes_to_table(notes(3)))
    with pytest.raises(InputError, match="not a shard artifact"):
        gather_parquet([plain], tmp_path / "out.parquet")


def test_merge_summaries_adds_counts_and_recomputes_the_rate() -> None:
    shards = [
        {
            "notes": 10,
            "seconds": 2.0,
            "notes_per_second": 5.0,
            "by_label": {"DATE": 3},
            "mode": "x",
        },
        {
            "notes": 30,
            "seconds": 2.0,
            "notes_per_second": 15.0,
            "by_label": {"DATE": 1, "AGE": 2},
            "mode": "x",
        },
        {"notes": 0, "seconds": 0.0, "notes_per_second": None, "by_label": {}, "mode": "x"},
    ]
    merged = merge_summaries(shards)
    assert merged == {
        "notes": 40,
        "seconds": 4.0,
        "notes_per_second": 10.0,  # 40 notes / 4 s, not the sum of the rates
        "by_label": {"DATE": 4, "AGE": 2},
        "mode": "x",
    }
    with pytest.raises(ConfigError, match="disagree at mode"):
        merge_summaries([{"mode": "x"}, {"mode": "y"}])


def test_merge_summaries_applies_a_rule_after_the_other_keys() -> None:
    """A rule sees every shard's value and the object's other keys, merged."""

    def share(values: list[Any], merged: dict[str, Any]) -> float:
        assert values == [0.5, None]  # each shard's own figure, not added
        return merged["hits"] / merged["notes"]

    shards = [{"share": 0.5, "hits": 1, "notes": 2}, {"share": None, "hits": 2, "notes": 4}]
    merged = merge_summaries(shards, rules={**MERGE_RULES, "share": share})
    assert merged == {"share": 0.5, "hits": 3, "notes": 6}
    assert list(merged) == ["share", "hits", "notes"]  # the key keeps its place


def test_agreed_keeps_a_setting_every_shard_writes_and_refuses_a_difference() -> None:
    shards = [{"seeds": 9, "requested": 4}, {"seeds": 9, "requested": 5}]
    assert merge_summaries(shards, rules={"seeds": agreed}) == {"seeds": 9, "requested": 9}
    with pytest.raises(ConfigError, match=r"disagree at sample: every shard must write it alike$"):
        merge_summaries(
            [{"sample": {"size": 2}}, {"sample": {"size": 3}}], rules={"sample": agreed}
        )


def test_merge_summaries_keeps_the_first_examples() -> None:
    shards = [{"examples": [1, 2], "max_examples": 3}, {"examples": [3, 4], "max_examples": 3}]
    assert merge_summaries(shards) == {"examples": [1, 2, 3], "max_examples": 3}


def test_gather_json_keeps_the_provenance_once(tmp_path: Path) -> None:
    paths = []
    for k, count in ((1, 4), (2, 6)):
        body = with_shard({"summary": {"notes": count}, "provenance": PROVENANCE}, Shard(k, 2), 10)
        path = tmp_path / f"{k}.json"
        path.write_text(json.dumps(body))
        paths.append(path)
    gather_json(paths, tmp_path / "summary.json")
    merged = json.loads((tmp_path / "summary.json").read_text())
    assert merged == {"summary": {"notes": 10}, "provenance": PROVENANCE}


def test_the_cli_gathers_and_names_a_bad_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_shards(tmp_path, 2, 5)
    out = tmp_path / "notes.parquet"
    assert main(["gather-shards", "--count", "2", str(out)]) == 0
    assert [n.note_id for n in read_notes(out)] == [f"n{i}" for i in range(5)]
    assert main(["gather-shards", "--count", "3", str(out)]) == 2
    missing = ", ".join(str(tmp_path / f"notes.shard-{k}-of-3.parquet") for k in (1, 2, 3))
    assert f"{out}: its shards {missing} are missing" in capsys.readouterr().err


def test_replace_surrogates_shards_gather_to_the_unsharded_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard still reads every note's originals, so its surrogates are the whole run's."""
    monkeypatch.setenv(SECRET_VARIABLE, STRONG_SECRET)
    source = tmp_path / "in.parquet"
    made_up = []
    for i in range(40):
        doctor, day = f"Vale{i % 5}", f"2101-02-{i % 27 + 1:02d}"
        text = f"Dr. {doctor} saw her on {day}."
        spans = (
            Span(text.index(doctor), text.index(doctor) + len(doctor), "DOCTOR"),
            Span(text.index(day), text.index(day) + len(day), "DATE"),
        )
        made_up.append(Note(f"n{i:03d}", f"p{i % 7}", text, spans, "synthetic-test"))
    write_notes(made_up, source)
    # the local-only side outputs lie in a local/ folder, as replace-surrogates requires
    outputs = ["notes.parquet", "local/offsets.parquet", "summary.json", "local/leftovers.json"]

    def command(folder: Path, shard: Shard | None) -> list[str]:
        def place(name: str) -> str:
            path = str(folder / name)
            return path if shard is None else shard_path(path, shard.label)

        notes, offsets, summary, leftovers = map(place, outputs)
        argv = ["replace-surrogates", str(source), notes, "--offsets", offsets]
        argv += ["--summary", summary, "--leftovers", leftovers, "--batch-rows", "6"]
        return argv if shard is None else [*argv, "--shard", shard.label]

    assert main(command(tmp_path / "whole", None)) == 0
    for k in (3, 1, 2):
        assert main(command(tmp_path / "gathered", Shard(k, 3))) == 0
    gathered = [str(tmp_path / "gathered" / name) for name in outputs]
    assert main(["gather-shards", "--count", "3", *gathered]) == 0
    for name in outputs:
        one = (tmp_path / "whole" / name).read_bytes()
        assert (tmp_path / "gathered" / name).read_bytes() == one, name


@pytest.mark.parametrize(
    ("path", "sharded"),
    [
        ("results/x/notes.parquet", "results/x/notes.shard-2-of-3.parquet"),
        ("logs/x/demo.log", "logs/x/demo.shard-2-of-3.log"),
        ("a/b.tar.gz", "a/b.tar.shard-2-of-3.gz"),
        ("model", "model.shard-2-of-3"),
    ],
)
def test_shard_path_puts_the_shard_before_the_suffix(path: str, sharded: str) -> None:
    assert shard_path(path, "2-of-3") == sharded


@pytest.mark.parametrize(
    "path", ["results/x/notes.parquet", "logs/x/demo.log", "a/b.tar.gz", "model", "x/local/t.json"]
)
def test_unsharded_output_undoes_shard_output(path: str) -> None:
    shard = Shard(2, 3)
    assert unsharded_output(shard_output(Path(path), shard), shard) == Path(path)
    assert unsharded_output(Path(path), None) == Path(path)
    assert unsharded_output(Path(path), shard) == Path(path)  # not a shard path: itself
