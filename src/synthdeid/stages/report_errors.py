"""Every missed and every spurious span of a model on development notes (report-errors).

The next lever for a de-identifier (more gold, another encoder, lexicons, a
threshold) should be chosen from its errors, not guessed. This stage tags
development notes (never the holdout: the run's validation notes and, by
default, the seed part, less any note the run trained on; a holdout note in
any file read is refused), decodes them as
``predict-ner`` does (model, regex detectors, Safe Harbor ages) and lists, per span:

``missed``
    a gold span no prediction touches (label-agnostic: PHI left in the text);
``mislabelled``
    a gold span touched only by predictions of other labels (redacted, but with
    the wrong surrogate family);
``spurious``
    a prediction that touches no gold span (over-redaction).

Each row carries the span's text with 40 characters of context either side and
the model's probability of ``O`` over the span's tokens (min and mean), so a
miss at P(O) = 0.55 (a threshold question) reads apart from one at 0.999 (the
model never saw such a thing). The table holds real text: it is written to the
step's ``local/`` folder (``--out`` elsewhere is refused) and marked
local-only (:mod:`synthdeid.local_only`).
The summary beside it holds counts and P(O) quantiles only, no text, and is
releasable.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from synthdeid.artifacts import make_provenance, write_json_atomic, write_parquet_atomic
from synthdeid.cli_types import (
    input_dir,
    input_file,
    optional_input_file,
    output_file,
    positive_int,
)
from synthdeid.errors import InputError
from synthdeid.local_only import require_local_path
from synthdeid.ner.report_errors import (
    KINDS,
    development_notes,
    errors_table,
    note_errors,
    summarize,
)
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments, set_threads

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, type=input_dir, help="model or ensemble folder")
    parser.add_argument("--notes", required=True, type=input_file, help="split notes table")
    parser.add_argument(
        "--parts", nargs="*", default=["seed"], help="parts of --notes to read (default: seed)"
    )
    parser.add_argument(
        "--validation", type=optional_input_file, default=None, help="the run's validation notes"
    )
    parser.add_argument(
        "--train",
        type=optional_input_file,
        default=None,
        help="the run's training mixture: its notes are left out",
    )
    parser.add_argument("--safe-harbor-ages", action="store_true", help="as in predict-ner")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    add_runtime_arguments(parser, progress=False, device_default="cpu")
    parser.add_argument(
        "--out", required=True, type=output_file, help="errors table (Parquet, in a local/ folder)"
    )
    parser.add_argument("--summary", required=True, type=output_file, help="counts (JSON)")


def run(args: argparse.Namespace) -> None:
    from synthdeid.detectors import add_regex_spans
    from synthdeid.ner.ages import drop_young_age_spans
    from synthdeid.ner.loading import load_tagger

    require_local_path(args.out, "--out", "note text")
    set_threads(args.threads)
    validation = read_notes(args.validation) if args.validation else []
    trained = {n.note_id for n in read_notes(args.train)} if args.train else set()
    notes = development_notes(
        read_notes(args.notes),
        args.parts,
        validation,
        trained,
        validation_path=args.validation or "--validation",
    )
    if not notes:
        raise InputError(args.notes, None, f"no development notes in parts {args.parts}")
    tagger = load_tagger(args.model, device=args.device)
    encoded = tagger.encode(notes)
    probs = tagger.token_probabilities(encoded, batch_size=args.batch_size, progress=True)
    predicted = [
        tagger.decode(p, enc, note.text) for note, enc, p in zip(notes, encoded, probs, strict=True)
    ]
    if tagger.settings.regex_detectors:
        predicted, _ = add_regex_spans(notes, predicted, tagger.settings.regex_detectors)
    if args.safe_harbor_ages:
        predicted, _ = drop_young_age_spans(notes, predicted)
    errors = [
        error
        for note, enc, p, spans in zip(notes, encoded, probs, predicted, strict=True)
        for error in note_errors(note, spans, enc.offsets, p)
    ]
    params = {"parts": args.parts, "safe_harbor_ages": args.safe_harbor_ages}
    inputs: dict[str, str | Path] = {"model": args.model, "notes": args.notes}
    provenance = make_provenance("report-errors", params, inputs)
    write_parquet_atomic(errors_table(errors, {n.note_id: n for n in notes}), args.out, provenance)
    summary = summarize(errors, notes)
    write_json_atomic({"summary": summary, "provenance": provenance}, args.summary)
    counts = {kind: summary["errors"][kind]["count"] for kind in KINDS}
    log.info("%d development notes: %s -> %s (local only)", len(notes), counts, args.out)
