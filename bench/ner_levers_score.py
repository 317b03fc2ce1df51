"""Score the runs of a lever sweep (bench/ner_levers.py) as the workflow scores a run, and archive them.

    python bench/ner_levers_score.py --runs LEVERS/runs \\
        --notes results/split_notes/physionet/notes.parquet \\
        --mixtures results/build_mixture/physionet --rule argmax \\
        --work WORK --archive docs/results/physionet-levers-runs [--regex DATE,PHONE]

For every run of the sweep: the ``O`` threshold is chosen on the run's
validation notes by ``--rule`` (an operating-point rule of
``synthdeid.ner.operating_point``: ``recall`` is the project's default
rule, ``argmax`` the fixed threshold 0.5) from the spans the sweep predicted
at every threshold of its grid; the holdout spans at that threshold become a
predictions table as ``synthdeid predict-ner`` writes it (the regex
detectors' union with ``--regex``, then the Safe Harbor ages dropped), which
``synthdeid evaluate-ner`` scores and ``synthdeid archive-run`` archives
(per-document counts, note ids hashed; the run's training settings and
history from the sweep). Run ``NAME-sK`` is archived as ``NAME-seedK`` in
arm ``NAME`` (with ``--suffix``, ``NAME<suffix>``), so ``synthdeid
compare-ner --archive`` and ``tabulate-study`` read the arms over seeds.
``levers.json`` in ``--work`` records each run's rule, threshold and
figures on its development notes (its validation notes and, for runs that
did not train on it, the seed part), from which the choices are made. The sweep's spans never leave ``--work``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid import cli
from synthdeid.artifacts import make_provenance, write_json_atomic, write_parquet_atomic
from synthdeid.detectors import add_regex_spans
from synthdeid.ner.ages import drop_young_age_spans
from synthdeid.ner.operating_point import OperatingPointRule, choose
from synthdeid.notes import Note, Span, notes_to_table, read_notes
from synthdeid.scoring.metrics import headline_metrics

FIGURES = (
    "detection_recall",
    "detection_precision",
    "leakage_detection_all",
    "leakage_overlap_all",
    "span_overlap_f1",
)
RULES = {"recall": OperatingPointRule(), "argmax": OperatingPointRule(mode="argmax")}


def spans_at(
    run: Mapping[str, Any], part: str, threshold: float, notes: Sequence[Note]
) -> list[list[Span]]:
    raw = run["spans"][part][repr(threshold)]
    return [[Span(s, e, label) for s, e, label in raw.get(note.note_id, [])] for note in notes]


def postprocess(
    notes: Sequence[Note], spans: list[list[Span]], regex: Sequence[str]
) -> list[list[Span]]:
    """What predict-ner does after the model: the regex union, then Safe Harbor ages."""
    if regex:
        spans, _ = add_regex_spans(notes, spans, regex)
    spans, _ = drop_young_age_spans(notes, spans)
    return spans


def choose_threshold(
    run: Mapping[str, Any],
    validation: Sequence[Note],
    rule: OperatingPointRule,
    regex: Sequence[str],
) -> dict[str, float]:
    rows = []
    for threshold in run["grid"]:
        spans = postprocess(validation, spans_at(run, "validation", threshold, validation), regex)
        predicted = {n.note_id: s for n, s in zip(validation, spans, strict=True)}
        rows.append({"o_threshold": threshold, **headline_metrics(validation, predicted)})
    return choose(rows, rule)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="the sweep's runs/ folder")
    parser.add_argument("--notes", type=Path, required=True, help="split_notes notes.parquet")
    parser.add_argument("--mixtures", type=Path, required=True, help="build_mixture/<corpus>")
    parser.add_argument("--rule", choices=sorted(RULES), default="recall")
    parser.add_argument("--regex", default="", help="detectors unioned, e.g. DATE,PHONE")
    parser.add_argument("--suffix", default="", help="added to every arm name")
    parser.add_argument("--only", nargs="*", default=None, help="arms to score (default all)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--archive", type=Path, required=True)
    parser.add_argument("--resamples", default="2000")
    parser.add_argument("--again", action="store_true", help="score runs archived already")
    args = parser.parse_args(argv)
    regex = [r for r in args.regex.split(",") if r]
    rule = RULES[args.rule]
    notes = read_notes(args.notes)
    holdout = [note for note in notes if note.split == "holdout"]
    validation: dict[str, list[Note]] = {}
    records = []
    for path in sorted(args.runs.glob("*.json")):
        run = json.loads(path.read_text())
        arm, _, seed = run["name"].rpartition("-s")
        if args.only is not None and arm not in args.only:
            continue
        arm += args.suffix
        name = f"{arm}-seed{seed}"
        mixture = run["mixture"]
        if mixture not in validation:
            validation[mixture] = read_notes(args.mixtures / mixture / "validation.parquet")
        chosen = choose_threshold(run, validation[mixture], rule, regex)
        threshold = chosen["o_threshold"]
        development = {"validation": chosen}
        if "seed" in run["spans"]:  # the seed part, where the run did not train on it
            seed_notes = [note for note in notes if note.split == "seed"]
            spans = postprocess(seed_notes, spans_at(run, "seed", threshold, seed_notes), regex)
            predicted = {n.note_id: s for n, s in zip(seed_notes, spans, strict=True)}
            development["seed"] = headline_metrics(seed_notes, predicted)
        records.append(
            {
                "run": name,
                "arm": arm,
                "sweep_run": run["name"],
                "rule": args.rule,
                "regex": regex,
                "o_threshold": threshold,
                **{part: {k: m[k] for k in FIGURES} for part, m in development.items()},
                "best_epoch": run["best_epoch"],
                "epochs": run["timing"]["epochs"],
                "gpu_train_seconds": run["timing"]["train_seconds"],
            }
        )
        if (args.archive / name / "run.json").is_file() and not args.again:
            print(f"{name}: archived already", flush=True)
            continue
        spans = postprocess(holdout, spans_at(run, "holdout", threshold, holdout), regex)
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        params = {"sweep_run": run["name"], "rule": args.rule, "o_threshold": threshold}
        provenance = make_provenance("ner-levers-score", params | {"regex": regex})
        predicted = [n.with_text(n.text, s) for n, s in zip(holdout, spans, strict=True)]
        write_parquet_atomic(notes_to_table(predicted), work / "predictions.parquet", provenance)
        cli.run_stage(
            "evaluate-ner",
            "--gold",
            str(args.notes),
            "--predictions",
            str(work / "predictions.parquet"),
            "--run",
            name,
            "--parts",
            "holdout",
            "--resamples",
            args.resamples,
            "--out-dir",
            str(work / "evaluation"),
        )
        # the sweep's record of the training, where archive-run reads a model folder's
        model = work / "model"
        model.mkdir(exist_ok=True)
        device = str(run.get("device", ""))
        history = {
            "run": name,
            "config": run["config"],
            "precision": {
                "requested": run["config"].get("precision", "auto"),
                "resolved": "bf16" if device.startswith("cuda") else "unknown",
                "reason": f"trained on {run.get('gpu') or device} (bench/ner_levers.py)",
            },
            "history": run["history"],
            "best_epoch": run["best_epoch"],
            "timing": run["timing"],
            "teachers": run["teachers"],
        }
        write_json_atomic(history, model / "training_history.json")
        archived = args.archive / name
        cli.run_stage(
            "archive-run",
            "--run",
            name,
            "--arm",
            arm,
            "--evaluation",
            str(work / "evaluation"),
            "--notes",
            str(args.notes),
            "--mixture",
            str(args.mixtures / mixture / "summary.json"),
            "--model",
            str(model),
            "--out-dir",
            str(archived),
        )
        print(f"{name}: O threshold {threshold} ({args.rule}) -> {archived}", flush=True)
    write_json_atomic({"runs": records}, args.work / f"levers{args.suffix}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
