"""Local-only artifacts (original PHI, or what reveals it) live apart from releasable ones."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthdeid.cli import main
from synthdeid.local_only import LOCAL_ONLY_KEY, is_local_path, local_path
from synthdeid.notes import Note, Span, read_notes, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE

REPO = Path(__file__).resolve().parents[1]
RULES = sorted((REPO / "workflow" / "rules").glob("*.smk"))
# file names of the artifacts that hold original surfaces or reveal their lengths
LOCAL_ONLY_NAMES = ("removed_values", "leftovers", "offsets")
# the rules that may read a local-only artifact: each uses it to screen its own
# output for seed PHI (the request guard and the pools' seed-PHI screen)
LOCAL_READERS = {
    "generate_templates",
    "fill_templates",
    "fill_control_templates",
    "sample_dp_lm",
}


def test_local_path_puts_the_artifact_in_a_local_folder_beside_the_output() -> None:
    out = Path("results/replace_surrogates/demo/notes.parquet")
    assert local_path(out, ".offsets.parquet") == Path(
        "results/replace_surrogates/demo/local/notes.offsets.parquet"
    )
    assert is_local_path(local_path(out, ".leftovers.json"))
    assert not is_local_path(out)
    assert not is_local_path("results/x/demo/local")  # the folder itself is not an artifact


def test_surrogate_output_keeps_no_original_offsets(tmp_path, monkeypatch) -> None:
    text = "Seen by Dr. Ames on 3/14, Ames again."
    notes = [Note(f"n{i}", "p1", text, (Span(12, 16, "DOCTOR"),), "t", "seed") for i in range(3)]
    source, out = tmp_path / "in.parquet", tmp_path / "out" / "notes.parquet"
    write_notes(notes, source)
    monkeypatch.setenv(SECRET_VARIABLE, secrets.token_hex(32))
    assert main(["replace-surrogates", str(source), str(out)]) == 0
    # the releasable table: no column that could give an original value's length
    names = pq.read_schema(out).names
    assert not [n for n in names if "old" in n or "offset" in n], names
    # the marked mention is replaced; the unmarked one is a leftover (by design)
    assert all(
        n.text.startswith("Seen by Dr. ") and "Ames" not in n.text[:16] for n in read_notes(out)
    )
    # the offsets and leftovers are local only, in the local folder
    offsets_path = out.parent / "local" / "notes.offsets.parquet"
    offsets = pq.read_table(offsets_path)
    assert offsets.schema.metadata[LOCAL_ONLY_KEY] == b"true"
    first = offsets.column("offset_map").to_pylist()[0][0]
    assert (first["old_start"], first["old_end"]) == (12, 16)
    leftovers = out.parent / "local" / "notes.leftovers.json"
    assert '"local_only": true' in leftovers.read_text() and "Ames" in leftovers.read_text()
    # the summary beside the output names no original surface
    summary = out.parent / "notes.summary.json"
    assert "Ames" not in summary.read_text()


def _rule_blocks() -> dict[str, str]:
    """rule name -> its text, over every rule file of the workflow."""
    blocks: dict[str, str] = {}
    for path in RULES:
        # plain rules and rules inherited with `use rule ... as NAME with:`
        parts = re.split(
            r"^(?:rule (\w+):|use rule \w+ as (\w+) with:)", path.read_text(), flags=re.MULTILINE
        )
        names = [a or b for a, b in zip(parts[1::3], parts[2::3], strict=True)]
        for name, body in zip(names, parts[3::3], strict=True):
            blocks[name] = body
    return blocks


def test_every_local_only_output_of_the_workflow_is_in_a_local_folder() -> None:
    blocks = _rule_blocks()
    assert {"mask_seeds", "replace_surrogates"} <= set(blocks)
    found = 0
    for rule, body in blocks.items():
        for path in re.findall(r'"(results/[^"]+)"', body):
            if Path(path).stem in LOCAL_ONLY_NAMES:
                found += 1
                assert re.search(r"/local/[^/]+$", path), f"{rule}: {path} is not under local/"
    assert found >= 3


def test_the_report_never_reads_a_local_only_artifact() -> None:
    for rule, body in _rule_blocks().items():
        for flagged in re.findall(r"report\(\s*\"([^\"]+)\"", body):
            assert "/local/" not in flagged, f"{rule} puts {flagged} in the report"


@pytest.mark.parametrize("name", LOCAL_ONLY_NAMES)
def test_only_screening_rules_read_local_only_artifacts(name: str) -> None:
    attribute = {"removed_values": "removed"}.get(name, name)
    for rule, body in _rule_blocks().items():
        if re.search(rf"rules\.\w+\.output\.{attribute}\b", body):
            assert rule in LOCAL_READERS, f"{rule} reads the local-only {name}"
