"""Memorization audit of generated notes against the training notes (Zecevic et al., sec. 4.6).

For every generated sample, the audit computes its ROUGE-L F-measure against
every training note and keeps the highest (``max_rouge_l``) and the first
training note reaching it (``best_training_index``, -1 when no training note
shares a token with the sample). ROUGE-L is that of ``rouge_score``
(``RougeScorer(["rougeL"]).score(target=training_note, prediction=sample)``,
computed exactly by :class:`synthdeid.dplm.rouge.RougeIndex`).

* exact duplicate: the sample's normalised text (casefolded, runs of
  whitespace collapsed to one space, stripped) equals a training note's
  normalised text; ``exact_duplicate_index`` is the first such note (-1: none).
* near duplicate: ``max_rouge_l >= near_threshold`` (0.8 by default). Every
  exact duplicate with at least one token is also a near duplicate.

Summary (over samples): n, mean with a 95% percentile bootstrap interval
(``resamples`` resamples of the samples, ``numpy.random.default_rng(seed)``),
median, quartiles (numpy linear percentiles 25/50/75), min, max, and the
counts and shares of exact and near duplicates with 95% Wilson score
intervals. The DP and non-DP audits are put side by side by
:func:`compare_audits` (table rows), :func:`audit_markdown` (a Markdown section
that also carries the canary test of :mod:`synthdeid.dplm.canaries`) and
:func:`plot_max_rouge_histograms` (one histogram panel per model, same bins).
"""

from __future__ import annotations

import logging
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from synthdeid.dplm.rouge import RougeIndex
from synthdeid.errors import ConfigError
from synthdeid.figures import PALETTE, pyplot, save_figure
from synthdeid.reporting import format_interval, interval_text, markdown_table
from synthdeid.stats import (
    CI_LEVEL,
    N_RESAMPLES,
    SEED,
    Interval,
    bootstrap_mean_interval,
    quartiles,
    wilson_interval,
)

if TYPE_CHECKING:
    from synthdeid.dplm.canaries import CanaryReport

log = logging.getLogger(__name__)

NEAR_THRESHOLD = 0.8
_WHITESPACE = re.compile(r"\s+")


def interval_json(interval: Interval) -> dict[str, float | None]:
    """Estimate and bounds as JSON numbers, null where undefined."""
    return interval.as_dict()


def normalise_text(text: str) -> str:
    """Casefolded, runs of whitespace collapsed to one space, stripped."""
    return _WHITESPACE.sub(" ", text.casefold()).strip()


def check_threshold(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class AuditSummary:
    """Distribution of the per-sample maximum ROUGE-L and the duplicate counts."""

    n_samples: int
    n_training: int
    mean: Interval  # bootstrap over samples
    median: float
    q1: float
    q3: float
    min: float
    max: float
    near_threshold: float
    n_exact_duplicates: int
    exact_share: Interval  # Wilson, over samples
    n_near_duplicates: int
    near_share: Interval  # Wilson, over samples

    def to_json(self) -> dict[str, Any]:
        return {
            "n_samples": self.n_samples,
            "n_training": self.n_training,
            "mean": interval_json(self.mean),
            "median": float(self.median),
            "q1": float(self.q1),
            "q3": float(self.q3),
            "min": float(self.min),
            "max": float(self.max),
            "near_threshold": float(self.near_threshold),
            "n_exact_duplicates": self.n_exact_duplicates,
            "exact_share": interval_json(self.exact_share),
            "n_near_duplicates": self.n_near_duplicates,
            "near_share": interval_json(self.near_share),
        }


@dataclass(frozen=True)
class MemorizationAudit:
    """Per-sample maximum ROUGE-L against the training notes, duplicates, summary."""

    max_rouge_l: tuple[float, ...]
    best_training_index: tuple[int, ...]  # -1: no training note shares a token
    exact_duplicate_index: tuple[int, ...]  # -1: not an exact duplicate
    summary: AuditSummary
    resamples: int
    seed: int
    use_stemmer: bool

    @property
    def near_duplicate(self) -> tuple[bool, ...]:
        threshold = self.summary.near_threshold
        return tuple(v >= threshold for v in self.max_rouge_l)

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_json(),
            "max_rouge_l": [float(v) for v in self.max_rouge_l],
            "best_training_index": [int(i) for i in self.best_training_index],
            "exact_duplicate_index": [int(i) for i in self.exact_duplicate_index],
            "resamples": self.resamples,
            "seed": self.seed,
            "use_stemmer": self.use_stemmer,
            "ci_level": CI_LEVEL,
            "definitions": {
                "max_rouge_l": "highest rouge_score ROUGE-L F of the sample against any training note",
                "exact_duplicate": "casefolded, whitespace-collapsed text equal to a training note",
                "near_duplicate": "max_rouge_l >= near_threshold",
                "mean_interval": "95% percentile bootstrap over samples",
                "share_interval": "95% Wilson score interval over samples",
            },
        }


