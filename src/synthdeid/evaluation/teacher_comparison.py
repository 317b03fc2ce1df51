"""Teacher against student per PHI category: intervals and paired tests (SHIELD, Table 2).

:func:`compare_distillation` scores both systems' per-document counts on one
resample matrix and tests ``student - teacher`` for precision and for recall,
each a family Bonferroni-corrected over the categories with gold support;
:func:`distillation_rows`, :func:`distillation_markdown` and
:func:`distillation_document` are the table, its Markdown and its JSON. The
figure is :func:`synthdeid.evaluation.teacher_figures.plot_distillation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.evaluation.bootstrap import (
    BootstrapResult,
    PairedTestResult,
    bootstrap_metrics,
    paired_bootstrap_test,
)
from synthdeid.reporting import (
    NOT_AVAILABLE,
    format_interval,
    markdown_table,
    p_text,
    undefined_to_none,
)
from synthdeid.scoring.metrics import DEFINITIONS, CountTable
from synthdeid.stats import Interval, is_undefined, resample_weights

MATCHES: tuple[str, ...] = ("overlap", "exact")


def match_metrics(match: str) -> dict[str, str]:
    """``precision`` / ``recall`` / ``f1`` -> the per-label ratio used for ``match``."""
    if match not in MATCHES:
        raise ConfigError(f"--match must be one of {list(MATCHES)}, got {match!r}")
    return {part: f"{match}_{part}" for part in ("precision", "recall", "f1")}


def distillation_fields() -> list[str]:
    fields = ["label", "support"]
    for system in ("teacher", "student"):
        for part in ("precision", "recall"):
            fields += [f"{system}_{part}", f"{system}_{part}_lo", f"{system}_{part}_hi"]
    for part in ("precision", "recall"):
        fields += [
            f"{part}_diff",
            f"{part}_diff_lo",
            f"{part}_diff_hi",
            f"{part}_p",
            f"{part}_p_bonferroni",
            f"{part}_significant",
        ]
    return [*fields, "m"]


@dataclass(frozen=True)
class Distillation:
    """Both systems' intervals and the two paired test families (student - teacher)."""

    teacher: str
    student: str
    match: str
    alpha: float
    teacher_result: BootstrapResult
    student_result: BootstrapResult
    tests: dict[str, PairedTestResult]  # "precision" / "recall" -> test family

    @property
    def labels(self) -> list[str]:
        """Labels with gold support, then ALL (the rows of the tests)."""
        return [row.label for row in self.tests["recall"].rows]

    @property
    def m(self) -> int:
        return self.tests["recall"].m


def compare_distillation(
    teacher: tuple[str, CountTable],
    student: tuple[str, CountTable],
    *,
    match: str,
    n_resamples: int,
    seed: int,
    alpha: float,
) -> Distillation:
    """Score both tables (already aligned by :func:`load_runs`) on one resample matrix."""
    (teacher_name, teacher_table), (student_name, student_table) = teacher, student
    metrics = match_metrics(match)
    weights = resample_weights(len(teacher_table.note_ids), n_resamples, seed)
    teacher_result, student_result = (
        bootstrap_metrics(table, n_resamples=n_resamples, seed=seed, weights=weights)
        for table in (teacher_table, student_table)
    )
    tests = {
        part: paired_bootstrap_test(
            student_table,
            teacher_table,
            metric=metrics[part],
            n_resamples=n_resamples,
            seed=seed,
            weights=weights,
            alpha=alpha,
        )
        for part in ("precision", "recall")
    }
    return Distillation(
        teacher_name, student_name, match, alpha, teacher_result, student_result, tests
    )


def distillation_rows(d: Distillation) -> list[dict[str, Any]]:
    """One row per label with gold support, then ALL (see :func:`distillation_fields`).

    Undefined figures (precision of a category a system never predicted, a
    difference involving one, its p) are None.
    """
    metrics = match_metrics(d.match)
    tested = {part: {row.label: row for row in t.rows} for part, t in d.tests.items()}
    rows = []
    for label in d.labels:
        row: dict[str, Any] = {"label": label, "support": tested["recall"][label].support}
        for system, result in (("teacher", d.teacher_result), ("student", d.student_result)):
            for part in ("precision", "recall"):
                interval = result.per_label[label][metrics[part]]
                row[f"{system}_{part}"] = interval.estimate
                row[f"{system}_{part}_lo"] = interval.lo
                row[f"{system}_{part}_hi"] = interval.hi
        for part in ("precision", "recall"):
            test = tested[part][label]
            row[f"{part}_diff"] = test.diff
            row[f"{part}_diff_lo"] = test.diff_lo
            row[f"{part}_diff_hi"] = test.diff_hi
            row[f"{part}_p"] = test.p
            row[f"{part}_p_bonferroni"] = test.p_bonferroni
            row[f"{part}_significant"] = test.significant
        row["m"] = d.m
        rows.append(undefined_to_none(row))
    return rows


def short_interval(interval: Interval) -> str:
    """``0.89 [0.86-0.93]``, as in SHIELD's Table 2; n/a where undefined."""
    return format_interval(interval, ".2f", sep="-")


