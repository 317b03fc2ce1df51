"""Faithfulness of a generated report to its row (Lorenzo et al. 2026, section 3, Tables 2 and 3).

A report is generated from one row of the (discretized) table; a variable is
*faithful* when the report states the row's value for it. Lorenzo et al. 2026 ask an LLM
judge, per variable-value pair, whether "the text correctly mentions the input
variable-value" and for the supporting span. This module offers a rule-based
checker built from the :class:`~synthdeid.tabular.spec.TableSpec` and the pure
half of the LLM judge (request messages and answer parsing); both give one
:class:`VariableVerdict` per (report, variable), scored the same way.

Mentions and windows
    Every occurrence (case-insensitive, word-bounded, any whitespace between
    words) of every variable's ``mentions`` and ``label`` is located.
    Overlapping occurrences resolve to the longest (ties: the earlier start,
    then spec order), so "largest nuclear radius" is a mention of
    ``worst_radius`` and its inner "nuclear radius" does not count for
    ``mean_radius``. A mention's *window* runs from its end to the next mention
    of another variable or the end of its sentence or line, whichever comes
    first. A sentence ends at ``.``, ``!`` or ``?`` followed by whitespace or the
    end of the text (so "0.085" does not end one); a line at a newline. A
    mention followed only by ``:``, ``=``, dashes or spaces up to the newline is a
    heading ("Diagnosis:" on its own line): its window goes on to the next
    non-empty line. Values are looked for after a mention only.

Binned variables
    Numbers are ``12``, ``12.5``, ``0.085``, ``.085`` and ``1,250`` (a comma only
    as a thousands separator; the decimal mark is a point). A written range
    ``12-15`` (also with spaces, an en or em dash), ``12 to 15`` or ``between 12 and 15`` is one value,
    and its ends are not read as numbers of their own. The row's bin
    ``[low, high]`` is taken as closed (a value on the edge states either
    neighbouring bin, as "between 12 and 15" in the prompt allows): a number
    states it when ``low <= x <= high``, a range when both its ends do. The
    variable is *correct* when a value in one of its windows states the bin,
    *wrong* when it is mentioned and none does, and *not_mentioned* when the
    report never mentions it.

Categorical variables
    A category's phrases (``Variable.phrases_of``) are matched word-bounded
    and case-insensitively, the longest first, so "non-malignant" is not read
    as "malignant" when both are phrases. A phrase after a negation cue in the
    same clause (``no``, ``not``, ``non``, ``without``, ``negative for``, ``free
    of``, ``absence of``, ``rule(s/d) out``, at most four words before it and no
    punctuation or "but" in between: "no evidence of malignancy") is
    negated and does not count. When some window of the variable holds a
    phrase, the variable is correct iff a phrase of the row's category occurs
    in its windows and no phrase of another category does. When the variable
    is not mentioned, or none of its windows holds a phrase (a diagnosis is
    often stated without the word "diagnosis", or below a heading), the whole
    report is searched instead: correct iff the row's category occurs and no
    other category does. Wrong when another category (or no category) is
    found; not_mentioned when neither the variable nor any of its categories
    occurs.

Unknown values
    A row value ``"unknown"`` is *wrong* when the report states a value for
    the variable (a number or range in a binned variable's windows; a
    non-negated category phrase anywhere for a categorical one). Otherwise it
    is *correct* when the variable is not mentioned, or when one of its
    windows, or the rest of a mention's sentence ("Radius and texture were not
    assessed."), says it is missing: ``unknown``, ``not known``,
    ``undetermined``, ``indeterminate``, ``unavailable``, ``n/a``, ``not
    [one word] assessed / assessable / reported / available / evaluated /
    evaluable / measured / measurable / determined / stated / specified /
    performed / recorded / documented / provided / done``, ``cannot / could not
    be [one word] assessed / determined / evaluated / measured``. A mention
    with neither a value nor such words is wrong.

Evidence
    Character offsets ``(start, end)`` into the report: for a correct verdict
    from the mention's start to the end of the supporting value (or the
    category phrase alone when found by the whole-report search, or the
    missing-word span); for a wrong one the contradicting value or phrase, or
    the mention when nothing was stated; ``None`` when not mentioned.

Scores (Lorenzo et al. 2026)
    Per-variable accuracy is the share of reports whose verdict for the
    variable is correct (Table 2); the overall accuracy is the mean over
    variables. A document's accuracy is its share of correct variables, and
    documents fall into the buckets of Table 3 by that fraction ``f``:
    Perfect ``f == 1``, High ``0.85 <= f < 1``, Moderate ``0.70 <= f < 0.85``,
    Low ``0.50 <= f < 0.70``, Very Low ``f < 0.50`` (edges compared with a
    1e-9 tolerance against float rounding). :func:`faithful_pairs` keeps, per
    report, only the variables it states correctly (Lorenzo et al. 2026,
    section 4, train on those pairs only).

LLM judge
    :func:`judge_request_messages` renders the prompt of
    ``resources/prompts/tabular_judge.yaml`` (``{report}`` and ``{pairs}``,
    :meth:`str.format`; a pair reads ``variable (label): value``, a bin as
    ``between low and high``). :func:`parse_judge_answer` reads the answer, a
    JSON object mapping each variable to ``{"correct": "yes"|"no",
    "reference": "..."}``, read by
    :func:`synthdeid.llm.answers.parse_json_object` (a code fence, or prose
    around the object, is tolerated); keys are matched ignoring case and a
    ``(label)`` suffix; unparseable JSON is a :class:`JudgeFailure`
    ``invalid_json`` and a non-object ``not_an_object``. Per variable:
    absent from the answer -> status ``not_judged``; ``correct`` other than
    yes/no (any case, or a JSON boolean) -> ``invalid_verdict`` (both count
    as not correct); otherwise the judge's verdict, with the reference
    located in the report (exactly, then case-insensitively with any
    whitespace) as evidence, or evidence ``None`` and note
    ``reference_not_found`` when it is not there. No network here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.llm.answers import AnswerError, parse_json_object
from synthdeid.prompt_file import FORMAT, PromptFile, load_prompt_file
from synthdeid.stats import cohen_kappa
from synthdeid.tabular.spec import BINNED, MISSING, Bin, TableSpec, Variable, format_number

CORRECT = "correct"
WRONG = "wrong"
NOT_MENTIONED = "not_mentioned"
NOT_JUDGED = "not_judged"
INVALID_VERDICT = "invalid_verdict"
STATUSES = (CORRECT, WRONG, NOT_MENTIONED, NOT_JUDGED, INVALID_VERDICT)
REFERENCE_NOT_FOUND = "reference_not_found"

BUCKETS: tuple[tuple[str, float], ...] = (
    ("Perfect", 1.0),
    ("High", 0.85),
    ("Moderate", 0.70),
    ("Low", 0.50),
    ("Very Low", 0.0),
)
EDGE_TOLERANCE = 1e-9

_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
_NUM_START = r"(?<![\w.])"
_NUM_END = r"(?!\.?\d|,\d)"
_NUMBER_RE = re.compile(_NUM_START + f"({_NUM})" + _NUM_END)
_RANGE_RE = re.compile(
    r"(?:(?<!\w)between\s+"
    + _NUM_START
    + f"({_NUM})"
    + r"\s*(?:and|to|-|\u2013|\u2014)\s*"
    + f"({_NUM})"
    + _NUM_END
    + r")|(?:"
    + _NUM_START
    + f"({_NUM})"
    + r"\s*(?:-|\u2013|\u2014|(?<!\w)to(?!\w))\s*"
    + f"({_NUM})"
    + _NUM_END
    + ")",
    re.IGNORECASE,
)
_BOUNDARY_RE = re.compile(r"[.!?](?=\s|$)|\n")
_HEADING_GAP_RE = re.compile(r"[\s:=\-\u2013\u2014]*")
_NEGATION_RE = re.compile(
    r"(?<!\w)(?:no|not|non|without|negative\s+for|free\s+of|absence\s+of|rule[sd]?\s+out|"
    r"ruling\s+out)(?!\w)",
    re.IGNORECASE,
)
_NEGATION_GAP_RE = re.compile(r"[\s\w/-]*")
_NEGATION_BREAKERS = frozenset({"but", "however", "although", "though", "yet", "except"})
_NEGATION_REACH = 4
_MISSING_RE = re.compile(
    r"(?<!\w)(?:unknown|not\s+known|undetermined|indeterminate|unavailable|n/a|"
    r"not\s+(?:\w+\s+)?(?:assessed|assessable|reported|available|evaluated|evaluable|measured|"
    r"measurable|determined|stated|specified|performed|recorded|documented|provided|done)|"
    r"(?:cannot|can\s*not|could\s+not|can't|couldn't)\s+be\s+(?:\w+\s+)?"
    r"(?:assessed|determined|evaluated|measured))(?!\w)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class VariableVerdict:
    """Whether one report states one variable's value (see the module docstring)."""

    variable: str
    value: str
    correct: bool
    status: str  # one of STATUSES
    evidence: tuple[int, int] | None
    note: str | None = None  # e.g. REFERENCE_NOT_FOUND for a judge verdict


