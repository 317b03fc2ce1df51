"""Train a de-identification model on a built mixture; write a Hugging Face model directory.

``synthdeid train-ner --train train.parquet --validation validation.parquet
--mixture-summary summary.json --settings JSON --run NAME --out-dir DIR``

``--settings`` holds the ``ner.training`` mapping (see config/README.md). A
compute-matched mixture's ``max_steps`` (in its summary) overrides the
configured epochs. The directory gets the weights, tokenizer, ``synthdeid_ner.json``
(labels, windows, operating point), ``training_history.json`` and a model card.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace

from synthdeid.cli_types import input_file, json_object, output_dir
from synthdeid.ner.mixtures import read_mixture, read_mixture_summary
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train", required=True, type=input_file, help="mixture train.parquet")
    parser.add_argument("--validation", required=True, type=input_file, help="validation.parquet")
    parser.add_argument("--mixture-summary", type=input_file, default=None)
    parser.add_argument(
        "--settings", type=json_object, default={}, help="JSON: the ner.training mapping"
    )
    parser.add_argument(
        "--soft-labels",
        type=input_file,
        default=None,
        help="a teacher's soft labels of the training notes (soft-label-ner): distillation",
    )
    parser.add_argument("--run", default="run", help="run name (model card)")
    parser.add_argument("--out-dir", required=True, type=output_dir)
    add_runtime_arguments(parser, device=False, threads_help="CPU threads (over the config)")


def run(args: argparse.Namespace) -> None:
    # torch and transformers load here, not when the CLI starts
    from synthdeid.ner.distillation import read_soft_labels
    from synthdeid.ner.model_card import save_model_directory
    from synthdeid.ner.training import TrainingConfig, train

    config = TrainingConfig.from_mapping(args.settings)
    if args.threads and config.threads is None:
        config = replace(config, threads=args.threads)
    mixture = read_mixture_summary(args.mixture_summary) if args.mixture_summary else {}
    if mixture.get("max_steps"):
        config = replace(config, max_steps=int(mixture["max_steps"]))
        log.info("compute-matched mixture: exactly %d optimizer steps", config.max_steps)
    train_notes = read_mixture(args.train)
    soft_labels = read_soft_labels(args.soft_labels) if args.soft_labels else None
    validation = read_notes(args.validation)
    result = train(
        [m.note for m in train_notes],
        validation,
        config,
        copies=[m.copies for m in train_notes],
        soft_labels=soft_labels,
        progress=not args.no_progress,
    )
    save_model_directory(result, config, args.out_dir, mixture=mixture, run=args.run)
    log.info(
        "saved %s: best epoch %d, O threshold %.3f, validation leakage %.4f -> %s",
        args.run,
        result.best_epoch,
        result.tagger.settings.o_threshold,
        result.validation["leakage_overlap_all"],
        args.out_dir,
    )
