"""Compare evaluated NER runs: a table with intervals and paired tests (compare-ner).

Each ``--run NAME=DIR`` names an ``evaluate-ner`` output folder; its
``per_document.parquet`` is re-scored here with one shared resample matrix,
so every run's intervals and every paired test use the same resamples. All
runs must score the same documents against the same gold (their order may
differ). Writes runs.csv / runs.md (one row per run, ranked as in VetSynth:
document leakage first, span-overlap F1 second), paired_tests.csv / .md
(each run against ``--reference``, per label and ALL), comparison.json,
runs.html (the three tables on one page, for the report) and runs.png
(label-agnostic and label-consistent leakage side by side, and span-overlap
F1, every run with its interval).

``--cross CORPUS RUN DIR`` adds each run's evaluation on another corpus;
cross_corpus.csv / .md / .png put every run on its own holdout (named by
``--corpus-name``) beside those corpora (:mod:`synthdeid.evaluation.cross_corpus`).

Runs of one configuration with several training seeds form an *arm*
(``--arm RUN=ARM``; a run without one is its own arm). arms.csv / arms.md
summarize each arm over its seeds (mean +- SD, t-interval, document bootstrap
interval) and arm_tests.csv tests each arm against the reference run's arm
by the two-level paired bootstrap of :mod:`synthdeid.evaluation.arms`.

``--archive DIR`` adds every run of an archive written by archive-run, with
its arm (:mod:`synthdeid.evaluation.archive`): the comparison of a study whose
models are gone.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import asdict, fields
from pathlib import Path

from synthdeid.artifacts import atomic_text, write_json_atomic
from synthdeid.cli_types import input_dir, name_pair, named_input_dir, output_dir, positive_int
from synthdeid.errors import ConfigError
from synthdeid.evaluation.archive import read_archives
from synthdeid.evaluation.arms import ArmTest
from synthdeid.evaluation.bootstrap import bootstrap_metrics, paired_bootstrap_test
from synthdeid.evaluation.compare import (
    RUNS_HTML,
    TEST_FIELDS,
    arm_rows,
    arms_markdown,
    compare_arms,
    group_arms,
    load_runs,
    paired_rows,
    plot_runs,
    run_rows,
    runs_markdown,
    tests_markdown,
)
from synthdeid.evaluation.cross_corpus import parse_cells, write_cross_corpus
from synthdeid.reporting import undefined_to_none, write_csv, write_html
from synthdeid.scoring.metrics import DEFINITIONS, LABEL_RATIOS
from synthdeid.stats import ALPHA, N_RESAMPLES, SEED, resample_weights

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run",
        dest="runs",
        action="append",
        default=[],
        type=named_input_dir,
        metavar="NAME=DIR",
        help="an evaluate-ner output folder and its name (repeat for each run)",
    )
    parser.add_argument(
        "--archive",
        type=input_dir,
        nargs="+",
        default=None,
        help="a folder of archive-run folders: every run in it, with its arm (several: their runs together, a run found twice kept once if its "
        "counts agree)",
    )
    parser.add_argument(
        "--arm",
        dest="arms",
        action="append",
        default=[],
        type=name_pair,
        metavar="RUN=ARM",
        help="the arm a run belongs to (runs <ARM>-seed<n> pair by seed); default: its own",
    )
    parser.add_argument("--reference", default=None, help="run to test against (default: first)")
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")
    parser.add_argument("--resamples", type=positive_int, default=N_RESAMPLES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--metric",
        choices=LABEL_RATIOS,
        default="overlap_recall",
        help="metric compared by the paired test (default: overlap_recall)",
    )
    parser.add_argument("--alpha", type=float, default=ALPHA, help="family-wise alpha")
    parser.add_argument(
        "--corpus-name",
        default="holdout",
        help="name of the corpus the --run folders scored (its holdout), for cross_corpus.*",
    )
    parser.add_argument(
        "--cross",
        action="append",
        nargs=3,
        default=[],
        metavar=("CORPUS", "RUN", "DIR"),
        help="an evaluate-ner folder of RUN on another corpus (repeat; cross_corpus.*)",
    )


def _add_archived_runs(args: argparse.Namespace) -> None:
    """Append the runs of ``--archive`` (and their arms) to ``--run`` / ``--arm``."""
    if args.archive is not None:
        for archived in read_archives(args.archive):
            args.runs.append((archived.name, archived.folder))
            if archived.arm != archived.name:
                args.arms.append((archived.name, archived.arm))
    if not args.runs:
        raise ConfigError("no run to compare: give --run NAME=DIR or --archive DIR")


def run(args: argparse.Namespace) -> None:
    _add_archived_runs(args)
    reference = args.reference or args.runs[0][0]
    tables = load_runs(args.runs, reference)
    ref = tables[reference]
    weights = resample_weights(len(ref.note_ids), args.resamples, args.seed)
    results = {
        name: bootstrap_metrics(table, n_resamples=args.resamples, seed=args.seed, weights=weights)
        for name, table in tables.items()
    }
    tests = {
        name: paired_bootstrap_test(
            table, ref, metric=args.metric, seed=args.seed, weights=weights, alpha=args.alpha
        )
        for name, table in tables.items()
        if name != reference
    }
    arms = group_arms(list(tables), args.arms)
    reference_arm = next(arm for arm, names in arms.items() if reference in names)
    summaries, arm_tests = compare_arms(
        tables, arms, reference_arm, weights, seed=args.seed, alpha=args.alpha
    )
    rows = run_rows(results, reference)
    tested = [row for name, result in tests.items() for row in paired_rows(name, reference, result)]
    out: Path = args.out_dir
    write_csv(rows, list(rows[0]), out / "runs.csv")
    tables_md = {
        "runs.md": runs_markdown(results, reference, rows),
        "paired_tests.md": tests_markdown(tested, args.metric, reference, args.resamples),
        "arms.md": arms_markdown(summaries, reference_arm, arm_tests, args.resamples),
    }
    for name, markdown in tables_md.items():
        with atomic_text(out / name) as handle:
            handle.write(markdown)
    cross_md = write_cross_corpus(
        args.runs,
        args.corpus_name,
        parse_cells(args.cross),
        out,
        n_resamples=args.resamples,
        seed=args.seed,
    )
    write_html("\n".join([*tables_md.values(), cross_md]), "NER runs", out / RUNS_HTML)
    write_csv(tested, TEST_FIELDS, out / "paired_tests.csv")
    summary_rows = arm_rows(summaries, reference_arm)
    write_csv(summary_rows, list(summary_rows[0]), out / "arms.csv")
    test_rows = [undefined_to_none(asdict(t)) for t in arm_tests]
    write_csv(test_rows, [f.name for f in fields(ArmTest)], out / "arm_tests.csv")
    write_json_atomic(
        {
            "reference": reference,
            "reference_arm": reference_arm,
            "arm_order": list(summaries),
            "arms": {
                arm: {
                    "runs": list(summary.runs),
                    "metrics": {m: v.as_dict() for m, v in summary.metrics.items()},
                }
                for arm, summary in summaries.items()
            },
            "arm_tests": test_rows,
            "metric": args.metric,
            "n_resamples": args.resamples,
            "seed": args.seed,
            "alpha": args.alpha,
            "runs": {
                name: {
                    "dir": str(folder),
                    "rank": next(r["rank"] for r in rows if r["run"] == name),
                    "counts": results[name].counts,
                    "headline": {m: i.as_dict() for m, i in results[name].headline.items()},
                }
                for name, folder in args.runs
            },
            "tests": {
                name: {
                    **{k: v for k, v in asdict(t).items() if k != "rows"},
                    "rows": paired_rows(name, reference, t),
                }
                for name, t in tests.items()
            },
            "definitions": DEFINITIONS,
        },
        out / "comparison.json",
    )
    plot_runs(results, reference, out / "runs.png")
    significant = sum(row["significant"] for row in tested)
    log.info(
        "compared %d runs on %d notes against %s: best %s; %d of %d paired tests significant -> %s",
        len(results),
        len(ref.note_ids),
        reference,
        next(r["run"] for r in rows if r["rank"] == 1),
        significant,
        len(tested),
        out,
    )