@dataclass(frozen=True)
class JudgeFailure:
    """A judge answer that could not be read at all (to retry or to report)."""

    reason: str  # invalid_json | not_an_object
    detail: str = ""


@dataclass(frozen=True)
class FaithfulPairs:
    """One report's variable-value pairs split into stated correctly (kept) and not."""

    kept: Mapping[str, str]
    dropped: tuple[str, ...]


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    owner: str  # a variable name (mentions) or a category (phrases)


@dataclass(frozen=True)
class _Value:
    start: int
    end: int
    low: float
    high: float

    def states(self, bin_: Bin) -> bool:
        return bin_.low <= self.low and self.high <= bin_.high


def _term_pattern(term: str) -> re.Pattern[str]:
    words = [re.escape(word) for word in term.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)", re.IGNORECASE)


def _longest_first(hits: list[tuple[_Hit, int]]) -> list[_Hit]:
    """Non-overlapping hits, longer first (ties: earlier start, then ``order``), by start."""
    ranked = sorted(hits, key=lambda item: (item[0].start - item[0].end, item[0].start, item[1]))
    kept: list[_Hit] = []
    for hit, _ in ranked:
        if all(hit.end <= other.start or other.end <= hit.start for other in kept):
            kept.append(hit)
    return sorted(kept, key=lambda hit: hit.start)


