"""Information extraction from reports: the task, its examples and its scores (Lorenzo et al. 2026, sec. 4).

The paper's test of its synthetic report/value pairs: an extractor trained on
them must read the variables back out of *real* reports. Here:

* **training examples** (:func:`training_examples`) are the faithful pairs of
  ``check_faithfulness`` (reports of synthetic rows, with only the variables
  each report states correctly, as the paper fine-tunes on);
* **test examples** (:func:`holdout_examples`) are the *real* holdout rows of the
  prepared table, each written as a report by the seeded grammar of
  :mod:`synthdeid.tabular.verbalize` after the same expert rules. No real
  report of these rows exists: the rows are real, the wording is the
  grammar's. The gold value of each variable is the row's (after the rules),
  so every test report is labelled for every variable. They derive from real
  rows: they stay on this machine (the endpoint policy) and are never written
  where releasable artifacts live;
* **answers** (:func:`category_of_answer`): what an extractor says for one
  variable, read as a category of the spec: a category's name or phrase for a
  categorical variable, a number placed in its bin for a binned one,
  ``unknown`` for "unknown", "not reported" and the like; anything else is no
  answer, counted wrong;
* **scores** (:func:`score_extraction`): per variable, accuracy and F1
  (macro-averaged over the categories the gold values of that variable take;
  a missing answer is a miss of the gold category), and overall the mean over
  variables with a 95% bootstrap interval over test reports (every test report
  carries every variable, so the overall accuracy is the mean of the reports'
  shares of correct variables). A variable no test report carries is n/a.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from synthdeid.errors import InputError
from synthdeid.stats import Interval, bootstrap_mean_interval
from synthdeid.tabular.expert_rules import ExpertRule, apply_rules
from synthdeid.tabular.faithfulness import check_report
from synthdeid.tabular.spec import BINNED, MISSING, TableSpec, Variable
from synthdeid.tabular.verbalize import grammar_report, record_rng

# what an extractor may say for a variable it finds no value for
_MISSING_ANSWERS = frozenset(
    {"unknown", "not reported", "not assessed", "not stated", "not mentioned", "none", "n/a"}
)
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


@dataclass(frozen=True)
class HoldoutSettings:
    """synth.tabular.extraction.test: how the test reports are written and scored."""

    seed: int = 1  # the grammar's seed (verbalize_tabular's default is 0)
    max_reports: int | None = None  # None: every holdout row
    resamples: int = 1000  # bootstrap resamples of the overall accuracy's interval

    def __post_init__(self) -> None:
        if self.max_reports is not None and self.max_reports < 1:
            raise ValueError("max_reports must be positive (or null: every holdout row)")
        if self.resamples < 1:
            raise ValueError("resamples must be positive")


@dataclass(frozen=True)
class Example:
    """One report and the values it is labelled with (variable -> category).

    A variable absent from ``values`` is unlabelled in this report (a training
    report that misstates it).
    """

    record_id: str
    report: str
    values: Mapping[str, str]


def training_examples(pairs: pd.DataFrame, spec: TableSpec, path: str | Path) -> list[Example]:
    """The faithful report/value pairs of ``check_faithfulness`` (``pairs.parquet``).

    A report with no faithful pair teaches nothing and is left out. A value
    outside the spec's domain is an InputError naming the file and record.
    """
    examples = []
    for record in pairs.to_dict("records"):
        try:
            kept = json.loads(record["kept_json"])
        except (TypeError, ValueError):
            raise InputError(path, record["record_id"], "kept_json is not JSON") from None
        if not isinstance(kept, dict):
            raise InputError(path, record["record_id"], "kept_json is not an object")
        for name, value in kept.items():
            if name not in spec.names or value not in spec.variable(name).domain:
                raise InputError(
                    path, record["record_id"], f"variable {name!r} or its value is not in the spec"
                )
        if kept:
            examples.append(Example(str(record["record_id"]), str(record["report"]), kept))
    return examples


def holdout_examples(
    holdout: pd.DataFrame, spec: TableSpec, rules: Sequence[ExpertRule], seed: int
) -> list[Example]:
    """The real holdout rows, each after the expert rules and written by the seeded grammar.

    The rules draw from ``record_rng(seed, record_id)``, the grammar from
    ``record_rng(seed + 1, record_id)`` (as verbalize_tabular does with its
    own seed), so a record's report is the same in any order.
    """
    examples = []
    for record in holdout.to_dict("records"):
        record_id = str(record["record_id"])
        ruled = apply_rules(record, rules, spec, record_rng(seed, record_id))
        report = grammar_report(ruled, spec, record_rng(seed + 1, record_id))
        examples.append(Example(record_id, report, dict(ruled.values)))
    return examples


def split_validation(
    examples: Sequence[Example], fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """(train, validation): a seeded ``fraction`` of the examples held out for choosing
    the epoch; at least one example on each side when there are two or more."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    if len(order) < 2 or fraction <= 0:
        return order, []
    held = min(len(order) - 1, max(1, round(len(order) * fraction)))
    return order[held:], order[:held]


def few_shot_examples(
    examples: Sequence[Example], variable: str, k: int, seed: int
) -> list[Example]:
    """``k`` training examples labelled for ``variable``, drawn by ``seed``: the first of
    each distinct value first, so the shots show as many values as they can."""
    labelled = [e for e in examples if variable in e.values]
    random.Random(f"{seed}:{variable}").shuffle(labelled)
    firsts: dict[str, Example] = {}
    for example in labelled:
        firsts.setdefault(example.values[variable], example)
    chosen = list(firsts.values())[:k]
    chosen += [e for e in labelled if e not in chosen][: k - len(chosen)]
    return chosen


