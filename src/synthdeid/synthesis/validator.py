"""Template validator: what an LLM answer must satisfy before it is filled.

A template is accepted only when, in this order:

1. the answer parses as a JSON object with a string ``note``, read by
   :func:`synthdeid.llm.answers.parse_json_object` (a code fence and prose
   around the object are tolerated, raw newlines inside strings accepted):
   unreadable JSON -> ``invalid_json``; another JSON value, or no string
   ``note`` -> ``missing_note``; an empty note -> ``empty``;
2. the note does not echo the prompt: no word :data:`ECHO_NGRAM`-gram of the
   prompt's own text (system message, the user message's fixed text, the
   variants' instructions; given as ``instructions``) appears in it, unless
   the seed has it too (``prompt_echo``);
3. no single-bracketed token imitates a placeholder: ``[DOCTOR_1]``,
   ``[HOSPITAL_n]``, ``[PHONE_N]``, ``<DATE_1>``, ``[Patient Name]``,
   ``[**Hospital 1**]`` (``pseudo_placeholder``); every other
   placeholder-looking token is a well-formed ``[[NAME_n]]``
   (``malformed_placeholder``), on the allowlist (``placeholder_not_allowlisted``)
   and allowed by the request's variant (``placeholder_not_in_variant``),
   and none stands inside a word, glued to letters or digits on both sides
   (``placeholder_in_word``: filled, it would merge with the word);
4. the variant's expectation holds: at least one placeholder
   (``missing_placeholder``), a repeated placeholder (``missing_repetition``) or
   none at all (``unexpected_placeholder``);
5. nothing identifier-like remains outside placeholders: dates, phone and ID
   digit runs, emails, URLs, capitalised tokens from a name list
   (``identifier_like:<kind>``);
6. the length in words is within ``length_ratio`` of the seed's (``length_ratio``);
7. the answer is not a copy of its masked seed: the share of the template's
   word 8-grams found in the seed is below ``max_copied_ngram_share``
   (``copied_seed``; switched off for backend ``none``, whose templates are
   the seeds by design).

Rejections keep their reason and a detail that never quotes a found
identifier (only its kind and position), so logs and summaries stay clean.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from synthdeid.identifiers import IdentifierScanner
from synthdeid.llm.answers import INVALID_JSON, AnswerError, parse_json_object
from synthdeid.synthesis.placeholders import (
    PLACEHOLDER_LIKE_RE,
    PlaceholderAllowlist,
    iter_placeholders,
)
from synthdeid.synthesis.prompts import Variant

# the status of a generated candidate (template, DP-LM sample, verbalized report):
# it passed the validator or not
ACCEPTED = "accepted"
REJECTED = "rejected"

COPY_NGRAM = 8
ECHO_NGRAM = 6
_ECHO_WORD_RE = re.compile(r"\w+")

# a single-bracketed token: [** ... **] (the MIMIC de-identification mark), or one
# pair of [], <> or {} not part of a doubled bracket, around a short one-line body
_BRACKETED_RE = re.compile(
    r"\[\*\*[^\[\]\n]{0,60}?\*\*\]"
    r"|(?<![\[<{])[\[<{](?![\[<{])(?P<body>[^\[\]<>{}\n]{1,40})[\]>}](?![\]>}])"
)
# a body written like a placeholder name: DOCTOR_1, HOSPITAL_n, PHONE_N, DR_NAME
_PSEUDO_NAME_RE = re.compile(r"\s*[A-Z][A-Z0-9]*(?:_[A-Za-z0-9#]+)+\s*")
# a body of one to four words (the last may be a number or n/N/X/#): Patient Name, date
_PSEUDO_WORDS_RE = re.compile(
    r"\s*[A-Za-z]+(?:'s)?(?:[ _][A-Za-z]+(?:'s)?){0,3}(?:[ _]?(?:\d+|[nNxX#]))?\s*"
)
# words that name an identifier type, besides the allowlisted placeholder names
IDENTIFIER_TYPE_WORDS = frozenset(
    {
        "NAME", "FIRSTNAME", "LASTNAME", "SURNAME", "MRN", "SSN", "ADDRESS", "EMAIL",
        "CITY", "STATE", "ZIP", "STREET", "TOWN", "COUNTRY", "CLINIC", "FACILITY",
        "PHYSICIAN", "NURSE", "PROVIDER", "TELEPHONE", "FAX", "PAGER",
    }
)  # fmt: skip


@dataclass(frozen=True)
class ValidatorSettings:
    length_ratio: tuple[float, float] = (0.5, 2.0)
    max_copied_ngram_share: float | None = 0.5  # None: no copy check


@dataclass(frozen=True)
class Verdict:
    """The validator's answer: a template, or the reason it was rejected."""

    template: str | None
    reason: str | None = None
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.reason is None