def difference_cell(row: dict[str, Any], part: str, n_resamples: int) -> str:
    """``+0.12 (0.0040)*``, the Bonferroni-adjusted p in brackets; n/a without a difference."""
    if is_undefined(row[f"{part}_diff"]):
        return NOT_AVAILABLE
    mark = "*" if row[f"{part}_significant"] else ""
    p = p_text(row[f"{part}_p_bonferroni"], n_resamples, row["m"])
    return f"{row[f'{part}_diff']:+.2f} ({p}){mark}"


def significant_summary(rows: Sequence[dict[str, Any]], n_resamples: int) -> list[str]:
    """``"DATE recall: student lower (-1.00, p_bonf <0.0050)"`` for every significant test."""
    found = []
    for part in ("precision", "recall"):
        for row in rows:
            if row[f"{part}_significant"]:
                direction = "higher" if row[f"{part}_diff"] > 0 else "lower"
                found.append(
                    f"{row['label']} {part}: student {direction} "
                    f"({row[f'{part}_diff']:+.2f}, p_bonf "
                    f"{p_text(row[f'{part}_p_bonferroni'], n_resamples, row['m'])})"
                )
    return found


def distillation_markdown(d: Distillation, rows: Sequence[dict[str, Any]]) -> str:
    metrics = match_metrics(d.match)
    n_resamples, seed = d.tests["recall"].n_resamples, d.tests["recall"].seed
    lines = [
        f"# Distillation: {d.teacher} (teacher) vs. {d.student} (student)",
        "",
        f"Span-level distillation comparison: {d.teacher} (teacher) vs. {d.student} (student), "
        f"{d.match} span matching ({metrics['precision']}, {metrics['recall']}), with "
        f"percentile bootstrap 95% CIs ({n_resamples} document-level resamples, seed {seed}). "
        "Support: gold spans per category. ΔP and ΔR: student - teacher, with the two-sided "
        "paired bootstrap p-value on the same resamples, Bonferroni-corrected over "
        f"m = {d.m} categories with gold support in each family (precision, recall; the ALL "
        f"row gets the same correction). * marks p_bonf < alpha = {d.alpha:g} "
        f"(per-test alpha {d.alpha / max(d.m, 1):.4g}).",
        "",
    ]
    by_label = {row["label"]: row for row in rows}
    lines += markdown_table(
        [
            "Category",
            f"{d.teacher} P [95% CI]",
            f"{d.teacher} R [95% CI]",
            f"{d.student} P [95% CI]",
            f"{d.student} R [95% CI]",
            "Support",
            "ΔP (p_bonf)",
            "ΔR (p_bonf)",
        ],
        [
            [
                label,
                short_interval(d.teacher_result.per_label[label][metrics["precision"]]),
                short_interval(d.teacher_result.per_label[label][metrics["recall"]]),
                short_interval(d.student_result.per_label[label][metrics["precision"]]),
                short_interval(d.student_result.per_label[label][metrics["recall"]]),
                str(by_label[label]["support"]),
                difference_cell(by_label[label], "precision", n_resamples),
                difference_cell(by_label[label], "recall", n_resamples),
            ]
            for label in d.labels
        ],
    )
    found = significant_summary(rows, n_resamples)
    lines += ["", f"Significant after Bonferroni: {'; '.join(found) if found else 'none'}.", ""]
    return "\n".join(lines)


def system_document(
    name: str, folder: Path, result: BootstrapResult, labels: Sequence[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "dir": str(folder),
        "counts": result.counts,
        "headline": {m: i.as_dict() for m, i in result.headline.items()},
        "per_label": {
            label: {
                **{m: i.as_dict() for m, i in result.per_label[label].items()},
                "support": result.support[label],
                "n_predicted": result.predicted[label],
            }
            for label in labels
        },
    }


def distillation_document(
    d: Distillation,
    rows: list[dict[str, Any]],
    folders: dict[str, Path],
    provenance: dict[str, Any],
) -> dict[str, Any]:
    metrics = match_metrics(d.match)
    return {
        "teacher": system_document(d.teacher, folders["teacher"], d.teacher_result, d.labels),
        "student": system_document(d.student, folders["student"], d.student_result, d.labels),
        "match": d.match,
        "metrics": {part: metrics[part] for part in ("precision", "recall")},
        "n_resamples": d.tests["recall"].n_resamples,
        "seed": d.tests["recall"].seed,
        "alpha": d.alpha,
        "m": d.m,
        "alpha_bonferroni": d.tests["recall"].alpha_bonferroni,
        "tests": {
            part: {
                **{k: v for k, v in asdict(test).items() if k != "rows"},
                "rows": [undefined_to_none(asdict(row)) for row in test.rows],
            }
            for part, test in d.tests.items()
        },
        "rows": rows,
        "significant": significant_summary(rows, d.tests["recall"].n_resamples),
        "definitions": {
            metrics[part]: DEFINITIONS[f"span_{metrics[part]}"] for part in ("precision", "recall")
        },
        "provenance": provenance,
    }