def possible_values(variable: Variable) -> str:
    """The values an extractor may answer for ``variable``, as a prompt states them."""
    if variable.kind == BINNED:
        low, high = variable.bins[0].low, variable.bins[-1].high
        unit = f" {variable.unit}" if variable.unit else ""
        text = f"a number between {low:g} and {high:g}{unit}"
    else:
        text = "one of: " + ", ".join(c.replace("_", " ") for c in variable.categories)
    return text + (", or unknown" if variable.allow_missing else "")


def stated_value(example: Example, variable: Variable, spec: TableSpec) -> tuple[str, str]:
    """What a correct extractor answers for ``variable`` in a labelled report, and the
    passage that states it: the category, or for a binned variable the number the report
    states (found by the rule checker of :mod:`synthdeid.tabular.faithfulness`, in the
    passage it cites); the bin's midpoint and no passage when the checker finds none."""
    category = example.values[variable.name]
    # each variable is judged on its own: the others' values only complete the row
    row = {v.name: example.values.get(v.name, v.domain[0]) for v in spec.variables}
    verdict = next(
        v for v in check_report(example.report, row, spec) if v.variable == variable.name
    )
    evidence = verdict.evidence if verdict.correct else None
    reference = example.report[evidence[0] : evidence[1]] if evidence else ""
    stated = None
    if variable.kind == BINNED and category != MISSING:
        numbers = _NUMBER_RE.findall(reference.replace(",", ""))
        stated = next((n for n in numbers if variable.discretize(n) == category), None)
    if variable.kind == BINNED and stated is None:
        reference = ""
    return answer_value(variable, category, stated), reference


def answer_value(variable: Variable, category: str, drawn: str | None = None) -> str:
    """The answer a correct extractor gives: the category, or for a binned variable the
    number the report states (``drawn``) or else its bin's midpoint."""
    if category == MISSING or variable.kind != BINNED:
        return category.replace("_", " ")
    if drawn is not None:
        return drawn
    chosen = variable.bin_of(category)
    return f"{(chosen.low + chosen.high) / 2:g}"


def category_of_answer(variable: Variable, answer: Any) -> str | None:
    """The spec category an extractor's answer names (see the module docstring); None for
    an answer that names none (empty, several categories, a number outside the bins)."""
    if answer is None or isinstance(answer, (dict, list)):
        return None
    text = " ".join(str(answer).replace("_", " ").casefold().split()).strip(" .")
    if not text:
        return None
    if text in _MISSING_ANSWERS:
        return MISSING
    if variable.kind == BINNED:
        number = _NUMBER_RE.search(text.replace(",", ""))
        return variable.discretize(number.group()) if number else None
    found = set()
    for category in variable.categories:
        for phrase in {*variable.phrases_of(category), category.replace("_", " ")}:
            if re.search(rf"(?<!\w){re.escape(phrase.casefold())}(?!\w)", text):
                found.add(category)
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class VariableScore:
    """One variable's scores over the test reports that carry it (None: n/a)."""

    reports: int
    answered: int
    accuracy: float | None
    f1: float | None


@dataclass(frozen=True)
class ExtractionScores:
    """One extractor's scores: per variable (spec order) and overall."""

    per_variable: dict[str, VariableScore]
    accuracy: Interval | None  # mean over variables, interval over test reports
    f1: float | None  # mean over variables with an F1

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_variable": {
                name: {
                    "reports": s.reports,
                    "answered": s.answered,
                    "accuracy": s.accuracy,
                    "f1": s.f1,
                }
                for name, s in self.per_variable.items()
            },
            "accuracy": self.accuracy.as_dict() if self.accuracy is not None else None,
            "f1": self.f1,
        }


def macro_f1(gold: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    """F1 averaged over the categories ``gold`` takes; a None prediction is a miss."""
    if not gold:
        return None
    scores = []
    for category in sorted(set(gold)):
        tp = sum(g == category and p == category for g, p in zip(gold, predicted, strict=True))
        fp = sum(g != category and p == category for g, p in zip(gold, predicted, strict=True))
        fn = sum(g == category and p != category for g, p in zip(gold, predicted, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def score_extraction(
    gold: Sequence[Example],
    predicted: Sequence[Mapping[str, str | None]],
    spec: TableSpec,
    *,
    resamples: int,
    seed: int,
) -> ExtractionScores:
    """Scores of ``predicted`` (one mapping per gold example, same order; a variable
    missing from a mapping is no answer) against the gold values."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} test reports")
    per_variable = {}
    for name in spec.names:
        pairs = [
            (e.values[name], p.get(name))
            for e, p in zip(gold, predicted, strict=True)
            if name in e.values
        ]
        truths = [g for g, _ in pairs]
        answers = [a for _, a in pairs]
        per_variable[name] = VariableScore(
            reports=len(pairs),
            answered=sum(a is not None for a in answers),
            accuracy=float(np.mean([g == a for g, a in pairs])) if pairs else None,
            f1=macro_f1(truths, answers),
        )
    shares = [
        float(np.mean([e.values[n] == p.get(n) for n in spec.names if n in e.values]))
        for e, p in zip(gold, predicted, strict=True)
        if any(n in e.values for n in spec.names)
    ]
    accuracy = bootstrap_mean_interval(shares, resamples=resamples, seed=seed) if shares else None
    f1s = [s.f1 for s in per_variable.values() if s.f1 is not None]
    return ExtractionScores(per_variable, accuracy, float(np.mean(f1s)) if f1s else None)
