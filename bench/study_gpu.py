"""The study's pending runs on one lent GPU machine: the CPU profile's queue in one lease.

On 2 CPU cores the queue (bench/study_queue.py) trains a run in 40 to 60 minutes;
one GPU trains every pending run in minutes, as the same Snakemake jobs with the same
configs (the CPU profile pins fp32, so a run's number format does not depend on where
it trained; run.json records the device's time). A lent machine starts bare (Python
with torch, no Snakemake, no project packages), takes at most 64 MiB a call (the
tracked tree included) and keeps /tmp only while it stays warm between calls, so:

    # here: the wheels the machine lacks (bench/study/gpu-wheels.txt, pinned by the lock)
    python bench/study_gpu.py wheels --out .gpu/wheels
    # here: the state Snakemake needs (what the planned jobs read of results/, its
    # checksum records, the corpus), the wheels and the project's own, in upload parts
    python bench/study_gpu.py pack --queue bench/study/physionet-cpu.txt \\
        --archive docs/results/physionet-study-full-runs --corpus physionet \\
        --wheels .gpu/wheels --out .gpu/study --host-jobs -- --configfile <the five files>
    # there: each part back to back (carry .gpu/study/upN), then the run
    bench/study/run-on-gpu.sh upload N       # N = 1 .. the parts pack printed
    bench/study/run-on-gpu.sh run SECONDS    # carry .gpu/study/run
    # here: the finished runs' archive folders into the committed archive
    python bench/study_gpu.py unpack --bundle <files_at> \\
        --archive docs/results/physionet-study-full-runs

``device`` (called by run-on-gpu.sh there) joins and installs the wheels, unpacks
the state and the corpus (at the absolute path it has here, so Snakemake's records
match), runs ``snakemake --keep-going`` on the pending runs' archive targets until
``--deadline`` seconds (then it interrupts Snakemake, which stops its jobs; what
finished is kept), and writes into ``--out`` ``archives.tar`` (each finished run's
archive folder and the plan: per-document counts with hashed note ids, no text),
``summary.json`` and Snakemake's log.

Pools that need an LLM server or a bundled GGUF (the Qwen templates, the DP-LM
samples) are built here: pack refuses when the pending runs' plan would build one
there, unless ``--host-jobs`` runs those jobs here first (Snakemake ``--until``
them; the Qwen templates need the LLM server started, as for study_queue.py), or
``--allow RULE`` says such a rule needs neither (the demo's offline template backend).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Literal

from study_queue import PLAN, RUN_RECORD, copy_into, pending, read_queue, skipped_runs

PART_BYTES = 48 * 2**20  # one call carries 64 MiB, the tracked tree (about 11) included
STATE = "state.tar"
CORPUS = "corpus.tar"
MANIFEST = "manifest.json"
SECRET = "secret"
ARCHIVES = "archives.tar"
SUMMARY = "summary.json"
LOG_TAIL_BYTES = 4 * 2**20  # of Snakemake's log, back in --out (a returned file's limit is 16)
# rules whose jobs need what the lent machine lacks: an LLM server (templates, the
# verbalizer), the bundled SmolLM2 GGUF (the DP language model)
HOST_ONLY_RULES = ("generate_templates", "train_dp_lm", "sample_dp_lm", "verbalize_tabular")


def state_members(root: Path, needed: Iterable[str]) -> list[Path]:
    """The files Snakemake there needs to plan what it plans here: of ``results/``, what
    the planned jobs read (a folder whole), and all its checksum records and benchmark
    files. The rest (trained models whose samples exist, archived runs' models) stays."""
    inputs = [root / path for path in needed if Path(path).parts[:1] == ("results",)]
    members: list[Path] = []
    for base in [*inputs, root / ".snakemake/metadata", root / "benchmarks"]:
        files = sorted(base.rglob("*")) if base.is_dir() else [base]
        members.extend(path.relative_to(root) for path in files if path.is_file())
    return sorted(set(members))


def write_tar(path: Path, root: Path, members: Sequence[Path]) -> None:
    """A tar of ``members`` (relative to ``root``), modification times kept; atomic."""
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as handle:
        scratch = Path(handle.name)
    try:
        with tarfile.open(scratch, "w") as tar:
            for member in members:
                tar.add(root / member, arcname=str(member), recursive=False)
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)


