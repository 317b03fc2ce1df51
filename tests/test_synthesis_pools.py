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


# ---------------------------------------------------------------- many fills per template


def test_a_template_is_filled_fills_per_template_times_with_values_of_its_own():
    result = build_pools(
        TEMPLATES,
        [],
        filler=filler(),
        surfaces=SurfaceIndex([]),
        encoder=None,
        dedup=DedupSettings(),
        source="synthetic:template:test",
        fills=4,
    )
    assert [n.note_id for n in result.pii] == [
        f"syn:{seed}:standard:0{suffix}"
        for seed in ("s1", "s3")
        for suffix in ("", "-fill1", "-fill2", "-fill3")
    ]
    assert len({n.text for n in result.pii}) == 8
    for note in result.pii:  # every fill exact at its own offsets
        first, _, third = note.spans
        assert note.text[first.start : first.end] == note.text[third.start : third.end]
    # a template without placeholders has one text: filled once
    assert [n.note_id for n in result.no_pii] == ["syn:s2:no_pii:0"]
    assert result.counts["filled"] == 3 + 2 * 3 and result.counts["fills_per_template"] == 4


def test_one_fill_per_template_is_what_the_pools_always_were():
    one = build_pools(
        TEMPLATES[:2], [], filler=filler(), surfaces=SurfaceIndex([]), encoder=None,
        dedup=DedupSettings(), source="s",
    )  # fmt: skip
    many = build_pools(
        TEMPLATES[:2], [], filler=filler(), surfaces=SurfaceIndex([]), encoder=None,
        dedup=DedupSettings(), source="s", fills=3,
    )  # fmt: skip
    assert many.pii[0] == one.pii[0] and many.no_pii == one.no_pii


def test_fills_of_one_template_are_no_near_duplicates_of_each_other():
    """Near dedup judges a template by its first fill: the other fills differ only in
    values and would all be near duplicates of it."""
    from synthdeid.embeddings import SentenceEncoder

    result = build_pools(
        TEMPLATES[:1], [], filler=filler(), surfaces=SurfaceIndex([]),
        encoder=SentenceEncoder.load(None), dedup=DedupSettings(near_threshold=0.9),
        source="s", fills=5,
    )  # fmt: skip
    assert len(result.pii) == 5 and not result.removals


def test_fills_of_a_template_are_screened_each():
    """Every fill passes the seed-PHI screen on its own values."""
    plain = build_pools(
        TEMPLATES[:1], [], filler=filler(), surfaces=SurfaceIndex([]), encoder=None,
        dedup=DedupSettings(), source="s", fills=3,
    )  # fmt: skip
    drawn = plain.pii[2].text[plain.pii[2].spans[0].start : plain.pii[2].spans[0].end]
    screened = build_pools(
        TEMPLATES[:1], [], filler=filler(), surfaces=SurfaceIndex([drawn]), encoder=None,
        dedup=DedupSettings(), source="s", fills=3,
    )  # fmt: skip
    assert plain.pii[2].note_id not in {n.note_id for n in screened.pii}
    assert any(r.step == "screen" for r in screened.removals)


@pytest.mark.parametrize("fills", [0, 1001, 2.5, True])
def test_fills_per_template_is_bounded(fills):
    with pytest.raises(ConfigError, match="fills_per_template"):
        check_pool_settings({"fills_per_template": fills})
