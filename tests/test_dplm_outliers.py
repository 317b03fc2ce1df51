"""Outlier notes: the generator's contract and the regeneration test of the audit."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from synthdeid.dplm.canaries import OUTLIER, PHRASE_MIN_SHARE, canary_report
from synthdeid.dplm.memorization import audit_markdown, memorization_audit, plot_canaries
from synthdeid.dplm.outliers import (
    COMPLICATIONS,
    FILLER_SENTENCES,
    LEAD_INS,
    MAX_OUTLIERS,
    MAX_SHARED_SHARE,
    PRESENTATIONS,
    compose,
    make_outliers,
)
from synthdeid.dplm.rouge import lcs_length, rouge_l, tokenize
from synthdeid.errors import ConfigError
from synthdeid.identifiers import IdentifierScanner
from synthdeid.mask import PLACEHOLDER_RE

ICU_FILLER = (
    "Sedated overnight and settles with reassurance. Lines secured and alarms audible. "
    "Plan discussed on rounds."
)


def every_combination() -> set[str]:
    """Every combination the module's clinical lists can make."""
    return {
        compose(support, p.diagnosis, trigger, therapy, complication)
        for p in PRESENTATIONS
        for support in p.supports
        for trigger in p.triggers
        for complication, therapy in COMPLICATIONS
    }


def filler_sentences_of(part: str) -> list[str]:
    """``part`` read as filler sentences of the module joined by spaces (fails otherwise)."""
    sentences, rest = [], part.strip()
    while rest:
        sentence = next((f for f in FILLER_SENTENCES if rest.startswith(f)), None)
        assert sentence is not None, "text that is no filler sentence of the module"
        sentences.append(sentence)
        rest = rest[len(sentence) :].strip()
    return sentences


def test_outliers_are_deterministic_unique_and_a_prefix_of_a_larger_draw() -> None:
    first = make_outliers(MAX_OUTLIERS, seed=3)
    assert first == make_outliers(MAX_OUTLIERS, seed=3)
    assert make_outliers(10, seed=3) == first[:10]
    assert make_outliers(10, seed=4) != first[:10]
    assert len({o.phrase for o in first}) == MAX_OUTLIERS
    assert len({o.text for o in first}) == MAX_OUTLIERS
    assert [o.canary_id for o in first[:3]] == ["outlier_001", "outlier_002", "outlier_003"]
    assert {o.kind for o in first} == {OUTLIER}
    assert make_outliers(0, seed=1) == []
    with pytest.raises(ConfigError, match=">= 0"):
        make_outliers(-1, seed=1)
    with pytest.raises(ConfigError, match=f"at most {MAX_OUTLIERS} outliers"):
        make_outliers(MAX_OUTLIERS + 1, seed=1)


def test_outliers_are_built_from_the_clinical_lists_only() -> None:
    allowed = every_combination()
    diagnoses = [p.diagnosis for p in PRESENTATIONS]
    assert len(set(diagnoses)) == len(diagnoses)
    assert len({c for c, _ in COMPLICATIONS}) == len(COMPLICATIONS)
    for seed in range(5):
        outliers = make_outliers(MAX_OUTLIERS, seed)
        # no two outliers of a draw share their diagnosis or their complication
        assert (
            len({next(d for d in diagnoses if f" for {d} after " in o.phrase) for o in outliers})
            == MAX_OUTLIERS
        )
        assert len({o.phrase.rsplit(" for concurrent ", 1)[1] for o in outliers}) == MAX_OUTLIERS
        for outlier in outliers:
            assert outlier.phrase in allowed
            carriers = [
                c
                for c in (lead.format(phrase=outlier.phrase) for lead in LEAD_INS)
                if c in outlier.text
            ]
            assert len(carriers) == 1
            before, after = outlier.text.split(carriers[0])
            fillers = filler_sentences_of(before) + filler_sentences_of(after)
            assert len(set(fillers)) == len(fillers)  # each filler sentence at most once


