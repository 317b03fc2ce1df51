"""Canary notes: generation and the reproduction test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from synthdeid.artifacts import write_parquet_atomic
from synthdeid.dplm.canaries import (
    CANARIES_SCHEMA,
    CANARY,
    OUTLIER,
    Canary,
    canary_report,
    make_canaries,
    number_words,
    of_kind,
    read_planted,
)
from synthdeid.dplm.outliers import make_outliers
from synthdeid.dplm.rouge import rouge_l, tokenize
from synthdeid.errors import ConfigError, InputError
from synthdeid.identifiers import IdentifierScanner
from synthdeid.mask import PLACEHOLDER_RE

FILLER = (
    "Patient ate lunch and walked with the therapist. Pain controlled with current "
    "medications. Will continue to monitor overnight."
)


def test_canaries_are_deterministic_and_unique() -> None:
    first = make_canaries(40, seed=3)
    assert first == make_canaries(40, seed=3)
    assert make_canaries(10, seed=3) == first[:10]
    assert make_canaries(10, seed=4) != first[:10]
    assert len({c.phrase for c in first}) == 40
    assert len({c.canary_id for c in first}) == 40
    assert make_canaries(0, seed=1) == []
    with pytest.raises(ConfigError, match=">= 0"):
        make_canaries(-1, seed=1)


def test_canary_texts_look_like_notes_and_carry_no_identifiers() -> None:
    canaries = make_canaries(60, seed=11)
    scanner = IdentifierScanner()
    for canary in canaries:
        assert 60 <= len(canary.text.split()) <= 120
        assert canary.phrase in canary.text
        assert 8 <= len(tokenize(canary.phrase)) <= 12
        assert not re.search(r"\d", canary.text)
        assert not PLACEHOLDER_RE.search(canary.text)
        assert scanner.scan(canary.text) == []
        # the phrase occurs once in its own note
        assert canary.text.count(canary.phrase) == 1
    # phrases differ in their invented place word, so no two phrases are near copies
    places = [c.phrase.split()[-2] for c in canaries]
    assert len(set(places)) == len(places)


def test_number_words() -> None:
    assert number_words(11) == "eleven"
    assert number_words(347) == "three hundred forty seven"
    assert number_words(900) == "nine hundred"
    assert number_words(21) == "twenty one"
    with pytest.raises(ValueError):
        number_words(0)


def test_phrase_inside_other_text_is_counted_and_scrambled_is_not() -> None:
    canaries = [
        Canary("c1", "Quiet night. The violet walrus juggles nineteen pewter kazoos near plimora "
               "belfry. Slept well.", "violet walrus juggles nineteen pewter kazoos near plimora belfry"),
        Canary("c2", "Up in chair. The amber lemur stacks sixty two glass bells near zorwick "
               "granary. Ate lunch.", "amber lemur stacks sixty two glass bells near zorwick granary"),
    ]  # fmt: skip
    phrase = canaries[0].phrase
    scrambled = " ".join(reversed(phrase.split()))
    samples = [
        f"{FILLER} Spouse says the VIOLET walrus,  juggles nineteen\npewter kazoos near "
        f"plimora belfry! {FILLER}",  # contained after normalisation
        f"{FILLER} {scrambled} {FILLER}",  # scrambled: not a reproduction
        FILLER,
        # eight of the nine words in order, with words in between: LCS recall 8/9 >= 0.8
        "violet walrus juggles nineteen odd pewter kazoos near plimora",
    ]
    report = canary_report(canaries, samples, resamples=200)
    rows = {row.canary_id: row for row in report.rows}
    assert rows["c1"].n_samples_reproducing == 2
    assert rows["c1"].best_phrase_recall == 1.0
    assert rows["c2"].n_samples_reproducing == 0
    assert report.n_canaries_reproduced == 1
    assert report.n_samples_reproducing_any == 2
    assert report.samples_reproducing_any.estimate == 0.5
    assert report.canaries_reproduced.estimate == 0.5
    # the scrambled sample alone reproduces nothing
    alone = canary_report(canaries, [samples[1]], resamples=50)
    assert alone.n_samples_reproducing_any == 0
    assert alone.rows[0].best_phrase_recall == pytest.approx(1 / 9)
    # a stricter share rejects the 8-of-9 sample
    strict = canary_report(canaries, samples, phrase_min_share=1.0, resamples=50)
    assert strict.rows[0].n_samples_reproducing == 1


def test_best_rouge_l_and_aggregates() -> None:
    canaries = make_canaries(4, seed=2)
    samples = [canaries[1].text, FILLER, "completely unrelated words here"]
    report = canary_report(canaries, samples, resamples=300, seed=1)
    row = report.rows[1]
    assert row.best_rouge_l == 1.0
    assert row.best_sample_index == 0
    for canary, r in zip(canaries, report.rows, strict=True):
        expected = max(rouge_l(s, canary.text) for s in samples)
        assert r.best_rouge_l == expected
    best = [r.best_rouge_l for r in report.rows]
    assert report.max_best_rouge_l == max(best)
    assert report.mean_best_rouge_l.estimate == pytest.approx(sum(best) / 4)
    assert report.mean_best_rouge_l.lo <= report.mean_best_rouge_l.estimate
    assert report.mean_best_rouge_l.hi >= report.mean_best_rouge_l.estimate
    assert report.n_canaries_reproduced == 1
    assert report.rows[1].n_samples_reproducing == 1
    assert report.n_samples == 3
    data = json.loads(json.dumps(report.to_json()))
    assert data["rows"][1]["best_rouge_l"] == 1.0
    assert data["canaries_reproduced"]["estimate"] == 0.25
    assert canary_report(canaries, samples, resamples=300, seed=1) == report


def test_bad_input() -> None:
    canaries = make_canaries(2, seed=1)
    with pytest.raises(ConfigError, match="phrase_min_share"):
        canary_report(canaries, ["x"], phrase_min_share=1.5)
    with pytest.raises(ConfigError, match="phrase_min_share"):
        canary_report(canaries, ["x"], phrase_min_share=0.0)
    with pytest.raises(ConfigError, match="sample"):
        canary_report(canaries, [])
    with pytest.raises(ConfigError, match="canary"):
        canary_report([], ["x"])


def test_exposure_ranks_planted_canaries_among_references() -> None:
    import math

    from synthdeid.dplm.canaries import canary_exposure, make_canaries, reference_canaries

    references = [float(v) for v in range(10, 1010, 10)]  # 100 references: 10 .. 1000
    report = canary_exposure([5.0, 1005.0, 500.0], references, resamples=200)
    assert report.references == 100 and report.ceiling == pytest.approx(math.log2(101))
    # rank 1 (lowest perplexity) = the ceiling; rank 101 (highest) = 0; 500 beats 49 references
    assert report.exposures[0] == pytest.approx(math.log2(101))
    assert report.exposures[1] == pytest.approx(0.0)
    assert report.exposures[2] == pytest.approx(math.log2(101) - math.log2(50))
    assert report.maximum == pytest.approx(math.log2(101))
    assert 1.3 < report.chance < 1.45  # uniform ranks: about log2(e) bits
    planted = make_canaries(5, 7)
    fresh = reference_canaries(planted, 30, 99)
    assert len(fresh) == 30
    assert not {c.phrase for c in fresh} & {c.phrase for c in planted}
    with pytest.raises(ConfigError):
        canary_exposure([], references)


def test_read_planted_gives_back_the_canaries_and_outliers_written(tmp_path: Path) -> None:
    canaries, outliers = make_canaries(3, seed=5), make_outliers(2, seed=5)
    path = tmp_path / "canaries.parquet"
    write_parquet_atomic(
        pa.Table.from_pylist([c.to_json() for c in canaries + outliers], schema=CANARIES_SCHEMA),
        path,
    )
    planted = read_planted(path)
    assert planted == canaries + outliers
    assert of_kind(planted, CANARY) == canaries and of_kind(planted, OUTLIER) == outliers
    # a table written before outliers existed has no kind column: its rows are canaries
    old = [{k: v for k, v in c.to_json().items() if k != "kind"} for c in canaries]
    write_parquet_atomic(pa.Table.from_pylist(old), path)
    assert read_planted(path) == canaries
    write_parquet_atomic(pa.table({"canary_id": ["c0"], "text": ["a note"]}), path)
    with pytest.raises(InputError, match="phrase"):
        read_planted(path)
    odd = {**canaries[0].to_json(), "kind": "parrot"}
    write_parquet_atomic(pa.Table.from_pylist([odd]), path)
    with pytest.raises(InputError, match="row 0: a planted note of unknown kind"):
        read_planted(path)


def test_the_canary_test_scores_one_kind_at_a_time() -> None:
    from synthdeid.dplm.canaries import KINDS
    from synthdeid.dplm.memorization import PLANTED_WORDS

    assert set(PLANTED_WORDS) == set(KINDS)  # the audit names every kind
    canaries, outliers = make_canaries(2, seed=1), make_outliers(2, seed=1)
    assert canary_report(canaries, ["x"], resamples=50).kind == CANARY
    assert canary_report(outliers, ["x"], resamples=50).to_json()["kind"] == OUTLIER
    with pytest.raises(ConfigError, match="one kind"):
        canary_report(canaries + outliers, ["x"], resamples=50)
