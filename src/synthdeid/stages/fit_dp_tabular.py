"""Fit one tabular synthesizer on the train half and draw independent synthetic samples.

Lorenzo et al. 2026 draw ten synthetic datasets per synthesizer and average the
metrics over them. Writes ``samples.parquet`` (``record_id``, ``sample``, the
variables) and ``privacy.json``: for a DP synthesizer the epsilon
bookkeeping (total = preprocessor + synthesizer, checked after fitting) and
delta; for a non-DP baseline, ``dp: false``. DP-CTGAN and PATE-CTGAN run in
the ``dpgan`` environment (opacus 0.14; envs/README.md).
"""

from __future__ import annotations

import argparse
import logging

import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, json_object, non_negative_int, output_file, positive_int
from synthdeid.errors import ConfigError
from synthdeid.runtime import add_runtime_arguments, set_threads
from synthdeid.tabular.budget import EpsilonBudget, plan_budget
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.synthesizers import fit_synthesizer, synthesizer_info
from synthdeid.tabular.tables import read_table, split_parts, write_table

log = logging.getLogger(__name__)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prepared", required=True, type=input_file, help="prepared.parquet")
    parser.add_argument("--spec", required=True, type=input_file, help="variable spec (YAML)")
    parser.add_argument("--synthesizer", required=True, help="mst, aim, pate_ctgan, ...")
    parser.add_argument("--epsilon", type=float, help="total epsilon (DP synthesizers only)")
    parser.add_argument("--preprocessor-epsilon", type=float, default=0.0)
    parser.add_argument(
        "--settings", type=json_object, default={}, help="JSON: constructor options"
    )
    parser.add_argument(
        "--samples", type=positive_int, default=10, help="independent samples to draw"
    )
    parser.add_argument(
        "--rows", type=non_negative_int, default=0, help="rows per sample (0: train rows)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=output_file, help="samples.parquet to write")
    parser.add_argument("--privacy-json", required=True, type=output_file)
    add_runtime_arguments(
        parser, device=False, zero_threads=True, threads_help="torch threads (0: default)"
    )


def run(args: argparse.Namespace) -> None:
    set_threads(args.threads)
    info = synthesizer_info(args.synthesizer)
    budget: EpsilonBudget | None = None
    if info.dp:
        if args.epsilon is None:
            raise ConfigError(f"{info.name} is differentially private: give --epsilon")
        budget = plan_budget(args.epsilon, args.preprocessor_epsilon, False)
    spec = load_spec(args.spec)
    prepared, _ = read_table(args.prepared, spec, ("split",))
    train, _ = split_parts(prepared, args.prepared)
    rows = args.rows or len(train)
    fitted = fit_synthesizer(
        info, train, spec, budget=budget, options=args.settings, seed=args.seed
    )
    parts = []
    for i in tqdm(range(args.samples), desc=f"sampling {info.name}", disable=args.no_progress):
        sample = fitted.sample(rows, seed=args.seed * 1000 + i + 1)
        sample.insert(0, "sample", i)
        sample.insert(0, "record_id", [f"{info.name}-s{i:02d}-r{j:06d}" for j in range(rows)])
        parts.append(sample)
    samples = pd.concat(parts, ignore_index=True)
    params = {
        "synthesizer": info.name,
        "library": f"{info.library}:{info.library_name}",
        "dp": info.dp,
        "epsilon": args.epsilon if info.dp else None,
        "preprocessor_epsilon": args.preprocessor_epsilon if info.dp else None,
        "options": args.settings,
        "samples": args.samples,
        "rows_per_sample": rows,
        "seed": args.seed,
    }
    provenance = make_provenance(
        "fit-dp-tabular", params, {"prepared": args.prepared, "spec": args.spec}
    )
    write_table(samples, spec, args.out, provenance, {"sample": pa.int32()})
    privacy = {
        **params,
        "train_rows": len(train),
        "fit_seconds": round(fitted.fit_seconds, 3),
        "domain": "from the spec (public); no budget spent learning it",
        **(fitted.privacy.as_dict() if fitted.privacy else {}),
    }
    write_json_atomic(privacy, args.privacy_json)
    log.info(
        "%s: %d samples x %d rows%s",
        info.name,
        args.samples,
        rows,
        f" at epsilon {fitted.privacy.epsilon_accounted:.4g} accounted of {args.epsilon} "
        f"(delta {fitted.privacy.delta:.3g})"
        if fitted.privacy
        else "",
    )
