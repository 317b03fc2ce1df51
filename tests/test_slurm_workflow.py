"""The workflow run through a REAL single-node SLURM cluster with profiles/slurm.

tests/slurm/start-slurm.sh installs Debian's slurm-wlm and munge if missing and starts
munged, slurmctld and slurmd on this machine (loopback only) with two fake GPUs; the
workflow is copied into a temporary directory and one job of each kind (TARGETS) is run
with ``snakemake --profile profiles/slurm``, so every non-local rule goes through sbatch
and squeue. The tests then check the artifacts, that each rule job left a SLURM log and a
job id that slurmctld knows, and that the GPU rule (``gpu=1``) got a GPU allocation.

Opt-in, because it installs packages and starts root daemons:

    SYNTHDEID_SLURM_TESTS=1 python -m pytest tests/test_slurm_workflow.py -x -q -s

The cluster is always stopped again (tests/slurm/stop-slurm.sh), even when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from synthdeid.shards import shard_path
from workflow_helpers import PLUMBING, copy_workflow

REPO = Path(__file__).resolve().parents[1]
SLURM_SCRIPTS = REPO / "tests" / "slurm"
VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = VENV_BIN / "snakemake"
# One job of every kind the profile dispatches, not the whole demo DAG (the local
# workflow tests run that): the GPU rule, one run from ingest to evaluation (train_ner
# asks for a GPU too), masking and surrogates (sharded below), the template regime with
# its LLM server, the DP language model and one DP tabular synthesizer: 15 jobs here
# against 68 for `all`, which ran past 25 minutes on a slow CI machine.
TARGETS = (
    "probe_gpu_env",
    "results/evaluate_ner/demo/real_only/metrics.json",
    "results/replace_surrogates/demo/notes.parquet",
    "results/fill_templates/demo/pii.parquet",
    "results/train_dp_lm/demo/dp/privacy.json",
    "results/fit_dp_tabular/breast_cancer/mst/eps3/privacy.json",
)
GPU_RULE = "probe_gpu_env"
FAKE_GPUS = 2
SNAKEMAKE_TIMEOUT_S = 1500
# outputs of the targets, as globs below the run directory (the corpus name may be a
# path segment: results/ingest_corpus/<corpus>/notes.parquet)
EXPECTED_ARTIFACTS = (
    "results/ingest_corpus/**/notes.parquet",
    "results/split_notes/**/notes.parquet",
    "results/mask_seeds/**/masked.parquet",
    "results/mask_seeds/**/local/removed_values.parquet",
    "results/replace_surrogates/**/notes.parquet",
    "results/probe_gpu_env/**/environment.json",
    "results/fill_templates/**/pii.parquet",
    "results/train_dp_lm/**/privacy.json",
    "results/fit_dp_tabular/**/mst/**/privacy.json",
    "results/train_ner/**/model/synthdeid_ner.json",
    "results/evaluate_ner/**/metrics.json",
)


def _skip_reason() -> str | None:
    if os.environ.get("SYNTHDEID_SLURM_TESTS") != "1":
        return (
            "real SLURM test is opt-in: set SYNTHDEID_SLURM_TESTS=1 (it apt-installs "
            "slurm-wlm + munge and starts root daemons via tests/slurm/start-slurm.sh)"
        )
    if os.geteuid() != 0:
        return "real SLURM test needs root (it installs packages and starts slurmctld/slurmd)"
    return None


pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or ""),
]

# "Job 3 has been submitted with SLURM jobid 17 (log: /.../rule_mask_seeds/demo/17.log)."
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.")
# "rule mask_seeds:" starts a job that goes to SLURM; local jobs print "localrule all:"
RULE_JOB = re.compile(r"^rule (\w+):", re.MULTILINE)


@dataclass
class WorkflowRun:
    workdir: Path
    returncode: int
    output: str
    seconds: float

    @property
    def slurm_logdir(self) -> Path:
        # the plugin's default: <working directory>/.snakemake/slurm_logs/rule_<rule>/...
        return self.workdir / ".snakemake" / "slurm_logs"

    def slurm_logs(self) -> list[Path]:
        return sorted(self.slurm_logdir.rglob("*.log")) if self.slurm_logdir.is_dir() else []

    def diagnostics(self, lines: int = 60) -> str:
        """The tail of the snakemake output and of every SLURM log, for failure messages."""
        parts = [f"--- snakemake (exit {self.returncode}), last {lines} lines ---"]
        parts += self.output.splitlines()[-lines:]
        logs = self.slurm_logs()
        if not logs:
            parts.append(f"--- no SLURM logs under {self.slurm_logdir} ---")
        for log in logs:
            parts.append(f"--- {log.relative_to(self.workdir)}, last 30 lines ---")
            parts += log.read_text(errors="replace").splitlines()[-30:]
        return "\n".join(parts)


@pytest.fixture(scope="module", autouse=True)
def _real_slurm_conf(slurm_conf_at_start: str | None) -> Iterator[None]:
    """The SLURM configuration the session started with, not conftest's empty one."""
    with pytest.MonkeyPatch.context() as env:
        if slurm_conf_at_start is None:
            env.delenv("SLURM_CONF", raising=False)
        else:
            env.setenv("SLURM_CONF", slurm_conf_at_start)
        yield


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, check=False, **kwargs)


