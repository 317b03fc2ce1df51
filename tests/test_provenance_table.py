"""The provenance table of final artifacts: read from Parquet metadata and JSON records,
n/a where an artifact records none, and the stage's outputs (list-provenance)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from synthdeid import cli
from synthdeid.artifacts import make_provenance, write_json_atomic, write_parquet_atomic
from synthdeid.code_identity import running, stage_code_digest
from synthdeid.provenance_table import params_digest, provenance_rows, read_provenance


def artifacts(tmp_path: Path) -> list[Path]:
    with running("synthdeid.stages.split_notes"):
        record = make_provenance("split-notes", {"seed": 3}, {})
    parquet = tmp_path / "notes.parquet"
    write_parquet_atomic(pa.table({"x": [1]}), parquet, record)
    summary = tmp_path / "summary.json"
    write_json_atomic({"summary": {"provenance": record}}, summary)
    bare = tmp_path / "bare.json"
    bare.write_text('{"n": 1}')
    return [parquet, summary, bare]


def test_rows_read_what_each_artifact_records_and_na_where_none(tmp_path: Path) -> None:
    parquet, summary, bare = artifacts(tmp_path)
    assert read_provenance(bare) is None
    rows = provenance_rows([parquet, summary, bare])
    assert [r.step for r in rows] == ["split-notes", "split-notes", None]
    assert rows[0].code_digest == stage_code_digest("split-notes")
    assert rows[0].params_digest == params_digest({"seed": 3}) != params_digest({"seed": 4})
    assert rows[0].inputs == 0 and rows[2].inputs is None


def test_the_stage_writes_the_table_and_refuses_an_unreadable_artifact(
    tmp_path: Path, capsys
) -> None:
    paths = artifacts(tmp_path)
    out = tmp_path / "out"
    assert (
        cli.main(["list-provenance", "--artifacts", *map(str, paths), "--out-dir", str(out)]) == 0
    )
    record = json.loads((out / "provenance.json").read_text())
    assert [a["step"] for a in record["artifacts"]] == ["split-notes", "split-notes", None]
    table = (out / "provenance.md").read_text()
    assert "3 final artifacts; 2 record their provenance" in table
    digest = stage_code_digest("split-notes").split(":")[1][:12]
    assert f"| `{paths[0]}` | split-notes | `{digest}` |" in table
    assert table.splitlines()[-1].endswith("| n/a | n/a | n/a | n/a |")
    assert (out / "provenance.html").read_text().startswith("<!DOCTYPE html>")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    code = cli.main(
        ["list-provenance", "--artifacts", str(broken), "--out-dir", str(tmp_path / "x")]
    )
    assert code == 2 and "broken.parquet" in capsys.readouterr().err
    assert not (tmp_path / "x" / "provenance.json").exists()


@pytest.mark.parametrize("text", ["[1, 2]", '{"provenance": "no"}'])
def test_json_without_a_provenance_record_is_na(tmp_path: Path, text: str) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    assert read_provenance(path) is None
