"""Template generation: masked seeds -> (LLM backend) -> validated templates.

Each masked seed note is rewritten once per requested copy of every prompt
variant. Requests carry masked text only and pass the request guard (no seed
PHI surface, nothing identifier-like) before they are sent; a refused request
is counted and never reaches the backend. Answers go through the
:class:`~synthdeid.synthesis.validator.TemplateValidator` (an answer that is
not JSON because it ran into ``max_tokens`` is ``truncated``); every attempt,
accepted or rejected with its reason, becomes one row of the templates table.

Backend ``none`` sends nothing: every masked seed is its own template (the
``seed`` pseudo-variant, copy check off). It exercises everything downstream
(validator, fill, dedup, screen, pools, diagnostics) without a language model.

The planned jobs (:func:`plan_jobs`, :func:`seed_jobs`) are one row each of
the templates table, in plan order, so a shard (``generate-templates --shard``)
runs a row range of them; what a job's answer depends on beyond the job (the
stand-in placeholder mix, the validator's vocabulary, the guard's surfaces) is
built from every seed, so a shard's rows are those of the whole run.
:data:`SHARD_MERGE_RULES` merges the shards' summaries into the whole run's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from synthdeid.llm.base import ChatBackend, ChatFailure, ChatRequest, ChatResponse
from synthdeid.notes import Note
from synthdeid.shards import MergeRule, agreed, merge_summaries
from synthdeid.synthesis.placeholders import PlaceholderAllowlist
from synthdeid.synthesis.prompts import PromptSpec, Variant, placeholder_mix, seed_variant
from synthdeid.synthesis.validator import ACCEPTED, REJECTED, TemplateValidator, Verdict, reject

log = logging.getLogger(__name__)

REFUSED_BY_GUARD = "refused_by_guard"
BACKEND_FAILURE = "backend_failure"

TEMPLATES_SCHEMA = pa.schema(
    [
        pa.field("template_id", pa.string(), nullable=False),
        pa.field("seed_note_id", pa.string(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("template", pa.string()),
        pa.field("request_sha256", pa.string()),
        pa.field("input_tokens", pa.int32()),
        pa.field("output_tokens", pa.int32()),
        pa.field("cached", pa.bool_(), nullable=False),
    ]
)

_LOWER_WORD_RE = re.compile(r"\b[a-z]+\b")


@dataclass(frozen=True)
class TemplateJob:
    """One requested rewrite: a masked seed, a variant and a copy number."""

    template_id: str
    seed: Note
    variant: Variant
    copy: int

    def request_seed(self, base_seed: int) -> int:
        digest = hashlib.sha256(f"{base_seed}:{self.template_id}".encode()).digest()
        return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class TemplateRecord:
    """One attempt; ``request`` is what went to the backend (None: nothing did)."""

    job: TemplateJob
    verdict: Verdict
    request_sha256: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached: bool = False
    request: ChatRequest | None = None

    @property
    def status(self) -> str:
        return ACCEPTED if self.verdict.accepted else REJECTED


@dataclass
class GenerationReport:
    """What the step did, for its summary.json."""

    records: list[TemplateRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        by_variant: dict[str, Counter[str]] = {}
        for record in self.records:
            by_variant.setdefault(record.job.variant.name, Counter())[record.status] += 1
        accepted = sum(r.verdict.accepted for r in self.records)
        return {
            "requested": len(self.records),
            "accepted": accepted,
            "acceptance_rate": acceptance_rate(accepted, len(self.records)),
            "rejections": dict(
                sorted(Counter(r.verdict.reason for r in self.records if r.verdict.reason).items())
            ),
            "by_variant": {
                name: {
                    "requested": sum(c.values()),
                    "accepted": c[ACCEPTED],
                    "acceptance_rate": acceptance_rate(c[ACCEPTED], sum(c.values())),
                }
                for name, c in sorted(by_variant.items())
            },
            "input_tokens": sum(r.input_tokens or 0 for r in self.records),
            "output_tokens": sum(r.output_tokens or 0 for r in self.records),
            "cached_responses": sum(r.cached for r in self.records),
            **self.extra,
        }


def acceptance_rate(accepted: int, requested: int) -> float | None:
    """Accepted templates per requested one (None: none requested)."""
    return accepted / requested if requested else None


def _merged_acceptance_rate(values: Sequence[Any], merged: Mapping[str, Any]) -> float | None:
    return acceptance_rate(merged["accepted"], merged["requested"])


def _merged_by_key(key: str) -> MergeRule:
    """The rule of a ``key`` whose object the step writes sorted by key (counts by reason,
    by variant): merged, then sorted again, as the whole run writes it."""

    def rule(values: Sequence[Any], merged: Mapping[str, Any]) -> dict[str, Any]:
        return dict(sorted(merge_summaries(values, key, SHARD_MERGE_RULES).items()))

    return rule


# how gather-shards merges the shards' summary.json (synthdeid.shards.merge_summaries):
# counts add up; rates are recomputed from the summed counts; the settings, the
# backend and the number of seeds (every shard plans from all of them) agree
SHARD_MERGE_RULES: Mapping[str, MergeRule] = {
    "acceptance_rate": _merged_acceptance_rate,
    "rejections": _merged_by_key("rejections"),
    "by_variant": _merged_by_key("by_variant"),
    "refusal_reasons": _merged_by_key("refusal_reasons"),
    **{key: agreed for key in ("seeds", "seed_sample", "backend", "backend_description")},
}


def template_id(seed_note_id: str, variant: str, copy: int) -> str:
    return f"tpl:{seed_note_id}:{variant}:{copy}"


def plan_jobs(
    seeds: Sequence[Note], variants: Mapping[str, int], prompt: PromptSpec
) -> list[TemplateJob]:
    """Every seed x every variant x its number of copies, in a stable order."""
    jobs: list[TemplateJob] = []
    for seed in seeds:
        for name, copies in variants.items():
            variant = prompt.variant(name)
            jobs.extend(
                TemplateJob(template_id(seed.note_id, name, k), seed, variant, k)
                for k in range(copies)
            )
    return jobs


def lowercase_vocabulary(texts: Iterable[str]) -> set[str]:
    """Words written in lower case somewhere in ``texts`` (ordinary words, not names).

    Masked seeds hold no gold names (masking propagates every gold surface),
    so a word seen in lower case there is a common word even where it is
    also a first name ("will", "rose"): the identifier scanner ignores it.
    """
    words: set[str] = set()
    for text in texts:
        words.update(_LOWER_WORD_RE.findall(text))
    return words


def seed_jobs(seeds: Sequence[Note], allowlist: PlaceholderAllowlist) -> list[TemplateJob]:
    """Backend ``none``'s plan: one job per seed, the seed pseudo-variant, in seed order."""
    variant = seed_variant(allowlist)
    return [TemplateJob(template_id(s.note_id, variant.name, 0), s, variant, 0) for s in seeds]


