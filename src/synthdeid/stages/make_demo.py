"""Generate the synthetic demo corpus (resources/demo/).

The generator, and what the corpus holds: :mod:`synthdeid.demo.generator`.
"""

from __future__ import annotations

import argparse

from synthdeid.cli_types import output_dir, positive_int
from synthdeid.demo.generator import (
    DEFAULT_N_NOTES,
    DEFAULT_OUT_DIR,
    DEFAULT_SEED,
    NOTES_FILE,
    write_demo_corpus,
)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir",
        type=output_dir,
        default=DEFAULT_OUT_DIR,
        help=f"folder to write {NOTES_FILE} into (default: %(default)s)",
    )
    parser.add_argument(
        "--n-notes",
        type=positive_int,
        default=DEFAULT_N_NOTES,
        help="number of notes (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="random seed (default: %(default)s)"
    )


def run(args: argparse.Namespace) -> None:
    write_demo_corpus(args.out_dir, args.n_notes, args.seed)