def _sentence_end(text: str, position: int) -> int:
    """Where the sentence or line that ``position`` is in ends (headings run on, see doc)."""
    start = position
    while True:
        boundary = _BOUNDARY_RE.search(text, start)
        if boundary is None:
            return len(text)
        gap = text[position : boundary.start()]
        if boundary.group() == "\n" and _HEADING_GAP_RE.fullmatch(gap):
            start = boundary.end()
            continue
        return boundary.start()


def _values(text: str, start: int, end: int) -> list[_Value]:
    """Numbers and written ranges in ``text[start:end]``, in order, ranges taking precedence."""
    segment = text[start:end]
    values: list[_Value] = []
    taken: list[tuple[int, int]] = []
    for match in _RANGE_RE.finditer(segment):
        groups = [g for g in match.groups() if g is not None]
        low, high = sorted(_number(g) for g in groups)
        values.append(_Value(start + match.start(), start + match.end(), low, high))
        taken.append(match.span())
    for match in _NUMBER_RE.finditer(segment):
        if any(a <= match.start() < b for a, b in taken):
            continue
        number = _number(match.group(1))
        values.append(_Value(start + match.start(), start + match.end(), number, number))
    return sorted(values, key=lambda value: value.start)


def _number(raw: str) -> float:
    return float(raw.replace(",", ""))


def _negated(text: str, start: int) -> bool:
    """Whether a negation cue governs the phrase starting at ``start`` (see the docstring)."""
    prefix_start = max(0, start - 160)
    prefix = text[prefix_start:start]
    cues = list(_NEGATION_RE.finditer(prefix))
    if not cues:
        return False
    gap = prefix[cues[-1].end() :]
    if not _NEGATION_GAP_RE.fullmatch(gap):
        return False
    words = re.findall(r"\w+", gap)
    if any(word.casefold() in _NEGATION_BREAKERS for word in words):
        return False
    return len(words) <= _NEGATION_REACH


