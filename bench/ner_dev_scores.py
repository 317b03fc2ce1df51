"""Score trained NER models on development notes under decoding variants, without the holdout.

    python bench/ner_dev_scores.py \\
        --model base=results/train_ner/physionet/real_only/model \\
        --part seed=results/split_notes/physionet/notes.parquet \\
        --part validation=results/build_mixture/physionet/real_only/validation.parquet \\
        --thresholds 0.5 0.7 --initials off separate

Decoding choices (the ``O`` threshold, the initials rule) and model options
are decided on notes that neither trained the model nor score it: the
validation patients and, for a real-only model, the seed part (gold-labelled,
kept for synthesis, never a training note of that model). The holdout stays
for the final figures. Each model tags every note once; each decoding
variant is then applied to the same probabilities. Printed per model, part,
threshold and initials mode: label-agnostic detection recall and precision
and document leakage (overlap matching, all notes), as ``evaluate-ner``
computes them.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def named(value: str) -> tuple[str, Path]:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {value!r}")
    return name, Path(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=named, action="append", required=True)
    parser.add_argument(
        "--part",
        type=named,
        action="append",
        required=True,
        help="NAME=notes.parquet; a split name (seed, train, holdout) keeps that split only",
    )
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.5])
    parser.add_argument("--initials", nargs="+", default=["off", "separate"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from synthdeid.ner.decoding import attach_initials, decode_spans
    from synthdeid.ner.loading import load_tagger
    from synthdeid.notes import read_notes
    from synthdeid.scoring.metrics import headline_metrics

    if any(name == "holdout" for name, _ in args.part):
        parser.error("the holdout is for final figures, not for development choices")
    torch.set_num_threads(args.threads)
    parts = {}
    for name, path in args.part:
        notes = read_notes(path)
        if name in {"seed", "train"}:
            notes = [note for note in notes if note.split == name]
        parts[name] = notes

    print("| model | part | notes | O threshold | initials | recall | precision | leakage |")
    print("|---|---|---|---|---|---|---|---|")
    for model_name, directory in args.model:
        tagger = load_tagger(directory, device="cpu")
        for part, notes in parts.items():
            encoded = tagger.encode(notes)
            probabilities = tagger.token_probabilities(encoded, progress=True)
            for threshold in args.thresholds:
                for mode in args.initials:
                    predicted = {
                        note.note_id: attach_initials(
                            decode_spans(
                                probs,
                                enc.offsets,
                                note.text,
                                tagger.settings.labels,
                                o_threshold=threshold,
                            ),
                            note.text,
                            mode,
                        )
                        for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
                    }
                    m = headline_metrics(notes, predicted)
                    print(
                        f"| {model_name} | {part} | {len(notes)} | {threshold} | {mode} "
                        f"| {m['detection_recall']:.3f} | {m['detection_precision']:.3f} "
                        f"| {m['leakage_overlap_all']:.3f} |"
                    )


if __name__ == "__main__":
    main()
