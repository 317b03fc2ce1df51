"""Synthetic-vs-real corpus diagnostics: composition, PII structure, label mix, divergences.

VetSynth (Tables 1, 3 and 4) explains the limits of synthetic training notes
by three measurable shifts: synthetic notes are shorter, their spans are
PER-heavy, and they lack PII-bearing notes without a person identifier and
within-note repetition of an identifier. :func:`subset_statistics` measures
each of these for one set of notes; :func:`diagnose` does it for every named
subset (real train, the synthetic pool and its PII / no-PII parts, the real
holdout) and adds two distances of every subset from the reference subset
(the real training notes), after SHIELD (section 2.3):

* the Jensen-Shannon divergence between unigram distributions
  (:func:`unigram_jsd`, base 2, so in [0, 1]), a vocabulary-level distance;
* the Fréchet distance between Gaussians fitted to sentence embeddings
  (:func:`frechet_distance`), a content-level distance, split into its
  mean-shift and covariance terms.

:func:`write_diagnostics` writes the tables (JSON, Markdown, CSV) and two
figures. Shares are fractions in [0, 1] in JSON and CSV, percentages in
Markdown; a quantity that is undefined (an empty subset, a share of zero PII
notes) is ``null`` / empty / "n/a", never a crash.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import linalg

from synthdeid.artifacts import atomic_text, write_json_atomic
from synthdeid.embeddings import SentenceEncoder
from synthdeid.figures import PALETTE, pyplot, save_figure
from synthdeid.labels import CANONICAL_LABELS, COARSE_LABELS, coarse_view
from synthdeid.notes import Note
from synthdeid.reporting import markdown_table, markdown_to_html, percent, write_csv
from synthdeid.stats import quartiles as sample_quartiles

DIAGNOSTICS_JSON = "diagnostics.json"
DIAGNOSTICS_MD = "diagnostics.md"
DIAGNOSTICS_CSV = "diagnostics.csv"
DIAGNOSTICS_HTML = "diagnostics.html"  # the Markdown tables rendered, for the Snakemake report
LENGTHS_FIGURE = "lengths.png"
LABELS_FIGURE = "labels.png"
OUTPUTS: tuple[str, ...] = (
    DIAGNOSTICS_JSON,
    DIAGNOSTICS_MD,
    DIAGNOSTICS_CSV,
    DIAGNOSTICS_HTML,
    LENGTHS_FIGURE,
    LABELS_FIGURE,
)

log = logging.getLogger(__name__)

PERSON = "PER"  # the coarse label whose absence VetSynth's Table 3 reports

# Unigram tokeniser for the JSD: the text is lower-cased (str.lower) and cut
# into maximal runs of Unicode word characters (letters, digits, underscore);
# punctuation and whitespace separate tokens and are dropped.
TOKEN_RE = re.compile(r"\w+")

DEFINITIONS: dict[str, str] = {
    "words": "whitespace-separated tokens per note (str.split)",
    "chars": "characters per note (Python string length)",
    "quartiles": "median [IQR] are numpy percentiles 50 [25-75], linear interpolation",
    "pii_notes": "notes with at least one span",
    "label_share": "spans of the label / all spans of the subset",
    "pii_notes_with_coarse": "PII notes with at least one span of the coarse label / PII notes",
    "pii_notes_without_per": "PII notes with no PER span (no PATIENT or DOCTOR) / PII notes",
    "pii_notes_with_repetition": (
        "PII notes in which one normalised surface (whitespace collapsed, casefolded) "
        "occurs in two or more spans, whatever their labels / PII notes"
    ),
    "unigram_jsd": (
        "Jensen-Shannon divergence, base 2 (0 = same distribution, 1 = disjoint "
        "vocabularies), between the unigram distributions of the subset and the reference "
        "over their union vocabulary; tokens are lower-cased runs of word characters (\\w+)"
    ),
    "frechet_distance": (
        "|mu_r - mu_s|^2 + Tr(S_r + S_s - 2 (S_r S_s)^(1/2)) between Gaussians fitted to the "
        "sentence embeddings of the reference and the subset (mean-pooled, L2-normalised); "
        "frechet_mean_term is the first summand, frechet_covariance_term the trace; "
        "needs at least 2 notes on each side and is biased upwards for small subsets"
    ),
}


# ---------------------------------------------------------------- statistics


def quartiles(values: Sequence[float]) -> dict[str, float]:
    """Median and interquartile range (numpy linear percentiles); NaN when empty."""
    if len(values) == 0:
        return {"median": math.nan, "q1": math.nan, "q3": math.nan}
    q1, median, q3 = sample_quartiles(values)
    return {"median": median, "q1": q1, "q3": q3}


def _share(count: int, total: int) -> float:
    return count / total if total else math.nan


def normalised_surface(text: str, start: int, end: int) -> str:
    """A span's surface with whitespace runs collapsed to one space, casefolded."""
    return " ".join(text[start:end].split()).casefold()