def identity_templates(
    jobs: Sequence[TemplateJob], validator: TemplateValidator
) -> GenerationReport:
    """Backend ``none``: each job's masked seed is validated as its own template."""
    # the seed is its own template: the copy check would reject every one
    validator = TemplateValidator(
        validator.allowlist,
        validator.scanner,
        replace(validator.settings, max_copied_ngram_share=None),
    )
    report = GenerationReport()
    for job in jobs:
        verdict = validator.validate_template(job.seed.text, job.variant, job.seed.text)
        report.records.append(TemplateRecord(job, verdict))
    return report


def plan_mix(jobs: Sequence[TemplateJob]) -> Counter[str]:
    """The placeholder mix of the planned jobs' seeds, each seed once: what a seed's
    stand-in placeholder is drawn from (:meth:`Variant.stand_in`)."""
    return placeholder_mix({job.seed.note_id: job.seed.text for job in jobs}.values())


def llm_templates(
    jobs: Sequence[TemplateJob],
    backend: ChatBackend,
    prompt: PromptSpec,
    validator: TemplateValidator,
    *,
    mix: Mapping[str, int],
    generation: Mapping[str, Any],
    base_seed: int,
    progress: bool = False,
) -> GenerationReport:
    """Send every job's request through ``backend`` (a guarded one) and validate the answers.

    A seed without placeholders asked for a PII-bearing rewrite gets one drawn
    from ``mix``, the seeds' own label mix (:func:`plan_mix` of the whole plan,
    also when ``jobs`` are a shard of it).
    """
    from synthdeid.llm.base import request_hash

    seeds = [job.request_seed(base_seed) for job in jobs]
    requests = [
        prompt.request(
            job.variant,
            job.seed.text,
            generation=generation,
            seed=seed,
            stand_in=job.variant.stand_in(mix, seed),
        )
        for job, seed in zip(jobs, seeds, strict=True)
    ]
    results = backend.complete_many(requests, progress=progress)
    report = GenerationReport()
    for job, request, result in zip(jobs, requests, results, strict=True):
        sha = request_hash(backend.name, backend.model, request)
        if isinstance(result, ChatFailure):
            reason = (
                REFUSED_BY_GUARD
                if result.reason.startswith("refused by guard")
                else BACKEND_FAILURE
            )
            sent = request if reason == BACKEND_FAILURE else None
            report.records.append(
                TemplateRecord(job, reject(reason, result.reason), sha, request=sent)
            )
            continue
        assert isinstance(result, ChatResponse)
        verdict = truncation(
            validator.validate_answer(result.text, job.variant, job.seed.text), result, request
        )
        report.records.append(
            TemplateRecord(
                job,
                verdict,
                sha,
                result.input_tokens,
                result.output_tokens,
                result.cached,
                request,
            )
        )
    return report


