"""A teacher tagger's soft labels (tag probabilities) on a mixture's training notes.

``synthdeid soft-label-ner --teacher DIR --train train.parquet --out soft_labels.parquet``

The teacher is a trained model, an ensemble or a stacker directory
(``ensemble-ner`` turns several training seeds into one). Every distinct note
of the mixture gets the teacher's per-token tag probabilities
(:mod:`synthdeid.ner.distillation`); ``train-ner --soft-labels`` then trains a
student on them and the gold tags. The output holds no text but says where
the teacher saw PHI: keep it in a ``local/`` folder.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.cli_types import input_dir, input_file, output_file, positive_int
from synthdeid.errors import ConfigError
from synthdeid.local_only import is_local_path
from synthdeid.runtime import add_runtime_arguments, set_threads

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--teacher", required=True, type=input_dir, help="teacher model directory")
    parser.add_argument("--train", required=True, type=input_file, help="mixture train.parquet")
    parser.add_argument("--out", required=True, type=output_file, help="soft labels .parquet")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="windows per batch")
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from synthdeid.artifacts import make_provenance
    from synthdeid.ner.distillation import teacher_soft_labels, write_soft_labels
    from synthdeid.ner.loading import load_tagger
    from synthdeid.ner.mixtures import read_mixture

    if not is_local_path(args.out):
        raise ConfigError(
            f"--out {args.out}: soft labels say where PHI is in real notes; write them in a "
            "local/ folder"
        )
    set_threads(args.threads)
    notes = list({m.note.note_id: m.note for m in read_mixture(args.train)}.values())
    teacher = load_tagger(args.teacher, device=args.device)
    labels = teacher_soft_labels(
        teacher, notes, batch_size=args.batch_size, progress=not args.no_progress
    )
    provenance = make_provenance("soft_label_ner", {}, {"train": args.train})
    write_soft_labels(labels, teacher.settings.tags, args.out, provenance)
    log.info("soft labels of %d notes from %s -> %s", len(labels), args.teacher, args.out)