def _row_values(row: Mapping[str, str], spec: TableSpec) -> list[tuple[Variable, str]]:
    """The row's value of every spec variable, in spec order; checks the values."""
    absent = [name for name in spec.names if name not in row]
    if absent:
        raise ConfigError(f"the row lacks the spec variables {absent} (spec {spec.name!r})")
    pairs = []
    for variable in spec.variables:
        value = str(row[variable.name])
        if value != MISSING and value not in variable.domain:
            raise ConfigError(
                f"{variable.name} = {value!r} is outside its domain {list(variable.domain)}"
            )
        pairs.append((variable, value))
    return pairs


class FaithfulnessChecker:
    """The rule-based checker of one spec (patterns compiled once; see the module docstring)."""

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self._terms: list[tuple[re.Pattern[str], str, int]] = []
        for order, variable in enumerate(spec.variables):
            seen: set[str] = set()
            for term in (*variable.mentions, variable.label):
                key = " ".join(term.casefold().split())
                if key and key not in seen:
                    seen.add(key)
                    self._terms.append((_term_pattern(term), variable.name, order))
        self._phrases: dict[str, list[tuple[re.Pattern[str], str, int]]] = {}
        for variable in spec.variables:
            if variable.kind == BINNED:
                continue
            patterns = []
            for order, category in enumerate(variable.categories):
                for phrase in variable.phrases_of(category):
                    patterns.append((_term_pattern(phrase), category, order))
            self._phrases[variable.name] = patterns

    def mentions(self, text: str) -> list[_Hit]:
        """Every variable mention in ``text``, overlaps resolved to the longest."""
        hits = [
            (_Hit(m.start(), m.end(), name), order)
            for pattern, name, order in self._terms
            for m in pattern.finditer(text)
        ]
        return _longest_first(hits)

    def phrases(self, text: str, variable: str) -> list[_Hit]:
        """Non-negated category phrases of ``variable`` in ``text`` (owner: the category)."""
        hits = [
            (_Hit(m.start(), m.end(), category), order)
            for pattern, category, order in self._phrases.get(variable, [])
            for m in pattern.finditer(text)
        ]
        return [hit for hit in _longest_first(hits) if not _negated(text, hit.start)]

    def check(self, text: str, row: Mapping[str, str]) -> list[VariableVerdict]:
        """One verdict per spec variable, in spec order."""
        pairs = _row_values(row, self.spec)
        mentions = self.mentions(text)
        verdicts = []
        for variable, value in pairs:
            own = [hit for hit in mentions if hit.owner == variable.name]
            windows = [(hit, self._window(text, hit, mentions)) for hit in own]
            if variable.kind == BINNED:
                verdicts.append(self._binned(text, variable, value, windows))
            else:
                verdicts.append(self._categorical(text, variable, value, windows))
        return verdicts

    @staticmethod
    def _window(text: str, mention: _Hit, mentions: list[_Hit]) -> tuple[int, int]:
        end = _sentence_end(text, mention.end)
        for other in mentions:
            if other.start >= mention.end and other.owner != mention.owner:
                end = min(end, other.start)
                break
        return mention.end, max(end, mention.end)

    @staticmethod
    def _missing_word(text: str, windows: list[tuple[_Hit, tuple[int, int]]]) -> _Hit | None:
        """A missing-value word in a window or in the rest of a mention's sentence."""
        for mention, (start, end) in windows:
            stop = max(end, _sentence_end(text, mention.end))
            match = _MISSING_RE.search(text, start, stop)
            if match:
                return _Hit(match.start(), match.end(), MISSING)
        return None

    def _unknown(
        self,
        text: str,
        variable: Variable,
        windows: list[tuple[_Hit, tuple[int, int]]],
        stated: _Hit | _Value | None,
    ) -> VariableVerdict:
        if stated is not None:
            return VariableVerdict(variable.name, MISSING, False, WRONG, (stated.start, stated.end))
        if not windows:
            return VariableVerdict(variable.name, MISSING, True, CORRECT, None)
        missing = self._missing_word(text, windows)
        if missing is not None:
            return VariableVerdict(
                variable.name, MISSING, True, CORRECT, (missing.start, missing.end)
            )
        first = windows[0][0]
        return VariableVerdict(variable.name, MISSING, False, WRONG, (first.start, first.end))

    def _binned(
        self,
        text: str,
        variable: Variable,
        value: str,
        windows: list[tuple[_Hit, tuple[int, int]]],
    ) -> VariableVerdict:
        found = [(mention, v) for mention, (a, b) in windows for v in _values(text, a, b)]
        if value == MISSING:
            return self._unknown(text, variable, windows, found[0][1] if found else None)
        if not windows:
            return VariableVerdict(variable.name, value, False, NOT_MENTIONED, None)
        target = variable.bin_of(value)
        for mention, stated in found:
            if stated.states(target):
                return VariableVerdict(
                    variable.name, value, True, CORRECT, (mention.start, stated.end)
                )
        if found:
            stated = found[0][1]
            return VariableVerdict(variable.name, value, False, WRONG, (stated.start, stated.end))
        first = windows[0][0]
        return VariableVerdict(variable.name, value, False, WRONG, (first.start, first.end))

    def _categorical(
        self,
        text: str,
        variable: Variable,
        value: str,
        windows: list[tuple[_Hit, tuple[int, int]]],
    ) -> VariableVerdict:
        phrases = self.phrases(text, variable.name)
        if value == MISSING:
            return self._unknown(text, variable, windows, phrases[0] if phrases else None)
        in_windows = [
            (mention, hit)
            for mention, (start, end) in windows
            for hit in phrases
            if start <= hit.start and hit.end <= end
        ]
        if in_windows:
            other = [hit for _, hit in in_windows if hit.owner != value]
            if other:
                return VariableVerdict(
                    variable.name, value, False, WRONG, (other[0].start, other[0].end)
                )
            mention, hit = in_windows[0]
            return VariableVerdict(variable.name, value, True, CORRECT, (mention.start, hit.end))
        other = [hit for hit in phrases if hit.owner != value]
        if other:
            return VariableVerdict(
                variable.name, value, False, WRONG, (other[0].start, other[0].end)
            )
        if phrases:
            return VariableVerdict(
                variable.name, value, True, CORRECT, (phrases[0].start, phrases[0].end)
            )
        if windows:
            first = windows[0][0]
            return VariableVerdict(variable.name, value, False, WRONG, (first.start, first.end))
        return VariableVerdict(variable.name, value, False, NOT_MENTIONED, None)