def reject(reason: str, detail: str = "") -> Verdict:
    return Verdict(None, reason, detail)


def parse_answer(answer: str) -> Verdict:
    """The ``note`` string of a JSON answer, or ``invalid_json`` / ``missing_note`` / ``empty``."""
    try:
        data = parse_json_object(answer)
    except AnswerError as exc:
        if exc.reason == INVALID_JSON:
            return reject("invalid_json", exc.detail)
        data = {}  # another JSON value: no note in it
    if not isinstance(data.get("note"), str):
        return reject("missing_note", 'expected a JSON object with a string "note"')
    if not data["note"].strip():
        return reject("empty", "the note is empty")
    return Verdict(data["note"])


def _words(text: str) -> list[str]:
    return text.casefold().split()


def _echo_grams(text: str, n: int = ECHO_NGRAM) -> set[tuple[str, ...]]:
    words = _ECHO_WORD_RE.findall(text.casefold())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def find_pseudo_placeholders(template: str, names: Iterable[str]) -> list[int]:
    """Offsets of single-bracketed tokens that imitate a placeholder (``names``: allowlisted)."""
    type_words = IDENTIFIER_TYPE_WORDS | {name.upper() for name in names}
    return [
        match.start()
        for match in _BRACKETED_RE.finditer(template)
        if _imitates_placeholder(match.group("body"), type_words)
    ]


def _imitates_placeholder(body: str | None, type_words: frozenset[str]) -> bool:
    if body is None:  # [** ... **]
        return True
    if _PSEUDO_NAME_RE.fullmatch(body):
        return True
    words = set(re.split(r"[\s_]+", body.upper().replace("'S", "")))
    return bool(_PSEUDO_WORDS_RE.fullmatch(body) and type_words & words)


def _inside_word(text: str, start: int, end: int) -> bool:
    """A placeholder with a letter or digit right before and right after it ("mis[[DOCTOR_1]]s")."""
    return start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()


def copied_share(template: str, seed: str, n: int = COPY_NGRAM) -> float:
    """Share of the template's word n-grams that also occur in the seed (0 for short texts)."""
    words = _words(template)
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    seed_words = _words(seed)
    seed_grams = {tuple(seed_words[i : i + n]) for i in range(len(seed_words) - n + 1)}
    return sum(g in seed_grams for g in grams) / len(grams)