def test_outlier_texts_look_like_notes_and_carry_no_identifiers() -> None:
    scanner = IdentifierScanner()
    words = [len(o.text.split()) for s in range(5) for o in make_outliers(MAX_OUTLIERS, s)]
    assert min(words) >= 60 and max(words) <= 120  # the canaries' length band
    for outlier in make_outliers(MAX_OUTLIERS, seed=11):
        assert outlier.text.count(outlier.phrase) == 1
        assert 12 <= len(tokenize(outlier.phrase)) <= 30
        assert not re.search(r"\d", outlier.text)
        assert not PLACEHOLDER_RE.search(outlier.text)
        assert scanner.scan(outlier.text) == []
    # every list entry, in every carrier sentence, and every filler sentence: nothing to flag
    first, (complication, therapy) = PRESENTATIONS[0], COMPLICATIONS[0]
    carriers = [
        compose(support, p.diagnosis, trigger, therapy, complication)
        for p in PRESENTATIONS
        for support in p.supports
        for trigger in p.triggers
    ] + [
        compose(first.supports[0], first.diagnosis, first.triggers[0], th, co)
        for co, th in COMPLICATIONS
    ]
    for phrase in carriers:
        for lead in LEAD_INS:
            sentence = lead.format(phrase=phrase)
            assert not re.search(r"\d", sentence)
            assert scanner.scan(sentence) == []
    for sentence in FILLER_SENTENCES:
        assert not re.search(r"\d", sentence) and scanner.scan(sentence) == []


def test_no_two_outliers_a_draw_can_make_are_near_copies() -> None:
    """Every pair of combinations with different diagnoses and complications (what a draw
    can hold) shares at most MAX_SHARED_SHARE of either's tokens in order, below the share
    at which a sample counts as regenerating one.

    LCS(A1 A2, B1 B2) <= LCS(A1, B1) + LCS(A1, B2) + LCS(A2, B1) + LCS(A2, B2) prunes the
    pairs; the LCS of the rest is computed."""
    assert MAX_SHARED_SHARE < PHRASE_MIN_SHARE
    heads = [
        (p.diagnosis, tokenize(f"{support} for {p.diagnosis} after {trigger}, started on"))
        for p in PRESENTATIONS
        for support in p.supports
        for trigger in p.triggers
    ]
    tails = [tokenize(f"{therapy} for concurrent {c}") for c, therapy in COMPLICATIONS]
    first, (complication, therapy) = PRESENTATIONS[0], COMPLICATIONS[0]
    joined = compose(first.supports[0], first.diagnosis, first.triggers[0], therapy, complication)
    assert heads[0][1] + tails[0] == tokenize(joined)
    head_tail = np.array([[lcs_length(h, t) for t in tails] for _, h in heads])
    tail_tail = np.array([[lcs_length(a, b) for b in tails] for a in tails])
    tail_len = np.array([len(t) for t in tails])
    other = ~np.eye(len(tails), dtype=bool)
    worst = 0.0
    for (i, (da, a)), (j, (db, b)) in itertools.combinations(enumerate(heads), 2):
        if da == db:
            continue
        bound = lcs_length(a, b) + head_tail[i][None, :] + head_tail[j][:, None] + tail_tail
        shortest = np.minimum(len(a) + tail_len[:, None], len(b) + tail_len[None, :])
        for x, y in np.argwhere(other & (bound > MAX_SHARED_SHARE * shortest)):
            left, right = a + tails[x], b + tails[y]
            worst = max(worst, lcs_length(left, right) / min(len(left), len(right)))
    assert worst <= MAX_SHARED_SHARE