def check_report(text: str, row: Mapping[str, str], spec: TableSpec) -> list[VariableVerdict]:
    """The rule-based verdicts of one report against its row, one per spec variable."""
    return FaithfulnessChecker(spec).check(text, row)


def check_reports(
    reports: Mapping[str, str], rows: Mapping[str, Mapping[str, str]], spec: TableSpec
) -> dict[str, list[VariableVerdict]]:
    """Verdicts of every report (by id) against the row of the same id."""
    absent = sorted(set(reports) - set(rows))
    if absent:
        raise ConfigError(f"reports without a row: {absent[:5]}{' ...' if len(absent) > 5 else ''}")
    checker = FaithfulnessChecker(spec)
    return {key: checker.check(text, rows[key]) for key, text in reports.items()}


# ---------------------------------------------------------------- scores


def _reports(
    verdicts_by_report: Mapping[str, Sequence[VariableVerdict]]
    | Iterable[Sequence[VariableVerdict]],
) -> list[Sequence[VariableVerdict]]:
    if isinstance(verdicts_by_report, Mapping):
        return list(verdicts_by_report.values())
    return list(verdicts_by_report)


def per_variable_accuracy(
    verdicts_by_report: Mapping[str, Sequence[VariableVerdict]]
    | Iterable[Sequence[VariableVerdict]],
) -> dict[str, float | None]:
    """Per variable, the share of reports stating it correctly (Lorenzo et al. 2026, Table 2).

    Over the judged verdicts only: a pair the judge could not answer for
    (``not_judged``) is a failed measurement, not a wrong report. A variable
    with no judged verdict has no accuracy (None, shown as n/a).
    """
    correct: Counter[str] = Counter()
    total: Counter[str] = Counter()
    seen: dict[str, None] = {}
    for verdicts in _reports(verdicts_by_report):
        for verdict in verdicts:
            seen[verdict.variable] = None
            if verdict.status == NOT_JUDGED:
                continue
            total[verdict.variable] += 1
            correct[verdict.variable] += int(verdict.correct)
    return {name: (correct[name] / total[name] if total[name] else None) for name in seen}