class TemplateValidator:
    """Checks templates against the allowlist, a variant and the seed they rewrite."""

    def __init__(
        self,
        allowlist: PlaceholderAllowlist,
        scanner: IdentifierScanner,
        settings: ValidatorSettings | None = None,
        instructions: Sequence[str] = (),
    ) -> None:
        """``instructions``: the prompt's own text, in pieces that never run into
        each other (see :meth:`PromptSpec.instruction_texts`); empty: no echo check."""
        self.allowlist = allowlist
        self.scanner = scanner
        self.settings = settings or ValidatorSettings()
        self.instructions = tuple(instructions)
        self._instruction_grams = set().union(*(_echo_grams(t) for t in self.instructions))

    def check_echo(self, template: str, seed: str) -> Verdict | None:
        """``prompt_echo`` when the template repeats the prompt's text (and the seed does not)."""
        if not self._instruction_grams:
            return None
        echoed = (_echo_grams(template) & self._instruction_grams) - _echo_grams(seed)
        if echoed:
            return reject(
                "prompt_echo",
                f"{len(echoed)} word {ECHO_NGRAM}-gram(s) of the prompt's instructions",
            )
        return None

    def check_placeholders(self, template: str, variant: Variant) -> Verdict | None:
        pseudo = find_pseudo_placeholders(template, self.allowlist.names)
        if pseudo:
            return reject(
                "pseudo_placeholder",
                f"{len(pseudo)} bracketed token(s) imitating a placeholder; first at offset "
                f"{pseudo[0]}",
            )
        wellformed = {(m.start, m.end) for m in iter_placeholders(template)}
        for match in PLACEHOLDER_LIKE_RE.finditer(template):
            if (match.start(), match.end()) not in wellformed:
                return reject("malformed_placeholder", f"at offset {match.start()}")
        counts: Counter[str] = Counter()
        for found in iter_placeholders(template):
            if _inside_word(template, found.start, found.end):
                return reject("placeholder_in_word", f"at offset {found.start}")
            if found.name not in self.allowlist:
                return reject("placeholder_not_allowlisted", f"[[{found.name}_n]]")
            if found.name not in variant.placeholders:
                kind = "unexpected_placeholder" if variant.expect == "none" else None
                return reject(kind or "placeholder_not_in_variant", f"[[{found.name}_n]]")
            counts[found.token] += 1
        if variant.expect == "placeholders" and not counts:
            return reject("missing_placeholder", "the variant asks for identifiers")
        if variant.expect == "repetition" and not any(c > 1 for c in counts.values()):
            return reject("missing_repetition", "no placeholder is used twice")
        return None

    def check_identifiers(self, template: str) -> Verdict | None:
        findings = self.scanner.scan(template)
        if not findings:
            return None
        first = findings[0]
        kinds = sorted({f.kind for f in findings})
        return reject(
            f"identifier_like:{first.kind}",
            f"{len(findings)} identifier-like string(s) ({', '.join(kinds)}); "
            f"first at offset {first.start}",
        )

    def check_length(self, template: str, seed: str) -> Verdict | None:
        low, high = self.settings.length_ratio
        ratio = len(template.split()) / max(1, len(seed.split()))
        if not low <= ratio <= high:
            return reject("length_ratio", f"{ratio:.2f} of the seed's words, allowed {low}-{high}")
        return None

    def check_copy(self, template: str, seed: str) -> Verdict | None:
        limit = self.settings.max_copied_ngram_share
        if limit is None:
            return None
        share = copied_share(template, seed)
        if share >= limit:
            return reject(
                "copied_seed", f"{share:.0%} of its word {COPY_NGRAM}-grams are the seed's"
            )
        return None

    def validate_template(self, template: str, variant: Variant, seed: str) -> Verdict:
        """Checks 2-7 on a template already extracted from its answer."""
        checks: tuple[Callable[[], Verdict | None], ...] = (
            lambda: self.check_echo(template, seed),
            lambda: self.check_placeholders(template, variant),
            lambda: self.check_identifiers(template),
            lambda: self.check_length(template, seed),
            lambda: self.check_copy(template, seed),
        )
        for check in checks:
            verdict = check()
            if verdict is not None:
                return verdict
        return Verdict(template)

    def validate_answer(self, answer: str, variant: Variant, seed: str) -> Verdict:
        """All checks on a raw LLM answer."""
        parsed = parse_answer(answer)
        if not parsed.accepted or parsed.template is None:
            return parsed
        return self.validate_template(parsed.template, variant, seed)


def rejection_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    return dict(sorted(Counter(v.reason for v in verdicts if v.reason).items()))
