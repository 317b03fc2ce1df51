"""Reading Snakemake's dry-run plan: the job table and the files the planned jobs need."""

from __future__ import annotations

from synthdeid.workflow.dry_run import job_table, planned_inputs, planned_jobs

# the shape Snakemake 9 prints (paths shortened)
PLAN = """Building DAG of jobs...
Job stats:
job              count
-------------  -------
build_mixture        1
train_ner            1
archive_run          1
total                3

[Mon Nov 30 04:07:47 2026]
rule build_mixture:
    input: results/sample_dp_lm/c/dp/pii.parquet, results/split_notes/c/notes.parquet
    output: results/build_mixture/c/r/train.parquet, results/build_mixture/c/r/summary.json
    log: logs/build_mixture/c/r.log
    jobid: 3
    reason: Missing output files: results/build_mixture/c/r/train.parquet
    wildcards: corpus=c, run=r
    resources: tmpdir=/tmp
[Mon Nov 30 04:07:47 2026]
rule train_ner:
    input: results/tapt_encoder/c/dplm/model, results/build_mixture/c/r/train.parquet
    output: results/train_ner/c/r/model
    log: logs/train_ner/c/r.log
    jobid: 2
    benchmark: benchmarks/train_ner/c/r.tsv
    reason: Missing output files: results/train_ner/c/r/model
    resources: tmpdir=/tmp, gpu=1
[Mon Nov 30 04:07:47 2026]
rule archive_run:
    input: results/train_ner/c/r/model, benchmarks/train_ner/c/r.tsv, results/train_dp_lm/c/dp/privacy.json
    output: results/archive_run/c/r/run.json
    jobid: 1
[Mon Nov 30 04:07:47 2026]
checkpoint plan_runs:
    input: results/build_mixture/c/r/summary.json
    output: results/plan_runs/c/plan.json
    jobid: 4
[Mon Nov 30 04:07:47 2026]
localrule all:
    input: results/archive_run/c/r/run.json
    jobid: 0
Job stats:
job              count
-------------  -------
build_mixture        1
total                1
"""


def test_the_job_table_is_the_first_one_printed() -> None:
    assert job_table(PLAN) == {"build_mixture": 1, "train_ner": 1, "archive_run": 1}
    assert job_table("Nothing to be done (all requested files are present).") == {}


def test_each_job_by_its_rule_and_outputs_checkpoints_included() -> None:
    assert planned_jobs(PLAN) == [
        (
            "build_mixture",
            "results/build_mixture/c/r/train.parquet, results/build_mixture/c/r/summary.json",
        ),
        ("train_ner", "results/train_ner/c/r/model"),
        ("archive_run", "results/archive_run/c/r/run.json"),
        ("plan_runs", "results/plan_runs/c/plan.json"),
    ]


def test_the_planned_jobs_need_what_they_read_and_no_planned_job_writes() -> None:
    assert planned_inputs(PLAN) == [
        "results/sample_dp_lm/c/dp/pii.parquet",
        "results/split_notes/c/notes.parquet",
        "results/tapt_encoder/c/dplm/model",
        "results/train_dp_lm/c/dp/privacy.json",
    ]
    assert planned_inputs("Nothing to be done.") == []