def plan_parts(
    sizes: dict[str, int], part_bytes: int = PART_BYTES
) -> list[list[tuple[str, int, int]]]:
    """Files into upload parts of at most ``part_bytes``: (name, offset, length) pieces,
    a file larger than what is left of a part split across parts (first fit, largest first)."""
    parts: list[list[tuple[str, int, int]]] = [[]]
    free = part_bytes
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        offset, left = 0, sizes[name]
        while left > 0:
            if free == 0:
                parts.append([])
                free = part_bytes
            length = min(left, free)
            parts[-1].append((name, offset, length))
            offset, left, free = offset + length, left - length, free - length
    return [part for part in parts if part]


def write_parts(source: Path, out: Path, part_bytes: int = PART_BYTES) -> dict[str, list[str]]:
    """Copy the files of ``source`` into ``out/up1``, ``up2``, ... as pieces
    ``<name>.<k>``; returns each file's pieces in order, as ``upN/<name>.<k>``."""
    sizes = {path.name: path.stat().st_size for path in source.iterdir() if path.is_file()}
    pieces: dict[str, list[str]] = {name: [] for name in sizes}
    for index, part in enumerate(plan_parts(sizes, part_bytes), start=1):
        folder = out / f"up{index}"
        folder.mkdir(parents=True)
        for name, offset, length in part:
            piece = f"{name}.{len(pieces[name])}"
            with (source / name).open("rb") as src, (folder / piece).open("wb") as dst:
                src.seek(offset)
                dst.write(src.read(length))
            pieces[name].append(f"{folder.name}/{piece}")
    return pieces


