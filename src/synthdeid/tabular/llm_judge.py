"""An LLM judge of the verbalized reports: one request per report, a verdict per variable.

The judge is asked, with the prompt of :func:`~synthdeid.tabular.faithfulness.load_judge_prompt`,
which of the row's values the report states; an answer that cannot be read
(or a request the guard refused, or the backend failed) leaves every
variable of that report ``not_judged``, counted by reason.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from synthdeid.errors import InputError
from synthdeid.llm.base import ChatFailure, ChatRequest
from synthdeid.llm.guard import REFUSED_PREFIX
from synthdeid.synthesis.templates import BACKEND_FAILURE, REFUSED_BY_GUARD
from synthdeid.tabular.faithfulness import (
    NOT_JUDGED,
    JudgeFailure,
    VariableVerdict,
    judge_request_messages,
    load_judge_prompt,
    parse_judge_answer,
)
from synthdeid.tabular.spec import TableSpec


def judge_verdicts(
    reports: list[dict[str, Any]],
    spec: TableSpec,
    backend: Any,
    prompt_path: Path | None,
    progress: bool,
) -> tuple[list[list[VariableVerdict]], Counter[str]]:
    """The LLM judge's verdicts; an unreadable answer leaves every pair ``not_judged``."""
    if prompt_path is None:
        raise InputError("--judge-prompt", None, "an LLM judge needs its prompt file")
    prompt = load_judge_prompt(prompt_path)
    requests = []
    for report in reports:
        system, user = judge_request_messages(report["template"], report["row"], spec, prompt)
        requests.append(ChatRequest.of(system, user, temperature=0.0))
    failures: Counter[str] = Counter()
    out = []
    for report, result in zip(
        reports, backend.complete_many(requests, progress=progress), strict=True
    ):
        row = report["row"]
        if isinstance(result, ChatFailure):
            refused = result.reason.startswith(REFUSED_PREFIX)
            reason = REFUSED_BY_GUARD if refused else BACKEND_FAILURE
            parsed: JudgeFailure | list[VariableVerdict] = JudgeFailure(reason, result.reason)
        else:
            parsed = parse_judge_answer(result.text, row, spec, report["template"])
        if isinstance(parsed, JudgeFailure):
            failures[parsed.reason] += 1
            parsed = [
                VariableVerdict(name, row[name], False, NOT_JUDGED, None) for name in spec.names
            ]
        out.append(parsed)
    return out, failures
