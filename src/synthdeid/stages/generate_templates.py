"""Generate templates from masked seeds with an LLM backend (or none), validated.

Reads the mask step's masked notes and removed values (refused when the removed
values were not written with these masked notes, before anything else: the
guard would search another run's surfaces), builds one request per
seed x variant x copy from the prompt file, sends it through the guarded
backend and validates every answer. Writes the templates table (every
attempt, with its status and reason), a summary with the acceptance rate,
the guard's refusals and token counts, and, local-only, every request that
went to the backend (the audit trail of what left the step: masked text, but
text of real notes, so it stays on the machine).

``--shard K/N`` runs only the K-th of N row ranges of the planned jobs (seed x
variant x copy in plan order; one job per seed for backend ``none``), each one
row of the templates table, and writes every output as a shard artifact
(:mod:`synthdeid.shards`) for ``gather-shards`` to join: ``--out``,
``--summary`` and ``--sent-requests`` are written where given (the workflow
gives the shard paths; the default sent-requests path is the shard path of
the unsharded one). Each shard still reads every seed: the validator's
vocabulary, the guard's PHI surfaces and the stand-in placeholder mix are the
whole run's, so its rows are those one job writes for its jobs. Shard jobs may
share ``--cache-dir``: each answer is its own file, written atomically.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from synthdeid.artifacts import make_provenance, write_json_atomic, write_parquet_atomic
from synthdeid.cli_types import input_dir, input_file, output_file
from synthdeid.errors import ConfigError, InputError
from synthdeid.identifiers import IdentifierScanner
from synthdeid.llm.factory import build_backend
from synthdeid.llm.guard import GuardedBackend, RequestGuard, load_phi_surfaces
from synthdeid.local_only import LOCAL_ONLY_METADATA, local_path, require_local_path
from synthdeid.mask import check_removed_values
from synthdeid.notes import Note, read_notes
from synthdeid.runtime import add_runtime_arguments
from synthdeid.shards import (
    Shard,
    shard_argument,
    shard_metadata,
    shard_output,
    shard_table_rows,
    unsharded_output,
    with_shard,
)
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
    records_to_table,
    seed_jobs,
    sent_requests_table,
)
from synthdeid.synthesis.validator import TemplateValidator, ValidatorSettings

log = logging.getLogger(__name__)

SETTING_KEYS = {"backend", "variants", "generation", "seed", "validator", "guard", "seed_sample"}


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--masked", required=True, type=input_file, help="mask step's masked.parquet"
    )
    parser.add_argument(
        "--removed", required=True, type=input_file, help="mask step's removed_values.parquet"
    )
    parser.add_argument("--allowlist", required=True, type=input_file, help="placeholders.yaml")
    parser.add_argument("--prompt", required=True, type=input_file, help="prompt file (YAML)")
    parser.add_argument(
        "--settings",
        required=True,
        type=json.loads,
        help="JSON: backend, variants, generation, seed, validator, guard (config synth.template)",
    )
    parser.add_argument(
        "--cache-dir", type=input_dir, default=None, help="response cache (reruns send nothing)"
    )
    parser.add_argument("--out", required=True, type=output_file, help="templates.parquet to write")
    parser.add_argument("--summary", required=True, type=output_file, help="summary.json to write")
    parser.add_argument(
        "--sent-requests",
        type=output_file,
        default=None,
        help="local-only Parquet of every request sent, in a local/ folder "
        "(default: local/ beside --out)",
    )
    add_runtime_arguments(parser, threads=False, device=False)
    parser.add_argument(
        "--shard",
        type=shard_argument,
        default=None,
        help="K/N: run only the K-th of N row ranges of the planned requests "
        "(seed x variant x copy), for gather-shards to join",
    )


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


def generate(args: argparse.Namespace) -> tuple[GenerationReport, dict[str, Any], int]:
    """The report of this run's jobs (its shard's with ``--shard``), the provenance, and
    the number of jobs planned (from every seed)."""
    settings = args.settings
    check_settings(settings)
    check_removed_values(args.removed, args.masked)
    allowlist = load_allowlist(args.allowlist)
    prompt = load_prompt(args.prompt, allowlist)
    seeds = read_notes(args.masked)
    if not seeds:
        raise InputError(args.masked, None, "no masked seed notes")
    check_seed_placeholders(args.masked, seeds, set(allowlist.names))
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
    backend = build_backend(settings.get("backend", {"kind": "none"}), cache_dir=args.cache_dir)
    extra: dict[str, Any] = {"seeds": len(seeds), "backend": settings.get("backend", {})}
    if sample.get("size") is not None:
        extra["seed_sample"] = {"size": int(sample["size"]), "seed": int(sample.get("seed", 0))}
    if backend is None:
        jobs = seed_jobs(seeds, allowlist)
        report = identity_templates(shard_jobs(jobs, args.shard), validator)
        extra["backend_description"] = {"backend": "none"}
    else:
        guard = RequestGuard(
            (surface for surface, _ in load_phi_surfaces(args.removed)),
            scanner,
            min_surface_chars=settings.get("guard", {}).get("min_surface_chars", 3),
            placeholders=allowlist.names,
        )
        guarded = GuardedBackend(backend, guard)
        jobs = plan_jobs(seeds, settings.get("variants", {"standard": 1}), prompt)
        report = llm_templates(
            shard_jobs(jobs, args.shard),
            guarded,
            prompt,
            validator,
            mix=plan_mix(jobs),
            generation=settings.get("generation", {}),
            base_seed=int(settings.get("seed", 0)),
            progress=not args.no_progress,
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
            "masked": args.masked,
            "removed": args.removed,
            "allowlist": args.allowlist,
            "prompt": args.prompt,
        },
    )
    return report, provenance, len(jobs)


def sent_requests_path(args: argparse.Namespace) -> Path:
    """``--sent-requests``, by default local/ beside the (unsharded) ``--out``, at its shard's
    path with ``--shard`` (where gather-shards looks for it)."""
    if args.sent_requests is not None:
        return Path(args.sent_requests)
    out = unsharded_output(Path(args.out), args.shard)
    return shard_output(local_path(out, ".sent_requests.parquet"), args.shard)


def run(args: argparse.Namespace) -> None:
    if args.sent_requests is not None:
        require_local_path(args.sent_requests, "--sent-requests", "the masked text of real notes")
    report, provenance, planned = generate(args)
    metadata = shard_metadata(args.shard, planned)
    write_parquet_atomic(records_to_table(report.records), args.out, provenance, metadata=metadata)
    sent = sent_requests_table(report.records)
    sent = sent.replace_schema_metadata({**(sent.schema.metadata or {}), **LOCAL_ONLY_METADATA})
    write_parquet_atomic(sent, sent_requests_path(args), provenance, metadata=metadata)
    summary = report.summary()
    body = {"summary": summary, "provenance": provenance}
    write_json_atomic(with_shard(body, args.shard, planned), args.summary)
    log.info(
        "templates: %d requested, %d accepted (%.1f%%); rejections %s",
        summary["requested"],
        summary["accepted"],
        100 * (summary["acceptance_rate"] or 0.0),
        summary["rejections"] or "none",
    )
