"""Notes planted in the training set, and the test of whether samples reproduce them.

Two kinds of planted note share one table (:data:`CANARIES_SCHEMA`, column
``kind``), one note builder (:func:`build_note`) and one scoring
(:func:`canary_report`): *canaries* (:func:`make_canaries`, below), whose
distinctive phrase is improbable nonsense, and *outliers*
(:func:`synthdeid.dplm.outliers.make_outliers`), clinically plausible ICU
notes whose distinctive sentence is a rare but realistic clinical combination
(Zecevic et al., sec. 4.6). A table written before outliers existed has no
``kind`` column: its rows are canaries.

Canaries (:func:`make_canaries`): ``k`` nursing-note-like texts of 60 to 120
words (whitespace-separated), each built from generic clinical filler
sentences written for this module (no corpus text) around one sentence that
carries a *distinctive phrase*: an improbable combination drawn from word
lists of this module, ``<adjective> <animal> <hobby verb> <number in words>
<material> <objects> near <invented place word> <building>``, e.g. "speckled
axolotl polishes two hundred eleven brass thimbles near quilowick lighthouse"
(9 to 12 ROUGE tokens). The invented place word (three syllables from fixed
lists) is different for every canary, so phrases are unique (asserted). The
texts carry no digits, dates, phone numbers, record numbers or person names
and no placeholders, so the identifier scanner has nothing to flag. The
generator is ``random.Random(seed)`` drawing canary after canary, so a seed
gives the same canaries, and the first ``k`` canaries of a larger ``k``.

Canary test (:func:`canary_report`), for the samples of one model and the
planted notes of one kind (for outliers, read "outlier" for "canary" and
"regenerates" for "reproduces"):

* best ROUGE-L of a canary: the highest ROUGE-L F of the canary note against
  any sample (``rouge_score``'s ``score(target=sample, prediction=canary)``),
  and the first sample reaching it (-1 when no sample shares a token);
* a sample *reproduces* a canary when (a) the normalised phrase occurs in the
  normalised sample (normalised: casefolded, ROUGE-tokenized, tokens joined by
  single spaces, so whitespace and punctuation runs collapse; matched on token
  boundaries), or (b) the LCS of the phrase's tokens within the sample's tokens
  covers at least ``phrase_min_share`` of the phrase's tokens (LCS recall of the
  phrase against the sample: its words appear in order, possibly with other
  words between them). A scrambled phrase is not a reproduction.

Exposure (:func:`canary_exposure`): how much lower a model's perplexity is on
the planted canaries than on canaries of the same generator it never saw
(:func:`reference_canaries`), by rank; it reads the model, not its samples,
so it tells a model that learnt the canaries without writing them out.

Aggregates: mean best ROUGE-L over canaries with a 95% percentile bootstrap
interval over canaries, the maximum, the number and share of canaries
reproduced by at least one sample (95% Wilson interval over canaries), and the
number and share of samples reproducing any canary (95% Wilson interval over
samples).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synthdeid.artifacts import read_parquet_with_provenance, require_columns
from synthdeid.dplm.memorization import interval_json
from synthdeid.dplm.rouge import RougeIndex
from synthdeid.errors import ConfigError, InputError
from synthdeid.stats import (
    N_RESAMPLES,
    SEED,
    Interval,
    bootstrap_mean_interval,
    wilson_interval,
)

log = logging.getLogger(__name__)

MIN_WORDS = 60
MAX_WORDS = 120
PHRASE_MIN_SHARE = 0.8

# the kinds of planted note (column ``kind`` of the planted-notes table)
CANARY = "canary"
OUTLIER = "outlier"
KINDS = (CANARY, OUTLIER)

FILLER_SENTENCES = (
    "Patient resting quietly in bed with the call light within reach.",
    "Skin warm and dry, no new areas of redness noted on the back or heels.",
    "Lungs sound clear in all fields and breathing is even and unlabored.",
    "Tolerated a soft diet at supper without nausea or vomiting.",
    "Assisted to the chair for most of the afternoon and tolerated it well.",
    "Denies chest pain, shortness of breath or dizziness at this time.",
    "Peripheral line in the left forearm flushes easily without swelling.",
    "Abdomen soft and nontender with active bowel sounds in all quadrants.",
    "Voiding without difficulty in the bathroom with standby assistance.",
    "Ambulated in the hallway with a walker and steady gait.",
    "Dressing over the incision clean, dry and intact, no drainage seen.",
    "Reports pain as mild and declined additional medication overnight.",
    "Oriented and follows commands, speech clear and appropriate.",
    "Encouraged fluids and use of the incentive spirometer every hour while awake.",
    "Turned and repositioned regularly to protect pressure points.",
    "Appetite fair, ate about half of the breakfast tray.",
    "Slept in short stretches through the night and woke easily to voice.",
    "Family visited in the evening and asked appropriate questions about the plan.",
    "Bed alarm on, side rails up as ordered, fall precautions maintained.",
    "Vital signs stable through the shift and within expected ranges.",
    "Pulses palpable in both feet and extremities warm to touch.",
    "Oxygen weaned to room air with saturations remaining acceptable.",
    "Teaching provided on medications and the patient repeated it back correctly.",
    "Mild swelling of both ankles, legs elevated on pillows.",
    "Blood sugar checks continued before meals and at bedtime as ordered.",
    "Physical therapy saw the patient and recommended continued walking.",
    "No signs of bleeding at the access site after the procedure.",
    "Mouth care done and the patient was made comfortable for the night.",
    "Plan of care reviewed with the team during morning rounds.",
    "Continue to monitor and notify the covering provider of any changes.",
)

LEAD_INS = (
    "Patient talked at length about how the {phrase}.",
    "During the evening chat the patient described how the {phrase}.",
    "Spouse explained at the bedside that the {phrase}.",
    "Patient insisted on telling staff that the {phrase}.",
)

ADJECTIVES = (
    "turquoise", "speckled", "lavender", "copper", "striped", "amber", "silver", "crimson",
    "ochre", "indigo", "marbled", "saffron", "pewter", "emerald", "tawny", "velvet",
)  # fmt: skip
ANIMALS = (
    "iguana", "hedgehog", "tortoise", "ferret", "axolotl", "cockatoo", "chinchilla",
    "salamander", "alpaca", "pangolin", "tarantula", "armadillo", "lemur", "gecko",
    "peacock", "capybara",
)  # fmt: skip
HOBBY_VERBS = (
    "collects", "polishes", "arranges", "catalogues", "paints", "counts", "stacks", "guards",
)  # fmt: skip
MATERIALS = (
    "brass", "porcelain", "glass", "tin", "walnut", "seashell", "clay", "pewter", "bamboo",
)  # fmt: skip
OBJECTS = (
    "thimbles", "teacups", "compasses", "marbles", "lanterns", "spoons", "kettles",
    "buttons", "sundials", "whistles", "hourglasses", "doorknobs",
)  # fmt: skip
PLACE_FIRST = (
    "zor", "quil", "brax", "vel", "mor", "thal", "kest", "drun", "plim", "wex", "yar",
    "gul", "snor", "trev", "obb", "frim",
)  # fmt: skip
PLACE_MIDDLE = ("a", "e", "i", "o", "u", "ae", "io", "ou")
PLACE_LAST = (
    "mere", "holt", "wick", "vane", "thorpe", "dale", "fell", "moor", "gate", "brook",
    "stead", "tarn",
)  # fmt: skip
BUILDINGS = (
    "lighthouse", "granary", "windmill", "boathouse", "observatory", "quarry", "orchard",
    "aqueduct", "greenhouse", "belfry",
)  # fmt: skip

_ONES = (
    "", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def number_words(n: int) -> str:
    """``n`` (1..999) in English words without hyphens: 347 -> "three hundred forty seven"."""
    if not 1 <= n <= 999:
        raise ValueError(f"number_words covers 1..999, got {n}")
    words = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        words.append(_TENS[rest // 10])
        if rest % 10:
            words.append(_ONES[rest % 10])
    elif rest:
        words.append(_ONES[rest])
    return " ".join(words)


@dataclass(frozen=True)
class Canary:
    """A planted note and its distinctive phrase (a substring of ``text``).

    ``kind``: :data:`CANARY` (an improbable phrase) or :data:`OUTLIER` (a rare
    but realistic clinical combination); ``canary_id`` is the planted note's
    id whatever its kind (``canary_001``, ``outlier_001``).
    """

    canary_id: str
    text: str
    phrase: str
    kind: str = CANARY

    def to_json(self) -> dict[str, str]:
        return {
            "canary_id": self.canary_id,
            "text": self.text,
            "phrase": self.phrase,
            "kind": self.kind,
        }


CANARIES_SCHEMA = pa.schema(
    [
        pa.field("canary_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("phrase", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
    ],
    metadata={b"synthdeid.synthetic": b"canary and outlier notes from seeded generators"},
)
# columns a planted-notes table must have; without ``kind`` every row is a canary
_REQUIRED_COLUMNS = [name for name in CANARIES_SCHEMA.names if name != "kind"]


def read_planted(path: Path) -> list[Canary]:
    """Every planted note of a table written by ``plant-canaries``, with its kind."""
    table, _ = read_parquet_with_provenance(path)
    require_columns(path, table.column_names, _REQUIRED_COLUMNS, "a planted-notes table")
    planted = [
        Canary(r["canary_id"], r["text"], r["phrase"], r.get("kind") or CANARY)
        for r in table.to_pylist()
    ]
    for number, note in enumerate(planted):
        if note.kind not in KINDS:
            raise InputError(
                path, f"row {number}", f"a planted note of unknown kind; known: {list(KINDS)}"
            )
    return planted


def of_kind(planted: Sequence[Canary], kind: str) -> list[Canary]:
    """The planted notes of one kind, in table order."""
    return [note for note in planted if note.kind == kind]


def _phrase(rng: random.Random, place: str) -> str:
    # a "rare" number: 11..999, never a multiple of ten
    number = rng.choice([n for n in range(11, 1000) if n % 10])
    return " ".join(
        [
            rng.choice(ADJECTIVES),
            rng.choice(ANIMALS),
            rng.choice(HOBBY_VERBS),
            number_words(number),
            rng.choice(MATERIALS),
            rng.choice(OBJECTS),
            "near",
            place,
            rng.choice(BUILDINGS),
        ]
    )


def build_note(rng: random.Random, carrier: str, filler_sentences: Sequence[str]) -> str:
    """A note of ``MIN_WORDS`` to ``MAX_WORDS`` words: the ``carrier`` sentence at a random
    place among filler sentences drawn in a random order (each used at most once)."""
    target = rng.randint(MIN_WORDS, MAX_WORDS)
    fillers = list(filler_sentences)
    rng.shuffle(fillers)
    chosen: list[str] = []
    total = len(carrier.split())
    for sentence in fillers:
        if total >= target:
            break
        size = len(sentence.split())
        if total + size <= MAX_WORDS:
            chosen.append(sentence)
            total += size
    chosen.insert(rng.randint(0, len(chosen)), carrier)
    text = " ".join(chosen)
    if not MIN_WORDS <= len(text.split()) <= MAX_WORDS:  # pragma: no cover - by construction
        raise AssertionError(f"planted note of {len(text.split())} words")
    return text


def _note(rng: random.Random, phrase: str) -> str:
    return build_note(rng, rng.choice(LEAD_INS).format(phrase=phrase), FILLER_SENTENCES)


def make_canaries(k: int, seed: int) -> list[Canary]:
    """``k`` canary notes with unique distinctive phrases (see the module docstring)."""
    if k < 0:
        raise ConfigError(f"the number of canaries must be >= 0, got {k}")
    capacity = len(PLACE_FIRST) * len(PLACE_MIDDLE) * len(PLACE_LAST)
    if k > capacity // 2:
        raise ConfigError(f"at most {capacity // 2} canaries can be made, asked for {k}")
    rng = random.Random(seed)
    places: set[str] = set()
    canaries = []
    for i in range(k):
        while True:
            place = rng.choice(PLACE_FIRST) + rng.choice(PLACE_MIDDLE) + rng.choice(PLACE_LAST)
            if place not in places:
                places.add(place)
                break
        phrase = _phrase(rng, place)
        canaries.append(Canary(f"canary_{i + 1:03d}", _note(rng, phrase), phrase))
    phrases = [c.phrase for c in canaries]
    assert len(set(phrases)) == len(phrases), "canary phrases must be unique"
    return canaries


def normalised_tokens(text: str, index: RougeIndex) -> str:
    """Casefolded, ROUGE-tokenized, tokens joined by single spaces."""
    return " ".join(index.tokenize(text.casefold()))


@dataclass(frozen=True)
class CanaryRow:
    """One canary against the samples of one model."""

    canary_id: str
    best_rouge_l: float  # highest ROUGE-L of the canary note against any sample
    best_sample_index: int  # first sample reaching it; -1 when it is 0.0
    best_phrase_recall: float  # highest LCS recall of the phrase's tokens in a sample
    n_samples_reproducing: int  # samples that reproduce the phrase

    def to_json(self) -> dict[str, Any]:
        return {
            "canary_id": self.canary_id,
            "best_rouge_l": float(self.best_rouge_l),
            "best_sample_index": int(self.best_sample_index),
            "best_phrase_recall": float(self.best_phrase_recall),
            "n_samples_reproducing": int(self.n_samples_reproducing),
        }


@dataclass(frozen=True)
class CanaryReport:
    """Canary test of one model's samples (see the module docstring).

    It scores the planted notes of one ``kind``; for outliers the fields named
    after canaries count outliers (``n_canaries``: outliers planted,
    ``n_canaries_reproduced``: outliers regenerated by at least one sample).
    """

    rows: tuple[CanaryRow, ...]
    n_canaries: int
    n_samples: int
    mean_best_rouge_l: Interval  # bootstrap over canaries
    max_best_rouge_l: float
    n_canaries_reproduced: int
    canaries_reproduced: Interval  # Wilson, over canaries
    n_samples_reproducing_any: int
    samples_reproducing_any: Interval  # Wilson, over samples
    phrase_min_share: float
    resamples: int
    seed: int
    kind: str = CANARY

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "rows": [row.to_json() for row in self.rows],
            "n_canaries": self.n_canaries,
            "n_samples": self.n_samples,
            "mean_best_rouge_l": interval_json(self.mean_best_rouge_l),
            "max_best_rouge_l": float(self.max_best_rouge_l),
            "n_canaries_reproduced": self.n_canaries_reproduced,
            "canaries_reproduced": interval_json(self.canaries_reproduced),
            "n_samples_reproducing_any": self.n_samples_reproducing_any,
            "samples_reproducing_any": interval_json(self.samples_reproducing_any),
            "phrase_min_share": float(self.phrase_min_share),
            "resamples": self.resamples,
            "seed": self.seed,
            "definitions": {
                "kind": "the kind of planted note scored (canary or outlier); ids and counts "
                "named after canaries are those of the planted notes of this kind",
                "best_rouge_l": "highest rouge_score ROUGE-L F of the planted note against any "
                "sample",
                "reproduces": (
                    "normalised phrase occurs in the normalised sample, or the LCS recall of "
                    "the phrase's tokens in the sample >= phrase_min_share (for an outlier, "
                    "the sample regenerates it)"
                ),
                "mean_interval": "95% percentile bootstrap over the planted notes",
                "share_interval": "95% Wilson score interval",
            },
        }


def canary_report(
    canaries: Sequence[Canary],
    samples: Sequence[str],
    *,
    phrase_min_share: float = PHRASE_MIN_SHARE,
    resamples: int = N_RESAMPLES,
    seed: int = SEED,
    use_stemmer: bool = False,
    index: RougeIndex | None = None,
) -> CanaryReport:
    """Best ROUGE-L of each planted note against ``samples`` and the phrase reproductions.

    ``canaries``: planted notes of one kind (canaries, or outliers). ``index``:
    a :class:`RougeIndex` already built from ``samples``.
    """
    if not 0.0 < phrase_min_share <= 1.0:
        raise ConfigError(f"phrase_min_share must be in (0, 1], got {phrase_min_share}")
    if not canaries:
        raise ConfigError("the canary test needs at least one canary")
    if not samples:
        raise ConfigError("the canary test needs at least one sample")
    kinds = sorted({c.kind for c in canaries})
    if len(kinds) != 1:
        raise ConfigError(f"the canary test scores one kind of planted note at a time, got {kinds}")
    if index is None:
        index = RougeIndex(samples, use_stemmer=use_stemmer)
    elif len(index) != len(samples) or index.use_stemmer != use_stemmer:
        raise ConfigError(
            f"the ROUGE index covers {len(index)} texts (use_stemmer={index.use_stemmer}), "
            f"there are {len(samples)} samples (use_stemmer={use_stemmer})"
        )
    normalised = [f" {normalised_tokens(s, index)} " for s in samples]
    any_reproduction = np.zeros(len(samples), dtype=bool)
    rows = []
    for canary in canaries:
        phrase_tokens = index.tokenize(canary.phrase)
        if not phrase_tokens:
            raise ConfigError(f"{canary.canary_id}: the distinctive phrase has no tokens")
        best, where = index.max_rouge_l(canary.text)
        recall = index.lcs_lengths_tokens(phrase_tokens) / len(phrase_tokens)
        phrase = f" {normalised_tokens(canary.phrase, index)} "
        contains = np.array([phrase in s for s in normalised], dtype=bool)
        reproduced = contains | (recall >= phrase_min_share)
        any_reproduction |= reproduced
        rows.append(
            CanaryRow(
                canary_id=canary.canary_id,
                best_rouge_l=best,
                best_sample_index=where,
                best_phrase_recall=float(recall.max()),
                n_samples_reproducing=int(reproduced.sum()),
            )
        )
    best_values = [row.best_rouge_l for row in rows]
    n_reproduced = sum(row.n_samples_reproducing > 0 for row in rows)
    n_any = int(any_reproduction.sum())
    report = CanaryReport(
        rows=tuple(rows),
        n_canaries=len(rows),
        n_samples=len(samples),
        mean_best_rouge_l=bootstrap_mean_interval(best_values, resamples=resamples, seed=seed),
        max_best_rouge_l=float(max(best_values)),
        n_canaries_reproduced=n_reproduced,
        canaries_reproduced=wilson_interval(n_reproduced, len(rows)),
        n_samples_reproducing_any=n_any,
        samples_reproducing_any=wilson_interval(n_any, len(samples)),
        phrase_min_share=float(phrase_min_share),
        resamples=resamples,
        seed=seed,
        kind=kinds[0],
    )
    log.info(
        "%s test: %d/%d reproduced, %d/%d samples reproduce one",
        kinds[0],
        n_reproduced,
        len(rows),
        n_any,
        len(samples),
    )
    return report


def _place(canary: Canary) -> str:
    """The invented place word of a canary's phrase (``... near <place> <building>``)."""
    return canary.phrase.rsplit(" near ", 1)[1].split()[0]


