"""The LLM baselines of information extraction: 0-shot and k-shot prompting (Lorenzo et al. 2026, sec. 4).

One request per test report and variable, as in the paper: the prompt gives
the report, the variable, its possible values (a category list, or a number
range for a binned variable) and the JSON answer form
``{"value": ..., "reference": ...}``. With ``k`` shots, ``k`` synthetic
training reports labelled for the variable come first, each as a user turn
answered by an assistant turn holding the correct JSON
(:func:`~synthdeid.tabular.extraction.few_shot_examples`: the same shots for
every test report, showing as many distinct values as they can). Greedy
decoding (temperature 0), JSON mode.

The answer's ``value`` is read by
:func:`~synthdeid.tabular.extraction.category_of_answer`; an answer that is
not a JSON object with a ``value`` key, or a failed request, is no answer
(counted wrong, and counted by reason).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from synthdeid.llm.answers import AnswerError, parse_json_object
from synthdeid.llm.base import ChatBackend, ChatFailure, ChatMessage, ChatRequest
from synthdeid.prompt_file import FORMAT, PromptFile, load_prompt_file
from synthdeid.tabular.extraction import (
    Example,
    category_of_answer,
    few_shot_examples,
    possible_values,
    stated_value,
)
from synthdeid.tabular.spec import TableSpec, Variable

PROMPT_FIELDS = {"report", "variable", "label", "values"}
NO_VALUE = "no_value"
BACKEND_FAILURE = "backend_failure"


@dataclass(frozen=True)
class LlmBaselineSettings:
    """synth.tabular.extraction.llm: the baselines' backend (kind none: no baseline), the
    shot counts, how many test reports they answer, the answer's token cap, the seed."""

    backend: dict[str, Any] = field(default_factory=lambda: {"kind": "none"})
    shots: list[int] = field(default_factory=lambda: [0, 3])
    max_reports: int | None = 40
    max_tokens: int = 96
    seed: int = 0

    def __post_init__(self) -> None:
        if any(k < 0 for k in self.shots) or len(set(self.shots)) != len(self.shots):
            raise ValueError("shots must be distinct counts >= 0")
        if self.max_reports is not None and self.max_reports < 1:
            raise ValueError("max_reports must be positive (or null: every test report)")


@dataclass(frozen=True)
class ExtractionPrompt(PromptFile):
    """The versioned prompt of ``resources/prompts/tabular_extraction.yaml``."""

    def user_turn(self, report: str, variable: Variable) -> ChatMessage:
        text = self.user.format(
            report=report,
            variable=variable.name,
            label=variable.label,
            values=possible_values(variable),
        )
        return ChatMessage("user", text.strip())


def load_extraction_prompt(path: str | Path) -> ExtractionPrompt:
    return ExtractionPrompt(**asdict(load_prompt_file(path, PROMPT_FIELDS, FORMAT)))


def shot_answer(example: Example, variable: Variable, spec: TableSpec) -> str:
    """The assistant turn of a shot: the correct JSON answer, with the value as the report
    states it (a measured value: its number) and the passage that states it."""
    value, reference = stated_value(example, variable, spec)
    return json.dumps({"value": value, "reference": reference})


def request_order(n_tests: int, n_variables: int, shots: int) -> list[tuple[int, int]]:
    """(test report, variable) pairs in the order the requests go out.

    Consecutive requests that share a long prefix let a server reuse its
    cached prompt (llama.cpp does): with shots the shots come first, so all
    the reports of one variable go in a row; without, the report comes first,
    so all the variables of one report go in a row.
    """
    if shots:
        return [(i, j) for j in range(n_variables) for i in range(n_tests)]
    return [(i, j) for i in range(n_tests) for j in range(n_variables)]


def extraction_requests(
    tests: Sequence[Example],
    shots_from: Sequence[Example],
    spec: TableSpec,
    prompt: ExtractionPrompt,
    *,
    shots: int,
    seed: int,
    max_tokens: int,
) -> list[ChatRequest]:
    """One request per test report and variable, in :func:`request_order`."""
    system = ChatMessage("system", prompt.system.strip())
    variables = spec.variables
    # the same shots, as user and assistant turns, before every report of a variable
    shot_turns: dict[str, list[ChatMessage]] = {}
    for variable in variables:
        turns: list[ChatMessage] = []
        for shot in few_shot_examples(shots_from, variable.name, shots, seed) if shots else []:
            turns.append(prompt.user_turn(shot.report, variable))
            turns.append(ChatMessage("assistant", shot_answer(shot, variable, spec)))
        shot_turns[variable.name] = turns
    requests = []
    for i, j in request_order(len(tests), len(variables), shots):
        variable = variables[j]
        requests.append(
            ChatRequest(
                messages=(
                    system,
                    *shot_turns[variable.name],
                    prompt.user_turn(tests[i].report, variable),
                ),
                temperature=0.0,
                max_tokens=max_tokens,
                seed=seed,
                json_mode=True,
            )
        )
    return requests


def run_llm_extraction(
    backend: ChatBackend,
    tests: Sequence[Example],
    shots_from: Sequence[Example],
    spec: TableSpec,
    prompt: ExtractionPrompt,
    *,
    shots: int,
    seed: int,
    max_tokens: int,
    progress: bool,
) -> tuple[list[dict[str, str | None]], Counter[str]]:
    """The backend's answers as categories (one mapping per test report), and the count of
    answers that named no category, by reason."""
    requests = extraction_requests(
        tests, shots_from, spec, prompt, shots=shots, seed=seed, max_tokens=max_tokens
    )
    results = backend.complete_many(requests, progress=progress)
    failures: Counter[str] = Counter()
    predicted: list[dict[str, str | None]] = [{} for _ in tests]
    order = request_order(len(tests), len(spec.variables), shots)
    for (i, j), result in zip(order, results, strict=True):
        variable = spec.variables[j]
        category = None
        if isinstance(result, ChatFailure):
            failures[BACKEND_FAILURE] += 1
        else:
            try:
                data = parse_json_object(result.text)
            except AnswerError as error:
                failures[error.reason] += 1
            else:
                category = category_of_answer(variable, data.get("value"))
                if category is None:
                    failures[NO_VALUE] += 1
        predicted[i][variable.name] = category
    return predicted, failures
