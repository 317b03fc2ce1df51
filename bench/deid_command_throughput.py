"""Benchmark ``synthdeid deid`` against ``synthdeid predict-ner`` on the same generated notes.

    python bench/deid_command_throughput.py --model results/train_ner/physionet/deploy/model \\
        --n 2000 --threads 2

``--n`` notes come from the demo corpus generator (:mod:`synthdeid.demo.generator`,
made up, seeded). They are written twice: as a folder of ``.txt`` files, which
``synthdeid deid`` reads, and as a notes table, which ``predict-ner`` reads.
Both commands run in this process (:func:`synthdeid.cli.run_stage`), after a
warm-up call that pays the imports, with the same model, precision and
threads; each is timed ``--repeats`` times, alternating which goes first,
from the call to its return (model loading, reading and writing included).
The table gives the median wall time of each, notes per second, the tagging
throughput their summaries record, and the ratio deid / predict-ner of the
wall times (above 1: deid is slower), with the CPU (as ``bench/llm_tasks.py``
names it) and the thread count. ``predict-ner`` writes the predictions and
the redacted notes (``--out-deidentified``), as ``deid`` does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from llm_tasks import cpu_model

from synthdeid.cli import run_stage
from synthdeid.cli_types import positive_int
from synthdeid.demo.generator import DEFAULT_SEED, generate_demo_notes
from synthdeid.notes import Note, write_notes

WARM_UP_NOTES = 4


def write_inputs(folder: Path, n: int, seed: int) -> tuple[Path, Path]:
    """``n`` generated notes as ``folder/notes/<id>.txt`` and as ``folder/notes.parquet``."""
    texts = folder / "notes"
    texts.mkdir(parents=True)
    notes = []
    for record in generate_demo_notes(n, seed):
        note_id = str(record["note_id"])
        (texts / f"{note_id}.txt").write_text(record["text"], encoding="utf-8")
        notes.append(Note(note_id, note_id, record["text"], (), "generated"))
    table = folder / "notes.parquet"
    write_notes(notes, table)
    return texts, table


def commands(args: argparse.Namespace, texts: Path, table: Path, out: Path) -> dict[str, list[str]]:
    """Each command's arguments, writing under ``out``, with the shared settings."""
    shared = ["--model", str(args.model), "--precision", args.precision]
    shared += ["--threads", str(args.threads), "--device", "cpu"]
    return {
        "predict-ner": [
            "predict-ner",
            *shared,
            "--notes",
            str(table),
            "--out",
            str(out / "predictions.parquet"),
            "--out-deidentified",
            str(out / "deidentified.parquet"),
        ],
        "deid": ["deid", *shared, str(texts), "--out", str(out / "deid"), "--no-progress"],
    }


def tagging_rate(name: str, out: Path) -> float | None:
    """The notes per second of tagging alone, as the command's summary records it."""
    summary = (
        out / "predictions.summary.json" if name == "predict-ner" else out / "deid" / "summary.json"
    )
    value = json.loads(summary.read_text())["summary"].get("notes_per_second")
    return float(value) if value is not None else None


def timed(call: Callable[[], None]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a trained model directory")
    parser.add_argument("--n", type=positive_int, default=500, help="generated notes")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    parser.add_argument("--repeats", type=positive_int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="deid-bench-") as scratch:
        root = Path(scratch)
        warm_texts, warm_table = write_inputs(root / "warm", WARM_UP_NOTES, args.seed)
        texts, table = write_inputs(root / "inputs", args.n, args.seed)
        for argv in commands(args, warm_texts, warm_table, root / "warm-out").values():
            run_stage(*argv)  # imports and first model load, for both commands
        seconds: dict[str, list[float]] = {"predict-ner": [], "deid": []}
        rates: dict[str, list[float]] = {"predict-ner": [], "deid": []}
        for repeat in range(args.repeats):
            out = root / f"run-{repeat}"
            order = list(commands(args, texts, table, out).items())
            for name, argv in order if repeat % 2 == 0 else order[::-1]:
                seconds[name].append(timed(lambda argv=argv: run_stage(*argv)))
                rate = tagging_rate(name, out)
                if rate is not None:
                    rates[name].append(rate)

    print(
        f"model {args.model}, {args.n} generated notes (seed {args.seed}), {args.precision}, "
        f"{args.threads} threads, CPU: {cpu_model()}, {args.repeats} repeat(s)"
    )
    print("| command | wall s (median) | notes/s | tagging notes/s (summary) |")
    print("|---|---|---|---|")
    for name, times in seconds.items():
        wall = statistics.median(times)
        tagging = f"{statistics.median(rates[name]):.1f}" if rates[name] else "n/a"
        print(f"| {name} | {wall:.2f} | {args.n / wall:.1f} | {tagging} |")
    ratio = statistics.median(seconds["deid"]) / statistics.median(seconds["predict-ner"])
    print(f"deid / predict-ner wall time: {ratio:.2f}x")


if __name__ == "__main__":
    main()
