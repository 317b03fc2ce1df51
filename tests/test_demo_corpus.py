"""Tests for the synthetic demo corpus generator and the committed resources/demo/."""

from __future__ import annotations

import argparse
import fnmatch
import json
import random
import string
import tomllib
import tracemalloc
from collections import Counter
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import pytest
from faker import Faker

from synthdeid.demo.generator import (
    DEFAULT_N_NOTES,
    DEFAULT_SEED,
    FAKER_LOCALE,
    SLOT_LABELS,
    STYLES,
    _draw_plan,
    _NoNames,
    generate_demo_notes,
    jsonl_line,
    summarize,
    write_demo_corpus,
)
from synthdeid.demo.phrases import (
    PHRASES_FILE,
    case_from_mapping,
    load_phrases,
    phrases_from_mapping,
)
from synthdeid.errors import ConfigError
from synthdeid.labels import CANONICAL_LABELS, LabelMap
from synthdeid.readers.base import ReaderOptions
from synthdeid.readers.jsonl import JsonlReader
from synthdeid.stages.make_demo import register_arguments, run

DEMO_FILE = Path(__file__).resolve().parents[1] / "resources" / "demo" / "notes.jsonl"


def render_jsonl(records: Iterable[dict]) -> str:
    return "".join(jsonl_line(record) for record in records)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return list(generate_demo_notes())


def test_same_seed_same_records(records: list[dict]) -> None:
    assert list(generate_demo_notes()) == records
    assert render_jsonl(generate_demo_notes()) == render_jsonl(records)


def test_different_seed_different_records(records: list[dict]) -> None:
    other = list(generate_demo_notes(seed=DEFAULT_SEED + 1))
    assert [r["text"] for r in other] != [r["text"] for r in records]


def test_record_shape(records: list[dict]) -> None:
    for record in records:
        assert set(record) == {"note_id", "patient_id", "style", "synthetic", "text", "spans"}
        assert record["synthetic"] is True
        assert record["note_id"].startswith(record["patient_id"] + "-n")
    assert len({r["note_id"] for r in records}) == len(records)


def test_size_styles_and_patients(records: list[dict]) -> None:
    assert len(records) >= 300
    assert {r["style"] for r in records} == set(STYLES)
    per_patient = Counter(r["patient_id"] for r in records)
    assert min(per_patient.values()) >= 2
    assert all(pid.startswith("demo-p") for pid in per_patient)
    words = [len(r["text"].split()) for r in records]
    assert min(words) >= 20
    assert max(words) <= 120


def test_phi_bearing_share(records: list[dict]) -> None:
    share = sum(1 for r in records if r["spans"]) / len(records)
    assert 0.25 <= share <= 0.35


def test_every_canonical_label_present(records: list[dict]) -> None:
    labels = {span["label"] for r in records for span in r["spans"]}
    assert labels == set(CANONICAL_LABELS)
    ages = [int(s["text"]) for r in records for s in r["spans"] if s["label"] == "AGE"]
    assert sum(age >= 90 for age in ages) >= 2


def test_within_note_repetition(records: list[dict]) -> None:
    repeated = [
        r["note_id"]
        for r in records
        if any(n > 1 for n in Counter((s["label"], s["text"]) for s in r["spans"]).values())
    ]
    assert repeated


def test_spans_match_surface_and_do_not_overlap(records: list[dict]) -> None:
    for record in records:
        text = record["text"]
        previous_end = 0
        for span in record["spans"]:
            assert span["label"] in CANONICAL_LABELS
            assert 0 <= previous_end <= span["start"] < span["end"] <= len(text)
            assert text[span["start"] : span["end"]] == span["text"]
            previous_end = span["end"]


def test_templates_label_only_known_slots() -> None:
    assert set(SLOT_LABELS.values()) <= set(CANONICAL_LABELS)
    for style in load_phrases().templates.values():
        for section in style.sections:
            for template in section.plain:
                names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
                assert not names & set(SLOT_LABELS), template
            for template in section.phi:
                names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
                assert names & set(SLOT_LABELS), template


def test_committed_file_matches_generator(records: list[dict]) -> None:
    assert DEMO_FILE.read_text(encoding="utf-8") == render_jsonl(records), (
        "resources/demo/notes.jsonl has drifted from the generator; "
        "regenerate it with `synthdeid make-demo`"
    )


def test_committed_external_corpus_matches_generator() -> None:
    # the demo's second corpus (evaluation.corpora): same generator, another seed and size
    external = DEMO_FILE.parents[1] / "demo-external" / "notes.jsonl"
    assert external.read_text(encoding="utf-8") == render_jsonl(
        generate_demo_notes(60, 20261123)
    ), "resources/demo-external/notes.jsonl has drifted; see resources/demo-external/README.md"


