"""Sample the DP language model by control code; validate and fill the samples into pools.

``synthdeid sample-dp-lm --model DIR --masked masked.parquet --notes notes.parquet
--removed removed_values.parquet --allowlist placeholders.yaml --settings JSON
--pool-settings JSON --name dp --samples samples.parquet --pii pii.parquet
--no-pii no_pii.parquet --removals removals.parquet --summary summary.json``

Every sample is kept in ``samples.parquet`` with its control code and the
validator's verdict (the memorization audit reads the raw samples). Accepted
samples are templates: the local fill instantiates their placeholders with
exact offsets, then the pools are deduplicated and screened exactly like the
template regime's (:mod:`synthdeid.stages.fill_templates`).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter

import pyarrow as pa

from synthdeid.artifacts import make_provenance, write_parquet_atomic
from synthdeid.cli_types import input_dir, input_file, json_object, output_file
from synthdeid.errors import InputError
from synthdeid.mask import check_removed_values
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments, pick_device, set_threads

log = logging.getLogger(__name__)

SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("code", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("tokens", pa.int32(), nullable=False),
        pa.field("finished", pa.bool_(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string()),
    ]
)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, type=input_dir, help="train-dp-lm model directory"
    )
    parser.add_argument(
        "--masked", required=True, type=input_file, help="masked.parquet (vocabulary)"
    )
    parser.add_argument("--notes", required=True, type=input_file, help="split notes.parquet")
    parser.add_argument("--seed-parts", nargs="+", default=["seed"], help="parts holding seeds")
    parser.add_argument("--removed", required=True, type=input_file, help="removed_values.parquet")
    parser.add_argument("--allowlist", required=True, type=input_file, help="placeholders.yaml")
    parser.add_argument("--settings", required=True, type=json_object, help="JSON: sampling")
    parser.add_argument("--pool-settings", required=True, type=json_object, help="JSON: pools")
    parser.add_argument("--name", default="dp", help="model name in ids and the source column")
    parser.add_argument(
        "--samples", required=True, type=output_file, help="samples.parquet to write"
    )
    parser.add_argument("--pii", required=True, type=output_file)
    parser.add_argument("--no-pii", required=True, type=output_file)
    parser.add_argument("--removals", required=True, type=output_file)
    parser.add_argument("--summary", required=True, type=output_file)
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from synthdeid.dplm.corpus import ControlCoder
    from synthdeid.dplm.model import load_lm
    from synthdeid.dplm.sampling import (
        SamplingConfig,
        generate_samples,
        placeholder_shares,
        validate_sample,
    )
    from synthdeid.dplm.training import PRIVACY_FILE, read_lm_settings
    from synthdeid.identifiers import IdentifierScanner
    from synthdeid.synthesis.placeholders import load_allowlist
    from synthdeid.synthesis.pools import (
        Template,
        check_pool_settings,
        pools_from_templates,
        write_pools,
    )
    from synthdeid.synthesis.prompts import seed_variant
    from synthdeid.synthesis.templates import lowercase_vocabulary
    from synthdeid.synthesis.validator import ACCEPTED, REJECTED, TemplateValidator

    config = SamplingConfig.from_mapping(args.settings)
    check_pool_settings(args.pool_settings)
    check_removed_values(args.removed, args.masked)  # the seed-PHI screen's surfaces
    allowlist = load_allowlist(args.allowlist)
    lm_settings = read_lm_settings(args.model)
    coder = ControlCoder.from_json(lm_settings["control_codes"])
    masked = read_notes(args.masked)
    if not masked:
        raise InputError(args.masked, None, "no masked notes")
    set_threads(args.threads)
    device = pick_device(args.device)
    model, tokenizer = load_lm(args.model, device)
    samples = generate_samples(
        model, tokenizer, coder.all_codes(), config, device=device, progress=not args.no_progress
    )
    validator = TemplateValidator(
        allowlist, IdentifierScanner(common_words=lowercase_vocabulary(n.text for n in masked))
    )
    variant = seed_variant(allowlist)
    verdicts = [validate_sample(s, validator, variant, config.min_words) for s in samples]
    rows = [
        {
            "sample_id": s.sample_id,
            "code": s.code,
            "text": s.text,
            "tokens": s.tokens,
            "finished": s.finished,
            "status": ACCEPTED if v.accepted else REJECTED,
            "reason": v.reason,
            "detail": v.detail or None,
        }
        for s, v in zip(samples, verdicts, strict=True)
    ]
    privacy = json.loads((args.model / PRIVACY_FILE).read_text())
    params = {
        "sampling": config.to_json(),
        "pool_settings": args.pool_settings,
        "name": args.name,
        "privacy": privacy,
    }
    provenance = make_provenance(
        "sample-dp-lm",
        params,
        {"masked": args.masked, "notes": args.notes, "removed": args.removed},
    )
    write_parquet_atomic(
        pa.Table.from_pylist(rows, schema=SAMPLES_SCHEMA), args.samples, provenance
    )
    templates = [
        Template(
            template_id=f"dplm:{args.name}:{s.sample_id}",
            seed_note_id="",
            patient_id=f"dplm:{args.name}:{s.sample_id}",
            variant=s.code,
            text=s.text,
        )
        for s, v in zip(samples, verdicts, strict=True)
        if v.accepted
    ]
    seeds = [n for n in read_notes(args.notes) if n.split in set(args.seed_parts)]
    result, filler = pools_from_templates(
        templates,
        seeds,
        allowlist=allowlist,
        removed=args.removed,
        settings=args.pool_settings,
        source=f"synthetic:dplm:{args.name}",
        progress=not args.no_progress,
    )
    rejected = Counter(v.reason for v in verdicts if not v.accepted)
    write_pools(
        result,
        provenance | {"fill": filler.provenance()},
        pii=args.pii,
        no_pii=args.no_pii,
        removals=args.removals,
        summary=args.summary,
        extra_counts={
            "samples": len(samples),
            "accepted": len(templates),
            "acceptance_rate": len(templates) / len(samples) if samples else 0.0,
            "rejected": dict(sorted(rejected.items())),
            "finished": sum(s.finished for s in samples),
            "with_placeholder": placeholder_shares(samples),
            "seeds_compared": len(seeds),
            "epsilon": privacy.get("epsilon"),
        },
    )
