"""Synthetic rows into report templates: LLM prompts, or a seeded grammar (backend ``none``).

Lorenzo et al. 2026 (section 3) condition an LLM on variable-value pairs; a range is
turned into an instruction ("to be selected within the range of 6 to 12,
depending on clinical consistency") so the model picks a plausible value. The
prompt here also asks for the report's identifiers as allowlisted
placeholders (``[[PATIENT_1]]``, ``[[DOCTOR_1]]``, ``[[DATE_1]]``,
``[[HOSPITAL_1]]``), which the template regime's local fill then turns into
surrogates at exact offsets, so the reports can join the de-identification
mixtures. Answers go through the template validator's JSON, placeholder and
identifier checks.

With backend ``none`` no language model is involved: :func:`grammar_report`
writes a structured report from a small grammar seeded per record (phrasing
variants, a number drawn inside each range). Such reports are marked
``generator = grammar`` and their pool's source says so; they exercise the
path, they are not LLM text.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from synthdeid.llm.base import ChatMessage
from synthdeid.prompt_file import TEMPLATE, PromptFile, load_prompt_file
from synthdeid.synthesis.prompts import Variant
from synthdeid.tabular.expert_rules import RuledRow
from synthdeid.tabular.spec import (
    BINNED,
    MISSING,
    TableSpec,
    Variable,
    format_number,
    number_text,
)

REPORT_PLACEHOLDERS = ("PATIENT", "DOCTOR", "DATE", "HOSPITAL")
REPORT_VARIANT = Variant(
    "tabular_report",
    "Use the placeholders for the patient, the reporting physician, the date and the hospital.",
    REPORT_PLACEHOLDERS,
    "placeholders",
)
GRAMMAR = "grammar"
PROMPT_FIELDS = {"title", "variables", "placeholders"}


def with_unit(text: str, variable: Variable) -> str:
    return f"{text} {variable.unit}" if variable.unit else text


def stated_value(variable: Variable, value: str, drawn: str | None) -> str:
    """How a prompt states one value: a drawn number, a range to choose in, or a category."""
    if value == MISSING:
        return "not reported"
    if drawn is not None and variable.kind == BINNED:
        return with_unit(drawn, variable)
    if drawn is not None:  # a category with a number drawn for it: "positive (46 %)"
        return f"{variable.phrases_of(value)[0]} ({with_unit(drawn, variable)})"
    if variable.kind == BINNED:
        chosen = variable.bin_of(value)
        low, high = format_number(chosen.low), format_number(chosen.high)
        return (
            f"to be selected within the range of {with_unit(low, variable)} to "
            f"{with_unit(high, variable)}, depending on clinical consistency"
        )
    return variable.phrases_of(value)[0]


def prompt_variables(row: RuledRow, spec: TableSpec) -> str:
    """One line per variable: ``- label: stated value``."""
    return "\n".join(
        f"- {v.label}: {stated_value(v, row.values[v.name], row.drawn.get(v.name))}"
        for v in spec.variables
    )


@dataclass(frozen=True)
class ReportPrompt(PromptFile):
    """The versioned prompt of ``resources/prompts/tabular_report.yaml``."""

    def messages(self, row: RuledRow, spec: TableSpec) -> tuple[ChatMessage, ...]:
        user = string.Template(self.user).substitute(
            title=spec.report_title or f"{spec.name} report",
            variables=prompt_variables(row, spec),
            placeholders=", ".join(f"[[{name}_1]]" for name in REPORT_PLACEHOLDERS),
        )
        return (ChatMessage("system", self.system), ChatMessage("user", user))


def load_report_prompt(path: str | Path) -> ReportPrompt:
    return ReportPrompt(**asdict(load_prompt_file(path, PROMPT_FIELDS, TEMPLATE)))


# ------------------------------------------------------------------ grammar (backend none)

_HEADERS = (
    "{title}\nPatient: [[PATIENT_1]]\nDate of procedure: [[DATE_1]]\nInstitution: [[HOSPITAL_1]]",
    "{title}\n[[HOSPITAL_1]]\nName: [[PATIENT_1]]    Collected: [[DATE_1]]",
    "[[HOSPITAL_1]] - {title}\nPatient [[PATIENT_1]], specimen received [[DATE_1]].",
)
_NUMBER_SENTENCES = (
    "The {label} is {value}.",
    "{Label}: {value}.",
    "{Label} measures {value}.",
)
_CATEGORY_SENTENCES = (
    "{Label}: {value}.",
    "The {label} is {value}.",
)
_MISSING_SENTENCES = ("{Label}: not assessed.", "The {label} was not reported.")
_CLOSINGS = (
    "Reported by [[DOCTOR_1]] on [[DATE_1]].",
    "Electronically signed: [[DOCTOR_1]], [[DATE_1]].",
    "Pathologist: [[DOCTOR_1]]",
)


def record_rng(seed: int, record_id: str) -> random.Random:
    """A generator for one record: same seed and record, same draws, in any order."""
    digest = hashlib.sha256(f"{seed}:{record_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _sentence(variable: Variable, value: str, drawn: str | None, rng: random.Random) -> str:
    label = variable.label
    names = {"label": label, "Label": label[:1].upper() + label[1:]}
    if value == MISSING:
        return rng.choice(_MISSING_SENTENCES).format(**names)
    if variable.kind == BINNED:
        if drawn is None:
            chosen = variable.bin_of(value)
            drawn = number_text(rng.uniform(chosen.low, chosen.high), variable.decimals)
        text = with_unit(drawn, variable)
        return rng.choice(_NUMBER_SENTENCES).format(value=text, **names)
    phrase = rng.choice(variable.phrases_of(value))
    if drawn is not None:
        phrase = f"{phrase} ({with_unit(drawn, variable)})"
    return rng.choice(_CATEGORY_SENTENCES).format(value=phrase, **names)


def grammar_report(row: RuledRow, spec: TableSpec, rng: random.Random) -> str:
    """A structured report stating every variable, with the four report placeholders."""
    title = spec.report_title or f"{spec.name} report"
    header = rng.choice(_HEADERS).format(title=title)
    findings = [
        _sentence(v, row.values[v.name], row.drawn.get(v.name), rng) for v in spec.variables
    ]
    lines_per_paragraph = rng.choice((3, 4, 12))
    paragraphs = [
        " ".join(findings[i : i + lines_per_paragraph])
        for i in range(0, len(findings), lines_per_paragraph)
    ]
    return "\n\n".join([header, "Findings:", *paragraphs, rng.choice(_CLOSINGS)])


def grammar_reports(rows: Sequence[tuple[str, RuledRow]], spec: TableSpec, seed: int) -> list[str]:
    return [grammar_report(row, spec, record_rng(seed, record_id)) for record_id, row in rows]