def _slurm_env() -> dict[str, str]:
    return {**os.environ, "SLURM_CI_FAKE_GPUS": str(FAKE_GPUS)}


@pytest.fixture(scope="module")
def slurm_cluster():
    """A running single-node SLURM cluster with fake GPUs; always stopped afterwards."""
    env = _slurm_env()
    try:
        start = time.monotonic()
        proc = _run([str(SLURM_SCRIPTS / "start-slurm.sh")], env=env, timeout=900)
        print(proc.stdout, proc.stderr, sep="\n")
        if proc.returncode != 0:
            pytest.fail(
                f"start-slurm.sh failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        print(f"[slurm test] cluster up in {time.monotonic() - start:.1f}s")
        yield
    finally:
        proc = _run([str(SLURM_SCRIPTS / "stop-slurm.sh")], env=env, timeout=300)
        print(proc.stdout, proc.stderr, sep="\n")


# what the CI cluster needs beyond the shipped profile: its one partition, and quick
# status polls for a small run (below MinJobAge / 3 = 1200 s there)
CI_PROFILE_VALUES: dict[str, Any] = {
    "default-resources": {"slurm_partition": "debug"},
    "slurm-init-seconds-before-status-checks": 2,
}


def ci_profile(workdir: Path) -> Path:
    """The shipped profiles/slurm with the CI cluster's values on top, as a profile folder."""
    shipped = yaml.safe_load((REPO / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    # CI has no conda (its channels are unreachable there): jobs run in this venv, whose
    # CPU torch the fake GPUs cannot serve; SYNTHDEID_FAKE_GPUS lets probe_gpu_env record
    assert shipped.pop("software-deployment-method") == "conda"
    merged = {**shipped, **CI_PROFILE_VALUES}
    merged["default-resources"] = {
        **shipped["default-resources"],
        **CI_PROFILE_VALUES["default-resources"],
    }
    folder = workdir / "ci-profile"
    folder.mkdir(exist_ok=True)
    (folder / "config.v8+.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    return folder


@pytest.fixture(scope="module")
def workflow_run(slurm_cluster, tmp_path_factory) -> WorkflowRun:
    """The workflow copied to a temporary directory (one epoch per model, as the local
    workflow tests run it: PLUMBING) and run through SLURM once."""
    workdir = copy_workflow(REPO, tmp_path_factory.mktemp("slurm-workflow"), PLUMBING)
    return run_snakemake(workdir, [*TARGETS], ci_profile(workdir))


def run_snakemake(workdir: Path, arguments: list[str], profile: Path) -> WorkflowRun:
    """``snakemake --profile <profile> <arguments>`` in ``workdir``, through SLURM."""
    # SLURM jobs inherit this environment (sbatch --export=ALL is SLURM's default), and
    # inside each job the plugin runs `snakemake` and the rules run `synthdeid`: both
    # must resolve to this virtual environment.
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "SYNTHDEID_FAKE_GPUS": "1",
    }
    cmd = [
        "timeout", "-k", "10", str(SNAKEMAKE_TIMEOUT_S),
        str(SNAKEMAKE),
        "--profile", str(profile),
        "--directory", str(workdir),
        "--snakefile", str(workdir / "workflow" / "Snakefile"),
        # the plugin deletes the SLURM log of every successful job unless told otherwise
        "--slurm-keep-successful-logs",
        *arguments,
    ]  # fmt: skip
    print("[slurm test] running:", " ".join(cmd))
    start = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=workdir,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
        timeout=SNAKEMAKE_TIMEOUT_S + 60,
    )
    run = WorkflowRun(workdir, proc.returncode, proc.stdout, time.monotonic() - start)
    (workdir / "snakemake-output.txt").write_text(proc.stdout)
    print(f"[slurm test] snakemake exited {run.returncode} after {run.seconds:.1f}s in {workdir}")
    return run


def _job_info(jobid: str) -> dict[str, str]:
    """slurmctld's record of a job (kept for MinJobAge=3600 s after it ended)."""
    proc = _run(["scontrol", "show", "job", jobid])
    if proc.returncode == 0:
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))
    # fall back to squeue, which also covers finished jobs with --states=all
    proc = _run(["squeue", "--states=all", "-h", "-j", jobid, "-o", "%i %T %k"])
    fields = proc.stdout.split()
    if proc.returncode == 0 and fields and fields[0] == jobid:
        return {"JobId": fields[0], "JobState": fields[1], "Comment": " ".join(fields[2:])}
    return {}


