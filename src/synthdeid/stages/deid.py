"""De-identify your own notes with a trained model: text files, a folder, a CSV or a JSONL file.

``synthdeid deid --model DIR INPUT... --out OUT`` reads the notes of
``INPUT`` (``.txt`` files and folders of them, or one CSV file with
``--text-column NAME`` and optionally ``--id-column NAME``, or one JSONL file
with ``--text-field NAME``, default ``text``, and optionally ``--id-field``;
:mod:`synthdeid.readers.plain`), tags them as ``predict-ner`` does (the
model's ``O`` threshold, chosen on validation notes, and its regex detectors,
both overridable; :mod:`synthdeid.ner.inference`) and writes the folder
``OUT`` (:mod:`synthdeid.ner.deid_outputs`): the de-identified notes under
the input's names, ``spans.jsonl`` and ``spans.parquet`` (note id, offsets
into the input text, label; never the text) and ``summary.json``.

``--mode redact`` (the default) writes ``[LABEL]`` for each predicted span;
``--mode surrogate`` a keyed surrogate, as ``predict-ner --mode surrogate``
does, with the key of ``--key-file`` or ``$SYNTHDEID_SECRET`` (the public
demo key is refused: it is for the synthetic demo corpus only). No gold
labels are needed. Notes are read, tagged and written ``--chunk-notes`` at a
time; a progress bar counts them (``--no-progress`` hides it).

Nothing of a note's text goes to the log or an error: bad input (a missing
column, a file that is not UTF-8, no notes, a folder that is no model) is
refused with one line naming the file, the record and the problem, and
``OUT`` is written whole or not at all.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.cli_types import input_dir, input_path, optional_input_file, output_dir, positive_int
from synthdeid.ner.deid_outputs import check_out_folder
from synthdeid.ner.inference import Tagging, add_tagging_arguments
from synthdeid.readers.plain import PLAIN_SOURCE, TableOptions, plan_inputs
from synthdeid.runtime import add_runtime_arguments, set_threads
from synthdeid.surrogate.keying import load_key, refuse_demo_key

log = logging.getLogger(__name__)

MODES = ("redact", "surrogate")


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        metavar="INPUT",
        nargs="+",
        type=input_path,
        help=".txt files and folders of them, or one .csv or .jsonl file",
    )
    parser.add_argument(
        "--model",
        required=True,
        type=input_dir,
        help="trained model, ensemble or lexicon-stacker directory",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=output_dir,
        help="output folder (new, empty, or an earlier output of this command, replaced)",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="redact",
        help="[LABEL] for each predicted span, or a keyed surrogate",
    )
    parser.add_argument("--text-column", default=None, help="CSV input: the notes' column")
    parser.add_argument(
        "--id-column", default=None, help="CSV input: the note ids' column (default: row numbers)"
    )
    parser.add_argument(
        "--text-field", default=None, help="JSONL input: the notes' field (default: text)"
    )
    parser.add_argument(
        "--id-field", default=None, help="JSONL input: the note ids' field (default: line numbers)"
    )
    add_tagging_arguments(parser)
    add_runtime_arguments(parser)
    parser.add_argument(
        "--key-file",
        type=optional_input_file,
        default=None,
        help="surrogate mode: the secret's file (default: $SYNTHDEID_SECRET)",
    )
    parser.add_argument(
        "--consistency",
        choices=("patient", "corpus"),
        default="patient",
        help="surrogate mode: one surrogate per original within a note (each note is its own "
        "patient), or over all the notes",
    )
    parser.add_argument(
        "--chunk-notes",
        type=positive_int,
        default=512,
        help="notes read, predicted and written at a time (memory is flat in the input size)",
    )


def run(args: argparse.Namespace) -> None:
    from synthdeid.ner.deid import DeidSettings, deid_provenance, deidentify

    set_threads(args.threads)
    options = TableOptions(args.text_column, args.id_column, args.text_field, args.id_field)
    inputs = plan_inputs(args.inputs, options)
    check_out_folder(args.out, inputs)
    # a missing key stops the step before any work
    key = load_key(args.key_file or None) if args.mode == "surrogate" else None
    if key is not None:  # before the model loads: nothing is done with the demo key
        refuse_demo_key(key, {PLAIN_SOURCE}, f"deid --mode surrogate {args.inputs[0]}")
    tagging = Tagging.from_arguments(args)
    settings = DeidSettings(
        mode=args.mode,
        key=key,
        consistency=args.consistency,
        chunk_notes=args.chunk_notes,
        progress=not args.no_progress,
    )
    provenance = deid_provenance(inputs, args.model, tagging, settings)
    deidentify(inputs, args.out, tagging, settings, provenance)