def test_committed_file_reads_with_jsonl_reader(records: list[dict]) -> None:
    reader = JsonlReader(ReaderOptions(label_map=LabelMap.identity(), source="demo"))
    notes = reader.read(DEMO_FILE)
    assert len(notes) == len(records) == DEFAULT_N_NOTES
    for note, record in zip(notes, records, strict=True):
        assert note.note_id == record["note_id"]
        assert note.patient_id == record["patient_id"]
        assert note.source == "demo"
        assert [(s.start, s.end, s.label) for s in note.spans] == [
            (s["start"], s["end"], s["label"]) for s in record["spans"]
        ]


def test_write_and_cli_entry(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register_arguments(parser)
    defaults = parser.parse_args([])
    assert defaults.out_dir == Path("resources/demo")
    assert (defaults.n_notes, defaults.seed) == (DEFAULT_N_NOTES, DEFAULT_SEED)

    run(parser.parse_args(["--out-dir", str(tmp_path), "--n-notes", "40", "--seed", "7"]))
    lines = (tmp_path / "notes.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == list(generate_demo_notes(40, 7))
    assert list(tmp_path.iterdir()) == [tmp_path / "notes.jsonl"]

    first = (tmp_path / "notes.jsonl").read_bytes()
    write_demo_corpus(tmp_path, 40, 7)
    assert (tmp_path / "notes.jsonl").read_bytes() == first
    assert summarize(generate_demo_notes(40, 7))["notes"] == 40


def test_rejects_empty_corpus() -> None:
    with pytest.raises(ConfigError):
        generate_demo_notes(0)


def test_phrase_tables_cover_every_style() -> None:
    phrases = load_phrases()
    assert list(phrases.templates) == list(STYLES)
    assert all(style.sections for style in phrases.templates.values())
    assert set(phrases.species) == {"canine", "feline", "equine"}
    assert all(len(exam.choices["findings"]) >= 2 for exam in phrases.radiology_exams)  # 2 drawn


def test_sections_default_to_no_phi_and_always_included() -> None:
    data = json.loads(resources.files("synthdeid.demo").joinpath(PHRASES_FILE).read_text())
    data["templates"] = {"memo": {"separator": " ", "sections": [{"plain": ["Seen."]}]}}
    (section,) = phrases_from_mapping(data).templates["memo"].sections
    assert (section.plain, section.phi, section.p) == (("Seen.",), (), 1.0)


def test_a_case_keeps_phrases_and_lists_to_draw_from_apart() -> None:
    case = case_from_mapping({"exam": "CT head", "findings": ["No bleed.", "No mass."]})
    assert case.phrases == {"exam": "CT head"}
    assert case.choices == {"findings": ("No bleed.", "No mass.")}


def test_phrases_ship_in_the_wheel(repo: Path) -> None:
    package_data = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["synthdeid"]
    assert any(fnmatch.fnmatch(f"demo/{PHRASES_FILE}", pattern) for pattern in package_data)


def peak_bytes_generating(n_notes: int) -> int:
    tracemalloc.start()
    try:
        for _ in generate_demo_notes(n_notes, 3):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_generation_keeps_no_state_per_note() -> None:
    # every note kept (a list of records or of patients) costs a kilobyte or more a
    # note; the generator keeps one patient and a byte a note (after a transient draw
    # of ~40). The first run pays for one-time loads (phrases, Faker's providers).
    peak_bytes_generating(20)
    small, large = peak_bytes_generating(200), peak_bytes_generating(1000)
    assert (large - small) / 800 < 200


def test_streamed_counts_match_counts_over_the_records(records: list[dict]) -> None:
    stats = summarize(iter(records))
    assert stats["notes"] == len(records)
    assert stats["patients"] == len({r["patient_id"] for r in records})
    assert stats["phi_bearing_notes"] == round(0.3 * len(records))
    assert stats["spans"] == sum(len(r["spans"]) for r in records)
    words = [len(r["text"].split()) for r in records]
    assert (stats["words_min"], stats["words_max"]) == (min(words), max(words))
    assert stats["words_mean"] == pytest.approx(sum(words) / len(words))


@pytest.mark.parametrize("seed", [DEFAULT_SEED, 7, 20261123])
def test_the_plan_draws_the_same_without_names(seed: int) -> None:
    # the first pass draws the plan without Faker: no draw may depend on a name
    phrases = load_phrases()
    with_names, without = random.Random(seed), random.Random(seed)
    fake = Faker(FAKER_LOCALE)
    fake.seed_instance(seed)
    named = [(p.kind, style, n) for p, style, n in _draw_plan(300, fake, with_names, phrases)]
    plain = [(p.kind, style, n) for p, style, n in _draw_plan(300, _NoNames(), without, phrases)]
    assert named == plain
    assert with_names.getstate() == without.getstate()
