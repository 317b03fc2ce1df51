"""Shared objects for the template synthesis tests (all text here is invented)."""

from __future__ import annotations

from pathlib import Path

from synthdeid.identifiers import IdentifierScanner
from synthdeid.synthesis.placeholders import PlaceholderAllowlist, load_allowlist
from synthdeid.synthesis.prompts import PromptSpec, load_prompt
from synthdeid.synthesis.validator import TemplateValidator, ValidatorSettings

REPO = Path(__file__).resolve().parents[1]
ALLOWLIST_PATH = REPO / "resources" / "placeholders.yaml"
PROMPT_PATH = REPO / "resources" / "prompts" / "template_rewrite.yaml"

SEED_TEXT = (
    "Pt admitted from [[HOSPITAL_1]] on [[DATE_1]] with chest pain. Seen by [[DOCTOR_1]] "
    "in the evening; heparin drip started and troponin trending down. Family updated by "
    "phone, wife plans to visit tomorrow. [[DOCTOR_1]] to review the echo in the morning. "
    "Plan: continue telemetry, repeat labs at six, advance diet as tolerated."
)


def allowlist() -> PlaceholderAllowlist:
    return load_allowlist(ALLOWLIST_PATH)


def prompt() -> PromptSpec:
    return load_prompt(PROMPT_PATH, allowlist())


def validator(**settings: object) -> TemplateValidator:
    return TemplateValidator(
        allowlist(),
        IdentifierScanner(),
        ValidatorSettings(**settings),  # type: ignore[arg-type]
    )
