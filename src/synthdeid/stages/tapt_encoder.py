"""Task-adaptive pretraining: continue MLM training of the encoder on a notes corpus.

``synthdeid tapt-encoder --corpus synthetic.parquet [more.parquet ...] --settings JSON
--out-dir DIR``

``--settings`` holds the ``ner.tapt`` mapping (:class:`synthdeid.ner.tapt.TaptConfig`).
The directory gets the MLM weights, the tokenizer and ``synthdeid_tapt.json``
(config, corpus digests, chunk counts, held-out MLM loss before and after);
``train-ner`` starts from it when ``ner.training.model`` names the directory.
"""

from __future__ import annotations

import argparse
import hashlib
import logging

from synthdeid.cli_types import input_file, json_object, output_dir
from synthdeid.errors import InputError
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        required=True,
        type=input_file,
        nargs="+",
        action="extend",
        help="notes Parquet file(s) to pretrain on (repeatable)",
    )
    parser.add_argument(
        "--parts",
        nargs="*",
        default=[],
        help="only notes of these split parts (default: every note)",
    )
    parser.add_argument(
        "--settings", type=json_object, default={}, help="JSON: the ner.tapt mapping"
    )
    parser.add_argument(
        "--out-dir", required=True, type=output_dir, help="checkpoint directory to write"
    )
    add_runtime_arguments(parser, threads_help="CPU threads", device_help="auto, cpu, cuda, cuda:N")


def _kept(parts: list[str]) -> str:
    """How an error names the notes asked for: those of ``--parts``, or all."""
    return f" of the parts {', '.join(parts)}" if parts else ""


def run(args: argparse.Namespace) -> None:
    # torch and transformers load here, not when the CLI starts
    from synthdeid.artifacts import make_provenance
    from synthdeid.ner.tapt import TaptConfig, continue_pretraining

    config = TaptConfig.from_mapping(args.settings)
    texts: list[str] = []
    notes_per_file: dict[str, int] = {}
    for path in args.corpus:
        if not path.is_file():
            raise InputError(path, None, "corpus file not found", "pass a notes Parquet file")
        notes = read_notes(path)
        if args.parts:
            notes = [note for note in notes if note.split in set(args.parts)]
        if not notes and len(args.corpus) > 1:
            # one pool of several may be empty (a DP model that wrote no PII note)
            log.warning("%s: no notes%s; TAPT trains on the other files", path, _kept(args.parts))
        notes_per_file[str(path)] = len(notes)
        texts.extend(note.text for note in notes)
    if not texts:
        where = args.corpus[0] if len(args.corpus) == 1 else ", ".join(map(str, args.corpus))
        raise InputError(
            where,
            None,
            f"no notes{_kept(args.parts)} in the corpus",
            "TAPT needs at least one note to train on",
        )
    provenance = make_provenance(
        "tapt",
        config.to_json(),
        {f"corpus_{i}": path for i, path in enumerate(args.corpus)},
    )
    fingerprint = hashlib.sha256()
    for record in provenance["inputs"].values():
        fingerprint.update(f"{record['digest']}\0".encode())
    provenance["fingerprint"] = f"sha256:{fingerprint.hexdigest()}"
    provenance["notes_per_file"] = notes_per_file
    provenance["parts"] = list(args.parts)
    result = continue_pretraining(
        texts,
        config,
        args.out_dir,
        device=args.device,
        threads=args.threads,
        progress=not args.no_progress,
        provenance=provenance,
    )
    log.info(
        "TAPT: %d steps on %d chunks, held-out MLM loss %s -> %s -> %s",
        result.steps,
        result.n_train_chunks,
        result.heldout_loss_before,
        result.heldout_loss_after,
        args.out_dir,
    )
