"""Integration tests on the PhysioNet deid developer part (PHYSIONET_DEID_DIR)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from synthdeid.ingest import IngestSettings, ingest_corpus
from synthdeid.labels import LabelMap
from synthdeid.mask import mask_note
from synthdeid.mentions import surfaces_left
from synthdeid.notes import Note, read_notes
from synthdeid.readers.physionet import parse_phrases
from workflow_helpers import copy_workflow, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def notes(repo: Path, physionet_dir: Path) -> list[Note]:
    config = yaml.safe_load((repo / "config" / "physionet.yaml").read_text())
    settings = IngestSettings(
        format="physionet",
        label_map=LabelMap(config["labels"]["mapping"]),
        source="physionet-deid",
        encoding=config["corpus"]["encoding"],
        overlaps=config["corpus"]["overlaps"],
    )
    result = ingest_corpus(physionet_dir, settings)
    assert result.surfaces_verified == 1140
    assert len(result.merged_overlaps) == 1
    return result.notes


def test_counts_match_the_release(notes: list[Note]) -> None:
    assert len(notes) == 1631
    assert len({n.patient_id for n in notes}) == 98
    assert sum(1 for n in notes if n.spans) == 498
    # 1,140 gold spans, one overlapping pair merged into its union
    assert sum(len(n.spans) for n in notes) == 1139


def test_every_gold_span_is_in_the_table_with_its_surface(
    notes: list[Note], physionet_dir: Path
) -> None:
    by_id = {n.note_id: n for n in notes}
    content = (physionet_dir / "id-phi.phrase").read_text(encoding="ascii")
    for _, patient, note, start, end, _, surface in parse_phrases(content, path=physionet_dir):
        target = by_id[f"{patient}-{note}"]
        assert target.text[start:end] == surface
        assert any(s.start <= start and end <= s.end for s in target.spans)


def test_masking_leaves_no_gold_surface_in_any_note(notes: list[Note]) -> None:
    leaks = {}
    for note in notes:
        masked = mask_note(note).note
        left = surfaces_left(masked, {s.surface(note.text) for s in note.spans})
        if left:
            leaks[note.note_id] = left
    assert leaks == {}


def test_workflow_runs_on_the_corpus(repo: Path, physionet_dir: Path, tmp_path: Path) -> None:
    workdir = copy_workflow(repo, tmp_path)
    snakemake(workdir, "--configfile", "config/physionet.yaml")
    results = workdir / "results"
    ingest = json.loads((results / "ingest_corpus" / "physionet" / "summary.json").read_text())
    assert ingest["summary"]["notes"] == 1631
    assert ingest["summary"]["gold_spans_read"] == 1140
    masked = read_notes(results / "mask_seeds" / "physionet" / "masked.parquet")
    split = {
        n.note_id: n for n in read_notes(results / "split_notes" / "physionet" / "notes.parquet")
    }
    assert masked and {n.split for n in masked} == {"seed"}
    for note in masked:
        original = split[note.note_id]
        assert surfaces_left(note, {s.surface(original.text) for s in original.spans}) == []