def memorization_audit(
    samples: Sequence[str],
    training: Sequence[str],
    *,
    near_threshold: float = NEAR_THRESHOLD,
    resamples: int = N_RESAMPLES,
    seed: int = SEED,
    use_stemmer: bool = False,
    progress: bool = True,
    index: RougeIndex | None = None,
) -> MemorizationAudit:
    """Audit ``samples`` against ``training`` (see the module docstring).

    ``index``: a :class:`RougeIndex` already built from ``training`` (to audit
    several models against one training set without rebuilding it).
    """
    check_threshold("near_threshold", near_threshold)
    if not training:
        raise ConfigError("the memorization audit needs at least one training note")
    if not samples:
        raise ConfigError("the memorization audit needs at least one sample")
    if index is None:
        index = RougeIndex(training, use_stemmer=use_stemmer)
    elif len(index) != len(training) or index.use_stemmer != use_stemmer:
        raise ConfigError(
            f"the ROUGE index covers {len(index)} notes (use_stemmer={index.use_stemmer}), "
            f"the training set {len(training)} (use_stemmer={use_stemmer})"
        )
    first_copy: dict[str, int] = {}
    for i, text in enumerate(training):
        first_copy.setdefault(normalise_text(text), i)
    best_values: list[float] = []
    best_indices: list[int] = []
    exact: list[int] = []
    for sample in tqdm(samples, desc="max ROUGE-L", unit="sample", disable=not progress):
        value, where = index.max_rouge_l(sample)
        best_values.append(value)
        best_indices.append(where)
        exact.append(first_copy.get(normalise_text(sample), -1))
    values = np.array(best_values, dtype=np.float64)
    n = len(values)
    n_exact = sum(i >= 0 for i in exact)
    n_near = int((values >= near_threshold).sum())
    q1, median, q3 = quartiles(values)
    summary = AuditSummary(
        n_samples=n,
        n_training=len(training),
        mean=bootstrap_mean_interval(values, resamples=resamples, seed=seed),
        median=median,
        q1=q1,
        q3=q3,
        min=float(values.min()),
        max=float(values.max()),
        near_threshold=float(near_threshold),
        n_exact_duplicates=n_exact,
        exact_share=wilson_interval(n_exact, n),
        n_near_duplicates=n_near,
        near_share=wilson_interval(n_near, n),
    )
    log.info(
        "memorization audit: %d samples, mean max ROUGE-L %.3f, %d exact and %d near duplicates",
        n,
        summary.mean.estimate,
        n_exact,
        n_near,
    )
    return MemorizationAudit(
        max_rouge_l=tuple(best_values),
        best_training_index=tuple(best_indices),
        exact_duplicate_index=tuple(exact),
        summary=summary,
        resamples=resamples,
        seed=seed,
        use_stemmer=use_stemmer,
    )


COMPARE_FIELDS = (
    "model",
    "n_samples",
    "n_training",
    "mean_max_rouge_l",
    "mean_ci_lo",
    "mean_ci_hi",
    "median",
    "q1",
    "q3",
    "min",
    "max",
    "near_threshold",
    "n_exact_duplicates",
    "exact_share",
    "exact_ci_lo",
    "exact_ci_hi",
    "n_near_duplicates",
    "near_share",
    "near_ci_lo",
    "near_ci_hi",
)


