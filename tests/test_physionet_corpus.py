"""Integration tests on the PhysioNet deid developer part (PHYSIONET_DEID_DIR)."""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import date, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from synthdeid.detectors import parse_date
from synthdeid.ingest import IngestResult
from synthdeid.llm.guard import load_phi_surfaces
from synthdeid.mask import mask_note
from synthdeid.mentions import surface_mentions, surfaces_left
from synthdeid.notes import Note, read_notes
from synthdeid.readers.physionet import parse_phrases
from synthdeid.surrogate.keying import SECRET_VARIABLE, SurrogateKey
from synthdeid.surrogate.operators import Mention, normalize
from synthdeid.surrogate.replace import ReplacedNote, SurrogateReplacer
from synthdeid.synthesis.fill import TemplateFiller
from synthdeid.synthesis.placeholders import load_allowlist
from workflow_helpers import copy_workflow, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def notes(physionet_ingest: IngestResult) -> list[Note]:
    result = physionet_ingest
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


def test_workflow_runs_on_the_corpus(
    repo: Path, physionet_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    workdir = copy_workflow(repo, tmp_path)
    # everything up to the training mixture; training a model on the corpus takes
    # tens of minutes on a CPU and is the documented baseline run, not a test
    snakemake(
        workdir,
        "results/mask_seeds/physionet/masked.parquet",
        "results/replace_surrogates/physionet/notes.parquet",
        "results/build_mixture/physionet/real_only/summary.json",
        "results/diagnose_synthetic/physionet/diagnostics.json",
        "--configfile",  # last: it takes several values
        "config/physionet.yaml",
    )
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
    surrogate = json.loads(
        (results / "replace_surrogates" / "physionet" / "summary.json").read_text()
    )
    assert surrogate["summary"]["notes"] == 1631 and surrogate["summary"]["spans"] == 1139
    assert (
        surrogate["provenance"]["params"]["key_fingerprint"]
        == SurrogateKey(SECRET.encode()).fingerprint()
    )
    assert SECRET not in (results / "replace_surrogates" / "physionet" / "summary.json").read_text()
    mixture = json.loads(
        (results / "build_mixture" / "physionet" / "real_only" / "summary.json").read_text()
    )["summary"]
    train_patients = {n.patient_id for n in split.values() if n.split == "train"}
    assert mixture["n_synthetic"] == 0
    assert mixture["n_real_train_patients"] + mixture["n_validation_patients"] == len(
        train_patients
    )
    assert mixture["n_real"] + mixture["n_validation_notes"] == sum(
        n.split == "train" for n in split.values()
    )
    check_template_pools(repo, results)


def check_template_pools(repo: Path, results: Path) -> None:
    """Backend none on the corpus: pools written, spans exact, no seed PHI surface left."""
    pool = read_notes(results / "fill_templates" / "physionet" / "pii.parquet")
    assert len(pool) > 50 and all(n.split == "synthetic" and n.spans for n in pool)
    # spans exact: fill every surviving template again and compare value by value
    config = yaml.safe_load((repo / "config" / "physionet.yaml").read_text())
    removed = [
        s
        for s, _ in load_phi_surfaces(
            results / "mask_seeds" / "physionet" / "local" / "removed_values.parquet"
        )
    ]
    long_surfaces = [s for s in removed if len("".join(s.split())) >= 3]
    filler = TemplateFiller(
        load_allowlist(repo / "resources" / "placeholders.yaml"),
        seed=config["synth"]["template"]["pools"]["fill_seed"],
        forbidden=long_surfaces,
    )
    templates = {
        row["template_id"]: row["template"]
        for row in pq.read_table(
            results / "generate_templates" / "physionet" / "templates.parquet"
        ).to_pylist()
    }
    n_spans = 0
    for note in pool:
        filled = filler.fill(
            templates["tpl:" + note.note_id.removeprefix("syn:")],
            "tpl:" + note.note_id.removeprefix("syn:"),
        )
        assert (filled.text, filled.spans) == (note.text, note.spans)
        for span, token in zip(note.spans, filled.tokens, strict=True):
            assert note.text[span.start : span.end] == filled.values[token]
            n_spans += 1
    summary = json.loads((results / "fill_templates" / "physionet" / "summary.json").read_text())
    assert n_spans == summary["summary"]["pii_spans"]
    # no seed PHI surface anywhere in a synthetic note (an independent regex search)
    left = {s for s in long_surfaces for n in pool if surface_mentions(n.text, s)}
    assert left == set()
    diagnostics = json.loads(
        (results / "diagnose_synthetic" / "physionet" / "diagnostics.json").read_text()
    )
    assert set(diagnostics["statistics"]) >= {"real train", "synthetic PII", "real holdout"}
    for figure in ("lengths.png", "labels.png"):
        assert (results / "diagnose_synthetic" / "physionet" / figure).stat().st_size > 10_000


# a fixed secret that load_key accepts (64 hex digits)
SECRET = hashlib.sha256(b"physionet integration test").hexdigest()


@pytest.fixture(scope="module")
def surrogates(notes: list[Note]) -> tuple[list[Note], list[ReplacedNote], SurrogateReplacer]:
    replacer = SurrogateReplacer(SurrogateKey(SECRET.encode()))
    return notes, [replacer.replace_note(note) for note in notes], replacer


def pairs(surrogates, labels: set[str]):
    """(patient, original surface, surrogate surface) for every span with one of ``labels``."""
    notes, results, _ = surrogates
    for note, result in zip(notes, results, strict=True):
        for old, new in zip(note.spans, result.note.spans, strict=True):
            if old.label in labels:
                yield note, old.surface(note.text), new.surface(result.note.text)


def test_surrogates_every_span_reprojected_no_identity(surrogates) -> None:
    notes, results, replacer = surrogates
    assert sum(len(r.note.spans) for r in results) == 1139
    for note, result in zip(notes, results, strict=True):
        assert [s.label for s in result.note.spans] == [s.label for s in note.spans]
        for entry, span in zip(result.offset_map, result.note.spans, strict=True):
            assert (entry.new_start, entry.new_end) == (span.start, span.end)
    # AGE under 90 is kept on purpose (HIPAA); every other span changed
    assert set(replacer.kept_deliberately) <= {"AGE"}
    assert sum(replacer.replaced.values()) + sum(replacer.kept_deliberately.values()) == 1139
    left = sum(len(r.surfaces_left) for r in results)
    print(f"original surfaces still elsewhere in the output: {left}")


def test_surrogate_dates_keep_every_interval_per_patient(surrogates) -> None:
    operator = surrogates[2].operators["DATE"]
    full: dict[str, list[tuple[int, int]]] = {}
    checked = 0
    for note, old, new in pairs(surrogates, {"DATE"}):
        before, after = parse_date(old), parse_date(new)
        if before is None:
            continue  # counted as unparsed_dates, replaced by a same-shape surrogate
        assert after is not None, (old, new)
        shift = operator.shift(Mention(old, "DATE", note.patient_id, note.note_id))
        if before.day is not None:
            # no year: the leap year 2000; an ordinal day alone: that day of January
            moved = date(before.year or 2000, before.month or 1, before.day) + timedelta(
                days=shift.days
            )
            assert after.day == moved.day, (old, new)
            if before.month is not None:
                assert after.month == moved.month, (old, new)
            if before.year is not None:
                assert after.year == moved.year
                full.setdefault(note.patient_id, []).append(
                    (date(before.year, before.month, before.day).toordinal(), moved.toordinal())
                )
        elif before.month is not None and before.year is None:  # a month name alone
            assert (after.month - before.month - shift.months) % 12 == 0
        elif before.month is not None:
            months = lambda d: d.year * 12 + d.month  # noqa: E731
            # modulo a century: two-digit years read back across the pivot
            assert (months(after) - months(before) - shift.months) % 1200 == 0
        else:
            assert (after.year - before.year - shift.years) % 100 == 0
        checked += 1
    # all but a few of the 302 DATE spans parse as one date (two more are ranges);
    # the rest (a lone digit, a decade, a day past its month's end) get same-shape
    # surrogates, counted as unparsed_dates
    assert checked > 290
    for dates in full.values():
        for (b1, a1), (b2, a2) in itertools.pairwise(dates):
            assert a2 - a1 == b2 - b1


def test_same_name_same_surrogate_across_a_patients_notes(surrogates) -> None:
    seen: dict[tuple[str, str], set[str]] = {}
    for note, old, new in pairs(surrogates, {"DOCTOR", "PATIENT"}):
        seen.setdefault((note.patient_id, normalize(old)), set()).add(normalize(new))
    assert len(seen) > 150
    assert {key: s for key, s in seen.items() if len(s) > 1} == {}


def test_uppercase_originals_get_uppercase_surrogates(surrogates) -> None:
    upper = [
        (old, new)
        for _, old, new in pairs(surrogates, {"DOCTOR", "PATIENT", "LOCATION"})
        if old.isupper()
    ]
    assert len(upper) > 50
    assert [(o, n) for o, n in upper if not n.isupper()] == []