@dataclass(frozen=True)
class Agreement:
    """How often two checkers give the same verdict on the same pairs; ``kappa`` is
    Cohen's kappa (:func:`~synthdeid.stats.cohen_kappa`), None when chance agreement
    is 1 (both always say the same thing)."""

    pairs: int
    observed: float | None
    kappa: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "observed": self.observed, "kappa": self.kappa}


def agreement(
    first: Iterable[Sequence[VariableVerdict]], second: Iterable[Sequence[VariableVerdict]]
) -> Agreement:
    """Agreement on ``correct`` over the pairs both judged (``not_judged`` pairs left out)."""
    a: list[bool] = []
    b: list[bool] = []
    for left, right in zip(first, second, strict=True):
        by_variable = {v.variable: v for v in right}
        for verdict in left:
            other = by_variable.get(verdict.variable)
            if other is None or NOT_JUDGED in (verdict.status, other.status):
                continue
            a.append(verdict.correct)
            b.append(other.correct)
    if not a:
        return Agreement(0, None, None)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
    return Agreement(len(a), observed, cohen_kappa(a, b))


def overall_accuracy(per_variable: Mapping[str, float | None]) -> float | None:
    """The mean of the per-variable accuracies (Lorenzo et al. 2026, Table 2, "Overall").

    Over the variables that have one; None when none has (nothing was judged).
    """
    if not per_variable:
        raise ValueError("no variables to average")
    values = [value for value in per_variable.values() if value is not None]
    return sum(values) / len(values) if values else None


def document_accuracy(verdicts: Sequence[VariableVerdict]) -> float | None:
    """The share of a report's judged variables stated correctly (None: none judged)."""
    if not verdicts:
        raise ValueError("a report without verdicts has no accuracy")
    judged = [v for v in verdicts if v.status != NOT_JUDGED]
    return sum(v.correct for v in judged) / len(judged) if judged else None


def accuracy_bucket(fraction: float) -> str:
    """The Table 3 bucket of a document accuracy (Lorenzo et al. 2026; edges in the module docstring)."""
    if not 0.0 - EDGE_TOLERANCE <= fraction <= 1.0 + EDGE_TOLERANCE:
        raise ValueError(f"an accuracy lies in [0, 1], got {fraction}")
    for name, edge in BUCKETS:
        if fraction >= edge - EDGE_TOLERANCE:
            return name
    return BUCKETS[-1][0]


def bucket_shares(
    verdicts_by_report: Mapping[str, Sequence[VariableVerdict]]
    | Iterable[Sequence[VariableVerdict]],
) -> dict[str, float] | None:
    """The share of documents in each Table 3 bucket (every bucket listed, in order).

    Over the documents with at least one judged variable; None when there is none.
    """
    accuracies = [document_accuracy(verdicts) for verdicts in _reports(verdicts_by_report)]
    judged = [value for value in accuracies if value is not None]
    if not judged:
        return None
    counts = Counter(accuracy_bucket(value) for value in judged)
    return {name: counts[name] / len(judged) for name, _ in BUCKETS}


def faithful_pairs(
    verdicts_by_report: Mapping[str, Sequence[VariableVerdict]], *, keep_unknown: bool = True
) -> dict[str, FaithfulPairs]:
    """Per report, the variable-value pairs it states correctly and the names of the others.

    Lorenzo et al. 2026 (section 4) fine-tune on these pairs only. ``keep_unknown=False``
    also drops correct ``"unknown"`` values (a report that merely omits a
    variable then teaches nothing about it).
    """
    result = {}
    for key, verdicts in verdicts_by_report.items():
        kept = {
            v.variable: v.value
            for v in verdicts
            if v.correct and (keep_unknown or v.value != MISSING)
        }
        dropped = tuple(v.variable for v in verdicts if v.variable not in kept)
        result[key] = FaithfulPairs(kept, dropped)
    return result


def status_counts(
    verdicts_by_report: Mapping[str, Sequence[VariableVerdict]]
    | Iterable[Sequence[VariableVerdict]],
) -> dict[str, int]:
    """How many verdicts have each status, and each note (e.g. ``reference_not_found``)."""
    counts: Counter[str] = Counter()
    for verdicts in _reports(verdicts_by_report):
        for verdict in verdicts:
            counts[verdict.status] += 1
            if verdict.note:
                counts[verdict.note] += 1
    return dict(counts)


