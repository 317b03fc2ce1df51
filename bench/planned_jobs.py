"""Every job each shipped config plans, as one JSON file: what a refactor must not change.

For every config combination the docs name, ``snakemake --dry-run --forceall``
lists each job's rule and output files; the file written maps the combination
to its sorted ``rule: outputs`` lines. Two such files from before and after a
change compare with ``diff`` (or ``--compare OTHER``); equal files mean the
change planned exactly the same jobs. PhysioNet combinations need
``PHYSIONET_DEID_DIR`` and are skipped without it.

    python bench/planned_jobs.py --out /tmp/before.json
    python bench/planned_jobs.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from synthdeid.workflow.dry_run import planned_jobs

ROOT = Path(__file__).resolve().parents[1]
# planning only checks that a strong-looking secret is set; a dry run replaces nothing
DRY_RUN_SECRET = secrets.token_hex(32)

# the shipped combinations: overlays on the demo default or on config/physionet.yaml
STUDY = (
    "physionet.yaml",
    "llm-physionet-qwen.yaml",
    "dplm-smollm2.yaml",
    "physionet-study.yaml",
    "physionet-study-cpu.yaml",
)
COMBINATIONS: dict[str, tuple[str, ...]] = {
    "demo": (),
    "demo+llm-local": ("llm-local.yaml",),
    "demo+llm-local-server": ("llm-local-server.yaml",),
    "demo+tabular-extraction-qwen": ("tabular-extraction-qwen.yaml",),
    "physionet": ("physionet.yaml",),
    "demo+cross-physionet": ("cross-physionet.yaml",),
    "physionet+llm-qwen": ("physionet.yaml", "llm-physionet-qwen.yaml"),
    "physionet+llm-server": ("physionet.yaml", "llm-physionet-server.yaml"),
    "physionet+dplm-smollm2": ("physionet.yaml", "dplm-smollm2.yaml"),
    "physionet+deploy-cpu": ("physionet.yaml", "physionet-deploy-cpu.yaml"),
    "physionet-study-cpu": STUDY,
    "physionet-study-cpu-fp32": (*STUDY[:-1], "physionet-study-cpu-fp32.yaml"),
}


def planned(files: tuple[str, ...]) -> list[str]:
    """``rule: output ...`` of every job a forced dry run plans, sorted."""
    args = [sys.executable, "-m", "snakemake", "--dry-run", "--forceall", "--cores", "2"]
    if files:
        args += ["--configfile", *(str(ROOT / "config" / f) for f in files)]
    env = {k: v for k, v in os.environ.items() if k != "SYNTHDEID_SECRET"}
    if "physionet.yaml" in files:  # its surrogates need a secret; a dry run uses none
        env["SYNTHDEID_SECRET"] = os.environ.get("SYNTHDEID_SECRET", DRY_RUN_SECRET)
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"dry run of {files} failed:\n{result.stderr[-2000:]}")
    return sorted(f"{rule}: {outputs}" for rule, outputs in planned_jobs(result.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compare", type=Path, help="an earlier file to compare with")
    args = parser.parse_args()
    have_corpus = bool(os.environ.get("PHYSIONET_DEID_DIR"))
    plans = {}
    for name, files in COMBINATIONS.items():
        if any("physionet" in f for f in files) and not have_corpus:
            print(f"{name}: skipped (PHYSIONET_DEID_DIR is not set)")
            continue
        plans[name] = planned(files)
        print(f"{name}: {len(plans[name])} jobs")
    args.out.write_text(json.dumps(plans, indent=1) + "\n")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    changed = [n for n in sorted(set(before) | set(plans)) if before.get(n) != plans.get(n)]
    for name in changed:
        gone = sorted(set(before.get(name, [])) - set(plans.get(name, [])))
        new = sorted(set(plans.get(name, [])) - set(before.get(name, [])))
        print(f"{name}: {len(gone)} jobs gone, {len(new)} new", *gone[:5], *new[:5], sep="\n  ")
    print("every combination plans the same jobs" if not changed else f"{len(changed)} differ")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