def has_repetition(note: Note) -> bool:
    """True when one normalised surface occurs in two or more spans of the note."""
    surfaces = Counter(normalised_surface(note.text, s.start, s.end) for s in note.spans)
    surfaces.pop("", None)
    return any(count >= 2 for count in surfaces.values())


def word_count(text: str) -> int:
    return len(text.split())


def _label_order(seen: Iterable[str]) -> list[str]:
    extras = sorted(set(seen) - set(CANONICAL_LABELS))
    return [*CANONICAL_LABELS, *extras]


def subset_statistics(
    notes: Sequence[Note], view: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Composition, lengths, label mix and PII-note structure of a set of notes.

    ``view`` maps canonical labels to the coarse PER/ORG/LOC/TIME/MISC view
    (default :data:`synthdeid.labels.DEFAULT_COARSE_VIEW`); a span label outside
    it raises ``ValueError``. See :data:`DEFINITIONS` for every quantity.
    """
    coarse = coarse_view(view)
    labels = Counter(s.label for n in notes for s in n.spans)
    unknown = sorted(set(labels) - set(coarse))
    if unknown:
        raise ValueError(f"span labels {unknown} have no coarse label; known: {sorted(coarse)}")
    coarse_counts = Counter({c: 0 for c in COARSE_LABELS})
    for label, count in labels.items():
        coarse_counts[coarse[label]] += count
    total_spans = sum(labels.values())

    pii = [n for n in notes if n.spans]
    with_coarse = {c: 0 for c in COARSE_LABELS}
    with_repetition = 0
    for note in pii:
        for c in {coarse[s.label] for s in note.spans}:
            with_coarse[c] += 1
        with_repetition += has_repetition(note)
    n_pii = len(pii)
    without_per = n_pii - with_coarse[PERSON]
    return {
        "notes": len(notes),
        "pii_notes": n_pii,
        "pii_share": _share(n_pii, len(notes)),
        "words": quartiles([word_count(n.text) for n in notes]),
        "chars": quartiles([len(n.text) for n in notes]),
        "spans": total_spans,
        "spans_per_pii_note": quartiles([len(n.spans) for n in pii]),
        "label_spans": {label: labels.get(label, 0) for label in _label_order(labels)},
        "label_share": {
            label: _share(labels.get(label, 0), total_spans) for label in _label_order(labels)
        },
        "coarse_spans": {c: coarse_counts[c] for c in COARSE_LABELS},
        "coarse_share": {c: _share(coarse_counts[c], total_spans) for c in COARSE_LABELS},
        "pii_notes_with_coarse": {c: _share(with_coarse[c], n_pii) for c in COARSE_LABELS},
        "n_pii_notes_without_per": without_per,
        "pii_notes_without_per": _share(without_per, n_pii),
        "n_pii_notes_with_repetition": with_repetition,
        "pii_notes_with_repetition": _share(with_repetition, n_pii),
    }


# ---------------------------------------------------------------- divergences


def unigram_counts(texts: Iterable[str]) -> Counter[str]:
    """Unigram counts with the documented tokeniser (:data:`TOKEN_RE` on lower-cased text)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(TOKEN_RE.findall(text.lower()))
    return counts


def unigram_jsd(real_texts: Iterable[str], synthetic_texts: Iterable[str]) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) between the two unigram distributions.

    Computed on the union vocabulary with ``0 log 0 = 0``. NaN when either
    side has no token at all.
    """
    p_counts = unigram_counts(real_texts)
    q_counts = unigram_counts(synthetic_texts)
    if not p_counts or not q_counts:
        return math.nan
    vocabulary = sorted(p_counts.keys() | q_counts.keys())
    p = np.array([p_counts.get(w, 0) for w in vocabulary], dtype=float)
    q = np.array([q_counts.get(w, 0) for w in vocabulary], dtype=float)
    p /= p.sum()
    q /= q.sum()
    m = (p + q) / 2

    def kl_to_m(x: np.ndarray) -> float:
        nonzero = x > 0
        return float(np.sum(x[nonzero] * np.log2(x[nonzero] / m[nonzero])))

    return float(min(1.0, max(0.0, 0.5 * kl_to_m(p) + 0.5 * kl_to_m(q))))


def frechet_components(
    real_emb: np.ndarray, synth_emb: np.ndarray, eps: float = 1e-6
) -> tuple[float, float]:
    """The mean-shift and covariance terms of the Fréchet distance between two sets.

    Gaussians are fitted with the sample mean and the unbiased covariance. The
    matrix square root is :func:`scipy.linalg.sqrtm` with the usual fixes (as
    in the reference FID code): when the product of the covariances is singular
    and the root is not finite, ``eps * I`` is added to both covariances; the
    tiny imaginary part that rounding leaves is discarded. The covariance term
    is clipped at 0 (it is a squared distance, negative only by rounding).
    NaN for both when either set has fewer than 2 rows.
    """
    x = np.asarray(real_emb, dtype=np.float64)
    y = np.asarray(synth_emb, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or (x.shape[1] != y.shape[1] and len(x) and len(y)):
        raise ValueError(f"need two 2-D arrays of equal width, got {x.shape} and {y.shape}")
    if len(x) < 2 or len(y) < 2:
        return math.nan, math.nan
    mu_x, mu_y = x.mean(axis=0), y.mean(axis=0)
    sigma_x = np.atleast_2d(np.cov(x, rowvar=False))
    sigma_y = np.atleast_2d(np.cov(y, rowvar=False))
    mean_term = float(np.sum((mu_x - mu_y) ** 2))
    with warnings.catch_warnings():
        # singular products are expected (fewer notes than dimensions) and handled below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean = linalg.sqrtm(sigma_x @ sigma_y)
        if not np.isfinite(covmean).all():
            offset = np.eye(sigma_x.shape[0]) * eps
            covmean = linalg.sqrtm((sigma_x + offset) @ (sigma_y + offset))
    imaginary = float(np.max(np.abs(np.imag(covmean)))) if np.iscomplexobj(covmean) else 0.0
    if imaginary > 1e-3:
        log.warning("Fréchet distance: discarding an imaginary part of %.3g", imaginary)
    covmean = np.real(covmean)
    cov_term = float(np.trace(sigma_x) + np.trace(sigma_y) - 2 * np.trace(covmean))
    return mean_term, max(0.0, cov_term)


def frechet_distance(real_emb: np.ndarray, synth_emb: np.ndarray, eps: float = 1e-6) -> float:
    """Fréchet distance between Gaussians fitted to two embedding sets (NaN if < 2 rows)."""
    mean_term, cov_term = frechet_components(real_emb, synth_emb, eps)
    return mean_term + cov_term


# ---------------------------------------------------------------- all subsets


@dataclass
class Diagnostics:
    """Statistics of every subset and divergences of every non-reference subset."""

    reference: str
    statistics: dict[str, dict[str, Any]]
    divergences: dict[str, dict[str, Any]]
    encoder: str | None
    word_lengths: dict[str, list[int]] = field(default_factory=dict)  # figure only
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def subsets(self) -> list[str]:
        return list(self.statistics)

    def to_dict(self) -> dict[str, Any]:
        document = {
            "reference": self.reference,
            "encoder": self.encoder,
            "subsets": self.subsets,
            "statistics": self.statistics,
            "divergences": self.divergences,
            "definitions": DEFINITIONS,
            "provenance": self.provenance,
        }
        return {key: _json_safe(value) for key, value in document.items()}


def _json_safe(value: Any) -> Any:
    """NaN and infinities become None, so the JSON is strict."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def diagnose(
    subsets: Mapping[str, Sequence[Note]],
    reference: str,
    encoder: SentenceEncoder | None,
    *,
    view: Mapping[str, str] | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> Diagnostics:
    """Statistics for every subset; JSD and Fréchet distance of the others vs ``reference``.

    With ``encoder=None`` the Fréchet columns are NaN. Each distinct text is
    embedded once, however many subsets it belongs to.
    """
    if reference not in subsets:
        raise ValueError(f"reference subset {reference!r} is not among {list(subsets)}")
    statistics = {name: subset_statistics(notes, view) for name, notes in subsets.items()}
    lengths = {name: [word_count(n.text) for n in notes] for name, notes in subsets.items()}

    vectors: dict[str, np.ndarray] = {}
    if encoder is not None:
        texts = list(dict.fromkeys(n.text for notes in subsets.values() for n in notes))
        embedded = encoder.embed(texts, batch_size=batch_size, progress=progress)
        row = {text: i for i, text in enumerate(texts)}
        for name, notes in subsets.items():
            vectors[name] = embedded[np.array([row[n.text] for n in notes], dtype=np.int64)]

    reference_texts = [n.text for n in subsets[reference]]
    divergences: dict[str, dict[str, Any]] = {}
    for name, notes in subsets.items():
        if name == reference:
            continue
        mean_term = cov_term = math.nan
        if encoder is not None:
            mean_term, cov_term = frechet_components(vectors[reference], vectors[name])
        divergences[name] = {
            "reference": reference,
            "notes": len(notes),
            "reference_notes": len(reference_texts),
            "unigram_jsd": unigram_jsd(reference_texts, (n.text for n in notes)),
            "frechet_distance": mean_term + cov_term,
            "frechet_mean_term": mean_term,
            "frechet_covariance_term": cov_term,
        }
    return Diagnostics(
        reference=reference,
        statistics=statistics,
        divergences=divergences,
        encoder=None if encoder is None else encoder.name,
        word_lengths=lengths,
    )