def test_workflow_runs_through_slurm(workflow_run: WorkflowRun) -> None:
    assert workflow_run.returncode == 0, (
        "snakemake --profile profiles/slurm failed\n" + workflow_run.diagnostics()
    )
    missing = [
        pattern for pattern in EXPECTED_ARTIFACTS if not list(workflow_run.workdir.glob(pattern))
    ]
    assert not missing, f"artifacts missing: {missing}\n" + workflow_run.diagnostics()


def test_every_rule_job_was_a_real_slurm_job(workflow_run: WorkflowRun) -> None:
    rule_jobs = RULE_JOB.findall(workflow_run.output)
    submitted = SUBMITTED.findall(workflow_run.output)
    logs = workflow_run.slurm_logs()
    print(f"[slurm test] {len(rule_jobs)} rule jobs: {sorted(rule_jobs)}")
    for snakemake_id, slurm_id, log in submitted:
        print(f"[slurm test] snakemake job {snakemake_id} -> SLURM job {slurm_id} ({log})")
    assert GPU_RULE in rule_jobs, f"{GPU_RULE} did not run\n" + workflow_run.diagnostics()
    assert len(submitted) == len(rule_jobs), (
        f"{len(rule_jobs)} rule jobs but {len(submitted)} SLURM submissions\n"
        + workflow_run.diagnostics()
    )

    # one plugin log per rule job, named <slurm jobid>.log under rule_<rule>/
    log_ids = sorted(log.stem for log in logs)
    submitted_ids = sorted(slurm_id for _, slurm_id, _ in submitted)
    assert log_ids == submitted_ids, (
        f"SLURM logs {[str(p.relative_to(workflow_run.workdir)) for p in logs]} do not match "
        f"the submitted job ids {submitted_ids}\n" + workflow_run.diagnostics()
    )
    log_rules = sorted(log.relative_to(workflow_run.slurm_logdir).parts[0] for log in logs)
    assert log_rules == sorted(f"rule_{rule}" for rule in rule_jobs)

    # every id is a job slurmctld ran to completion, for the rule whose log names it
    for log in logs:
        rule_dir = log.relative_to(workflow_run.slurm_logdir).parts[0]
        info = _job_info(log.stem)
        print(
            f"[slurm test] SLURM job {log.stem}: {rule_dir}, state {info.get('JobState')}, "
            f"TresPerJob {info.get('TresPerJob', '-')}"
        )
        assert info, f"SLURM does not know job {log.stem} ({log})"
        assert info.get("JobState") == "COMPLETED", f"job {log.stem}: {info}"
        # the plugin's --comment: rule_<rule> or rule_<rule>_wildcards_<values>
        comment = info.get("Comment", "").strip()
        assert comment == rule_dir or comment.startswith(f"{rule_dir}_wildcards_"), (
            f"job {log.stem} ({log}) is not a {rule_dir} job: {info}"
        )


