"""What made each final artifact: step, code digest, parameters digest (list-provenance).

``synthdeid list-provenance --artifacts PATH... --out-dir DIR``

Reads the provenance each artifact records (never its rows:
:mod:`synthdeid.provenance_table`) and writes ``provenance.json``,
``provenance.md`` and ``provenance.html`` (the report's table).
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import atomic_text, make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, output_dir
from synthdeid.provenance_table import (
    provenance_markdown,
    provenance_records,
    provenance_rows,
)
from synthdeid.reporting import write_html

log = logging.getLogger(__name__)

TITLE = "What made each result"


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--artifacts", required=True, nargs="+", type=input_file, help="the final artifacts"
    )
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the table")


def run(args: argparse.Namespace) -> None:
    rows = provenance_rows(args.artifacts)
    out = args.out_dir
    write_json_atomic(
        {
            "artifacts": provenance_records(rows),
            "provenance": make_provenance("list-provenance", {}, {}),
        },
        out / "provenance.json",
    )
    markdown = provenance_markdown(rows)
    with atomic_text(out / "provenance.md") as handle:
        handle.write(f"# {TITLE}\n\n{markdown}")
    write_html(markdown, TITLE, out / "provenance.html")
    log.info(
        "provenance of %d artifacts (%d record none)",
        len(rows),
        sum(r.step is None for r in rows),
    )
