"""One run of template generation: the masked seeds, the validator, the guarded backend, the jobs.

:func:`generate_templates` checks the settings and the seeds (they must speak the
placeholder allowlist), draws the seed sample (:func:`sample_seeds`, the same
for the same ids and seed whatever their order), plans one job per seed x
variant x copy (one per seed for backend ``none``), runs this shard's jobs
through the request guard and the template validator, and returns the report
with the run's provenance. :func:`sent_requests_path` is where the local-only
audit trail of what was sent goes by default.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthdeid.artifacts import make_provenance
from synthdeid.errors import ConfigError, InputError
from synthdeid.identifiers import IdentifierScanner
from synthdeid.llm.factory import build_backend
from synthdeid.llm.guard import GuardedBackend, RequestGuard, load_phi_surfaces
from synthdeid.local_only import local_path
from synthdeid.mask import check_removed_values
from synthdeid.notes import Note, read_notes
from synthdeid.shards import Shard, shard_output, shard_table_rows, unsharded_output
from synthdeid.synthesis.placeholders import iter_placeholders, load_allowlist
from synthdeid.synthesis.prompts import load_prompt
from synthdeid.synthesis.templates import (
    GenerationReport,
    TemplateJob,
    identity_templates,
    llm_templates,
    lowercase_vocabulary,
    plan_jobs,
    plan_mix,
    seed_jobs,
)
from synthdeid.synthesis.validator import TemplateValidator, ValidatorSettings

log = logging.getLogger(__name__)

SETTING_KEYS = {"backend", "variants", "generation", "seed", "validator", "guard", "seed_sample"}


def check_settings(settings: Mapping[str, Any]) -> None:
    unknown = sorted(set(settings) - SETTING_KEYS)
    if unknown:
        raise ConfigError(
            f"template settings: unknown keys {unknown}; known: {sorted(SETTING_KEYS)}"
        )
    variants = settings.get("variants", {})
    bad = {k: v for k, v in variants.items() if not isinstance(v, int) or v < 0}
    if bad:
        raise ConfigError(f"template variants: copies must be integers >= 0, got {bad}")


def check_seed_placeholders(path: Path, seeds: list[Note], allowlist_names: set[str]) -> None:
    """Masked seeds must speak the allowlist (e.g. not the coarse PER/ORG view)."""
    for note in seeds:
        for found in iter_placeholders(note.text):
            if found.name not in allowlist_names:
                raise InputError(
                    path,
                    f"note {note.note_id!r}",
                    f"placeholder [[{found.name}_n]] is not on the allowlist",
                    "mask with label_view canonical, or add the name to the allowlist",
                )


def sample_ids(ids: Iterable[str], size: int, seed: int) -> set[str]:
    """A random ``size`` of ``ids`` (all when ``size`` >= their number), the same for the
    same ids and ``seed`` whatever their order: those whose SHA-256 of ``<seed>:<id>`` is
    smallest."""
    if size < 1:
        raise ConfigError(f"template seed_sample.size must be >= 1, not {size}")

    def rank(key: str) -> str:
        return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()

    return set(sorted(ids, key=rank)[:size])


def sample_seeds(seeds: list[Note], size: int, seed: int) -> list[Note]:
    """A random subset of ``size`` seeds (:func:`sample_ids` of their note ids), kept in
    their original order."""
    chosen = sample_ids((note.note_id for note in seeds), size, seed)
    return [note for note in seeds if note.note_id in chosen]


def shard_jobs(jobs: list[TemplateJob], shard: Shard | None) -> list[TemplateJob]:
    """The planned jobs this run sends: all of them, or its shard's row range."""
    rows = shard_table_rows(shard, len(jobs))
    if shard is not None:
        log.info("shard %s: jobs %d to %d of %d", shard.label, rows.start + 1, rows.stop, len(jobs))
    return jobs[rows.start : rows.stop]