def _find_key(value: Any, key: str) -> Any:
    """The first value stored under key anywhere in nested JSON dicts/lists."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _find_key(item, key)
            if found is not None:
                return found
    return None


def test_gpu_rule_got_a_slurm_gpu(workflow_run: WorkflowRun) -> None:
    found = sorted(workflow_run.workdir.glob("results/probe_gpu_env/**/environment.json"))
    assert found, f"no environment.json from {GPU_RULE}\n" + workflow_run.diagnostics()
    environment = json.loads(found[0].read_text())
    print(f"[slurm test] {found[0].name}: {json.dumps(environment, sort_keys=True)}")

    devices = _find_key(environment, "CUDA_VISIBLE_DEVICES")
    job_id = _find_key(environment, "SLURM_JOB_ID")
    assert job_id, f"{GPU_RULE} did not run inside a SLURM job: {environment}"
    # gpu=1 -> --gpus=1 -> SLURM binds exactly one of the fake GPUs (index 0 or 1)
    fake_indices = {str(i) for i in range(FAKE_GPUS)}
    assert devices in fake_indices, (
        f"CUDA_VISIBLE_DEVICES={devices!r}: expected one of the fake GPUs {sorted(fake_indices)} "
        f"set by SLURM for the gpu=1 rule\n{environment}"
    )
    info = _job_info(str(job_id))
    print(f"[slurm test] {GPU_RULE} SLURM job {job_id}: TresPerJob={info.get('TresPerJob')}")
    assert info.get("TresPerJob") == "gres:gpu:1", f"job {job_id} has no GPU request: {info}"


# ---------------------------------------------------------------- sharded steps

SHARDS = 3
# the artifacts of the sharded rules, from the run above (one job each)
SHARDED_ARTIFACTS = (
    "results/replace_surrogates/{corpus}/notes.parquet",
    "results/replace_surrogates/{corpus}/summary.json",
    "results/replace_surrogates/{corpus}/local/offsets.parquet",
    "results/replace_surrogates/{corpus}/local/leftovers.json",
    "results/predict_ner/{corpus}/{run}/predictions.parquet",
    "results/predict_ner/{corpus}/{run}/deidentified.parquet",
)


@pytest.fixture(scope="module")
def sharded_run(workflow_run: WorkflowRun) -> tuple[WorkflowRun, dict[str, bytes]]:
    """replace_surrogates and one run's predict_ner again, as 3 SLURM shard jobs each + gather.

    The one-job artifacts of the first run are read, then removed, so that the
    sharded rules and their gathers must write them again.
    """
    assert workflow_run.returncode == 0, "the unsharded run failed: nothing to compare"
    workdir = workflow_run.workdir
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    corpus, run = config["corpus"]["name"], config["ner"]["runs"][0]["name"]
    paths = [p.format(corpus=corpus, run=run) for p in SHARDED_ARTIFACTS]
    unsharded = {path: (workdir / path).read_bytes() for path in paths}
    for path in paths:
        (workdir / path).unlink()
    shards = workdir / "shards.yaml"
    shards.write_text(
        yaml.safe_dump({"shards": {"replace_surrogates": SHARDS, "predict_ner": SHARDS}})
    )
    targets = [paths[0], paths[4]]
    configfiles = ["--configfile", "config/config.yaml", str(shards)]
    return run_snakemake(workdir, [*targets, *configfiles], ci_profile(workdir)), unsharded


def test_sharded_steps_gather_the_bytes_of_one_job(
    sharded_run: tuple[WorkflowRun, dict[str, bytes]],
) -> None:
    run, unsharded = sharded_run
    assert run.returncode == 0, "the sharded run failed\n" + run.diagnostics()
    jobs = RULE_JOB.findall(run.output)
    assert sorted(jobs) == sorted(
        ["replace_surrogates"] * SHARDS
        + ["predict_ner"] * SHARDS
        + ["gather_replace_surrogates", "gather_predict_ner"]
    ), run.diagnostics()
    assert len(SUBMITTED.findall(run.output)) == len(jobs), run.diagnostics()
    for path, expected in unsharded.items():
        for k in range(1, SHARDS + 1):  # each shard job wrote its own part
            shard = shard_path(path, f"{k}-of-{SHARDS}")
            assert (run.workdir / shard).is_file(), f"{shard} is missing"
        assert (run.workdir / path).read_bytes() == expected, f"{path} differs from one job's"
