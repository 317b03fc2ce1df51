"""Train a de-identification model on a built mixture; write a Hugging Face model directory.

``synthdeid train-ner --train train.parquet --validation validation.parquet
--mixture-summary summary.json --settings JSON --run NAME --out-dir DIR``

``--settings`` holds the ``ner.training`` mapping (see config/README.md). A
compute-matched mixture's ``max_steps`` (in its summary) overrides the
configured epochs. The directory gets the weights, tokenizer, ``synthdeid_ner.json``
(labels, windows, operating point), ``training_history.json`` and a model card.

With ``--resume-dir DIR`` the training state is saved there after every epoch;
run again after a stop (a signal, a SLURM time limit, a machine gone), the
step goes on from the last finished epoch if its inputs, settings and code are
the same (:mod:`synthdeid.ner.resume`); the folder is removed once the model
is saved. It holds weights trained on the training notes: keep it local.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from synthdeid.cli_types import input_file, json_object, output_dir
from synthdeid.ner.mixtures import read_mixture, read_mixture_summary
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments

if TYPE_CHECKING:
    from synthdeid.ner.resume import ResumeFolder
    from synthdeid.ner.training import TrainingConfig

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
    parser.add_argument(
        "--resume-dir",
        type=output_dir,
        default=None,
        help="save the training state here after every epoch; a rerun goes on from it",
    )
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
    resume = _resume_folder(args, config) if args.resume_dir else None
    result = train(
        [m.note for m in train_notes],
        validation,
        config,
        copies=[m.copies for m in train_notes],
        soft_labels=soft_labels,
        progress=not args.no_progress,
        resume=resume,
    )
    save_model_directory(result, config, args.out_dir, mixture=mixture, run=args.run)
    if resume is not None:
        resume.clear()
    log.info(
        "saved %s: best epoch %d, O threshold %.3f, validation leakage %.4f -> %s",
        args.run,
        result.best_epoch,
        result.tagger.settings.o_threshold,
        result.validation["leakage_overlap_all"],
        args.out_dir,
    )


def _resume_folder(args: argparse.Namespace, config: TrainingConfig) -> ResumeFolder:
    """The resume folder, keyed by the input files' bytes, the settings and this stage's code."""
    from synthdeid.artifacts import file_digest
    from synthdeid.code_identity import running_code_digest
    from synthdeid.ner.resume import ResumeFolder, resume_fingerprint

    inputs = {
        name: file_digest(path) if path else None
        for name, path in (
            ("train", args.train),
            ("validation", args.validation),
            ("mixture_summary", args.mixture_summary),
            ("soft_labels", args.soft_labels),
        )
    }
    parts = {"inputs": inputs, "settings": config.to_json(), "code": running_code_digest()}
    return ResumeFolder(args.resume_dir, resume_fingerprint(parts))