def join_pieces(uploads: Path, pieces: dict[str, list[str]], into: Path) -> list[Path]:
    """The files ``write_parts`` split, whole again under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    joined = []
    for name, names in sorted(pieces.items()):
        with (into / name).open("wb") as dst:
            for piece in names:
                with (uploads / piece).open("rb") as src:
                    shutil.copyfileobj(src, dst)
        joined.append(into / name)
    return joined


SNAKEMAKE = (sys.executable, "-m", "snakemake")


def dry_run(targets: Sequence[str], snakemake_args: Sequence[str]) -> str:
    """Snakemake's printed plan for ``targets``."""
    result = subprocess.run(
        [*SNAKEMAKE, "--dry-run", *targets, *snakemake_args],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"snakemake --dry-run failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return result.stdout


def host_only_rules(rules: dict[str, int], allow: Sequence[str]) -> list[str]:
    """The planned rules that must run here (:data:`HOST_ONLY_RULES`), less ``allow``."""
    return sorted(rule for rule in rules if rule in HOST_ONLY_RULES and rule not in allow)


def pack(args: argparse.Namespace) -> int:
    # here, not at the top: `device` runs on the lent machine before the project is installed
    from synthdeid.workflow.dry_run import job_table, planned_inputs

    root = Path.cwd()
    queue = read_queue(args.queue)
    plan = root / "results/plan_runs" / args.corpus / PLAN
    skipped = skipped_runs(plan) | skipped_runs(args.archive / PLAN)
    todo = pending(queue, args.archive, skipped)
    if not todo:
        print("every queued run is archived or skipped: nothing to pack")
        return 0
    targets = [f"results/archive_run/{args.corpus}/{run}/{RUN_RECORD}" for run in todo]
    planned = dry_run(targets, args.snakemake)
    host_only = host_only_rules(job_table(planned), args.allow)
    if host_only and args.host_jobs:
        # those jobs here, and nothing after them; the pools then travel with the state.
        # One rule a call: Snakemake 9 stops short of a second --until rule that needs
        # the first (snakemake/snakemake#823); each call builds what its rule needs.
        for rule in host_only:
            until = [*SNAKEMAKE, "--cores", str(args.cores), *targets, "--until", rule]
            print("+", " ".join([*until[:4], "...", "--until", rule]), flush=True)
            subprocess.run([*until, *args.snakemake], check=True)
        planned = dry_run(targets, args.snakemake)
        host_only = host_only_rules(job_table(planned), args.allow)
    if host_only:
        raise SystemExit(
            f"the pending runs would run {', '.join(host_only)} on the lent machine, which "
            "has no LLM server or bundled GGUF: run them here first (--host-jobs)"
        )
    if args.corpus_env and not os.environ.get(args.corpus_env):
        raise SystemExit(f"${args.corpus_env} names no corpus folder (--corpus-env '' for none)")
    corpus_dir = Path(os.environ[args.corpus_env]).resolve() if args.corpus_env else None
    staged = args.out.with_name(args.out.name + ".partial")
    if staged.exists():
        shutil.rmtree(staged)
    try:
        # and the plan of degenerate arms, which comes back with the archives
        needed = [*planned_inputs(planned), str(plan.relative_to(root))]
        summary = stage_pack(args, root, staged, needed, targets, job_table(planned), corpus_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if args.out.exists():
        shutil.rmtree(args.out)
    staged.rename(args.out)
    print(f"{len(todo)} pending runs {summary} in {args.out}")
    return 0


def stage_pack(
    args: argparse.Namespace,
    root: Path,
    out: Path,
    needed: Sequence[str],
    targets: Sequence[str],
    rules: dict[str, int],
    corpus_dir: Path | None,
) -> str:
    """Write the run folder and the upload parts into ``out`` for the planned jobs
    (``rules``), which read ``needed``; a line saying what they hold."""
    run_folder = out / "run"
    run_folder.mkdir(parents=True)
    write_tar(run_folder / STATE, root, state_members(root, needed))
    if corpus_dir is not None:
        files = [p.relative_to(corpus_dir) for p in sorted(corpus_dir.rglob("*")) if p.is_file()]
        write_tar(run_folder / CORPUS, corpus_dir, files)
    secret = os.environ.get("SYNTHDEID_SECRET")
    if secret:
        (run_folder / SECRET).write_text(secret, "utf-8")
        (run_folder / SECRET).chmod(0o600)
    pieces = {}
    if args.wheels:
        with tempfile.TemporaryDirectory() as staging:
            for wheel in args.wheels.glob("*.whl"):
                shutil.copy2(wheel, staging)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "-q",
                    "--no-deps",
                    "--no-build-isolation",
                    "-w",
                    staging,
                    str(root),
                ],
                check=True,
            )
            pieces = write_parts(Path(staging), out)
    manifest = {
        "corpus": args.corpus,
        "targets": list(targets),
        "snakemake_args": list(args.snakemake),
        "corpus_env": args.corpus_env,
        "corpus_dir": str(corpus_dir) if corpus_dir else None,
        "wheels": pieces,
        "planned_jobs": rules,
    }
    (run_folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    run_bytes = sum(p.stat().st_size for p in run_folder.iterdir())
    if run_bytes > PART_BYTES:
        raise SystemExit(
            f"{run_folder} holds {run_bytes / 2**20:.1f} MiB, more than one call carries "
            f"beside the tree ({PART_BYTES / 2**20:.0f})"
        )
    uploads = sorted(p.name for p in out.glob("up*"))
    return (
        f"({sum(rules.values())} jobs: "
        + ", ".join(f"{rule} {n}" for rule, n in rules.items())
        + f"); run folder {run_bytes / 2**20:.1f} MiB; upload parts: {', '.join(uploads) or 'none'}"
    )


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: Path, names: Sequence[str]) -> dict[str, str]:
    """``name==version`` pins of ``names`` from a requirements lock (names normalized)."""
    pins = {}
    for line in lock.read_text("utf-8").splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            pins[normalized(name)] = version
    missing = sorted(name for name in names if normalized(name) not in pins)
    if missing:
        raise SystemExit(f"{lock} pins no version of {', '.join(missing)}")
    return {name: pins[normalized(name)] for name in names}


