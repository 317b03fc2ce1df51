"""Finding identifier-like strings in text that should carry no identifiers.

Masked seed notes, prompts and generated templates may contain placeholders
(``[[DOCTOR_1]]``) but no dates, phone numbers, record numbers, e-mail
addresses, URLs or person names. :class:`IdentifierScanner` looks for strings
that look like any of these, so the request guard can refuse a prompt before
it leaves the machine and the template validator can reject a template that
invented a real-looking identifier. It is a heuristic backstop, not a
de-identifier: it aims at recall on formatted identifiers and at few false
alarms on ordinary clinical prose.

Kinds of finding:

* ``date``, ``phone``, ``id``: the DATE, PHONE and ID detectors of
  :mod:`synthdeid.detectors` (same patterns, same guards against
  blood pressures, times and doses);
* ``email``: ``local@domain.tld``;
* ``url``: ``http://`` / ``https://`` addresses and ``www.`` host names;
* ``name``: a Capitalised (``Smith``, ``McDonald``, ``O'Brien``) or UPPER
  (``SMITH``, three letters or more) word whose casefold is a first or last
  name, by default from Faker's en_US name lists (the lists the surrogate
  name operator draws from). Not names: words in ``common_words`` (the caller
  passes words its corpus uses in lower case, such as "will", "may", "rose"),
  the built-in :data:`NOT_NAMES` (English words, clinical terms and eponyms
  that are also Faker names: "Frank" blood, "Colon", "Foley", "Wall" motion),
  and name words inside the eponymous phrases of :data:`EPONYM_PHRASES`
  ("Murphy's sign", "Jackson-Pratt drain"). The price of these exclusions:
  a real person called Foley or Frank is not flagged by the scanner (the
  request guard also searches the seed notes' own PHI surfaces, which catches
  those); two-letter UPPER words ("LE", "JO") are taken for abbreviations.

Known limits: those of the detectors (a score written ``2/10`` far from a
"pain" or "score" word is taken for a date; bare years and weekdays are not
dates); names outside the Faker lists, and names spelled in lower case, are
not found. ``kinds`` turns kinds off for callers that mind their false alarms.

Text inside placeholders is never reported: placeholders are blanked before
scanning. Findings are sorted and do not overlap; where kinds overlap, the
earlier start wins, then the longer span, then the order email, url, date,
phone, id, name.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from synthdeid.detectors import detect, non_overlapping
from synthdeid.errors import ConfigError
from synthdeid.mask import PLACEHOLDER_RE

log = logging.getLogger(__name__)

KINDS = ("email", "url", "date", "phone", "id", "name")
_DETECTOR_KINDS = {"DATE": "date", "PHONE": "phone", "ID": "id"}

_EMAIL_RE = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
# an address ends before whitespace, quotes and brackets; trailing punctuation is trimmed
_URL_RE = re.compile(r"(?i:\bhttps?://|(?<![\w.@-])www\.)[^\s<>\"'()\[\]{}]+")
_URL_TRAILING = ".,;:!?"
# a capitalised word (internal capitals and apostrophes allowed) or an UPPER word
_NAME_TOKEN_RE = re.compile(r"(?<![\w'\u2019])[A-Z][A-Za-z]*(?:['\u2019][A-Za-z]+)*(?![\w])")
_POSSESSIVE_RE = re.compile(r"['\u2019][sS]$")
_MIN_UPPER_NAME = 3

# Faker en_US first and last names that are ordinary English words, clinical
# terms or eponyms whose capitalised form is common in clinical notes (sentence
# starts, section headers, "Frank blood", "Foley catheter", "Wall motion").
NOT_NAMES = frozenset(
    {
        # English words
        "amber", "angel", "april", "autumn", "ball", "banks", "bass", "bean", "berry", "best",
        "bill", "bird", "black", "bond", "branch", "bright", "brown", "buck", "case", "chase",
        "cherry", "church", "cook", "crane", "cross", "crystal", "daisy", "dale", "dawn", "day",
        "dean", "destiny", "diamond", "don", "drew", "faith", "fields", "flowers", "fox", "frank",
        "frost", "gates", "gay", "glass", "golden", "good", "grace", "grant", "gray", "green",
        "guy", "hale", "hardy", "hart", "heath", "hill", "holly", "hood", "hope", "horn", "house",
        "hunt", "jade", "joy", "key", "king", "lamb", "lance", "lane", "little", "long", "love",
        "mark", "marks", "max", "may", "melody", "miles", "mills", "misty", "moon", "moss",
        "noble", "page", "park", "parks", "penny", "powers", "price", "prince", "rich",
        "rivers", "robin", "rose", "rush", "savage", "sharp", "shields", "short", "small", "snow",
        "spencer", "stark", "stone", "strong", "summer", "summers", "sue", "wade", "wall",
        "walls", "ward", "waters", "watts", "wells", "white", "winters", "wise", "wolf", "wood",
        "woods", "young",
        # occupations (social history)
        "baker", "barber", "butler", "carpenter", "farmer", "mason", "porter", "potter",
        "weaver",
        # clinical words and abbreviations
        "ana", "chambers", "colon", "cox", "gene", "gross", "pace", "ray",
        # eponyms written alone (Foley catheter, Mayo clinic)
        "foley", "mayo",
        # languages and nationalities (social history, interpreter needs)
        "english", "french",
    }
)  # fmt: skip

# eponymous phrases: the name words inside them are not reported
EPONYM_PHRASES = re.compile(
    r"""(?ix)\b(?:
        murphy['\u2019]?s?\s+sign | jackson[-\s]pratt | cheyne[-\s]stokes | mallory[-\s]weiss
      | hunt[-\s]hess | swan[-\s]ganz | graves['\u2019]?\s+disease | bell['\u2019]?s?\s+palsy
      | wilson['\u2019]?s?\s+disease | barrett['\u2019]?s?\s+(?:esophagus|mucosa)
      | wells\s+(?:score|criteria) | fisher\s+(?:grade|scale) | berg\s+balance
      | bruce\s+protocol | duke\s+(?:criteria|score) | tanner\s+stage | bishop\s+score
      | richmond\s+agitation | allen['\u2019]?s?\s+test | fowler['\u2019]?s?\s+position
      | turner\s+syndrome | hickman\s+(?:catheter|line) | blake\s+drains?
      | glenn\s+(?:procedure|shunt) | ross\s+procedure | norton\s+scale
      | morton['\u2019]?s?\s+neuroma | brooke\s+ileostomy | grey\s+turner
    )\b"""
)


@dataclass(frozen=True, order=True)
class Finding:
    """An identifier-like string: character span (``end`` exclusive) and kind."""

    start: int
    end: int
    kind: str

    def describe(self) -> str:
        """The finding without its text (safe for logs): kind and length."""
        return f"{self.kind} ({self.end - self.start} chars)"


def _kind(finding: Finding) -> str:
    return finding.kind


@functools.lru_cache(maxsize=4)
def faker_names(locale: str = "en_US") -> frozenset[str]:
    """Casefolded first and last names of a Faker locale (the surrogate name lists)."""
    import faker

    # the surrogate name operator's own reader of the Faker person provider
    from synthdeid.surrogate.operators.names import name_pools

    pools = name_pools(faker.Faker(locale))
    return pools["first"].casefolded() | pools["last"].casefolded()


def blank_placeholders(text: str, names: Collection[str] | None = None) -> str:
    """``text`` with its ``[[NAME_n]]`` placeholders replaced by spaces (same length).

    ``names``: blank only placeholders of these names (an allowlist); others
    stay as they are, to be searched like any other text. None: every one.
    """
    return PLACEHOLDER_RE.sub(
        lambda m: " " * (m.end() - m.start()) if names is None or m.group(1) in names else m[0],
        text,
    )


class IdentifierScanner:
    """Finds identifier-like strings: see the module docstring for the kinds.

    ``names``: the name words to look for (any case; default Faker en_US
    first and last names). ``common_words``: words never taken for names
    (compared casefolded), typically those a corpus uses in lower case.
    ``kinds``: the kinds to report (default all of :data:`KINDS`).
    """

    def __init__(
        self,
        names: Iterable[str] | None = None,
        common_words: Iterable[str] = (),
        kinds: Iterable[str] = KINDS,
    ) -> None:
        self.kinds_reported = frozenset(kinds)
        unknown = sorted(self.kinds_reported - set(KINDS))
        if unknown:
            raise ConfigError(f"unknown identifier kinds {unknown}; known: {list(KINDS)}")
        source = faker_names() if names is None else {n.casefold() for n in names}
        excluded = NOT_NAMES | {w.casefold() for w in common_words}
        self.names: frozenset[str] = frozenset(
            self._key(n) for n in source if self._key(n) not in excluded
        )
        self.excluded_words = len(source) - len(self.names)

    @staticmethod
    def _key(word: str) -> str:
        return word.replace("'", "").replace("\u2019", "").casefold()

    def scan(self, text: str, *, placeholder_names: Collection[str] | None = None) -> list[Finding]:
        """The identifier-like strings of ``text``, sorted, non-overlapping.

        ``placeholder_names``: only placeholders of these names are blanked
        (see :func:`blank_placeholders`; None: every placeholder).
        """
        blanked = blank_placeholders(text, placeholder_names)
        wanted = self.kinds_reported
        found = [
            *(self._emails(blanked) if "email" in wanted else []),
            *(self._urls(blanked) if "url" in wanted else []),
            *self._formatted(blanked, [k for k, v in _DETECTOR_KINDS.items() if v in wanted]),
            *(self._names(blanked) if "name" in wanted else []),
        ]
        return non_overlapping(found, KINDS, _kind)

    @staticmethod
    def _emails(text: str) -> list[Finding]:
        if "@" not in text:
            return []
        return [Finding(m.start(), m.end(), "email") for m in _EMAIL_RE.finditer(text)]

    @staticmethod
    def _urls(text: str) -> list[Finding]:
        if "://" not in text and "www." not in text.casefold():
            return []
        found = []
        for match in _URL_RE.finditer(text):
            end = match.start() + len(match.group().rstrip(_URL_TRAILING))
            found.append(Finding(match.start(), end, "url"))
        return found

    @staticmethod
    def _formatted(text: str, labels: list[str]) -> list[Finding]:
        if not labels:
            return []
        spans = detect(text, labels)
        return [Finding(s.start, s.end, _DETECTOR_KINDS[s.label]) for s in spans]

    def _names(self, text: str) -> list[Finding]:
        found = []
        for match in _NAME_TOKEN_RE.finditer(text):
            word = _POSSESSIVE_RE.sub("", match.group())
            if word.isupper() and len(word) < _MIN_UPPER_NAME:
                continue
            if self._key(word) in self.names:
                found.append(Finding(match.start(), match.start() + len(word), "name"))
        if not found:
            return found
        # eponymous phrases are looked for only when there is a name to clear
        eponyms = [m.span() for m in EPONYM_PHRASES.finditer(text)]
        return [f for f in found if not any(s <= f.start and f.end <= e for s, e in eponyms)]