def compare_audits(audits: Mapping[str, MemorizationAudit]) -> list[dict[str, Any]]:
    """One row per model (keys :data:`COMPARE_FIELDS`), in the mapping's order."""
    if not audits:
        raise ValueError("no audits to compare")
    rows = []
    for model, audit in audits.items():
        s = audit.summary
        rows.append(
            {
                "model": model,
                "n_samples": s.n_samples,
                "n_training": s.n_training,
                "mean_max_rouge_l": float(s.mean.estimate),
                "mean_ci_lo": float(s.mean.lo),
                "mean_ci_hi": float(s.mean.hi),
                "median": s.median,
                "q1": s.q1,
                "q3": s.q3,
                "min": s.min,
                "max": s.max,
                "near_threshold": s.near_threshold,
                "n_exact_duplicates": s.n_exact_duplicates,
                "exact_share": float(s.exact_share.estimate),
                "exact_ci_lo": float(s.exact_share.lo),
                "exact_ci_hi": float(s.exact_share.hi),
                "n_near_duplicates": s.n_near_duplicates,
                "near_share": float(s.near_share.estimate),
                "near_ci_lo": float(s.near_share.lo),
                "near_ci_hi": float(s.near_share.hi),
            }
        )
    return rows


@dataclass(frozen=True)
class PlantedWords:
    """How tables, titles and legends name one kind of planted note."""

    one: str  # "canary"
    many: str  # "canaries"
    article: str  # "a" / "an", before ``one``
    reproduces: str  # what a sample does to it: "reproduces" / "regenerates"
    reproduced: str
    reproducing: str
    headline: str  # the figure title's verb: "extracted" / "regenerated"
    what: str  # the distinctive part: "phrase" / "combination"
    intro: str  # what was planted, after "{n} {one} notes"


# by the kinds of synthdeid.dplm.canaries.KINDS
PLANTED_WORDS: dict[str, PlantedWords] = {
    "canary": PlantedWords(
        one="canary",
        many="canaries",
        article="a",
        reproduces="reproduces",
        reproduced="reproduced",
        reproducing="reproducing",
        headline="extracted",
        what="phrase",
        intro="each with a unique distinctive phrase, were planted in the training set.",
    ),
    "outlier": PlantedWords(
        one="outlier",
        many="outliers",
        article="an",
        reproduces="regenerates",
        reproduced="regenerated",
        reproducing="regenerating",
        headline="regenerated",
        what="combination",
        intro=(
            "clinically plausible ICU nursing notes, each around one rare but realistic "
            "combination (a rare diagnosis after its trigger, on an unusual support, with a "
            "concurrent rare complication and its therapy), were planted in the training set "
            "(Zecevic et al., sec. 4.6): a sample that writes one out could re-identify a patient."
        ),
    ),
}


def planted_words(report_by_model: Mapping[str, CanaryReport]) -> PlantedWords:
    """The words for the kind of planted note the reports score (one kind for all)."""
    kinds = sorted({r.kind for r in report_by_model.values()})
    if len(kinds) != 1 or kinds[0] not in PLANTED_WORDS:
        raise ValueError(f"reports of one known kind of planted note expected, got {kinds}")
    return PLANTED_WORDS[kinds[0]]


def planted_markdown(
    report_by_model: Mapping[str, CanaryReport], *, figure: str | None = None, level: int = 3
) -> list[str]:
    """Markdown lines of the canary test of one kind of planted note, DP vs non-DP.

    A heading, what was planted and how it is scored, the aggregates per
    model, then the best ROUGE-L and the samples reproducing it per planted
    note and model; ``figure`` (a path relative to the Markdown file) is linked.
    """
    w = planted_words(report_by_model)
    reports = list(report_by_model.values())
    some = reports[0]
    lines = [
        f"{'#' * level} {w.many.capitalize()}",
        "",
        f"{some.n_canaries} {w.one} notes, {w.intro} Best ROUGE-L: the highest ROUGE-L of the "
        f"{w.one} note against any sample (mean with a 95% bootstrap interval over {w.many}). "
        f"A sample {w.reproduces} {w.article} {w.one} when the normalised "
        f"{w.what} occurs in it or the LCS recall of the {w.what}'s tokens in the sample is "
        f">= {some.phrase_min_share:g}; shares with 95% Wilson intervals (over {w.many}, over "
        "samples).",
        "",
    ]
    lines += markdown_table(
        [
            "model",
            "samples",
            "mean best ROUGE-L [95% CI]",
            "max best ROUGE-L",
            f"{w.many} {w.reproduced}",
            f"samples {w.reproducing} {w.article} {w.one}",
        ],
        [
            [
                model,
                str(r.n_samples),
                format_interval(r.mean_best_rouge_l),
                f"{r.max_best_rouge_l:.3f}",
                f"{r.n_canaries_reproduced}/{r.n_canaries} ({format_interval(r.canaries_reproduced)})",
                f"{r.n_samples_reproducing_any}/{r.n_samples} "
                f"({format_interval(r.samples_reproducing_any)})",
            ]
            for model, r in report_by_model.items()
        ],
    )
    models = list(report_by_model)
    by_id = [{row.canary_id: row for row in report_by_model[m].rows} for m in models]
    ids = [row.canary_id for row in some.rows]
    lines += [""]
    lines += markdown_table(
        [w.one]
        + [f"{m}: best ROUGE-L (sample)" for m in models]
        + [f"{m}: samples {w.reproducing}" for m in models],
        [
            [cid]
            + [
                f"{rows[cid].best_rouge_l:.3f} ({rows[cid].best_sample_index})"
                if cid in rows
                else "-"
                for rows in by_id
            ]
            + [str(rows[cid].n_samples_reproducing) if cid in rows else "-" for rows in by_id]
            for cid in ids
        ],
    )
    if figure:
        lines += ["", f"![Best ROUGE-L of each {w.one}]({figure})"]
    return lines


