"""Reports of table rows written by an LLM, each answer judged by the template validator.

:class:`VerbalizeSettings` is the verbalizer's configuration;
:func:`llm_verdicts` sends one request per ruled row through the (guarded)
backend, under the JSON or placeholder constraint ``generation.constrain``
asks for, and judges each answer: its placeholders and that it names no
identifier. Without a backend the seeded grammar writes the reports
(:func:`synthdeid.tabular.verbalize.grammar_reports`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.llm.base import ChatFailure, ChatRequest, ChatResponse
from synthdeid.llm.constraints import NoteShape
from synthdeid.llm.guard import REFUSED_PREFIX
from synthdeid.synthesis.templates import BACKEND_FAILURE, REFUSED_BY_GUARD, truncation
from synthdeid.synthesis.validator import TemplateValidator, Verdict, parse_answer
from synthdeid.tabular.expert_rules import RuledRow
from synthdeid.tabular.spec import TableSpec
from synthdeid.tabular.verbalize import REPORT_PLACEHOLDERS, REPORT_VARIANT, ReportPrompt

REPORT_SEGMENT_CHARS = 300


@dataclass(frozen=True)
class VerbalizeSettings:
    """synth.tabular.verbalize (minus the subsample keys, which the subsample rule takes,
    and the endpoint policy's, :class:`~synthdeid.tabular.endpoint.EndpointPolicy`)."""

    backend: dict[str, Any] = field(default_factory=lambda: {"kind": "none"})
    rules: list[dict[str, Any]] = field(default_factory=list)
    generation: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    fill_seed: int = 0


def llm_verdicts(
    rows: list[tuple[str, RuledRow]],
    spec: TableSpec,
    backend: Any,
    prompt: ReportPrompt,
    validator: TemplateValidator,
    settings: VerbalizeSettings,
    progress: bool,
) -> list[tuple[Verdict, ChatResponse | None]]:
    """One request per row through ``backend``; each answer judged by the validator.

    ``generation["constrain"]``: ``json`` (default) asks for the JSON note,
    enforced where the backend can; ``placeholders`` also forces the four
    report placeholders into the note, in order, with at most
    :data:`REPORT_SEGMENT_CHARS` characters around each (so a looping model
    must move on and end); ``free`` asks for nothing. An answer that is not
    JSON because it ran into ``max_tokens`` is ``truncated``.
    """
    generation = dict(settings.generation)
    constrain = generation.pop("constrain", "json")
    shapes = {
        "free": None,
        "json": NoteShape("note"),
        "placeholders": NoteShape(
            "note",
            tuple(f"[[{n}_1]]" for n in REPORT_PLACEHOLDERS),
            max_chars=(REPORT_SEGMENT_CHARS,) * (len(REPORT_PLACEHOLDERS) + 1),
        ),
    }
    if constrain not in shapes:
        raise ConfigError(
            f"verbalize generation.constrain must be one of {list(shapes)}, not {constrain!r}"
        )
    requests = [
        ChatRequest(
            messages=prompt.messages(row, spec),
            seed=settings.seed + i,
            json_mode=constrain != "free",
            shape=shapes[constrain],
            **generation,
        )
        for i, (_, row) in enumerate(rows)
    ]
    out: list[tuple[Verdict, ChatResponse | None]] = []
    answers = backend.complete_many(requests, progress=progress)
    for request, result in zip(requests, answers, strict=True):
        if isinstance(result, ChatFailure):
            refused = result.reason.startswith(REFUSED_PREFIX)
            reason = REFUSED_BY_GUARD if refused else BACKEND_FAILURE
            out.append((Verdict(None, reason, result.reason), None))
            continue
        verdict = truncation(parse_answer(result.text), result, request)
        if verdict.accepted and verdict.template is not None:
            verdict = (
                validator.check_placeholders(verdict.template, REPORT_VARIANT)
                or validator.check_identifiers(verdict.template)
                or verdict
            )
        out.append((verdict, result))
    return out