def wheels(args: argparse.Namespace) -> int:
    """Download the listed packages' wheels for the machine's Python; build the sdist-only
    ones here (pure Python)."""
    names = read_queue(args.names)  # one name a line, # comments: the queue file's format
    args.out.mkdir(parents=True, exist_ok=True)
    platform = [f"--platform=manylinux_2_{minor}_x86_64" for minor in (28, 27, 24, 17)] + [
        "--platform=manylinux2014_x86_64"
    ]
    for name, version in locked_versions(args.lock, names).items():
        pin = f"{name}=={version}"
        binary = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                f"--python-version={args.python}",
                "--implementation=cp",
                *platform,
                "-d",
                str(args.out),
                pin,
            ],
            capture_output=True,
            check=False,
        )
        if binary.returncode != 0:
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(args.out), pin],
                check=True,
            )
    files = sorted(args.out.glob("*.whl"))
    total = sum(f.stat().st_size for f in files)
    print(f"{len(files)} wheels, {total / 2**20:.1f} MiB in {args.out}")
    return 0


def install_wheels(wheels: Sequence[Path], site: Path) -> None:
    if not wheels:
        return
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(site),
            *map(str, wheels),
        ],
        check=True,
    )


def run_until(
    command: Sequence[str], env: dict[str, str], log: IO[str], budget: float, grace: float
) -> int | None:
    """Run ``command`` in its own process group; at ``budget`` seconds interrupt the
    group (Snakemake stops its jobs and marks their outputs incomplete), after
    ``grace`` more kill it. Its return code, None where it was interrupted."""
    process = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return process.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return None