def audit_markdown(
    audits: Mapping[str, MemorizationAudit],
    canaries: Mapping[str, CanaryReport] | None = None,
    *,
    histogram: str | None = None,
    canary_figure: str | None = None,
    outliers: Mapping[str, CanaryReport] | None = None,
    outlier_figure: str | None = None,
    title: str = "Memorization audit",
    level: int = 2,
) -> str:
    """A Markdown section: the max ROUGE-L comparison, then the canary and outlier tests.

    ``histogram``, ``canary_figure`` and ``outlier_figure`` are figure paths
    (relative to the Markdown file) to link; ``canaries`` and ``outliers`` map
    model names to the canary test of the planted canaries and of the planted
    outliers (:func:`planted_markdown`).
    """
    if not audits:
        raise ValueError("no audits to report")
    h = "#" * level
    first = next(iter(audits.values())).summary
    lines = [
        f"{h} {title}",
        "",
        f"Each generated sample is scored with ROUGE-L (rouge_score F-measure) against all "
        f"{first.n_training} training notes and its maximum is kept (Zecevic et al., sec. 4.6). "
        f"Exact duplicate: casefolded, whitespace-collapsed text equal to a training note; "
        f"near duplicate: max ROUGE-L >= {first.near_threshold:g}. Means with 95% percentile "
        f"bootstrap intervals over samples; shares with 95% Wilson intervals.",
        "",
    ]
    lines += markdown_table(
        [
            "model",
            "samples",
            "mean max ROUGE-L [95% CI]",
            "median [IQR]",
            "min - max",
            "exact duplicates",
            f"near duplicates (>= {first.near_threshold:g})",
        ],
        [
            [
                model,
                str(a.summary.n_samples),
                format_interval(a.summary.mean),
                interval_text(a.summary.median, a.summary.q1, a.summary.q3, sep="-"),
                f"{a.summary.min:.3f} - {a.summary.max:.3f}",
                f"{a.summary.n_exact_duplicates} ({format_interval(a.summary.exact_share)})",
                f"{a.summary.n_near_duplicates} ({format_interval(a.summary.near_share)})",
            ]
            for model, a in audits.items()
        ],
    )
    if histogram:
        lines += ["", f"![Maximum ROUGE-L per sample]({histogram})"]
    for reports, figure in ((canaries, canary_figure), (outliers, outlier_figure)):
        if reports:
            lines += ["", *planted_markdown(reports, figure=figure, level=level + 1)]
    return "\n".join(lines) + "\n"


# human names of the audited models (run names of train_dp_lm) for titles and legends
MODEL_LABELS: dict[str, str] = {"dp": "DP-SGD model", "non_dp": "non-DP baseline"}


def model_label(model: str) -> str:
    """``dp`` -> ``DP-SGD model``; any other run name as it is."""
    return MODEL_LABELS.get(model, model)


def plot_max_rouge_histograms(
    audits: Mapping[str, MemorizationAudit], path: str | Path, *, bins: int = 20
) -> Any:
    """One histogram panel per model of the per-sample max ROUGE-L (x in [0, 1], same bins).

    Returns the (closed) figure.
    """
    if not audits:
        raise ValueError("no audits to plot")
    if bins < 1:
        raise ValueError(f"bins must be positive, got {bins}")
    plt = pyplot()
    edges = np.linspace(0.0, 1.0, bins + 1)
    fig, axes = plt.subplots(
        1, len(audits), figsize=(4.2 * len(audits), 3.4), sharex=True, squeeze=False
    )
    for ax, (model, audit) in zip(axes[0], audits.items(), strict=True):
        values = np.clip(np.asarray(audit.max_rouge_l, dtype=np.float64), 0.0, 1.0)
        ax.hist(values, bins=edges, color=PALETTE["blue"], alpha=0.85)
        mean = audit.summary.mean.estimate
        ax.axvline(mean, color=PALETTE["vermillion"], linestyle="--", label=f"mean {mean:.3f}")
        ax.set_xlim(0.0, 1.0)
        ax.set_title(f"{model_label(model)} (n = {audit.summary.n_samples} samples)")
        ax.set_xlabel("max ROUGE-L against training notes (0 to 1)")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("samples")
    fig.tight_layout()
    save_figure(fig, Path(path))
    return fig


