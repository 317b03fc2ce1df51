"""From accepted templates to PII and no-PII synthetic pools.

Four steps, each counted:

1. **fill**: placeholders become locally generated values, never a seed PHI
   surface; offsets are recorded at insertion and checked on every note
   (``text[start:end]`` is the inserted value, 100% of spans). A template
   with placeholders is filled ``fills_per_template`` times, each fill with
   values of its own (VetSynth fills each template many times: about 10k
   notes from a few hundred seeds); the dedup of steps 2 and 3 judges a
   template by its first fill, and its other fills are made only when that
   one is kept, so fills of one template, which differ only in their
   values, are not taken for near duplicates of each other;
2. **exact dedup**: the normalised text (whitespace collapsed, case folded)
   is hashed; a note equal to an earlier synthetic note or to any seed note
   is removed;
3. **near dedup**: MiniLM sentence embeddings; a note whose cosine similarity
   to any seed note, or to a synthetic note already kept (greedy, in template
   order), reaches the threshold is removed (seed comparison can be switched off for backend ``none``, whose
   notes are the seeds with new identifiers by design);
4. **screen**: a note containing any seed PHI surface (the mask step's
   removed values; whole word, any case) anywhere is dropped.

What survives is split into the PII pool (at least one span) and the no-PII
pool, in the canonical notes schema with ``split = synthetic``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synthdeid.artifacts import write_json_atomic, write_parquet_atomic
from synthdeid.embeddings import (
    SentenceEncoder,
    cosine_max_similarity,
    greedy_near_duplicates,
)
from synthdeid.errors import ConfigError
from synthdeid.llm.guard import load_phi_surfaces
from synthdeid.mentions import SurfaceIndex
from synthdeid.notes import Note, write_notes
from synthdeid.synthesis.fill import TemplateFiller
from synthdeid.synthesis.placeholders import PlaceholderAllowlist

log = logging.getLogger(__name__)

SYNTHETIC_SPLIT = "synthetic"
SETTING_KEYS = {
    "fill_seed",
    "fills_per_template",
    "near_threshold",
    "against_seeds",
    "encoder",
    "min_surface_chars",
}
MAX_FILLS_PER_TEMPLATE = 1000

REMOVALS_SCHEMA = pa.schema(
    [
        pa.field("note_id", pa.string(), nullable=False),
        pa.field("step", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("matched", pa.string()),
        pa.field("similarity", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Template:
    """An accepted template and where it came from."""

    template_id: str
    seed_note_id: str
    patient_id: str
    variant: str
    text: str


@dataclass(frozen=True)
class DedupSettings:
    near_threshold: float = 0.95
    against_seeds: bool = True
    batch_size: int = 32


@dataclass(frozen=True)
class Removal:
    note_id: str
    step: str
    reason: str
    matched: str | None = None
    similarity: float | None = None


@dataclass
class PoolResult:
    pii: list[Note] = field(default_factory=list)
    no_pii: list[Note] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    def removals_table(self) -> pa.Table:
        return pa.Table.from_pylist([vars(r) for r in self.removals], schema=REMOVALS_SCHEMA)


def synthetic_note_id(template_id: str) -> str:
    return "syn:" + template_id.removeprefix("tpl:")


def fill_id(template_id: str, fill: int) -> str:
    """The id a template's ``fill``-th fill (0-based) is drawn under: the template's own
    for the first, so one fill per template gives what it always gave."""
    return template_id if fill == 0 else f"{template_id}-fill{fill}"


def fill_templates(
    templates: Sequence[Template], filler: TemplateFiller, source: str, fill: int = 0
) -> list[Note]:
    """The ``fill``-th fill of each template (:func:`fill_id`); the filler checks every one
    (spans exact, text outside them unchanged)."""
    notes = []
    for template in templates:
        key = fill_id(template.template_id, fill)
        filled = filler.fill(template.text, key)  # checked by the filler
        notes.append(
            Note(
                note_id=synthetic_note_id(key),
                patient_id=template.patient_id,
                text=filled.text,
                spans=tuple(filled.spans),
                source=source,
                split=SYNTHETIC_SPLIT,
            )
        )
    return notes


def refill(
    templates: Sequence[Template],
    kept: Sequence[Note],
    filler: TemplateFiller,
    source: str,
    fills: int,
) -> tuple[list[Note], list[Note]]:
    """The kept first fills with, after each one that holds a span, fills 2..``fills`` of
    its template (a template without placeholders has one text only); and the new fills."""
    by_id = {synthetic_note_id(t.template_id): t for t in templates}
    notes: list[Note] = []
    made: list[Note] = []
    for note in kept:
        notes.append(note)
        if note.spans:
            template = by_id[note.note_id]
            more = [fill_templates([template], filler, source, k)[0] for k in range(1, fills)]
            notes.extend(more)
            made.extend(more)
    return notes, made


def normalized_hash(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).casefold().encode()).hexdigest()


def exact_dedup(notes: Sequence[Note], seeds: Sequence[Note]) -> tuple[list[Note], list[Removal]]:
    seed_hashes = {normalized_hash(s.text): s.note_id for s in seeds}
    seen: dict[str, str] = {}
    kept: list[Note] = []
    removed: list[Removal] = []
    for note in notes:
        key = normalized_hash(note.text)
        if key in seed_hashes:
            removed.append(Removal(note.note_id, "exact_dedup", "equals_seed", seed_hashes[key]))
        elif key in seen:
            removed.append(Removal(note.note_id, "exact_dedup", "equals_synthetic", seen[key]))
        else:
            seen[key] = note.note_id
            kept.append(note)
    return kept, removed


def near_dedup(
    notes: Sequence[Note],
    seeds: Sequence[Note],
    encoder: SentenceEncoder,
    settings: DedupSettings,
    progress: bool = False,
) -> tuple[list[Note], list[Removal]]:
    """Drop notes too similar to a seed (optionally) or to a synthetic note already kept."""
    if not notes:
        return [], []
    embedded = encoder.embed(
        [n.text for n in notes], batch_size=settings.batch_size, progress=progress
    )
    to_seed = np.full(len(notes), -np.inf)
    seed_index = np.full(len(notes), -1)
    if settings.against_seeds and seeds:
        seed_emb = encoder.embed(
            [s.text for s in seeds], batch_size=settings.batch_size, progress=progress
        )
        to_seed, seed_index = cosine_max_similarity(embedded, seed_emb)
    near_seed = to_seed >= settings.near_threshold
    removed: list[Removal] = [
        Removal(
            notes[i].note_id,
            "near_dedup",
            "near_seed",
            seeds[int(seed_index[i])].note_id,
            float(to_seed[i]),
        )
        for i in np.flatnonzero(near_seed).tolist()
    ]
    # greedy within the pool: a note goes when it is that close to a note already kept
    candidates = np.flatnonzero(~near_seed)
    keep, duplicate_of = greedy_near_duplicates(embedded[candidates], settings.near_threshold)
    kept: list[Note] = []
    for position, i in enumerate(candidates.tolist()):
        if keep[position]:
            kept.append(notes[i])
            continue
        j = int(candidates[int(duplicate_of[position])])
        similarity = float(embedded[i] @ embedded[j])
        removed.append(
            Removal(notes[i].note_id, "near_dedup", "near_synthetic", notes[j].note_id, similarity)
        )
    order = {note.note_id: k for k, note in enumerate(notes)}
    removed.sort(key=lambda r: order[r.note_id])
    return kept, removed


def screen_phi(notes: Sequence[Note], surfaces: SurfaceIndex) -> tuple[list[Note], list[Removal]]:
    """Drop every note in which some seed PHI surface occurs (whole word, any case)."""
    kept: list[Note] = []
    removed: list[Removal] = []
    for note in notes:
        hits = surfaces.find(note.text)
        if hits:
            removed.append(Removal(note.note_id, "screen", f"seed_phi_surface x{len(hits)}"))
        else:
            kept.append(note)
    return kept, removed


def build_pools(
    templates: Sequence[Template],
    seeds: Sequence[Note],
    *,
    filler: TemplateFiller,
    surfaces: SurfaceIndex,
    encoder: SentenceEncoder | None,
    dedup: DedupSettings,
    source: str,
    progress: bool = False,
    fills: int = 1,
) -> PoolResult:
    """Fill, dedup (exact, then near when an encoder is given), fill again ``fills`` times
    in all, dedup exactly, screen and split."""
    result = PoolResult()
    notes = fill_templates(templates, filler, source)
    filled = list(notes)
    notes, removed = exact_dedup(notes, seeds)
    result.removals.extend(removed)
    if encoder is not None:
        notes, removed = near_dedup(notes, seeds, encoder, dedup, progress)
        result.removals.extend(removed)
    if fills > 1:
        notes, made = refill(templates, notes, filler, source, fills)
        filled += made
        notes, removed = exact_dedup(notes, seeds)  # a fill that drew the same values
        result.removals.extend(removed)
    result.counts["templates"] = len(templates)
    result.counts["fills_per_template"] = fills
    result.counts["filled"] = len(filled)
    result.counts["filled_spans"] = sum(len(n.spans) for n in filled)
    notes, removed = screen_phi(notes, surfaces)
    result.removals.extend(removed)
    result.pii = [n for n in notes if n.spans]
    result.no_pii = [n for n in notes if not n.spans]
    by_reason: dict[str, int] = {}
    for removal in result.removals:
        key = f"{removal.step}:{removal.reason.split(' ')[0]}"
        by_reason[key] = by_reason.get(key, 0) + 1
    result.counts.update(
        removed=dict(sorted(by_reason.items())),
        pii_notes=len(result.pii),
        no_pii_notes=len(result.no_pii),
        pii_spans=sum(len(n.spans) for n in result.pii),
        screened_surfaces=len(surfaces),
        unscreened_short_surfaces=surfaces.skipped,
        near_dedup="on" if encoder is not None else "off",
    )
    return result


def check_pool_settings(settings: dict[str, Any]) -> None:
    unknown = sorted(set(settings) - SETTING_KEYS)
    if unknown:
        raise ConfigError(f"pool settings: unknown keys {unknown}; known: {sorted(SETTING_KEYS)}")
    fills = settings.get("fills_per_template", 1)
    if isinstance(fills, bool) or not isinstance(fills, int):
        raise ConfigError(f"pool settings: fills_per_template must be an integer, got {fills!r}")
    if not 1 <= fills <= MAX_FILLS_PER_TEMPLATE:
        raise ConfigError(
            f"pool settings: fills_per_template must lie in 1..{MAX_FILLS_PER_TEMPLATE}, "
            f"got {fills}"
        )


def pools_from_templates(
    templates: list[Template],
    seeds: list[Note],
    *,
    allowlist: PlaceholderAllowlist,
    removed: Path,
    settings: dict[str, Any],
    source: str,
    progress: bool,
) -> tuple[PoolResult, TemplateFiller]:
    """Fill, dedup and screen accepted templates with the pool settings (shared by every regime)."""
    check_pool_settings(settings)
    phi = [surface for surface, _ in load_phi_surfaces(removed)]
    min_chars = int(settings.get("min_surface_chars", 3))
    encoder = None
    if settings.get("encoder") is not False:
        encoder = SentenceEncoder.load(settings.get("encoder"))
    # the filler never draws a screened surface (shorter ones, e.g. ages, stay drawable)
    filler = TemplateFiller(
        allowlist,
        seed=int(settings.get("fill_seed", 0)),
        forbidden=[s for s in phi if len("".join(s.split())) >= min_chars],
    )
    result = build_pools(
        templates,
        seeds,
        filler=filler,
        surfaces=SurfaceIndex(phi, min_chars=min_chars),
        encoder=encoder,
        dedup=DedupSettings(
            near_threshold=float(settings.get("near_threshold", 0.95)),
            against_seeds=bool(settings.get("against_seeds", True)),
        ),
        source=source,
        progress=progress,
        fills=int(settings.get("fills_per_template", 1)),
    )
    return result, filler


def write_pools(
    result: PoolResult,
    provenance: dict[str, Any],
    *,
    pii: Path,
    no_pii: Path,
    removals: Path,
    summary: Path,
    extra_counts: dict[str, Any],
) -> dict[str, Any]:
    """The PII / no-PII pools, the removals table and the summary, each written atomically."""
    write_notes(result.pii, pii, provenance)
    write_notes(result.no_pii, no_pii, provenance)
    write_parquet_atomic(result.removals_table(), removals, provenance)
    counts = {**result.counts, **extra_counts}
    write_json_atomic({"summary": counts, "provenance": provenance}, summary)
    log.info(
        "pools: %d PII notes (%d spans), %d no-PII notes; removed %s",
        counts["pii_notes"],
        counts["pii_spans"],
        counts["no_pii_notes"],
        counts["removed"] or "nothing",
    )
    return counts