@dataclass(frozen=True)
class TemplateInputs:
    """The files a template run reads: the mask step's masked seeds and removed values,
    the placeholder allowlist and the prompt file."""

    masked: Path
    removed: Path
    allowlist: Path
    prompt: Path


def generate_templates(
    settings: dict[str, Any],
    inputs: TemplateInputs,
    *,
    cache_dir: Path | None,
    shard: Shard | None,
    progress: bool,
) -> tuple[GenerationReport, dict[str, Any], int]:
    """The report of this run's jobs (its shard's with ``shard``), the provenance, and
    the number of jobs planned (from every seed)."""
    check_settings(settings)
    check_removed_values(inputs.removed, inputs.masked)
    allowlist = load_allowlist(inputs.allowlist)
    prompt = load_prompt(inputs.prompt, allowlist)
    seeds = read_notes(inputs.masked)
    if not seeds:
        raise InputError(inputs.masked, None, "no masked seed notes")
    check_seed_placeholders(inputs.masked, seeds, set(allowlist.names))
    sample = settings.get("seed_sample") or {}
    if sample.get("size") is not None:
        seeds = sample_seeds(seeds, int(sample["size"]), int(sample.get("seed", 0)))
    scanner = IdentifierScanner(common_words=lowercase_vocabulary(n.text for n in seeds))
    validator_settings = settings.get("validator", {})
    validator = TemplateValidator(
        allowlist,
        scanner,
        ValidatorSettings(
            length_ratio=tuple(validator_settings.get("length_ratio", (0.5, 2.0))),
            max_copied_ngram_share=validator_settings.get("max_copied_ngram_share", 0.5),
        ),
        instructions=prompt.instruction_texts(),
    )
    backend = build_backend(settings.get("backend", {"kind": "none"}), cache_dir=cache_dir)
    extra: dict[str, Any] = {"seeds": len(seeds), "backend": settings.get("backend", {})}
    if sample.get("size") is not None:
        extra["seed_sample"] = {"size": int(sample["size"]), "seed": int(sample.get("seed", 0))}
    if backend is None:
        jobs = seed_jobs(seeds, allowlist)
        report = identity_templates(shard_jobs(jobs, shard), validator)
        extra["backend_description"] = {"backend": "none"}
    else:
        guard = RequestGuard(
            (surface for surface, _ in load_phi_surfaces(inputs.removed)),
            scanner,
            min_surface_chars=settings.get("guard", {}).get("min_surface_chars", 3),
            placeholders=allowlist.names,
        )
        guarded = GuardedBackend(backend, guard)
        jobs = plan_jobs(seeds, settings.get("variants", {"standard": 1}), prompt)
        report = llm_templates(
            shard_jobs(jobs, shard),
            guarded,
            prompt,
            validator,
            mix=plan_mix(jobs),
            generation=settings.get("generation", {}),
            base_seed=int(settings.get("seed", 0)),
            progress=progress,
        )
        extra["backend_description"] = backend.describe()
        extra["guard"] = {
            "sent": guarded.sent,
            "refused": guarded.refused,
            "refusal_reasons": dict(sorted(guarded.refusal_reasons.items())),
        }
    report.extra.update(extra)
    provenance = make_provenance(
        "generate-templates",
        {
            "settings": settings,
            "prompt": prompt.provenance(),
            "allowlist": {"version": allowlist.version, "sha256": allowlist.fingerprint},
        },
        {
            "masked": inputs.masked,
            "removed": inputs.removed,
            "allowlist": inputs.allowlist,
            "prompt": inputs.prompt,
        },
    )
    return report, provenance, len(jobs)


def sent_requests_path(out: Path, shard: Shard | None) -> Path:
    """Where the sent requests go by default: local/ beside the (unsharded) templates table
    ``out``, at its shard's path with ``shard`` (where gather-shards looks for them)."""
    return shard_output(local_path(unsharded_output(out, shard), ".sent_requests.parquet"), shard)