def canary_headline(report_by_model: Mapping[str, CanaryReport]) -> str:
    """What the canary (or outlier) figure shows, said plainly when nothing was extracted.

    With no phrase (for outliers: combination) reproduced by any model the
    bars are not a finding of memorization, and the title says so, with the
    counts; with every best ROUGE-L 0, no planted note shares even one word
    sequence with a sample.
    """
    w = planted_words(report_by_model)
    reports = list(report_by_model.values())
    n = reports[0].n_canaries
    samples = "; ".join(
        f"{model_label(m)}: n = {r.n_samples} sample{'' if r.n_samples == 1 else 's'}"
        for m, r in report_by_model.items()
    )
    reproduced = {model: r.n_canaries_reproduced for model, r in report_by_model.items()}
    if all(r.max_best_rouge_l == 0 for r in reports):
        return (
            f"No {w.one} was {w.headline}: none of the {n} {w.many} shares a word "
            f"sequence with any sample ({samples})"
        )
    if not any(reproduced.values()):
        return (
            f"No {w.one} was {w.headline}: no {w.what} of the {n} {w.many} reappears in any "
            f"sample ({samples}); the bars are incidental word overlap"
        )
    counts = ", ".join(f"{model_label(m)} {k}/{n}" for m, k in reproduced.items())
    return (
        f"{w.many.capitalize()} whose {w.what} reappears in a sample (marked): {counts} ({samples})"
    )


def plot_canaries(report_by_model: Mapping[str, CanaryReport], path: str | Path) -> Any:
    """Grouped bars: each canary's best ROUGE-L against the samples of each model.

    The same for outliers (reports of planted outliers). A canary whose
    phrase a sample reproduces (an outlier whose combination a sample
    regenerates) is marked above its bar; the title says plainly when none was
    (:func:`canary_headline`). Returns the (closed) figure.
    """
    if not report_by_model:
        raise ValueError("no canary reports to plot")
    w = planted_words(report_by_model)
    plt = pyplot()
    models = list(report_by_model)
    ids = [row.canary_id for row in next(iter(report_by_model.values())).rows]
    positions = np.arange(len(ids), dtype=np.float64)
    width = 0.8 / len(models)
    fig_width = max(6.5, 0.5 * len(ids) * len(models) + 2.0)
    fig, ax = plt.subplots(figsize=(fig_width, 3.9))
    marked = False
    for k, model in enumerate(models):
        rows = {row.canary_id: row for row in report_by_model[model].rows}
        heights = [rows[c].best_rouge_l if c in rows else 0.0 for c in ids]
        offsets = positions - 0.4 + width * (k + 0.5)
        ax.bar(offsets, heights, width=width, label=model_label(model))
        reproduced = [
            (x, h)
            for x, h, c in zip(offsets, heights, ids, strict=True)
            if c in rows and rows[c].n_samples_reproducing > 0
        ]
        if reproduced:
            xs, hs = zip(*reproduced, strict=True)
            ax.plot(
                xs,
                [h + 0.03 for h in hs],
                "v",
                color=PALETTE["black"],
                markersize=5,
                label=None if marked else f"{w.what} {w.reproduced} in a sample",
            )
            marked = True
    ax.set_xticks(positions, ids, rotation=60, fontsize=7, ha="right")
    ax.set_ylim(0.0, 1.08)
    ax.set_xlabel(f"planted {w.one} (n = {len(ids)})")
    ax.set_ylabel("best ROUGE-L against samples (0 to 1)")
    ax.set_title(
        # about 12 characters of the 9 pt title per inch of figure, so no line is cut off
        textwrap.fill(
            canary_headline(report_by_model), width=int(12 * fig_width), break_on_hyphens=False
        ),
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, Path(path))
    return fig
