"""From templates to pools: fill exactness, exact and near dedup, the PHI screen."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthdeid.errors import ConfigError
from synthdeid.mentions import SurfaceIndex
from synthdeid.notes import Note, read_notes
from synthdeid.synthesis.fill import TemplateFiller
from synthdeid.synthesis.pools import (
    SYNTHETIC_SPLIT,
    DedupSettings,
    Template,
    build_pools,
    check_pool_settings,
    exact_dedup,
    near_dedup,
    screen_phi,
    write_pools,
)
from synthesis_helpers import allowlist

TEMPLATES = [
    Template(
        "tpl:s1:standard:0",
        "s1",
        "p1",
        "standard",
        "Seen by [[DOCTOR_1]] on [[DATE_1]]; [[DOCTOR_1]] will call back.",
    ),
    Template("tpl:s2:no_pii:0", "s2", "p2", "no_pii", "Afebrile overnight, tolerating diet."),
    # same text as the first after whitespace and case normalisation: an exact duplicate
    Template(
        "tpl:s3:standard:0",
        "s3",
        "p3",
        "standard",
        "seen  by [[DOCTOR_1]] on [[DATE_1]]; [[DOCTOR_1]] will call back.",
    ),
]


def seed_note(note_id: str, text: str) -> Note:
    return Note(note_id, "p9", text, (), "test", "seed")


def filler(forbidden=()) -> TemplateFiller:
    return TemplateFiller(allowlist(), seed=3, forbidden=forbidden)


def test_pools_are_exact_and_split_by_pii():
    result = build_pools(
        TEMPLATES[:2],
        [],
        filler=filler(),
        surfaces=SurfaceIndex([]),
        encoder=None,
        dedup=DedupSettings(),
        source="synthetic:template:test",
    )
    assert [n.note_id for n in result.pii] == ["syn:s1:standard:0"]
    assert [n.note_id for n in result.no_pii] == ["syn:s2:no_pii:0"]
    note = result.pii[0]
    assert note.split == SYNTHETIC_SPLIT and note.patient_id == "p1"
    assert [s.label for s in note.spans] == ["DOCTOR", "DATE", "DOCTOR"]
    first, _, third = note.spans
    assert note.text[first.start : first.end] == note.text[third.start : third.end]
    assert "[[" not in note.text
    assert result.counts["filled_spans"] == 3 and result.counts["pii_spans"] == 3


def test_exact_dedup_within_pool_and_against_seeds():
    notes = [
        Note("a", "p", "Same  Text here.", (), "s", "synthetic"),
        Note("b", "p", "same text HERE.", (), "s", "synthetic"),
        Note("c", "p", "A seed copy.", (), "s", "synthetic"),
    ]
    kept, removed = exact_dedup(notes, [seed_note("seed1", "a seed   copy.")])
    assert [n.note_id for n in kept] == ["a"]
    assert [(r.note_id, r.reason, r.matched) for r in removed] == [
        ("b", "equals_synthetic", "a"),
        ("c", "equals_seed", "seed1"),
    ]


def test_screen_drops_notes_with_a_seed_phi_surface():
    notes = [
        Note("a", "p", "Wife Marisol Quinteros visited.", (), "s", "synthetic"),
        Note("b", "p", "Wife visited.", (), "s", "synthetic"),
    ]
    kept, removed = screen_phi(notes, SurfaceIndex(["marisol quinteros"]))
    assert [n.note_id for n in kept] == ["b"]
    assert removed[0].note_id == "a" and removed[0].step == "screen"


def test_fill_never_produces_a_forbidden_surface():
    template = Template("tpl:x:standard:0", "x", "p", "standard", "By [[DOCTOR_1]].")
    free = build_pools(
        [template],
        [],
        filler=filler(),
        surfaces=SurfaceIndex([]),
        encoder=None,
        dedup=DedupSettings(),
        source="s",
    )
    span = free.pii[0].spans[0]
    value = free.pii[0].text[span.start : span.end]
    # forbid the value drawn without constraint: the filler must draw another one
    constrained = build_pools(
        [template],
        [],
        filler=filler(forbidden=[value]),
        surfaces=SurfaceIndex([value]),
        encoder=None,
        dedup=DedupSettings(),
        source="s",
    )
    assert constrained.pii and value.casefold() not in constrained.pii[0].text.casefold()
    assert not constrained.removals


@pytest.mark.slow
def test_near_dedup_with_minilm():
    from synthdeid.embeddings import SentenceEncoder

    encoder = SentenceEncoder.load(None)
    base = "Patient resting comfortably, vital signs stable, plan to continue antibiotics."
    notes = [
        Note("a", "p", base, (), "s", "synthetic"),
        Note("b", "p", base.replace("comfortably", "comfortably tonight"), (), "s", "synthetic"),
        Note("c", "p", "Wound dressing changed; moderate serous drainage noted.", (), "s", "s"),
        Note("d", "p", "Family meeting held about goals of care and code status.", (), "s", "s"),
    ]
    seeds = [seed_note("seed1", "Family meeting held about the goals of care and code status.")]
    kept, removed = near_dedup(notes, seeds, encoder, DedupSettings(near_threshold=0.9))
    assert [n.note_id for n in kept] == ["a", "c"]
    reasons = {r.note_id: (r.reason, r.matched) for r in removed}
    assert reasons == {"b": ("near_synthetic", "a"), "d": ("near_seed", "seed1")}
    assert all(r.similarity is not None and r.similarity >= 0.9 for r in removed)
    kept_all, _ = near_dedup(
        notes, seeds, encoder, DedupSettings(near_threshold=0.9, against_seeds=False)
    )
    assert [n.note_id for n in kept_all] == ["a", "c", "d"]


def test_pool_settings_with_an_unknown_key_are_refused():
    check_pool_settings({"fill_seed": 1, "near_threshold": 0.9})
    with pytest.raises(ConfigError, match=r"pool settings: unknown keys \['seed'\]"):
        check_pool_settings({"seed": 1})


def test_write_pools_writes_both_pools_the_removals_and_the_counts(tmp_path: Path):
    repeated = Template("tpl:s4:no_pii:0", "s4", "p4", "no_pii", TEMPLATES[1].text)
    result = build_pools(
        [*TEMPLATES[:2], repeated],
        [],
        filler=filler(),
        surfaces=SurfaceIndex([]),
        encoder=None,
        dedup=DedupSettings(),
        source="synthetic:template:test",
    )
    paths = {name: tmp_path / f"{name}.parquet" for name in ("pii", "no_pii", "removals")}
    summary = tmp_path / "summary.json"
    counts = write_pools(
        result, {"step": "test"}, **paths, summary=summary, extra_counts={"seeds_compared": 0}
    )
    assert counts == {**result.counts, "seeds_compared": 0}
    assert json.loads(summary.read_text()) == {"summary": counts, "provenance": {"step": "test"}}
    assert read_notes(paths["pii"]) == result.pii
    assert read_notes(paths["no_pii"]) == result.no_pii
    assert pq.read_table(paths["removals"]).num_rows == len(result.removals) == 1
