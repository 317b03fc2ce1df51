"""Benchmark the corpus-wide steps' peak memory and speed as the corpus grows.

    python bench/scale_memory.py --sizes 10000 100000 1000000
    python bench/scale_memory.py --sizes 10000 100000 --format physionet
    python bench/scale_memory.py --sizes 1000 1000000 --deid-model MODEL_DIR --deid-precision int8

For every size N, in a fresh work folder, four ``synthdeid`` calls run one
after another, each in its own process, as the workflow chains them:

- ``make-demo --n-notes N``: the synthetic demo corpus (JSONL);
- ``ingest-corpus --format jsonl``: the canonical notes table; with
  ``--format physionet`` the demo notes are first rewritten (untimed) as
  PhysioNet's ``id.text`` and ``id-phi.phrase`` and ingest reads those;
- ``split-notes``: seed / train / holdout by patient;
- ``replace-surrogates``: keyed surrogates (a random strong
  ``SYNTHDEID_SECRET``, so the public demo key is never used);
- with ``--deid-model DIR``, a fifth: ``predict-ner`` de-identifies the
  surrogate notes with that trained model (``--deid-precision``, redacted
  text written too), on ``--deid-threads`` threads (default 2, the machine).

Each step's peak resident memory is the child's own ``ru_maxrss``, which
:func:`os.wait4` returns with its exit status (``getrusage(RUSAGE_CHILDREN)``
is a maximum over every child so far, so it hides a smaller later step).
Wall seconds and notes per second are printed beside it, and every step's
peak is also given as a ratio to the same step at the smallest N measured in
the same run (the baseline): a step whose memory is flat in the number of
notes stays near 1.00x. Every step but ``predict-ner`` runs with
``OMP_NUM_THREADS=1`` (Arrow's thread pool follows it), so its figures are
one core's. A last row per size adds the steps' wall seconds up (the whole
chain, ``make-demo`` included, and its largest peak).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from synthdeid.cli_types import positive_int

STEPS = ("make-demo", "ingest-corpus", "split-notes", "replace-surrogates", "predict-ner")
TOTAL = "total"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
SOURCE = "demo-synthetic"
FRACTIONS = {"seed": "0.3", "train": "0.4", "holdout": "0.3"}


@dataclass(frozen=True)
class Deid:
    """The de-identification step: a trained model directory, its number format, threads."""

    model: Path
    precision: str
    threads: int


@dataclass(frozen=True)
class Measure:
    step: str
    notes: int
    seconds: float
    peak_mb: float


def identity_label_map() -> str:
    from synthdeid.labels import CANONICAL_LABELS

    return json.dumps({label: label for label in CANONICAL_LABELS})


def write_physionet(jsonl: Path, folder: Path) -> None:
    """Rewrite the demo's JSONL notes as PhysioNet's two files, a note at a time.

    Patients and notes are numbered (PhysioNet ids hold no ``-``); a span's
    category is its canonical label, its surface the text at its offsets.
    """
    patients: dict[str, int] = {}
    notes_of: dict[int, int] = {}
    folder.mkdir(parents=True, exist_ok=True)
    with (
        jsonl.open(encoding="utf-8") as lines,
        (folder / "id.text").open("w", encoding="utf-8", newline="") as text_file,
        (folder / "id-phi.phrase").open("w", encoding="utf-8", newline="") as phrase_file,
    ):
        for line in lines:
            note = json.loads(line)
            patient = patients.setdefault(note["patient_id"], len(patients) + 1)
            number = notes_of[patient] = notes_of.get(patient, 0) + 1
            text = note["text"]
            text_file.write(f"START_OF_RECORD={patient}||||{number}||||\n{text}||||END_OF_RECORD\n")
            for span in note["spans"]:
                start, end = span["start"], span["end"]
                surface = text[start:end]
                phrase_file.write(f"{patient} {number} {start} {end} {span['label']} {surface}\n")


def is_model_directory(path: Path) -> bool:
    """What ``predict-ner --model`` loads: a trained model, an ensemble or a stacker directory.

    Checked before the corpus is made, so a wrong path fails in a second, not
    after the steps before ``predict-ner`` have run on a million notes. The
    check imports the NER modules (torch), so it runs in a child process: a
    forked child starts from its parent's peak RSS, and a parent holding
    torch would inflate every step's measured peak.
    """
    check = (
        "import sys; from synthdeid.ner.ensemble import is_ensemble_directory; "
        "from synthdeid.ner.stacker import is_stacked_directory; p = sys.argv[1]; "
        "sys.exit(0 if is_ensemble_directory(p) or is_stacked_directory(p) else 1)"
    )
    if (path / "config.json").is_file():
        return True
    return subprocess.run([sys.executable, "-c", check, str(path)], check=False).returncode == 0


def commands(
    n_notes: int, folder: Path, corpus_format: str, deid: Deid | None = None
) -> dict[str, list[str]]:
    """The steps' arguments, as the workflow's rules pass them (``predict-ner`` with ``deid``)."""
    corpus, notes, split = folder / "demo", folder / "ingest", folder / "split"
    read = (
        ("--corpus", str(corpus / "notes.jsonl"), "--format", "jsonl")
        if corpus_format == "jsonl"
        else ("--corpus", str(folder / "physionet"), "--format", "physionet")
    )
    surrogate, predicted = folder / "surrogate", folder / "deid"
    split_args = ["--seed", "13"]
    for part, fraction in FRACTIONS.items():
        split_args += [f"--{part}-fraction", fraction]
    steps = {
        "make-demo": ["--n-notes", str(n_notes), "--out-dir", str(corpus)],
        "ingest-corpus": [
            *read,
            *("--source", SOURCE, "--label-map", identity_label_map()),
            *("--out", str(notes / "notes.parquet"), "--summary", str(notes / "summary.json")),
        ],
        "split-notes": [
            *("--notes", str(notes / "notes.parquet"), *split_args),
            *("--out", str(split / "notes.parquet"), "--summary", str(split / "summary.json")),
        ],
        "replace-surrogates": [
            *(str(split / "notes.parquet"), str(surrogate / "notes.parquet")),
            *("--summary", str(surrogate / "summary.json")),
            *("--leftovers", str(surrogate / "local" / "leftovers.json")),
            *("--offsets", str(surrogate / "local" / "offsets.parquet")),
        ],
    }
    if deid is not None:
        steps["predict-ner"] = [
            *("--model", str(deid.model), "--notes", str(surrogate / "notes.parquet")),
            *("--out", str(predicted / "predictions.parquet")),
            *("--out-deidentified", str(predicted / "deidentified.parquet"), "--mode", "redact"),
            *("--summary", str(predicted / "summary.json"), "--precision", deid.precision),
            *("--threads", str(deid.threads), "--device", "cpu"),
        ]
    return steps


def run_measured(
    step: str, arguments: list[str], env: dict[str, str], log: Path
) -> tuple[float, float]:
    """Run one step in a child process: its wall seconds and its own peak RSS in MB."""
    command = [sys.executable, "-m", "synthdeid", step, *arguments]
    with log.open("w") as output:
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{step} exited {process.returncode}:\n{tail}")
    return seconds, usage.ru_maxrss / 1024  # ru_maxrss: kilobytes on Linux


def measure_size(
    n_notes: int, work: Path, env: dict[str, str], corpus_format: str, deid: Deid | None
) -> list[Measure]:
    folder = work / f"n{n_notes}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    measures = []
    for step, arguments in commands(n_notes, folder, corpus_format, deid).items():
        if step == "ingest-corpus" and corpus_format == "physionet":
            write_physionet(folder / "demo" / "notes.jsonl", folder / "physionet")
        print(f"N={n_notes:,}: {step} ...", file=sys.stderr, flush=True)
        threads = str(deid.threads) if deid is not None and step == "predict-ner" else "1"
        step_env = {**env, "OMP_NUM_THREADS": threads}
        seconds, peak_mb = run_measured(step, arguments, step_env, folder / f"{step}.log")
        measures.append(Measure(step, n_notes, seconds, peak_mb))
        print(f"N={n_notes:,}: {step} {seconds:.1f} s, peak {peak_mb:.0f} MB", file=sys.stderr)
    total = Measure(
        TOTAL, n_notes, sum(m.seconds for m in measures), max(m.peak_mb for m in measures)
    )
    return [*measures, total]


def table(measures: list[Measure]) -> str:
    """Markdown: one row per size and step; peak ratio against the smallest size's step."""
    baseline = {m.step: m for m in measures if m.notes == min(x.notes for x in measures)}
    rows = [
        "| notes | step | wall s | notes/s | peak RSS MB | peak vs smallest N |",
        "|---|---|---|---|---|---|",
    ]
    order = (*STEPS, TOTAL)
    for m in sorted(measures, key=lambda m: (m.notes, order.index(m.step))):
        ratio = m.peak_mb / baseline[m.step].peak_mb
        rows.append(
            f"| {m.notes:,} | {m.step} | {m.seconds:,.1f} | {m.notes / m.seconds:,.0f} "
            f"| {m.peak_mb:,.0f} | {ratio:.2f}x |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=list(DEFAULT_SIZES),
        help="corpus sizes in notes (default: %(default)s); the smallest is the baseline",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="folder for the corpora and outputs (default: a temporary one, removed after)",
    )
    parser.add_argument(
        "--format",
        choices=("jsonl", "physionet"),
        default="jsonl",
        help="the corpus format ingest-corpus reads (default: %(default)s)",
    )
    parser.add_argument(
        "--deid-model",
        type=Path,
        default=None,
        help="a trained model directory: adds predict-ner over the surrogate notes",
    )
    parser.add_argument(
        "--deid-precision",
        choices=("fp32", "bf16", "int8"),
        default="int8",
        help="predict-ner's number format (default: %(default)s)",
    )
    parser.add_argument(
        "--deid-threads",
        type=positive_int,
        default=2,
        help="predict-ner's threads (default: %(default)s)",
    )
    args = parser.parse_args()
    if min(args.sizes) < 1:
        parser.error("--sizes must be positive")
    deid = None
    if args.deid_model is not None:
        if not is_model_directory(args.deid_model):
            parser.error(
                f"--deid-model {args.deid_model}: not a trained model, ensemble or stacker directory"
            )
        deid = Deid(args.deid_model.resolve(), args.deid_precision, args.deid_threads)
    env = {**os.environ, "SYNTHDEID_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        measures = []
        for n_notes in sorted(set(args.sizes)):
            measures += measure_size(n_notes, work, env, args.format, deid)
            if args.work_dir is None:
                shutil.rmtree(work / f"n{n_notes}")  # a million notes is about 600 MB on disk
    print(table(measures))


if __name__ == "__main__":
    main()
