"""Build a de-identification training mixture: real train notes plus labelled pools.

Reads the split notes table (its ``train`` part, or the parts of the spec's
``real_parts``, is the real data) and any
number of pools (``--pool NAME=PATH``, each a notes table; ``--pool-parts``
keeps only pool notes of those split parts, e.g. the surrogates of the seed
part), builds the mixture the ``--spec`` JSON describes (see
:mod:`synthdeid.ner.mixtures`) and writes the train part (notes plus ``pool`` and ``copies``), the real-only validation
part and a summary with provenance. Nothing is written unless all inputs read
and the mixture builds.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from synthdeid.artifacts import make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, named_input_file, output_file
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.mixtures import (
    POOL_INPUT_PREFIX,
    MixtureSpec,
    build_mixture,
    check_pool_name,
    read_real_parts,
    write_mixture,
)
from synthdeid.notes import Note, read_notes, write_notes
from synthdeid.surrogate.release_ids import read_id_map, restore_ids

log = logging.getLogger(__name__)


def _parse_pools(values: list[tuple[str, Path]] | None) -> dict[str, Path]:
    """``--pool NAME=PATH`` values -> pool name -> path; duplicate or bad names are errors."""
    pools: dict[str, Path] = {}
    for name, path in values or []:
        check_pool_name(name)
        if name in pools:
            raise ConfigError(f"--pool {name!r} is given twice")
        pools[name] = path
    return pools


def _select_parts(notes: list[Note], parts: list[str] | None) -> list[Note]:
    """The pool notes whose ``split`` is one of ``parts`` (all notes when ``parts`` is None)."""
    if parts is None:
        return notes
    wanted = set(parts)
    return [n for n in notes if n.split in wanted]


def _parse_spec(text: str) -> MixtureSpec:
    try:
        mapping: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--spec is not valid JSON: {exc}") from None
    return MixtureSpec.from_mapping(mapping)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--notes", required=True, type=input_file, help="split notes table; its train part is real"
    )
    parser.add_argument(
        "--pool",
        action="append",
        type=named_input_file,
        metavar="NAME=PATH",
        help="a labelled pool (notes table) to draw from; repeatable",
    )
    parser.add_argument(
        "--pool-ids",
        action="append",
        type=named_input_file,
        metavar="NAME=PATH",
        help="the local map of a pool released under keyed ids (replace_surrogates' "
        "local/offsets.parquet): its notes get their original ids back, so the checks on "
        "holdout and validation patients hold; repeatable",
    )
    parser.add_argument(
        "--pool-parts",
        nargs="+",
        metavar="PART",
        help="use only pool notes whose split is one of these parts (default: all)",
    )
    parser.add_argument(
        "--spec", required=True, help="the mixture as a JSON object (regime, seed, fractions)"
    )
    parser.add_argument(
        "--out-train", required=True, type=output_file, help="train mixture (Parquet)"
    )
    parser.add_argument(
        "--out-validation", required=True, type=output_file, help="real validation notes (Parquet)"
    )
    parser.add_argument("--summary", required=True, type=output_file, help="summary JSON")


def run(args: argparse.Namespace) -> None:
    spec = _parse_spec(args.spec)
    pool_paths = _parse_pools(args.pool)
    id_maps = _parse_pools(args.pool_ids)
    unmatched = sorted(set(id_maps) - set(pool_paths))
    if unmatched:
        raise ConfigError(f"--pool-ids names pools that no --pool gives: {unmatched}")
    real_notes, holdout_patients = read_real_parts(args.notes, spec.real_parts)
    if not real_notes:
        raise InputError(
            args.notes,
            None,
            f"no note has a split in mixture.real_parts {list(spec.real_parts)}",
            "pass the output of the split stage",
        )
    pools: dict[str, list[Note]] = {}
    for name, path in pool_paths.items():
        notes = read_notes(path)
        if name in id_maps:
            notes = restore_ids(notes, read_id_map(id_maps[name]), id_maps[name])
        pools[name] = _select_parts(notes, args.pool_parts)
        if not pools[name]:
            log.warning(
                "pool %r: none of its %d notes is in parts %s", name, len(notes), args.pool_parts
            )
    mixture = build_mixture(real_notes, pools, spec, holdout_patients=holdout_patients)
    provenance = make_provenance(
        "build-mixture",
        {"spec": asdict(spec), "pools": sorted(pool_paths), "pool_parts": args.pool_parts},
        {
            "notes": args.notes,
            **{f"{POOL_INPUT_PREFIX}{name}": path for name, path in pool_paths.items()},
            **{f"pool_ids:{name}": path for name, path in id_maps.items()},
        },
    )
    write_mixture(mixture.train, args.out_train, provenance)
    write_notes(mixture.validation, args.out_validation, provenance)
    write_json_atomic({"summary": mixture.summary, "provenance": provenance}, args.summary)
    s = mixture.summary
    log.info(
        "mixture %s (seed %d): %d train examples in %d unique notes (%d real, %d synthetic = "
        "%.1f%%); %d validation notes from %d patients",
        s["regime"],
        s["seed"],
        s["n_train_total"],
        s["n_train_unique"],
        s["n_real"],
        s["n_synthetic"],
        s["realized_synthetic_percent"],
        s["n_validation_notes"],
        s["n_validation_patients"],
    )