def truncation(verdict: Verdict, result: ChatResponse, request: ChatRequest) -> Verdict:
    """``truncated`` instead of ``invalid_json`` when the answer ran into ``max_tokens``."""
    ran_out = result.output_tokens is not None and result.output_tokens >= request.max_tokens
    if verdict.reason == "invalid_json" and ran_out:
        return reject("truncated", f"the answer stopped at max_tokens ({request.max_tokens})")
    return verdict


SENT_REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("template_id", pa.string(), nullable=False),
        pa.field("request_sha256", pa.string(), nullable=False),
        pa.field(
            "messages",
            pa.list_(
                pa.struct(
                    [
                        pa.field("role", pa.string(), nullable=False),
                        pa.field("content", pa.string(), nullable=False),
                    ]
                )
            ),
            nullable=False,
        ),
        pa.field("shape", pa.string()),
        pa.field("cached", pa.bool_(), nullable=False),
    ]
)


def sent_requests_table(records: Sequence[TemplateRecord]) -> pa.Table:
    """Every request that passed the guard and went to the backend (or was answered
    from the cache): the audit trail of what left the step, masked text only."""
    rows = [
        {
            "template_id": r.job.template_id,
            "request_sha256": r.request_sha256,
            "messages": [{"role": m.role, "content": m.content} for m in r.request.messages],
            "shape": json.dumps(r.request.shape.canonical()) if r.request.shape else None,
            "cached": r.cached,
        }
        for r in records
        if r.request is not None and r.request_sha256 is not None
    ]
    return pa.Table.from_pylist(rows, schema=SENT_REQUESTS_SCHEMA)


def records_to_table(records: Sequence[TemplateRecord]) -> pa.Table:
    rows = [
        {
            "template_id": r.job.template_id,
            "seed_note_id": r.job.seed.note_id,
            "patient_id": r.job.seed.patient_id,
            "variant": r.job.variant.name,
            "status": r.status,
            "reason": r.verdict.reason,
            "detail": r.verdict.detail,
            "template": r.verdict.template,
            "request_sha256": r.request_sha256,
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "cached": r.cached,
        }
        for r in records
    ]
    return pa.Table.from_pylist(rows, schema=TEMPLATES_SCHEMA)