def extract(archive: Path, into: Path, kind: Literal["tar", "data"]) -> None:
    """Unpack a tar with the ``kind`` extraction filter ("tar": keep modification times
    and modes; "data": refuse links and paths out of ``into`` as well); Pythons before
    3.11.4 have no filters and extract as "tar" does."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter=kind)
        else:
            tar.extractall(into)


def finished_runs(targets: Sequence[str]) -> list[Path]:
    return [Path(t).parent for t in targets if Path(t).is_file()]


def device(args: argparse.Namespace) -> int:
    started = time.monotonic()
    manifest = json.loads((args.run / MANIFEST).read_text("utf-8"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", SLURM_CONF="/dev/null")
    args.work.mkdir(parents=True, exist_ok=True)
    if manifest["wheels"] and not args.no_install:
        site = args.work / "site"
        installed = site / ".installed"  # a second run on the same warm machine skips it
        if not installed.is_file():
            install_wheels(
                join_pieces(args.uploads, manifest["wheels"], args.work / "wheels"), site
            )
            installed.touch()
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(":")
        env["PATH"] = f"{site / 'bin'}{os.pathsep}{env['PATH']}"
    extract(args.run / STATE, Path.cwd(), "tar")
    if manifest["corpus_dir"]:
        corpus_dir = Path(manifest["corpus_dir"])
        if not corpus_dir.is_dir():
            corpus_dir.mkdir(parents=True)
            extract(args.run / CORPUS, corpus_dir, "tar")
        env[manifest["corpus_env"]] = str(corpus_dir)
    if (args.run / SECRET).is_file():
        env["SYNTHDEID_SECRET"] = (args.run / SECRET).read_text("utf-8").strip()
    budget = max(args.deadline - (time.monotonic() - started), 1)
    command = [
        *SNAKEMAKE,
        "--cores",
        str(args.cores),
        "--resources",
        f"gpu={args.gpu_jobs}",
        "--keep-going",
        # a run interrupted at an earlier deadline on this machine: its jobs again
        "--rerun-incomplete",
        "--nolock",
        *manifest["targets"],
        *manifest["snakemake_args"],
    ]
    print("+", " ".join(command), flush=True)
    log_path = args.work / "snakemake.log"
    with log_path.open("w") as log:
        rc = run_until(command, env, log, budget, args.grace)
    with log_path.open("rb") as log, (args.out / "snakemake.log").open("wb") as tail:
        log.seek(max(log_path.stat().st_size - LOG_TAIL_BYTES, 0))
        tail.write(log.read())
    done = finished_runs(manifest["targets"])
    plan = Path("results/plan_runs") / manifest["corpus"] / PLAN
    with tarfile.open(args.out / ARCHIVES, "w") as tar:
        for folder in done:
            tar.add(folder, arcname=folder.name)
        if plan.is_file():
            tar.add(plan, arcname=PLAN)
    summary = {
        "snakemake_returncode": rc,
        "deadline_s": args.deadline,
        "wall_s": round(time.monotonic() - started, 1),
        "archived": [folder.name for folder in done],
        "not_done": [Path(t).parent.name for t in manifest["targets"] if not Path(t).is_file()],
    }
    (args.out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    print(f"{len(done)} of {len(manifest['targets'])} runs archived in {summary['wall_s']} s")
    return 0


def unpack(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        extract(args.bundle / ARCHIVES, Path(scratch), "data")
        names = sorted(p.name for p in Path(scratch).iterdir())
        runs = [name for name in names if (Path(scratch) / name / RUN_RECORD).is_file()]
        for name in runs:
            copy_into(Path(scratch) / name, args.archive)
        if PLAN in names:
            copy_into(Path(scratch) / PLAN, args.archive)
    print(f"{len(runs)} runs into {args.archive}: {', '.join(runs) or 'none'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    packer = sub.add_parser("pack", help="here: state, corpus and wheels in upload parts")
    packer.add_argument("--queue", type=Path, required=True)
    packer.add_argument("--archive", type=Path, required=True)
    packer.add_argument("--corpus", required=True, help="the corpus name of the config")
    packer.add_argument(
        "--corpus-env", default="PHYSIONET_DEID_DIR", help="the variable naming the corpus folder"
    )
    packer.add_argument("--wheels", type=Path, default=None, help="wheels the machine lacks")
    packer.add_argument("--out", type=Path, required=True)
    packer.add_argument(
        "--allow", nargs="*", default=[], help="host-only rules that may run there after all"
    )
    packer.add_argument(
        "--host-jobs", action="store_true", help="run the host-only jobs here first (--cores)"
    )
    packer.add_argument("--cores", type=int, default=2, help="for --host-jobs")
    packer.add_argument("snakemake", nargs=argparse.REMAINDER)
    runner = sub.add_parser("device", help="there: install, unpack, run until the deadline")
    runner.add_argument("--run", type=Path, required=True, help="the carried run folder")
    runner.add_argument("--uploads", type=Path, required=True, help="where the parts were put")
    runner.add_argument("--work", type=Path, required=True, help="scratch for wheels and site")
    runner.add_argument("--out", type=Path, required=True)
    runner.add_argument("--deadline", type=float, required=True, help="seconds, all included")
    runner.add_argument("--cores", type=int, default=16)
    runner.add_argument("--gpu-jobs", type=int, default=8, help="trainings at once on the GPU")
    runner.add_argument("--grace", type=float, default=60, help="seconds to stop after it")
    runner.add_argument("--no-install", action="store_true", help="use this environment")
    fetcher = sub.add_parser("wheels", help="here: the wheels the machine lacks")
    fetcher.add_argument("--names", type=Path, default=Path("bench/study/gpu-wheels.txt"))
    fetcher.add_argument("--lock", type=Path, default=Path("envs/requirements-cpu.lock"))
    fetcher.add_argument("--python", default="3.12", help="the machine's Python version")
    fetcher.add_argument("--out", type=Path, required=True)
    unpacker = sub.add_parser("unpack", help="here: the finished runs into the archive")
    unpacker.add_argument("--bundle", type=Path, required=True)
    unpacker.add_argument("--archive", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "pack":
        args.snakemake = args.snakemake[1:] if args.snakemake[:1] == ["--"] else args.snakemake
    commands = {"wheels": wheels, "pack": pack, "device": device, "unpack": unpack}
    return commands[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
