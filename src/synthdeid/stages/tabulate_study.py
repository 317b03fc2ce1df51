"""The study table and forest plot: every arm against the reference arm (tabulate-study).

Reads compare-ner's ``comparison.json`` (arms over training seeds, two-level
paired bootstrap tests; :mod:`synthdeid.evaluation.arms`), each run's
build-mixture ``summary.json`` (training notes, realized synthetic share) and,
for arms whose data passed through the DP language model (its pools or
``tapt: dplm``), that model's ``privacy.json`` (epsilon, delta), and each
run's ``train_ner`` benchmark file (wall and CPU time of its training) and
model folder (the epoch kept, the number format, the code and machine it
trained with); or all of these from an archive written by archive-run
(``--archive``). Writes study.csv, study.md and study.html (one row per arm;
the HTML page is the report's table), study.png (the differences from the
reference arm in span-overlap F1 and document leakage, with their intervals),
and study_runs.csv and study_runs.md (one row per run).

The table's columns, readings and MDE: :mod:`synthdeid.evaluation.study_table`;
the runs table: :mod:`synthdeid.evaluation.study_runs`.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.cli_types import (
    input_dir,
    input_file,
    named_input_dir,
    named_input_file,
    output_dir,
    positive_float,
)
from synthdeid.errors import InputError
from synthdeid.evaluation.archive import (
    read_json,
    read_model_history,
    read_privacy,
    read_sizes,
    read_train_time,
)
from synthdeid.evaluation.arms import ARM_METRICS
from synthdeid.evaluation.study_runs import run_rows, write_runs
from synthdeid.evaluation.study_table import (
    FOREST_METRICS,
    MDE_TARGET,
    add_archived_runs,
    arm_of_runs,
    degenerate_arms,
    mixed_pool_arms,
    significant_cells,
    study_rows,
    write_study,
)

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--comparison", required=True, type=input_file, help="compare-ner's comparison.json"
    )
    parser.add_argument(
        "--mixture",
        dest="mixtures",
        action="append",
        default=[],
        type=named_input_file,
        metavar="RUN=SUMMARY",
        help="a run's build-mixture summary.json (repeat; ensembles have none)",
    )
    parser.add_argument(
        "--privacy",
        dest="privacy",
        action="append",
        default=[],
        type=named_input_file,
        metavar="RUN=PRIVACY",
        help="the privacy.json of the DP model a run's data passed through (repeat)",
    )
    parser.add_argument(
        "--benchmark",
        dest="benchmarks",
        action="append",
        default=[],
        type=named_input_file,
        metavar="RUN=TSV",
        help="a run's train_ner benchmark file: its wall and CPU time (repeat)",
    )
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        type=named_input_dir,
        metavar="RUN=MODEL_DIR",
        help="a run's train-ner model folder: the epoch kept, its number format and machine "
        "(repeat)",
    )
    parser.add_argument(
        "--archive",
        type=input_dir,
        nargs="+",
        default=None,
        help="a folder of archive-run folders: sizes, budgets and train times of its runs (several: their runs together, a run found twice kept once if its "
        "counts agree)",
    )
    parser.add_argument(
        "--plan",
        type=input_file,
        default=None,
        help="plan-runs' plan.json: degenerate arms, reported once (default with --archive: "
        "the plan.json of the first archive folder that has one)",
    )
    parser.add_argument("--title", default="Synthetic data arms against the reference")
    parser.add_argument(
        "--forest",
        nargs="+",
        choices=ARM_METRICS,
        default=list(FOREST_METRICS),
        help="the metrics whose differences the table and the forest plot show",
    )
    parser.add_argument(
        "--mde-target",
        type=positive_float,
        default=MDE_TARGET,
        help="the difference in F1 the study means to detect: the table counts the arms "
        "whose minimum detectable effect is at most this (default: %(default)s)",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")


def run(args: argparse.Namespace) -> None:
    comparison = read_json(args.comparison, "comparison")
    runs = arm_of_runs(comparison, args.comparison)
    named = (("--mixture", args.mixtures), ("--privacy", args.privacy))
    for kind, pairs in (*named, ("--benchmark", args.benchmarks), ("--model", args.models)):
        for name, path in pairs:
            if name not in runs:
                raise InputError(
                    path, None, f"{kind} names run {name!r}, which the comparison does not hold"
                )
    mixtures = {name: read_sizes(path) for name, path in args.mixtures}
    privacy = {name: read_privacy(path) for name, path in args.privacy}
    train = {name: read_train_time(path) for name, path in args.benchmarks}
    models = {name: read_model_history(path) for name, path in args.models}
    trained = {name: model.outcome for name, model in models.items()}
    formats = {name: model.number_format for name, model in models.items() if model.number_format}
    if args.archive is not None:
        add_archived_runs(args.archive, runs, mixtures, privacy, train, trained, formats)
    rows = study_rows(comparison, mixtures, privacy, train)
    write_study(
        rows,
        comparison,
        args.out_dir,
        title=args.title,
        forest=args.forest,
        mde_target=args.mde_target,
        degenerate=degenerate_arms(args.plan, args.archive),
        mixed_pools=mixed_pool_arms(comparison, mixtures),
    )
    write_runs(
        run_rows(comparison, mixtures, train, trained, formats),
        comparison,
        args.out_dir,
        title=args.title,
    )
    log.info(
        "tabulated %d arms against %s; intervals excluding zero after Bonferroni: %s -> %s",
        len(rows),
        comparison["reference_arm"],
        ", ".join(significant_cells(rows)) or "none",
        args.out_dir,
    )