# ---------------------------------------------------------------- writing


def _number(value: float, decimals: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{decimals}f}"


def _percent(share: float) -> str:
    return percent(share, sign="")


def _median_iqr(q: Mapping[str, float]) -> str:
    if not math.isfinite(q["median"]):
        return "n/a"
    return f"{_number(q['median'])} [{_number(q['q1'])}\u2013{_number(q['q3'])}]"


def _count_share(count: int, share: float) -> str:
    return f"{count:,} ({_percent(share)}%)" if math.isfinite(share) else f"{count:,}"


def diagnostics_markdown(diag: Diagnostics) -> str:
    stats = diag.statistics
    names = diag.subsets
    lines = [
        "# Synthetic vs real corpus diagnostics",
        "",
        f"Subsets: {', '.join(names)}. Reference for the divergences: {diag.reference}.",
        "",
        "## Corpus composition and lengths",
        "",
    ]
    lines += markdown_table(
        [
            "Subset",
            "N notes",
            "Notes w/ ≥1 span",
            "Words median [IQR]",
            "Chars median [IQR]",
            "Total spans",
            "Spans per PII note median [IQR]",
        ],
        [
            [
                name,
                f"{s['notes']:,}",
                _count_share(s["pii_notes"], s["pii_share"]),
                _median_iqr(s["words"]),
                _median_iqr(s["chars"]),
                f"{s['spans']:,}",
                _median_iqr(s["spans_per_pii_note"]),
            ]
            for name, s in stats.items()
        ],
    )
    lines += ["", "## Structure of PII-bearing notes (% of PII notes)", ""]
    lines += markdown_table(
        ["Subset (PII notes only)", *COARSE_LABELS, "No PER", "Any within-note repetition"],
        [
            [
                f"{name} (n={s['pii_notes']:,})",
                *(_percent(s["pii_notes_with_coarse"][c]) for c in COARSE_LABELS),
                _percent(s["pii_notes_without_per"]),
                _percent(s["pii_notes_with_repetition"]),
            ]
            for name, s in stats.items()
        ],
    )
    lines += ["", "## Span label distribution (coarse view)", ""]
    lines += markdown_table(
        ["Label", *(f"{name} spans" for name in names)],
        [
            [
                c,
                *(
                    _count_share(stats[n]["coarse_spans"][c], stats[n]["coarse_share"][c])
                    for n in names
                ),
            ]
            for c in COARSE_LABELS
        ],
    )
    labels = list(dict.fromkeys(label for s in stats.values() for label in s["label_spans"]))
    lines += ["", "## Span label distribution (canonical labels)", ""]
    lines += markdown_table(
        ["Label", *(f"{name} spans" for name in names)],
        [
            [
                label,
                *(
                    _count_share(
                        stats[n]["label_spans"].get(label, 0),
                        _share(stats[n]["label_spans"].get(label, 0), stats[n]["spans"]),
                    )
                    for n in names
                ),
            ]
            for label in labels
        ],
    )
    lines += ["", f"## Divergence from {diag.reference}", ""]
    encoder = diag.encoder or "none (embeddings skipped)"
    lines += markdown_table(
        ["Subset", "N notes", "Unigram JSD", "Fréchet distance", "mean term", "covariance term"],
        [
            [
                name,
                f"{d['notes']:,}",
                _number(d["unigram_jsd"], 4),
                _number(d["frechet_distance"], 4),
                _number(d["frechet_mean_term"], 4),
                _number(d["frechet_covariance_term"], 4),
            ]
            for name, d in diag.divergences.items()
        ],
    )
    lines += ["", f"Sentence encoder: {encoder}.", "", "## Definitions", ""]
    lines += [f"- **{key}**: {text}" for key, text in DEFINITIONS.items()]
    lines.append("")
    return "\n".join(lines)


