"""Plot and tabulate the split corpus: notes, PHI-bearing notes and spans per label, per part."""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import atomic_text
from synthdeid.cli_types import input_file, output_file
from synthdeid.corpus_overview import overview_table, plot_overview
from synthdeid.notes import read_notes

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--notes", required=True, type=input_file, help="split notes.parquet")
    parser.add_argument("--title", default="Corpus overview")
    parser.add_argument("--figure", required=True, type=output_file, help="PNG to write")
    parser.add_argument("--table", required=True, type=output_file, help="TSV to write")


def run(args: argparse.Namespace) -> None:
    table = overview_table(read_notes(args.notes))
    with atomic_text(args.table) as handle:
        table.to_csv(handle, sep="\t", index=False)
    plot_overview(table, args.figure, args.title)
    log.info("corpus overview -> %s, %s", args.figure, args.table)
