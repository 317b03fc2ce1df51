"""What a Snakemake dry run (``snakemake --dry-run``) says it would do.

Three readings of its printed plan: the job table (rule -> jobs), each job's rule
and outputs, and the files the planned jobs read that no planned job writes, which is
all of ``results/`` a copy of the workflow needs to run the same jobs elsewhere. Snakemake does not rebuild a
file whose consumers are all up to date (a trained DP language model, once its
samples exist), so what the planned jobs do not read can stay behind.
"""

from __future__ import annotations

import re

_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_FILES = re.compile(r"^\s+(input|output|log|benchmark): (.+)$")
WRITTEN = ("output", "log", "benchmark")


def job_table(output: str) -> dict[str, int]:
    """Rule -> count from the first "Job stats" table of Snakemake's output; {} when
    it prints none (nothing to be done)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Job stats:")), None)
    jobs: dict[str, int] = {}
    if start is None:
        return jobs
    for line in lines[start + 3 :]:  # past the header and its rule
        fields = line.split()
        if len(fields) != 2 or fields[0] == "total" or not fields[1].isdigit():
            break
        jobs[fields[0]] = int(fields[1])
    return jobs


def planned_jobs(output: str) -> list[tuple[str, str]]:
    """(rule, its outputs as printed) of every job block of the dry run, in the order
    printed; a job without outputs (a target rule) is left out."""
    jobs = []
    rule = None
    for line in output.splitlines():
        header = _JOB.match(line)
        if header:
            rule = header.group(1)
            continue
        match = _FILES.match(line)
        if match and match.group(1) == "output" and rule is not None:
            jobs.append((rule, match.group(2)))
            rule = None
    return jobs


def planned_inputs(output: str) -> list[str]:
    """The files the planned jobs read that none of them writes, sorted: the "input:"
    lines of the dry run's job blocks less their "output:", "log:" and "benchmark:"
    lines (paths hold no ", ", which Snakemake prints between them)."""
    read: set[str] = set()
    written: set[str] = set()
    for line in output.splitlines():
        match = _FILES.match(line)
        if match:
            (written if match.group(1) in WRITTEN else read).update(match.group(2).split(", "))
    return sorted(read - written)
