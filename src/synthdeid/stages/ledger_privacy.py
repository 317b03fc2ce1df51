"""The privacy ledger of a corpus: every DP release and the composed total (ledger-privacy).

``synthdeid ledger-privacy --releases JSON [--budgets JSON] --out-dir DIR``

``--releases`` lists each DP release as the workflow knows it (name, mechanism,
population, its ``privacy.json`` file, what is derived from it); the epsilon and
delta come from the file. Writes ``ledger.json``, ``ledger.md`` and ``ledger.html``
(the report's table): each release, and per population the total by basic
composition against its budget (:mod:`synthdeid.privacy_ledger`). A population
over its budget stops the step, and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from synthdeid.artifacts import atomic_text, make_provenance, reading_record, write_json_atomic
from synthdeid.cli_types import json_list, json_object, output_dir
from synthdeid.errors import InputError
from synthdeid.privacy_ledger import (
    TITLE,
    check_budgets,
    compose,
    ledger_markdown,
    ledger_record,
    release_from_record,
)
from synthdeid.reporting import write_html

log = logging.getLogger(__name__)

LEDGER_JSON = "ledger.json"
LEDGER_MD = "ledger.md"
LEDGER_HTML = "ledger.html"


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--releases",
        required=True,
        type=json_list,
        help="JSON list: {name, mechanism, population, file, derived} per DP release",
    )
    parser.add_argument(
        "--budgets",
        type=json_object,
        default={},
        help="JSON object: population -> its epsilon budget (null: none)",
    )
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the ledger")


def run(args: argparse.Namespace) -> None:
    releases = []
    for spec in args.releases:
        path = Path(spec["file"])
        with reading_record(path, "privacy record"):
            record = json.loads(path.read_text(encoding="utf-8"))
        try:
            releases.append(release_from_record(spec, record))
        except ValueError as exc:
            raise InputError(path, None, str(exc), "rerun the step that wrote it") from None
    totals = compose(releases, args.budgets)
    check_budgets(totals, "measured")
    record = ledger_record(releases, totals)
    record["provenance"] = make_provenance(
        "ledger-privacy", {"budgets": args.budgets}, {r["name"]: r["file"] for r in args.releases}
    )
    out: Path = args.out_dir
    markdown = ledger_markdown(record)
    write_json_atomic(record, out / LEDGER_JSON)
    with atomic_text(out / LEDGER_MD) as handle:
        handle.write(markdown)
    write_html(markdown, TITLE, out / LEDGER_HTML)
    for total in totals:
        log.info(
            "%s: epsilon %.3f over %d release(s)",
            total.population,
            total.epsilon,
            len(total.releases),
        )
