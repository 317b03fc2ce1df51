"""Which trained runs would train the same model, and which arms are degenerate (plan-runs).

``synthdeid plan-runs --mixture RUN=SUMMARY... --arm RUN=ARM... --settings RUN=DIGEST...
[--protect RUN...] --out PLAN_JSON``

Reads each trained run's build-mixture ``summary.json`` (its mixture digest), takes
its arm and the digest of its training settings from the workflow, and writes the
plan of :mod:`synthdeid.ner.duplicates`: duplicate runs and degenerate arms (every
run repeats a run of one other arm). The workflow trains, scores and archives the
runs of the other arms only; the study table reports a degenerate arm once, as its
canonical arm. Runs are taken in the order given (the reference arm's first).
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import name_pair, named_input_file, output_file
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.duplicates import TrainedRun, plan_runs
from synthdeid.ner.mixtures import read_mixture_summary

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mixture",
        action="append",
        required=True,
        type=named_input_file,
        metavar="RUN=SUMMARY",
        help="a trained run's build-mixture summary.json (repeat; the order is kept)",
    )
    parser.add_argument(
        "--arm",
        action="append",
        default=[],
        type=name_pair,
        metavar="RUN=ARM",
        help="the arm of a run (default: the run itself)",
    )
    parser.add_argument(
        "--settings",
        action="append",
        required=True,
        type=name_pair,
        metavar="RUN=DIGEST",
        help="the digest of a run's training settings (every run with --mixture needs one)",
    )
    parser.add_argument(
        "--protect",
        action="append",
        default=[],
        metavar="RUN",
        help="a run other runs build on (never part of a degenerate arm)",
    )
    parser.add_argument("--out", required=True, type=output_file, help="plan.json")


def run(args: argparse.Namespace) -> None:
    arms = dict(args.arm)
    settings = dict(args.settings)
    runs = []
    for name, path in args.mixture:
        if name not in settings:
            raise ConfigError(f"run {name!r} has a --mixture but no --settings digest")
        digest = read_mixture_summary(path).get("digest")
        if not isinstance(digest, str):
            raise InputError(path, None, "no mixture digest", "rerun build-mixture")
        runs.append(TrainedRun(name, arms.get(name, name), digest, settings[name]))
    plan = plan_runs(runs, protected=set(args.protect))
    for arm, canonical in plan.degenerate_arms.items():
        log.warning(
            "arm %r trains the same models as arm %r (identical mixtures and settings): "
            "reported as %r, not trained",
            arm,
            canonical,
            canonical,
        )
    record = plan.as_dict()
    record["provenance"] = make_provenance(
        "plan-runs", {"runs": len(runs)}, {name: path for name, path in args.mixture}
    )
    write_json_atomic(record, args.out)
    log.info(
        "%d trained runs: %d repeat an earlier run, %d arms degenerate",
        len(runs),
        len(plan.duplicates),
        len(plan.degenerate_arms),
    )
