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
  text written too), on ``--deid-threads`` threads (default 2, the machine);
  with ``--deid-shards K`` it runs as K jobs over row ranges, one after
  another as K SLURM jobs would on one node, then ``gather-shards`` joins them
  into the artifact one job writes (its own row in the table).

With ``--work-dir DIR --resume`` a run picks up where an earlier one over the
same folder stopped: every finished step (and every finished shard) is
recorded in ``DIR/nN/measures.jsonl`` the moment it ends, and a resumed run
reuses those records and runs only what is missing. A run that stops, or a
machine that goes away, loses at most the step in progress; the records say
when each step ran. A resumed run refuses a folder whose corpus was written
in another format: its figures would not add up. Resumed with other
de-identification settings (model, precision, threads, shards), it keeps the
four corpus steps, which do not read them, and de-identifies again from the
first shard (say, more shards to keep each job shorter than a lease).

``--only-shards I [I ...]`` runs only those of the K shard jobs, as one node
runs its share when the shards are spread over machines (or over leases too
short for all K): the corpus steps run (or are found recorded) as usual, the
other shards are left to other runs, and the gather and the total row wait
until every shard is recorded. The table then counts the notes of the shards
that ran, and a per-shard table (notes, wall seconds, notes/s, peak) follows
it whenever the de-identification runs as shards.

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
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from synthdeid.artifacts import atomic_text
from synthdeid.cli_types import positive_int
from synthdeid.shards import Shard, shard_path

STEPS = (
    "make-demo",
    "ingest-corpus",
    "split-notes",
    "replace-surrogates",
    "predict-ner",
    "gather-shards",
)
CORPUS_STEPS = STEPS[:4]  # the steps before de-identification: they never read its settings
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
    shards: int = 1
    chunk_notes: int | None = None  # predict-ner's --chunk-notes (None: its default)


@dataclass(frozen=True)
class Measure:
    step: str
    corpus: int  # the corpus size N it was measured at
    notes: int  # the notes its jobs went through: the corpus, or the shards that ran
    seconds: float
    peak_mb: float
    jobs: int = 1  # the shard jobs a step ran as (their seconds added, their peaks' maximum)
    shards: int = 1  # the shard jobs the step is cut into (more than ``jobs``: some not run yet)


@dataclass(frozen=True)
class Job:
    """One child process of the chain: ``step`` (its synthdeid command) with ``arguments``;
    ``key`` names it in the records (``predict-ner 2/4`` for a shard)."""

    key: str
    step: str
    arguments: list[str]


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


def commands(n_notes: int, folder: Path, corpus_format: str, deid: Deid | None = None) -> list[Job]:
    """The chain's jobs in order, with the arguments the workflow's rules pass (``predict-ner``
    with ``deid``: one job, or ``deid.shards`` shard jobs and their ``gather-shards``)."""
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
    jobs = [Job(step, step, arguments) for step, arguments in steps.items()]
    if deid is None:
        return jobs
    outputs = {
        "--out": predicted / "predictions.parquet",
        "--out-deidentified": predicted / "deidentified.parquet",
        "--summary": predicted / "summary.json",
    }
    predict = [
        *("--model", str(deid.model), "--notes", str(surrogate / "notes.parquet")),
        *("--mode", "redact", "--precision", deid.precision),
        *("--threads", str(deid.threads), "--device", "cpu"),
    ]
    if deid.chunk_notes is not None:
        predict += ["--chunk-notes", str(deid.chunk_notes)]
    if deid.shards == 1:
        written = [item for flag, path in outputs.items() for item in (flag, str(path))]
        return [*jobs, Job("predict-ner", "predict-ner", [*predict, *written])]
    for index in range(1, deid.shards + 1):
        shard = Shard(index, deid.shards)
        # each shard writes its own files beside the artifact, as the workflow's shard jobs do
        written = [
            item
            for flag, path in outputs.items()
            for item in (flag, shard_path(str(path), shard.label))
        ]
        arguments = [*predict, *written, "--shard", f"{index}/{deid.shards}"]
        jobs.append(Job(f"predict-ner {index}/{deid.shards}", "predict-ner", arguments))
    gather = ["--count", str(deid.shards), *(str(path) for path in outputs.values())]
    return [*jobs, Job("gather-shards", "gather-shards", gather)]


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


RECORDS = "measures.jsonl"
Record = dict[str, Any]  # one line of RECORDS: a finished job, or the settings


def settings_record(corpus_format: str, deid: Deid | None) -> Record:
    """What a folder's figures depend on besides N: a resumed run must match it."""
    return {
        "format": corpus_format,
        "deid": None if deid is None else {**asdict(deid), "model": str(deid.model)},
    }


