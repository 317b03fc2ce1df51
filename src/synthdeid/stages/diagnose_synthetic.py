"""Compare synthetic and real notes: lengths, label mix, PII structure, JSD, Fréchet distance.

The ``diagnose-synthetic`` stage. Subsets are named on the command line, in
the order the tables and figures show them:

``--subset NAME=PATH[:PART]``
    the notes of the notes table ``PATH`` (Parquet). The text after the
    first ``=`` is ``PATH[:PART]``; if it contains a ``:``, the text after the
    *last* ``:`` is ``PART``: one split name, or several separated by commas,
    and only notes whose ``split`` is one of them are kept (empty: all
    notes). So a path that itself contains ``:`` is written with a trailing
    ``:`` (``NAME=odd:name.parquet:`` keeps every note of ``odd:name.parquet``).
    Example: ``--subset "real train=results/split_notes/demo/notes.parquet:train"``.
    The same ``NAME`` given again with another table adds that table's notes
    (a union: ``--subset "synthetic=pii.parquet" --subset "synthetic=no_pii.parquet"``).
``--derive NEW=BASE:pii`` / ``--derive NEW=BASE:no-pii``
    the notes of the earlier subset ``BASE`` with at least one span (``pii``)
    or with none (``no-pii``), e.g. ``--derive "synthetic PII=synthetic (all):pii"``.

``--reference NAME`` is the subset the divergences are measured from (the
real training notes). Writes diagnostics.json, diagnostics.md,
diagnostics.csv, lengths.png and labels.png into ``--out-dir``
(:mod:`synthdeid.synthesis.diagnostics`).
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import make_provenance
from synthdeid.cli_types import output_dir, positive_int
from synthdeid.embeddings import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH, SentenceEncoder
from synthdeid.errors import ConfigError
from synthdeid.runtime import add_runtime_arguments
from synthdeid.synthesis.diagnostics import diagnose, write_diagnostics
from synthdeid.synthesis.subsets import (
    DerivedSubset,
    FileSubset,
    load_subsets,
    parse_derived,
    parse_subset,
)

log = logging.getLogger(__name__)

BUNDLED = "bundled"


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--subset",
        dest="subsets",
        action="append",
        type=parse_subset,
        metavar="NAME=PATH[:PART]",
        help="a named subset: notes of a Parquet notes table, optionally only split PART "
        "(comma-separated parts allowed; the last ':' separates PART); repeat",
    )
    parser.add_argument(
        "--derive",
        dest="subsets",
        action="append",
        type=parse_derived,
        metavar="NEW=BASE:pii|no-pii",
        help="a subset made of the notes of an earlier subset with (pii) or without (no-pii) "
        "spans; repeat",
    )
    parser.add_argument(
        "--reference", required=True, help="subset the divergences are measured from"
    )
    parser.add_argument(
        "--encoder",
        default=BUNDLED,
        help=f"sentence encoder: a model directory or hub id, or {BUNDLED!r} (bundled MiniLM)",
    )
    parser.add_argument(
        "--no-embeddings",
        action="store_true",
        help="skip the sentence embeddings (Fréchet distances are left empty)",
    )
    add_runtime_arguments(
        parser, threads=False, progress=False, device_help="torch device for the encoder"
    )
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument(
        "--max-length",
        type=positive_int,
        default=DEFAULT_MAX_LENGTH,
        help="tokens per text for the encoder (longer texts are truncated)",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")


def run(args: argparse.Namespace) -> None:
    specs: list[FileSubset | DerivedSubset] = args.subsets or []
    if not specs:
        raise ConfigError("diagnose-synthetic needs at least one --subset")
    subsets = load_subsets(specs)
    if args.reference not in subsets:
        raise ConfigError(
            f"--reference {args.reference!r} is not a subset; subsets: {list(subsets)}"
        )
    encoder = None
    if not args.no_embeddings:
        model = None if args.encoder == BUNDLED else args.encoder
        encoder = SentenceEncoder.load(model, args.device, args.max_length)
    diag = diagnose(subsets, args.reference, encoder, batch_size=args.batch_size, progress=True)
    diag.provenance = make_provenance(
        "diagnose-synthetic",
        {
            "subsets": [
                {"name": s.name, "path": str(s.path), "parts": list(s.parts)}
                if isinstance(s, FileSubset)
                else {"name": s.name, "base": s.base, "keep": s.keep}
                for s in specs
            ],
            "reference": args.reference,
            "encoder": None if args.no_embeddings else (diag.encoder or args.encoder),
            "max_length": args.max_length,
        },
        {s.name: s.path for s in specs if isinstance(s, FileSubset)},
    )
    paths = write_diagnostics(diag, args.out_dir)
    for name, stats in diag.statistics.items():
        log.info(
            "%s: %d notes (%d with PII), median %s words",
            name,
            stats["notes"],
            stats["pii_notes"],
            stats["words"]["median"],
        )
    for name, d in diag.divergences.items():
        log.info(
            "%s vs %s: unigram JSD %.4f, Fréchet distance %.4f",
            name,
            args.reference,
            d["unigram_jsd"],
            d["frechet_distance"],
        )
    log.info("diagnostics -> %s", ", ".join(str(p) for p in paths.values()))