# ---------------------------------------------------------------- LLM judge

JUDGE_FIELDS = ("report", "pairs")
JudgePrompt = PromptFile  # the judge prompt file (fields {report}, {pairs})


def load_judge_prompt(path: str | Path) -> JudgePrompt:
    """Read and check the judge prompt file (a ``str.format`` user template)."""
    return load_prompt_file(path, set(JUDGE_FIELDS), FORMAT)


def _value_text(variable: Variable, value: str) -> str:
    if value == MISSING:
        return MISSING
    if variable.kind == BINNED:
        bin_ = variable.bin_of(value)
        text = f"between {format_number(bin_.low)} and {format_number(bin_.high)}"
        return f"{text} {variable.unit}" if variable.unit else text
    return value.replace("_", " ")


def judge_pairs(row: Mapping[str, str], spec: TableSpec) -> str:
    """The row as the judge reads it: one ``variable (label): value`` line per variable."""
    return "\n".join(
        f"{variable.name} ({variable.label}): {_value_text(variable, value)}"
        for variable, value in _row_values(row, spec)
    )


def judge_request_messages(
    report: str, row: Mapping[str, str], spec: TableSpec, prompt: JudgePrompt
) -> tuple[str, str]:
    """The (system, user) messages asking the judge about every pair of ``row``."""
    user = prompt.user.format(report=report, pairs=judge_pairs(row, spec))
    return prompt.system.strip(), user.strip()


def _yes_no(raw: Any) -> bool | None:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().strip(".").casefold()
        if word in ("yes", "no"):
            return word == "yes"
    return None


def _answer_key(key: Any) -> str:
    """A key of the judge's answer, compared loosely: case, spaces, a "(label)" suffix."""
    return str(key).split("(", 1)[0].strip().casefold()


def locate_reference(reference: str, report: str) -> tuple[int, int] | None:
    """Offsets of ``reference`` in ``report``: exact, then case-insensitive with any whitespace."""
    reference = reference.strip().strip("\"'\u201c\u201d\u2018\u2019").strip()
    if not reference:
        return None
    position = report.find(reference)
    if position >= 0:
        return position, position + len(reference)
    pattern = r"\s+".join(re.escape(word) for word in reference.split())
    match = re.search(pattern, report, re.IGNORECASE)
    return (match.start(), match.end()) if match else None


def parse_judge_answer(
    answer: str, row: Mapping[str, str], spec: TableSpec, report: str
) -> list[VariableVerdict] | JudgeFailure:
    """The judge's verdict per spec variable, in spec order (see the module docstring)."""
    pairs = _row_values(row, spec)
    try:
        data = parse_json_object(answer)
    except AnswerError as exc:  # invalid_json | not_an_object
        return JudgeFailure(exc.reason, exc.detail)
    folded = {_answer_key(key): entry for key, entry in data.items()}
    verdicts = []
    for variable, value in pairs:
        if variable.name in data:
            entry = data[variable.name]
        elif _answer_key(variable.name) in folded:
            entry = folded[_answer_key(variable.name)]
        else:
            verdicts.append(VariableVerdict(variable.name, value, False, NOT_JUDGED, None))
            continue
        if isinstance(entry, dict):
            entry = {_answer_key(key): item for key, item in entry.items()}
        verdict = _yes_no(entry.get("correct")) if isinstance(entry, dict) else None
        if verdict is None:
            verdicts.append(VariableVerdict(variable.name, value, False, INVALID_VERDICT, None))
            continue
        reference = entry.get("reference")
        candidates = [reference] if isinstance(reference, str) else reference
        if not isinstance(candidates, list):
            candidates = []
        candidates = [c for c in candidates if isinstance(c, str) and c.strip()]
        evidence = None
        for candidate in candidates:
            evidence = locate_reference(candidate, report)
            if evidence is not None:
                break
        note = REFERENCE_NOT_FOUND if candidates and evidence is None else None
        status = CORRECT if verdict else WRONG
        verdicts.append(VariableVerdict(variable.name, value, verdict, status, evidence, note))
    return verdicts