def read_records(folder: Path, settings: Record) -> dict[str, Record]:
    """The finished jobs recorded in ``folder`` (key -> record); {} for a fresh folder.

    Raises SystemExit when the folder's corpus was measured in another format.
    Measured with other de-identification settings, the folder keeps the
    records of the corpus steps only: its de-identification outputs are
    removed and the records rewritten (atomically) under ``settings``."""
    path = folder / RECORDS
    if not path.is_file():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    recorded = lines[0].get("settings") if lines else None
    if not isinstance(recorded, dict) or recorded.get("format") != settings["format"]:
        raise SystemExit(
            f"{path}: measured with settings {recorded}, not {settings}; "
            "resume with the same corpus format, or measure in another --work-dir"
        )
    records = {line["key"]: line for line in lines[1:]}
    if recorded == settings:
        return records
    kept = {key: record for key, record in records.items() if key in CORPUS_STEPS}
    print(
        f"{folder}: measured with de-identification settings {recorded['deid']}; "
        f"keeping its {len(kept)} corpus steps and de-identifying with {settings['deid']}",
        file=sys.stderr,
        flush=True,
    )
    shutil.rmtree(folder / "deid", ignore_errors=True)
    with atomic_text(path) as rewritten:
        for line in [{"settings": settings}, *kept.values()]:
            rewritten.write(json.dumps(line) + "\n")
    return kept


def append_record(folder: Path, record: Record) -> None:
    """One line, flushed and synced, so a killed run loses only the job in progress."""
    with (folder / RECORDS).open("a", encoding="utf-8") as records:
        records.write(json.dumps(record) + "\n")
        records.flush()
        os.fsync(records.fileno())


def combine(n_notes: int, step: str, records: list[Record], shards: int = 1) -> Measure:
    """A step's figures from its jobs' records: notes and seconds added, the largest peak
    (a record without its notes counts the whole corpus: one job over all of it)."""
    notes = sum(r.get("notes", n_notes) for r in records)
    seconds = sum(r["seconds"] for r in records)
    peak = max(r["peak_mb"] for r in records)
    return Measure(step, n_notes, notes, seconds, peak, jobs=len(records), shards=shards)


def job_notes(job: Job, n_notes: int) -> int:
    """The notes a finished job went through: a ``predict-ner`` job's own count (its
    summary's: a shard's row range), the corpus size for every other step."""
    if job.step != "predict-ner":
        return n_notes
    summary = Path(job.arguments[job.arguments.index("--summary") + 1])
    return int(json.loads(summary.read_text(encoding="utf-8"))["summary"]["notes"])


def shard_index(key: str) -> int | None:
    """``"predict-ner 12/16"`` -> 12; ``None`` for a job that is not a shard."""
    _, _, label = key.rpartition(" ")
    return int(label.split("/")[0]) if "/" in label else None


