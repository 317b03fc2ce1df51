"""Score predicted PHI spans against gold notes, with bootstrap intervals (evaluate-ner).

Inputs: the gold notes table (only the notes whose ``split`` is in
``--parts``, holdout by default) and a predictions notes table of the same
schema whose ``spans`` are the predicted spans. Every gold note must have a
row in the predictions, with the same text. Writes metrics.json, metrics.md
(and the same tables as metrics.html, for the Snakemake report), metrics.csv,
per_document.parquet and per_label_recall.png into ``--out-dir``. Figures with
an empty denominator are undefined: null in JSON, empty in the CSV, n/a in
the tables (:mod:`~synthdeid.scoring.metrics`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from synthdeid.artifacts import make_provenance
from synthdeid.cli_types import input_file, output_dir, positive_int
from synthdeid.errors import InputError
from synthdeid.evaluation.bootstrap import bootstrap_metrics
from synthdeid.evaluation.report import write_not_scored_report, write_report
from synthdeid.notes import Note, Span, read_notes
from synthdeid.scoring.metrics import count_table
from synthdeid.stats import N_RESAMPLES, SEED

log = logging.getLogger(__name__)

DEFAULT_PARTS = ("holdout",)


def _parse_parts(values: Sequence[str] | None) -> tuple[str, ...]:
    """``["holdout", "train,seed"]`` -> ``("holdout", "train", "seed")``; default holdout."""
    if not values:
        return DEFAULT_PARTS
    parts = [p.strip() for value in values for p in value.split(",") if p.strip()]
    return tuple(dict.fromkeys(parts))


def _select_gold(notes: Sequence[Note], parts: Sequence[str], path: Path) -> list[Note]:
    selected = [note for note in notes if note.split in parts]
    if not selected:
        present = sorted({note.split for note in notes})
        raise InputError(
            path,
            None,
            f"no gold notes in parts {list(parts)}",
            f"parts present: {present}; choose them with --parts",
        )
    return selected


def _match_predictions(
    gold: Sequence[Note], predictions: Sequence[Note], path: Path
) -> dict[str, tuple[Span, ...]]:
    """note_id -> predicted spans for every gold note; InputError when one is missing."""
    by_id = {note.note_id: note for note in predictions}
    missing = [note.note_id for note in gold if note.note_id not in by_id]
    if missing:
        raise InputError(
            path,
            None,
            f"{len(missing)} of {len(gold)} gold notes have no predictions row; "
            f"first missing note ids: {missing[:5]}",
            "predict every gold note (a note without PHI gets a row with no spans)",
        )
    for note in gold:
        if by_id[note.note_id].text != note.text:
            raise InputError(
                path,
                f"note {note.note_id!r}",
                "text differs from the gold note, so the span offsets cannot be compared",
                "predict on the gold notes table itself",
            )
    return {note.note_id: by_id[note.note_id].spans for note in gold}


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gold", required=True, type=input_file, help="gold notes table (Parquet)")
    parser.add_argument(
        "--predictions",
        required=True,
        type=input_file,
        help="notes table whose spans are the predicted spans",
    )
    parser.add_argument("--run", required=True, help="name of the evaluated run")
    parser.add_argument("--out-dir", required=True, type=output_dir, help="folder for the outputs")
    parser.add_argument(
        "--parts",
        action="append",
        default=None,
        help="gold splits to score, comma-separated or repeated (default: holdout)",
    )
    parser.add_argument(
        "--resamples", type=positive_int, default=N_RESAMPLES, help="bootstrap resamples"
    )
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed")
    parser.add_argument(
        "--skip-unpredicted",
        action="store_true",
        help="score only the gold notes that have a predictions row (a silver pool that left "
        "out the notes its teacher failed on); how many were skipped is logged and recorded",
    )


def run(args: argparse.Namespace) -> None:
    parts = _parse_parts(args.parts)
    gold = _select_gold(read_notes(args.gold), parts, args.gold)
    predictions = read_notes(args.predictions)
    skipped = 0
    if args.skip_unpredicted:
        predicted_ids = {note.note_id for note in predictions}
        kept = [note for note in gold if note.note_id in predicted_ids]
        skipped = len(gold) - len(kept)
        if not kept:
            # a teacher that failed on every note: say so, with every figure n/a
            reason = f"none of the {len(gold)} gold notes has a predictions row"
            log.warning("%s: %s; every figure is n/a", args.run, reason)
            provenance = make_provenance(
                "evaluate-ner",
                {"run": args.run, "parts": list(parts), "unpredicted_notes_skipped": len(gold)},
                {"gold": args.gold, "predictions": args.predictions},
            )
            write_not_scored_report(args.out_dir, args.run, reason, provenance)
            return
        if skipped:
            log.warning(
                "%s: %d of %d gold notes have no prediction, not scored",
                args.run,
                skipped,
                len(gold),
            )
        gold = kept
    predicted = _match_predictions(gold, predictions, args.predictions)
    table = count_table(gold, predicted)
    result = bootstrap_metrics(table, n_resamples=args.resamples, seed=args.seed)
    provenance = make_provenance(
        "evaluate-ner",
        {
            "run": args.run,
            "parts": list(parts),
            "resamples": args.resamples,
            "seed": args.seed,
            "unpredicted_notes_skipped": skipped,
        },
        {"gold": args.gold, "predictions": args.predictions},
    )
    write_report(args.out_dir, args.run, table, result, provenance)
    h = result.headline
    log.info(
        "%s: %d notes (%d with PHI): leakage(overlap) %.3f [%.3f, %.3f], detection recall %.3f, "
        "span overlap P/R/F1 %.3f/%.3f/%.3f, exact F1 %.3f -> %s",
        args.run,
        int(result.counts["n_notes"]),
        int(result.counts["n_notes_with_phi"]),
        h["leakage_overlap_all"].estimate,
        h["leakage_overlap_all"].lo,
        h["leakage_overlap_all"].hi,
        h["detection_recall"].estimate,
        h["span_overlap_precision"].estimate,
        h["span_overlap_recall"].estimate,
        h["span_overlap_f1"].estimate,
        h["span_exact_f1"].estimate,
        args.out_dir,
    )
