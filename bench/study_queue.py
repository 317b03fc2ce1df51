"""Train a study's runs a few at a time into a committed archive (the CPU profile).

A study on 2 CPU cores is days of training, more than one machine keeps. The
queue file lists the study's runs in the order they are trained (one per line,
``#`` starts a comment). Each call trains the next ``--next`` runs that the
archive folder does not hold yet, one Snakemake call each, and copies each
finished run's ``results/archive_run/<corpus>/<run>/`` folder and the plan
(``results/plan_runs/<corpus>/plan.json``, which names degenerate arms) into
the archive; commit the archive after each call. Runs of degenerate arms (the
plan's ``skipped_runs``) are passed over. A run cut short (a signal, the
machine gone) is taken up by the next call: Snakemake reruns its incomplete
step, and ``train_ner`` goes on from its last finished epoch (its ``resume/``
folder, :mod:`synthdeid.ner.resume`). Everything after ``--`` goes to Snakemake
(the config files):

    python bench/study_queue.py --queue bench/study/physionet-cpu.txt \\
      --archive docs/results/physionet-study-full-runs --corpus physionet --next 2 \\
      -- --configfile config/physionet.yaml config/llm-physionet-qwen.yaml \\
         config/dplm-smollm2.yaml config/physionet-study.yaml config/physionet-study-cpu.yaml
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path

RUN_RECORD = "run.json"
PLAN = "plan.json"


def read_queue(path: Path) -> list[str]:
    """The run names of a queue file, in order (comments and blank lines dropped)."""
    runs = [line.split("#", 1)[0].strip() for line in path.read_text("utf-8").splitlines()]
    named = [run for run in runs if run]
    repeated = sorted({run for run in named if named.count(run) > 1})
    if repeated:
        raise SystemExit(f"{path}: runs listed twice: {', '.join(repeated)}")
    return named


def skipped_runs(plan: Path) -> set[str]:
    """The runs a plan does not train (degenerate arms); none without a plan yet."""
    if not plan.is_file():
        return set()
    return set(json.loads(plan.read_text("utf-8")).get("skipped_runs", []))


def pending(queue: Sequence[str], archive: Path, skipped: Collection[str]) -> list[str]:
    """The queued runs neither archived nor skipped, in queue order."""
    return [
        run for run in queue if run not in skipped and not (archive / run / RUN_RECORD).is_file()
    ]


def copy_into(source: Path, archive: Path) -> None:
    """Copy a run's archive folder (or the plan) into the archive, replacing it whole."""
    archive.mkdir(parents=True, exist_ok=True)
    target = archive / source.name
    with tempfile.TemporaryDirectory(dir=archive) as scratch:
        staged = Path(scratch) / source.name
        if source.is_dir():
            shutil.copytree(source, staged)
        else:
            shutil.copy2(source, staged)
        if target.is_dir():
            shutil.rmtree(target)
        staged.replace(target)


def snakemake_command(target: Path, cores: int, extra: Sequence[str]) -> list[str]:
    """The Snakemake call that trains and archives one run; a step a stopped call left
    incomplete is run again (and train_ner resumes), not refused."""
    return ["snakemake", "--cores", str(cores), "--rerun-incomplete", str(target), *extra]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=Path, required=True, help="runs in training order")
    parser.add_argument("--archive", type=Path, required=True, help="the committed archive")
    parser.add_argument("--corpus", required=True, help="the corpus name of the config")
    parser.add_argument("--next", type=int, default=1, help="runs to train in this call")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="list the runs only")
    parser.add_argument("snakemake", nargs=argparse.REMAINDER, help="-- then Snakemake arguments")
    args = parser.parse_args(argv)
    extra = args.snakemake[1:] if args.snakemake[:1] == ["--"] else args.snakemake
    plan = Path("results/plan_runs") / args.corpus / PLAN
    queue = read_queue(args.queue)
    todo = pending(queue, args.archive, skipped_runs(plan) | skipped_runs(args.archive / PLAN))
    print(
        f"{len(queue) - len(todo)} of {len(queue)} queued runs archived or skipped; next: "
        f"{', '.join(todo[: args.next]) or 'none'}",
        flush=True,
    )
    if args.dry_run:
        return 0
    for run in todo[: args.next]:
        if run in skipped_runs(plan):
            continue  # the plan, first built by the call before, makes it degenerate
        target = Path("results/archive_run") / args.corpus / run / RUN_RECORD
        command = snakemake_command(target, args.cores, extra)
        print("+", " ".join(command), flush=True)
        if subprocess.run(command, check=False).returncode != 0:
            print(f"{run}: snakemake failed; the archive is unchanged for it", file=sys.stderr)
            return 1
        copy_into(target.parent, args.archive)
        if plan.is_file():
            copy_into(plan, args.archive)
        print(f"{run}: archived into {args.archive / run}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