CSV_FIELDS: tuple[str, ...] = ("subset", "section", "key", "value")


def diagnostics_rows(diag: Diagnostics) -> list[dict[str, Any]]:
    """Long table: one row per (subset, section, key); undefined values are empty."""
    rows: list[dict[str, Any]] = []

    def add(subset: str, section: str, key: str, value: Any) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            value = ""
        rows.append({"subset": subset, "section": section, "key": key, "value": value})

    for name, s in diag.statistics.items():
        for key, value in s.items():
            if isinstance(value, dict):
                for inner, v in value.items():
                    add(name, key, inner, v)
            else:
                add(name, "composition", key, value)
    for name, d in diag.divergences.items():
        for key, value in d.items():
            add(name, "divergence", key, value)
    return rows


def plot_lengths(diag: Diagnostics, path: Path) -> Any:
    """Box plots of words per note, one per subset (empty subsets are left blank).

    Returns the (closed) figure.
    """
    plt = pyplot()
    names = diag.subsets
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 1.5), 4.2))
    data = [diag.word_lengths.get(name, []) for name in names]
    positions = [i for i, d in enumerate(data) if d]
    if positions:
        ax.boxplot(
            [data[i] for i in positions],
            positions=positions,
            widths=0.6,
            flierprops={"markersize": 2, "alpha": 0.4},
            medianprops={"color": PALETTE["vermillion"]},
        )
    ticks = [f"{name}\n(n={len(d):,})" for name, d in zip(names, data, strict=True)]
    ax.set_xticks(range(len(names)), ticks, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xlabel("subset (n = notes)")
    ax.set_ylabel("words per note")
    ax.set_title("Note length per subset")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def plot_labels(diag: Diagnostics, path: Path) -> Any:
    """Grouped bars: share of spans per coarse label and per canonical label, per subset.

    A subset without spans has no label shares: it is drawn as nothing and
    named so in the legend. Returns the (closed) figure.
    """
    plt = pyplot()
    names = diag.subsets
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.8]}
    )
    canonical = list(
        dict.fromkeys(label for s in diag.statistics.values() for label in s["label_share"])
    )
    width = 0.8 / max(1, len(names))
    for ax, key, labels in (
        (left, "coarse_share", list(COARSE_LABELS)),
        (right, "label_share", canonical),
    ):
        for i, name in enumerate(names):
            shares = diag.statistics[name][key]
            values = [shares.get(label, math.nan) for label in labels]
            values = [100 * v if math.isfinite(v) else 0.0 for v in values]
            offsets = [x + (i - (len(names) - 1) / 2) * width for x in range(len(labels))]
            spans = diag.statistics[name]["spans"]
            legend = f"{name} (n = {spans:,} spans)" if spans else f"{name} (no spans: n/a)"
            ax.bar(offsets, values, width=width, label=legend)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_ylabel("% of the subset's spans")
        ax.grid(axis="y", alpha=0.3)
    left.set_title("Coarse labels")
    left.set_xlabel("coarse PHI label")
    right.set_title("Canonical labels")
    right.set_xlabel("canonical PHI label")
    left.legend(frameon=False, fontsize=8)
    fig.suptitle("Span label distribution per subset")
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def write_diagnostics(diag: Diagnostics, out_dir: str | Path) -> dict[str, Path]:
    """Write diagnostics.json/.md/.csv/.html, lengths.png and labels.png; return their paths."""
    out = Path(out_dir)
    paths = {name: out / name for name in OUTPUTS}
    write_json_atomic(diag.to_dict(), paths[DIAGNOSTICS_JSON])
    markdown = diagnostics_markdown(diag)
    with atomic_text(paths[DIAGNOSTICS_MD]) as handle:
        handle.write(markdown)
    with atomic_text(paths[DIAGNOSTICS_HTML]) as handle:
        handle.write(markdown_to_html(markdown, title="Synthetic vs real corpus diagnostics"))
    write_csv(diagnostics_rows(diag), CSV_FIELDS, paths[DIAGNOSTICS_CSV])
    plot_lengths(diag, paths[LENGTHS_FIGURE])
    plot_labels(diag, paths[LABELS_FIGURE])
    return paths