def measure_size(
    n_notes: int,
    work: Path,
    env: dict[str, str],
    corpus_format: str,
    deid: Deid | None,
    resume: bool = False,
    only_shards: frozenset[int] | None = None,
) -> tuple[list[Measure], list[Record]]:
    """Run (or find recorded) every job of size ``n_notes``: the step measures, with a total
    row once every job has run, and the records of the de-identification's shard jobs."""
    folder = work / f"n{n_notes}"
    settings = settings_record(corpus_format, deid)
    done = read_records(folder, settings) if resume else {}
    if not done:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        append_record(folder, {"settings": settings})
    by_step: dict[str, list[Record]] = {}
    left: list[str] = []  # shard jobs left to other runs (--only-shards)
    for job in commands(n_notes, folder, corpus_format, deid):
        record = done.get(job.key)
        index = shard_index(job.key)
        waits = job.step == "gather-shards" and bool(left)
        elsewhere = index is not None and only_shards is not None and index not in only_shards
        if record is None and (waits or elsewhere):
            if index is not None:
                left.append(job.key)
            continue
        if record is None:
            if job.step == "ingest-corpus" and corpus_format == "physionet":
                write_physionet(folder / "demo" / "notes.jsonl", folder / "physionet")
            print(f"N={n_notes:,}: {job.key} ...", file=sys.stderr, flush=True)
            threads = str(deid.threads) if deid is not None and job.step == "predict-ner" else "1"
            step_env = {**env, "OMP_NUM_THREADS": threads}
            log = folder / f"{job.key.replace(' ', '.').replace('/', '-of-')}.log"
            seconds, peak_mb = run_measured(job.step, job.arguments, step_env, log)
            record = {
                "key": job.key,
                "notes": job_notes(job, n_notes),
                "seconds": seconds,
                "peak_mb": peak_mb,
                "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            append_record(folder, record)
            verb = "ran"
        else:
            verb = f"recorded {record['finished']}"
        print(
            f"N={n_notes:,}: {job.key} {record['seconds']:.1f} s, "
            f"peak {record['peak_mb']:.0f} MB ({verb})",
            file=sys.stderr,
        )
        by_step.setdefault(job.step, []).append(record)
    shards = 1 if deid is None else deid.shards
    measures = [
        combine(n_notes, step, records, shards if step == "predict-ner" else 1)
        for step, records in by_step.items()
    ]
    shard_records = [r for r in by_step.get("predict-ner", []) if shard_index(r["key"])]
    if left:
        print(
            f"N={n_notes:,}: {len(left)} of {shards} shard jobs left to other runs "
            f"({', '.join(left)}): no gather and no total yet",
            file=sys.stderr,
        )
        return measures, shard_records
    total = Measure(
        TOTAL,
        n_notes,
        n_notes,
        sum(m.seconds for m in measures),
        max(m.peak_mb for m in measures),
        jobs=sum(m.jobs for m in measures),
    )
    return [*measures, total], shard_records


def table(measures: list[Measure]) -> str:
    """Markdown: one row per size and step; peak ratio against the smallest size's step."""
    baseline = {m.step: m for m in measures if m.corpus == min(x.corpus for x in measures)}
    rows = [
        "| notes | step | wall s | notes/s | peak RSS MB | peak vs smallest N |",
        "|---|---|---|---|---|---|",
    ]
    order = (*STEPS, TOTAL)
    for m in sorted(measures, key=lambda m: (m.corpus, order.index(m.step))):
        ratio = m.peak_mb / baseline[m.step].peak_mb
        step = m.step
        if m.jobs < m.shards:
            step = f"{m.step} ({m.jobs} of {m.shards} shard jobs: {m.notes:,} notes)"
        elif m.shards > 1:
            step = f"{m.step} ({m.shards} shard jobs)"
        rows.append(
            f"| {m.corpus:,} | {step} | {m.seconds:,.1f} | {m.notes / m.seconds:,.0f} "
            f"| {m.peak_mb:,.0f} | {ratio:.2f}x |"
        )
    return "\n".join(rows)


def shard_table(records: list[Record], shards: int) -> str:
    """Markdown: one row per recorded shard job of one size, in shard order."""
    rows = [
        "| shard | notes | wall s | notes/s | peak RSS MB | finished (UTC) |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(records, key=lambda r: shard_index(r["key"]) or 0):
        notes = r.get("notes")
        rate = "n/a" if notes is None else f"{notes / r['seconds']:,.1f}"
        rows.append(
            f"| {shard_index(r['key'])} of {shards} | {'n/a' if notes is None else f'{notes:,}'} "
            f"| {r['seconds']:,.0f} | {rate} | {r['peak_mb']:,.0f} | {r['finished']} |"
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
    parser.add_argument(
        "--deid-shards",
        type=positive_int,
        default=1,
        help="predict-ner as this many shard jobs, then gather-shards (default: %(default)s)",
    )
    parser.add_argument(
        "--deid-chunk-notes",
        type=positive_int,
        default=None,
        help="predict-ner's --chunk-notes, the unit shards are cut in (default: its own)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with --work-dir: reuse the jobs an earlier run recorded there, run the rest",
    )
    parser.add_argument(
        "--only-shards",
        type=positive_int,
        nargs="+",
        default=None,
        metavar="I",
        help="run only these of the --deid-shards jobs (the others are left to other runs "
        "over the same --work-dir); the gather waits until every shard is recorded",
    )
    args = parser.parse_args()
    if args.only_shards is not None:
        if args.deid_model is None:
            parser.error("--only-shards needs --deid-model (it picks de-identification shards)")
        if max(args.only_shards) > args.deid_shards:
            parser.error(
                f"--only-shards {max(args.only_shards)}: above --deid-shards {args.deid_shards}"
            )
    if min(args.sizes) < 1:
        parser.error("--sizes must be positive")
    if args.resume and args.work_dir is None:
        parser.error("--resume needs --work-dir (the folder of the run to resume)")
    deid = None
    if args.deid_model is not None:
        if not is_model_directory(args.deid_model):
            parser.error(
                f"--deid-model {args.deid_model}: not a trained model, ensemble or stacker directory"
            )
        deid = Deid(
            args.deid_model.resolve(),
            args.deid_precision,
            args.deid_threads,
            args.deid_shards,
            args.deid_chunk_notes,
        )
    env = {**os.environ, "SYNTHDEID_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        measures: list[Measure] = []
        shard_tables: list[str] = []
        only = None if args.only_shards is None else frozenset(args.only_shards)
        for n_notes in sorted(set(args.sizes)):
            size, shards = measure_size(n_notes, work, env, args.format, deid, args.resume, only)
            measures += size
            if shards and deid is not None:
                shard_tables.append(f"N={n_notes:,}:\n\n{shard_table(shards, deid.shards)}")
            if args.work_dir is None:
                shutil.rmtree(work / f"n{n_notes}")  # a million notes is about 600 MB on disk
    print("\n\n".join([table(measures), *shard_tables]))


if __name__ == "__main__":
    main()