def test_the_audit_scores_a_regenerating_sample_as_regenerated_and_others_not(
    tmp_path: Path,
) -> None:
    outliers = make_outliers(4, seed=2)
    target = outliers[1]
    # a near miss: the same rare diagnosis, but another support, trigger and complication
    presentation = next(p for p in PRESENTATIONS if f" for {p.diagnosis} after " in target.phrase)
    support = next(s for s in presentation.supports if not target.phrase.startswith(f"{s} for "))
    trigger = next(t for t in presentation.triggers if f" after {t}, " not in target.phrase)
    used = {o.phrase.rsplit(" for concurrent ", 1)[1] for o in outliers}
    complication, therapy = next((c, t) for c, t in COMPLICATIONS if c not in used)
    near_miss = compose(support, presentation.diagnosis, trigger, therapy, complication)
    regenerating = (
        f"{ICU_FILLER} Spouse asked why the patient is {target.phrase.upper()}. {ICU_FILLER}"
    )
    samples_dp = [ICU_FILLER, f"Patient remains {near_miss}. {ICU_FILLER}"]
    samples_non_dp = [regenerating, ICU_FILLER, f"{ICU_FILLER} Patient remains {near_miss}."]
    reports = {
        "dp": canary_report(outliers, samples_dp, resamples=200),
        "non_dp": canary_report(outliers, samples_non_dp, resamples=200),
    }
    # a sample sharing the rare diagnosis only is no regeneration
    dp = reports["dp"]
    assert dp.kind == OUTLIER and dp.n_canaries == 4 and dp.n_samples == 2
    assert dp.n_canaries_reproduced == 0 and dp.n_samples_reproducing_any == 0
    assert dp.rows[1].best_phrase_recall < PHRASE_MIN_SHARE
    # a sample holding the combination regenerates that outlier and no other
    non_dp = reports["non_dp"]
    assert [row.n_samples_reproducing for row in non_dp.rows] == [0, 1, 0, 0]
    assert non_dp.rows[1].best_phrase_recall == 1.0
    assert non_dp.n_canaries_reproduced == 1 and non_dp.n_samples_reproducing_any == 1
    assert non_dp.canaries_reproduced.estimate == 0.25
    assert non_dp.samples_reproducing_any.estimate == pytest.approx(1 / 3)
    # max ROUGE-L per outlier: the highest over the samples, the first sample reaching it
    for report, samples in ((dp, samples_dp), (non_dp, samples_non_dp)):
        for outlier, row in zip(outliers, report.rows, strict=True):
            assert row.best_rouge_l == max(rouge_l(s, outlier.text) for s in samples)
    assert non_dp.rows[1].best_sample_index == 0
    assert non_dp.max_best_rouge_l == max(row.best_rouge_l for row in non_dp.rows)
    mean = non_dp.mean_best_rouge_l
    assert mean.lo <= mean.estimate <= mean.hi
    assert mean.estimate == pytest.approx(sum(row.best_rouge_l for row in non_dp.rows) / 4)
    data = json.loads(json.dumps(non_dp.to_json(), allow_nan=False))
    assert data["kind"] == OUTLIER and data["rows"][1]["n_samples_reproducing"] == 1

    # the audit's Markdown and figure, DP beside non-DP
    audits = {
        "dp": memorization_audit(samples_dp, [o.text for o in outliers], resamples=100),
        "non_dp": memorization_audit(samples_non_dp, [o.text for o in outliers], resamples=100),
    }
    text = audit_markdown(audits, outliers=reports, outlier_figure="outliers.png")
    assert "### Outliers" in text and "### Canaries" not in text
    assert (
        "| model | samples | mean best ROUGE-L [95% CI] | max best ROUGE-L | outliers regenerated | samples regenerating an outlier |"
        in text
    )
    assert "| non_dp | 3 |" in text and "1/4 (0.250 [" in text and "outlier_002" in text
    assert "![Best ROUGE-L of each outlier](outliers.png)" in text
    fig = plot_canaries(reports, tmp_path / "outliers.png")
    assert (tmp_path / "outliers.png").read_bytes()[:4] == b"\x89PNG"
    (ax,) = fig.axes
    assert ax.get_xlabel() == "planted outlier (n = 4)"
    assert "0 to 1" in ax.get_ylabel()
    title = ax.get_title().replace("\n", " ")
    assert title.startswith("Outliers whose combination reappears in a sample (marked)")
    assert "DP-SGD model 0/4" in title and "non-DP baseline 1/4" in title
    assert "DP-SGD model: n = 2 samples" in title
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "combination regenerated in a sample" in legend
    silent = {"dp": reports["dp"], "non_dp": canary_report(outliers, [ICU_FILLER], resamples=50)}
    title = plot_canaries(silent, tmp_path / "none.png").axes[0].get_title().replace("\n", " ")
    assert title.startswith("No outlier was regenerated")
