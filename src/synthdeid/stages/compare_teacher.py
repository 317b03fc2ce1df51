"""Teacher vs. student per PHI category, and the noise of the silver labels (compare-teacher).

SHIELD (Table 2, Figure 7) compares the teacher (an LLM labelling the gold
holdout) with its student (a small NER model trained on the teacher's silver
labels) on the same notes: per category precision and recall with percentile
bootstrap 95% intervals over document resamples, the gold support, and paired
bootstrap tests of ``student - teacher`` for precision and for recall, each a
family Bonferroni-corrected over the categories with gold support.

Inputs are ``evaluate-ner`` output folders; their ``per_document.parquet``
is re-scored here (:mod:`~synthdeid.evaluation.bootstrap`), so nothing is
predicted again.

* ``--teacher NAME=DIR`` and ``--student NAME=DIR``: the two systems scored on
  the same gold notes. One resample matrix serves both systems and both tests.
  Writes distillation.csv / .md / .json, distillation.html (the table, for the
  report) and distillation.png (dumbbell plot: precision and recall panels, a
  teacher and a student dot per category with its 95% interval, joined by a
  solid line when the student is at least as good and a dashed one otherwise).
  A figure a system leaves undefined (precision of a category it never
  predicted) is n/a, never 0.
* ``--silver TEACHER=DIR``: a teacher's silver pool labels scored against the gold spans of the
  pool notes, i.e. how noisy the student's training labels are. Writes
  silver_noise.csv / .md / .json and silver_noise.png.

``--match overlap`` (default) compares span overlap precision and recall,
``--match exact`` exact-boundary ones. Outputs of a branch whose inputs are
not given are not written.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from synthdeid.artifacts import atomic_text, make_provenance, write_json_atomic
from synthdeid.cli_types import named_input_dir, output_dir, positive_int, probability
from synthdeid.errors import ConfigError
from synthdeid.evaluation.bootstrap import BootstrapResult, bootstrap_metrics
from synthdeid.evaluation.compare import load_runs
from synthdeid.evaluation.report import PER_DOCUMENT, plot_not_scored, read_per_document
from synthdeid.evaluation.silver_noise import (
    NOISE_FIELDS,
    noise_document,
    noise_markdown,
    noise_rows,
)
from synthdeid.evaluation.teacher_comparison import (
    MATCHES,
    Distillation,
    compare_distillation,
    distillation_document,
    distillation_fields,
    distillation_markdown,
    distillation_rows,
    match_metrics,
    significant_summary,
)
from synthdeid.evaluation.teacher_figures import plot_distillation, plot_noise
from synthdeid.reporting import NOT_AVAILABLE, number_or_na, write_csv, write_html
from synthdeid.scoring.metrics import ALL
from synthdeid.stats import ALPHA, N_RESAMPLES, SEED

log = logging.getLogger(__name__)

DISTILLATION = "distillation"
SILVER_NOISE = "silver_noise"


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--teacher",
        type=named_input_dir,
        default=None,
        metavar="NAME=DIR",
        help="evaluate-ner folder of the teacher's labels on the gold holdout (needed with "
        "--student)",
    )
    parser.add_argument(
        "--student",
        type=named_input_dir,
        default=None,
        metavar="NAME=DIR",
        help="evaluate-ner folder of the student's predictions on the same gold holdout",
    )
    parser.add_argument(
        "--silver",
        type=named_input_dir,
        default=None,
        metavar="TEACHER=DIR",
        help="evaluate-ner folder of a teacher's silver pool labels scored against the pool's "
        "gold, with the teacher's name",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")
    parser.add_argument(
        "--resamples", type=positive_int, default=N_RESAMPLES, help="bootstrap resamples"
    )
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed")
    parser.add_argument("--alpha", type=probability, default=ALPHA, help="family-wise alpha")
    parser.add_argument(
        "--match",
        choices=MATCHES,
        default="overlap",
        help="span matching of precision and recall (default: overlap)",
    )


def _write_distillation(
    d: Distillation, folders: dict[str, Path], params: dict[str, Any], out: Path
) -> None:
    rows = distillation_rows(d)
    provenance = make_provenance(
        "compare-teacher",
        params,
        {name: folder / PER_DOCUMENT for name, folder in folders.items()},
    )
    write_csv(rows, distillation_fields(), out / f"{DISTILLATION}.csv")
    markdown = distillation_markdown(d, rows)
    with atomic_text(out / f"{DISTILLATION}.md") as handle:
        handle.write(markdown)
    write_html(markdown, f"Distillation: {d.teacher} vs. {d.student}", out / f"{DISTILLATION}.html")
    write_json_atomic(
        distillation_document(d, rows, folders, provenance), out / f"{DISTILLATION}.json"
    )
    plot_distillation(d, rows, out / f"{DISTILLATION}.png")
    overall = rows[-1]
    log.info(
        "%s vs %s on %d notes (%s): P %s -> %s, R %s -> %s; significant: %s -> %s",
        d.teacher,
        d.student,
        int(d.teacher_result.counts["n_notes"]),
        d.match,
        number_or_na(overall["teacher_precision"]),
        number_or_na(overall["student_precision"]),
        number_or_na(overall["teacher_recall"]),
        number_or_na(overall["student_recall"]),
        "; ".join(significant_summary(rows, d.tests["recall"].n_resamples)) or "none",
        out,
    )


def _write_noise(
    name: str,
    folder: Path,
    result: BootstrapResult,
    match: str,
    params: dict[str, Any],
    out: Path,
) -> None:
    provenance = make_provenance("compare-teacher", params, {"silver": folder / PER_DOCUMENT})
    write_csv(noise_rows(result, match), NOISE_FIELDS, out / f"{SILVER_NOISE}.csv")
    with atomic_text(out / f"{SILVER_NOISE}.md") as handle:
        handle.write(noise_markdown(name, result, match))
    write_json_atomic(
        noise_document(name, folder, result, match, provenance), out / f"{SILVER_NOISE}.json"
    )
    plot_noise(name, result, match, out / f"{SILVER_NOISE}.png")
    metrics = match_metrics(match)
    log.info(
        "silver labels on %d pool notes (%s): P %.3f, R %.3f, detection recall %.3f -> %s",
        int(result.counts["n_notes"]),
        match,
        result.per_label[ALL][metrics["precision"]].estimate,
        result.per_label[ALL][metrics["recall"]].estimate,
        result.headline["detection_recall"].estimate,
        out,
    )


def _write_noise_not_scored(
    name: str, folder: Path, reason: str, match: str, params: dict[str, Any], out: Path
) -> None:
    """The silver-noise outputs when the pool holds no note: every figure n/a, and why."""
    provenance = make_provenance("compare-teacher", params, {"silver": folder / PER_DOCUMENT})
    write_csv([], NOISE_FIELDS, out / f"{SILVER_NOISE}.csv")
    with atomic_text(out / f"{SILVER_NOISE}.md") as handle:
        handle.write(
            f"# Silver label noise: {name}\n\nNot measured: {reason}. "
            f"Every figure is {NOT_AVAILABLE}.\n"
        )
    write_json_atomic(
        {"teacher": name, "match": match, "not_scored": reason, "provenance": provenance},
        out / f"{SILVER_NOISE}.json",
    )
    plot_not_scored(
        out / f"{SILVER_NOISE}.png", f"{name}: silver label noise", reason, "precision / recall"
    )
    log.warning("silver labels of %s: not measured, %s -> %s", name, reason, out)


def run(args: argparse.Namespace) -> None:
    if args.student is None and args.silver is None:
        raise ConfigError("compare-teacher needs --student NAME=DIR, --silver DIR or both")
    if args.student is not None and args.teacher is None:
        raise ConfigError("--student needs --teacher NAME=DIR to compare against")
    params = {
        "teacher": args.teacher[0] if args.teacher else None,
        "student": args.student[0] if args.student else None,
        "match": args.match,
        "resamples": args.resamples,
        "seed": args.seed,
        "alpha": args.alpha,
    }
    # read and score every input before writing anything
    distillation = None
    if args.student is not None:
        teacher, student = args.teacher[0], args.student[0]
        if teacher == student:
            raise ConfigError(f"--teacher and --student need different names, both are {teacher!r}")
        tables = load_runs([args.teacher, args.student], teacher)
        distillation = compare_distillation(
            (teacher, tables[teacher]),
            (student, tables[student]),
            match=args.match,
            n_resamples=args.resamples,
            seed=args.seed,
            alpha=args.alpha,
        )
    noise = None
    not_scored = None
    if args.silver is not None:
        silver_table = read_per_document(args.silver[1] / PER_DOCUMENT)
        if silver_table.note_ids:
            noise = bootstrap_metrics(silver_table, n_resamples=args.resamples, seed=args.seed)
        else:
            not_scored = "the silver pool holds no note (the teacher kept none of its answers)"
    if distillation is not None:
        folders = {"teacher": args.teacher[1], "student": args.student[1]}
        _write_distillation(distillation, folders, params, args.out_dir)
    if noise is not None:
        _write_noise(args.silver[0], args.silver[1], noise, args.match, params, args.out_dir)
    if not_scored is not None:
        _write_noise_not_scored(
            args.silver[0], args.silver[1], not_scored, args.match, params, args.out_dir
        )
