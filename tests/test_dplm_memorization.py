"""Memorization audit: max ROUGE-L, duplicates, intervals, reports and figures."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from synthdeid.dplm.canaries import canary_report, make_canaries
from synthdeid.dplm.memorization import (
    COMPARE_FIELDS,
    MemorizationAudit,
    audit_markdown,
    compare_audits,
    interval_json,
    memorization_audit,
    normalise_text,
    plot_canaries,
    plot_max_rouge_histograms,
)
from synthdeid.dplm.rouge import RougeIndex, rouge_l
from synthdeid.errors import ConfigError
from synthdeid.stats import Interval, wilson_interval

TRAINING = [
    "Patient resting comfortably, vital signs stable overnight.",
    "Dressing changed on the left leg wound, no drainage noted.",
    "Ambulated twice in the hallway with a walker; tolerated well.",
]


def test_identical_copy_disjoint_and_partial() -> None:
    samples = [
        "patient resting   comfortably, VITAL signs stable overnight.",  # exact (normalised)
        "Quantum chromodynamics lattice gauge theory.",  # disjoint vocabulary
        "Dressing changed on the right arm, no drainage noted.",  # partial overlap
        "Ambulated twice in the hallway with a walker: tolerated well",  # same tokens
    ]
    audit = memorization_audit(samples, TRAINING, resamples=200, progress=False)
    assert audit.max_rouge_l[0] == 1.0
    assert audit.best_training_index[0] == 0
    assert audit.exact_duplicate_index == (0, -1, -1, -1)
    assert audit.max_rouge_l[1] == 0.0
    assert audit.best_training_index[1] == -1
    assert audit.max_rouge_l[2] == rouge_l(TRAINING[1], samples[2])
    assert 0.5 < audit.max_rouge_l[2] < 1.0
    assert audit.best_training_index[2] == 1
    assert audit.max_rouge_l[3] == 1.0  # identical tokens, different punctuation
    assert audit.near_duplicate == (True, False, False, True)
    s = audit.summary
    assert (s.n_samples, s.n_training) == (4, 3)
    assert s.n_exact_duplicates == 1
    assert s.n_near_duplicates == 2
    assert s.near_share.estimate == 0.5
    assert s.exact_share == wilson_interval(1, 4)
    assert s.mean.estimate == pytest.approx(np.mean(audit.max_rouge_l))
    assert (s.min, s.max) == (0.0, 1.0)
    assert s.median == pytest.approx(np.median(audit.max_rouge_l))
    assert s.q1 <= s.median <= s.q3


def test_max_equals_brute_force_rouge_score() -> None:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"])
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(30)]
    training = [" ".join(rng.choice(vocab, size=rng.integers(5, 40))) for _ in range(25)]
    samples = [" ".join(rng.choice(vocab, size=rng.integers(1, 40))) for _ in range(10)]
    audit = memorization_audit(samples, training, resamples=50, progress=False)
    for sample, value, where in zip(
        samples, audit.max_rouge_l, audit.best_training_index, strict=True
    ):
        scores = [scorer.score(t, sample)["rougeL"].fmeasure for t in training]
        assert value == max(scores)
        assert where == scores.index(max(scores))


def test_threshold_and_shared_index() -> None:
    samples = ["Dressing changed on the right arm, no drainage noted."]
    value = rouge_l(TRAINING[1], samples[0])
    at = memorization_audit(samples, TRAINING, near_threshold=value, progress=False)
    above = memorization_audit(samples, TRAINING, near_threshold=value + 1e-9, progress=False)
    assert at.summary.n_near_duplicates == 1
    assert above.summary.n_near_duplicates == 0
    index = RougeIndex(TRAINING)
    shared = memorization_audit(samples, TRAINING, index=index, progress=False)
    assert shared.max_rouge_l == at.max_rouge_l
    with pytest.raises(ConfigError, match="index"):
        memorization_audit(samples, TRAINING[:2], index=index, progress=False)


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="training"):
        memorization_audit(["a"], [], progress=False)
    with pytest.raises(ConfigError, match="sample"):
        memorization_audit([], ["a"], progress=False)
    for threshold in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="near_threshold"):
            memorization_audit(["a"], ["a"], near_threshold=threshold, progress=False)
    with pytest.raises(ValueError):
        compare_audits({})


def test_interval_json_writes_null_where_the_interval_is_undefined() -> None:
    defined = Interval(0.5, 0.25, 0.75)
    assert interval_json(defined) == {"estimate": 0.5, "ci_lo": 0.25, "ci_hi": 0.75}
    undefined = interval_json(Interval(math.nan, math.nan, math.nan))
    assert undefined == {"estimate": None, "ci_lo": None, "ci_hi": None}
    assert json.loads(json.dumps(undefined, allow_nan=False)) == undefined


def test_normalise_text() -> None:
    assert normalise_text("  A\tB\n\nc  ") == "a b c"
    assert normalise_text("Straße") == "strasse"


def _two_audits() -> dict[str, MemorizationAudit]:
    dp = memorization_audit(
        ["Quiet evening, patient watched television.", "Vital signs stable."],
        TRAINING,
        resamples=100,
        progress=False,
    )
    non_dp = memorization_audit(
        [*TRAINING[:2], "Unrelated words"], TRAINING, resamples=100, progress=False
    )
    return {"dp": dp, "non_dp": non_dp}


def test_compare_json_markdown_and_figures(tmp_path: Path) -> None:
    audits = _two_audits()
    rows = compare_audits(audits)
    assert [r["model"] for r in rows] == ["dp", "non_dp"]
    assert all(tuple(r) == COMPARE_FIELDS for r in rows)
    assert rows[1]["n_exact_duplicates"] == 2
    assert rows[1]["max"] == 1.0
    handle = io.StringIO()
    writer = csv.DictWriter(handle, fieldnames=COMPARE_FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    assert handle.getvalue().count("\n") == 3

    for audit in audits.values():
        data = json.loads(json.dumps(audit.to_json(), allow_nan=False))
        assert data["summary"]["n_samples"] == audit.summary.n_samples
        assert all(type(v) is float for v in data["max_rouge_l"])

    canaries = make_canaries(3, seed=1)
    reports = {
        "dp": canary_report(canaries, ["nothing like it"], resamples=50),
        "non_dp": canary_report(canaries, [canaries[0].text, "x"], resamples=50),
    }
    text = audit_markdown(audits, reports, histogram="hist.png", canary_figure="canaries.png")
    assert text.startswith("## Memorization audit")
    assert "| non_dp | 3 |" in text
    s = audits["non_dp"].summary
    assert (
        "| model | samples | mean max ROUGE-L [95% CI] | median [IQR] | min - max "
        "| exact duplicates | near duplicates (>= 0.8) |\n|---|---|---|---|---|---|---|\n"
    ) in text
    assert (
        f"| non_dp | 3 | {s.mean.estimate:.3f} [{s.mean.lo:.3f}, {s.mean.hi:.3f}] "
        f"| {s.median:.3f} [{s.q1:.3f}-{s.q3:.3f}] | {s.min:.3f} - {s.max:.3f} "
        f"| 2 ({s.exact_share.estimate:.3f} [{s.exact_share.lo:.3f}, {s.exact_share.hi:.3f}]) |"
    ) in text
    assert "### Canaries" in text
    assert "canary_001" in text and "1/3" in text
    assert "![Maximum ROUGE-L per sample](hist.png)" in text

    histogram = tmp_path / "figs" / "hist.png"
    plot_max_rouge_histograms(audits, histogram)
    assert histogram.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot_canaries(reports, tmp_path / "canaries.png")
    assert (tmp_path / "canaries.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "canaries.png",
        "hist.png",
    ]
    assert not math.isnan(rows[0]["mean_max_rouge_l"])


def test_canary_figure_says_plainly_when_no_canary_was_extracted(tmp_path: Path) -> None:
    canaries = make_canaries(3, seed=1)
    silent = {
        "dp": canary_report(canaries, ["nothing like it"], resamples=50),
        "non_dp": canary_report(canaries, ["nor this one", "x"], resamples=50),
    }
    fig = plot_canaries(silent, tmp_path / "none.png")
    (ax,) = fig.axes
    title = ax.get_title().replace("\n", " ")
    assert title.startswith("No canary was extracted")
    assert "3 canaries" in title
    assert "DP-SGD model: n = 1 sample;" in title and "non-DP baseline: n = 2 samples" in title
    assert ax.get_xlabel() == "planted canary (n = 3)"
    assert "0 to 1" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["DP-SGD model", "non-DP baseline"]  # human names, not run keys

    leaky = {
        "dp": silent["dp"],
        "non_dp": canary_report(canaries, [canaries[0].text, "x"], resamples=50),
    }
    fig = plot_canaries(leaky, tmp_path / "leaky.png")
    (ax,) = fig.axes
    title = ax.get_title().replace("\n", " ")
    assert "DP-SGD model 0/3" in title and "non-DP baseline 1/3" in title
    assert "phrase reproduced in a sample" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_histogram_titles_name_the_model_and_n(tmp_path: Path) -> None:
    fig = plot_max_rouge_histograms(_two_audits(), tmp_path / "hist.png")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("DP-SGD model (n = ") and titles[1].startswith("non-DP baseline")
    assert all("ROUGE-L" in ax.get_xlabel() for ax in fig.axes)