def reference_canaries(planted: Sequence[Canary], count: int, seed: int) -> list[Canary]:
    """``count`` canaries from the same generator that were never planted: drawn with
    another ``seed``, none sharing a place word (hence a phrase) with ``planted``.
    A draw's place words are unique, so ``count + len(planted)`` draws are enough."""
    taken = {_place(c) for c in planted}
    drawn = make_canaries(count + len(planted), seed)
    return [c for c in drawn if _place(c) not in taken][:count]


@dataclass(frozen=True)
class ExposureReport:
    """Canary exposure (Carlini et al. 2019, "The Secret Sharer") of one model.

    A planted canary's rank is its place among itself and the ``references``
    never-planted canaries when all are sorted by the model's perplexity
    (1 = the lowest); its exposure is ``log2(R + 1) - log2(rank)``. A model
    that learnt nothing about the canaries ranks them uniformly at random:
    mean exposure ``chance`` (about 1.44 bits); one that learnt a canary by
    heart ranks it first: ``ceiling = log2(R + 1)``.
    """

    references: int
    exposures: tuple[float, ...]  # per planted canary, in order
    mean: Interval  # with a bootstrap interval over canaries
    maximum: float
    chance: float
    ceiling: float

    def to_json(self) -> dict[str, Any]:
        return {
            "references": self.references,
            "exposures": [float(e) for e in self.exposures],
            "mean": interval_json(self.mean),
            "maximum": float(self.maximum),
            "chance": float(self.chance),
            "ceiling": float(self.ceiling),
        }


def canary_exposure(
    planted: Sequence[float],
    references: Sequence[float],
    *,
    resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> ExposureReport:
    """Exposure of each planted canary from its perplexity and the references'."""
    if not planted or not references:
        raise ConfigError("canary exposure needs planted and reference canaries")
    ordered = np.sort(np.asarray(references, dtype=np.float64))
    total = len(ordered) + 1
    ranks = 1 + np.searchsorted(ordered, np.asarray(planted, dtype=np.float64), side="left")
    exposures = np.log2(total) - np.log2(ranks)
    chance = float(np.log2(total) - np.mean(np.log2(np.arange(1, total + 1))))
    return ExposureReport(
        references=len(ordered),
        exposures=tuple(float(e) for e in exposures),
        mean=bootstrap_mean_interval(exposures, resamples=resamples, seed=seed),
        maximum=float(exposures.max()),
        chance=chance,
        ceiling=float(np.log2(total)),
    )
