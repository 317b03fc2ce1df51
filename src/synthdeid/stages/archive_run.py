"""Archive what a study table needs of a run, small enough to commit (archive-run).

``synthdeid archive-run --run NAME --arm ARM --evaluation EVAL_DIR --notes NOTES
[--mixture SUMMARY] [--privacy PRIVACY] [--benchmark TRAIN_TSV]
[--model MODEL_DIR] [--config-md5 HEX] --out-dir ARCHIVE/NAME``

Reads evaluate-ner's ``per_document.parquet`` from ``EVAL_DIR``, the sizes of
the run's build-mixture ``summary.json``, the DP budget of the ``privacy.json``
its data passed through, the wall and CPU time of its ``train_ner``
benchmark file (with the training seconds of the calls before for a run resumed after a
stop, its CPU time then unknown) and the training settings, the epoch kept and the
machine its model folder records, and writes
``per_document.parquet`` (note ids hashed, keyed by the scored notes of
``NOTES``, the notes table the run was evaluated on) and ``run.json`` into
``--out-dir`` (:mod:`synthdeid.evaluation.archive`). What a
run does not have (an ensemble's mixture and training, a non-DP run's budget)
is null in ``run.json`` and n/a in the study table.
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path

from synthdeid.artifacts import make_provenance
from synthdeid.cli_types import input_dir, input_file, output_dir
from synthdeid.errors import ConfigError
from synthdeid.evaluation.archive import (
    ModelHistory,
    TrainTime,
    read_model_history,
    read_privacy,
    read_sizes,
    read_train_time,
    write_archived_run,
)
from synthdeid.evaluation.report import PER_DOCUMENT

log = logging.getLogger(__name__)

MD5 = re.compile(r"[0-9a-f]{32}")


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="the run's name (the archive folder's name)")
    parser.add_argument("--arm", default=None, help="the arm the run belongs to (default: itself)")
    parser.add_argument(
        "--evaluation", required=True, type=input_dir, help="the run's evaluate-ner folder"
    )
    parser.add_argument(
        "--notes",
        required=True,
        type=input_file,
        help="the notes table the run was scored on (the key of the hashed note ids)",
    )
    parser.add_argument("--mixture", type=input_file, default=None, help="build-mixture summary")
    parser.add_argument("--privacy", type=input_file, default=None, help="train-dp-lm privacy.json")
    parser.add_argument(
        "--benchmark", type=input_file, default=None, help="the run's train_ner benchmark file"
    )
    parser.add_argument(
        "--model",
        type=input_dir,
        default=None,
        help="the run's train-ner model folder (its training settings are recorded)",
    )
    parser.add_argument(
        "--config-md5", default=None, help="MD5 of the run's resolved configuration (recorded)"
    )
    parser.add_argument(
        "--out-dir", required=True, type=output_dir, help="the run's archive folder"
    )


def run(args: argparse.Namespace) -> None:
    if args.config_md5 is not None and not MD5.fullmatch(args.config_md5):
        raise ConfigError(f"--config-md5 must be 32 lowercase hex digits, got {args.config_md5!r}")
    if args.out_dir.name != args.run:
        raise ConfigError(
            f"--out-dir {args.out_dir} must be named after the run {args.run!r} (the archive "
            "reads one folder per run, named after it)"
        )
    model = read_model_history(args.model) if args.model is not None else None
    optional = {
        "mixture": args.mixture,
        "privacy": args.privacy,
        "benchmark": args.benchmark,
        "training": model.path if model is not None else None,
    }
    inputs = {"per_document": args.evaluation / PER_DOCUMENT, "notes": args.notes}
    inputs |= {name: path for name, path in optional.items() if path is not None}
    provenance = make_provenance(
        "archive-run", {"run": args.run, "config_md5": args.config_md5}, inputs
    )
    record = write_archived_run(
        args.out_dir,
        run=args.run,
        arm=args.arm or args.run,
        evaluation=args.evaluation,
        mixture=read_sizes(args.mixture) if args.mixture is not None else None,
        privacy=read_privacy(args.privacy) if args.privacy is not None else None,
        train=_train_time(args.benchmark, model),
        provenance=provenance,
        notes=args.notes,
        training_config=model.training_config if model is not None else None,
        trained=model.outcome if model is not None else None,
    )
    train = record["train"]
    log.info(
        "archived run %s (arm %s): %d notes, train %s -> %s",
        args.run,
        record["arm"],
        record["n_notes"],
        f"{train['wall_s'] / 60:.1f} min wall" if train else "n/a",
        args.out_dir,
    )


def _train_time(benchmark: Path | None, model: ModelHistory | None) -> TrainTime | None:
    """The benchmark's train time; for a run resumed after a stop, with the calls before."""
    if benchmark is None:
        return None
    time = read_train_time(benchmark)
    return time.with_earlier_calls(model.seconds_before_resume if model is not None else None)
