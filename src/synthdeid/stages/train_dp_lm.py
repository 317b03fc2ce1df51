"""Fine-tune a causal LM on masked seed notes with DP-SGD (or --no-dp, same code path).

``synthdeid train-dp-lm --masked masked.parquet --canaries canaries.parquet
--allowlist placeholders.yaml --settings JSON --out-dir DIR --privacy-json PATH [--no-dp]``

``--canaries`` is ``plant-canaries``' table: every planted note in it, canary
or outlier, is a training note like the masked seeds.

``--settings`` is the ``synth.dplm`` slice: ``model`` (``bundled:smollm2``, a
GGUF file, a model directory or a hub id; null = a small GPT-2 from
``scratch``), ``scratch``, ``lora`` (null: every weight trains),
``control_codes``, ``training`` and ``privacy``. The model directory gets the weights, the
tokenizer, ``synthdeid_lm.json`` (control codes, lengths, examples) and
``privacy.json`` (epsilon, delta, noise multiplier, sample rate, steps,
accountant, secure_mode, N, and which parameters were trained), which is also written to ``--privacy-json``.
A privacy target that cannot be met is refused before training.
"""

from __future__ import annotations

import argparse
import json
import logging
import warnings
from collections import Counter
from typing import Any

from synthdeid.artifacts import atomic_directory, make_provenance, write_json_atomic
from synthdeid.cli_types import input_file, json_object, output_dir, output_file
from synthdeid.errors import ConfigError, InputError
from synthdeid.notes import read_notes
from synthdeid.runtime import add_runtime_arguments, pick_device, set_threads

log = logging.getLogger(__name__)

HISTORY_FILE = "training_history.json"
SETTING_KEYS = {"model", "scratch", "lora", "control_codes", "training", "privacy"}
TOKENIZER_CAVEAT = (
    "the tokenizer was fit on the training text without noise: its vocabulary is not covered "
    "by the DP guarantee (strings in fewer than scratch.min_frequency notes are never merged)"
)


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--masked", required=True, type=input_file, help="mask step's masked.parquet"
    )
    parser.add_argument(
        "--canaries",
        type=input_file,
        default=None,
        help="canaries.parquet (canaries and outliers) to plant",
    )
    parser.add_argument("--allowlist", required=True, type=input_file, help="placeholders.yaml")
    parser.add_argument("--settings", required=True, type=json_object, help="JSON: synth.dplm")
    parser.add_argument(
        "--no-dp", action="store_true", help="the non-DP baseline: same loop, no clipping or noise"
    )
    parser.add_argument(
        "--out-dir", required=True, type=output_dir, help="model directory to write"
    )
    parser.add_argument("--privacy-json", type=output_file, default=None, help="privacy.json copy")
    add_runtime_arguments(parser, threads_help="CPU threads", device_help="auto, cpu or cuda[:n]")


def _check_settings(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(settings) - SETTING_KEYS)
    if unknown:
        raise ConfigError(f"synth.dplm: unknown keys {unknown}; known: {sorted(SETTING_KEYS)}")
    return settings


def run(args: argparse.Namespace) -> None:

    from synthdeid.dplm.adapters import LoraSettings
    from synthdeid.dplm.canaries import CANARY, OUTLIER, of_kind, read_planted
    from synthdeid.dplm.corpus import (
        ControlCoder,
        control_token,
        placeholder_tokens,
        training_examples,
    )
    from synthdeid.dplm.model import ScratchConfig, build_lm, save_lm
    from synthdeid.dplm.privacy import PrivacyConfig
    from synthdeid.dplm.training import (
        LM_SETTINGS_FILE,
        PRIVACY_FILE,
        LmTrainingConfig,
        train_lm,
    )
    from synthdeid.synthesis.placeholders import load_allowlist

    settings = _check_settings(args.settings)
    training = LmTrainingConfig.from_mapping(settings.get("training", {}))
    scratch = ScratchConfig.from_mapping(settings.get("scratch", {}))
    privacy = None if args.no_dp else PrivacyConfig.from_mapping(settings.get("privacy", {}))
    lora = None if settings.get("lora") is None else LoraSettings.from_mapping(settings["lora"])
    if lora is not None and settings.get("model") is None:
        raise ConfigError("synth.dplm.lora needs a pretrained synth.dplm.model (not scratch)")
    allowlist = load_allowlist(args.allowlist)
    seeds = [(n.note_id, n.text) for n in read_notes(args.masked)]
    if not seeds:
        raise InputError(args.masked, None, "no masked notes to train on")
    planted = read_planted(args.canaries) if args.canaries else []
    canaries = [(c.canary_id, c.text) for c in of_kind(planted, CANARY)]
    outliers = [(c.canary_id, c.text) for c in of_kind(planted, OUTLIER)]
    texts = [t for _, t in seeds] + [c.text for c in planted]
    coder = ControlCoder.fit(settings.get("control_codes", ["pii"]), texts)
    examples = training_examples(seeds, canaries, coder, outliers)
    special = [control_token(c) for c in coder.all_codes()] + placeholder_tokens(allowlist, texts)
    set_threads(args.threads)
    device = pick_device(args.device)
    built = build_lm(
        settings.get("model"), scratch, texts, special, seed=training.seed, resize=lora is None
    )
    model, tokenizer, described = built.model, built.tokenizer, built.described
    log.info(
        "%s LM: %s parameters, vocabulary %d; %d notes (%d canaries, %d outliers); codes %s",
        "non-DP" if privacy is None else "DP",
        f"{described['parameters']:,}",
        described["vocabulary"],
        len(examples),
        len(canaries),
        len(outliers),
        dict(Counter(e.code for e in examples)),
    )
    with warnings.catch_warnings():
        # Opacus' backward hooks warn on every step that the input ids need no gradient
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        result = train_lm(
            examples,
            model,
            tokenizer,
            training,
            privacy,
            device=device,
            progress=not args.no_progress,
            lora=lora,
            base_vocabulary=built.base_vocabulary,
        )
    record = dict(result.privacy) | {"trained_parameters": result.trained}
    if described.get("tokenizer_fit_on_training_text"):
        record["caveats"] = [*record["caveats"], TOKENIZER_CAVEAT]
    provenance = make_provenance(
        "train-dp-lm",
        {"settings": settings, "dp": privacy is not None},
        {"masked": args.masked, "allowlist": args.allowlist}
        | ({"canaries": args.canaries} if args.canaries else {}),
    )
    lm_settings = {
        "control_codes": coder.to_json(),
        "codes_in_training": dict(sorted(Counter(e.code for e in examples).items())),
        "max_length": training.max_length,
        "examples": {
            "seed": len(seeds),
            "canary": len(canaries),
            "outlier": len(outliers),
            "truncated": result.truncated,
        },
        "model": described,
        "opacus_preparation": result.preparation.to_json() if result.preparation else None,
        "training": training.to_json(),
        "lora": lora.to_json() if lora else None,
        "privacy_config": privacy.to_json() if privacy else None,
        "provenance": provenance,
    }
    with atomic_directory(args.out_dir) as staging:
        save_lm(result.model, tokenizer, staging)
        (staging / LM_SETTINGS_FILE).write_text(json.dumps(lm_settings, indent=2) + "\n")
        (staging / PRIVACY_FILE).write_text(json.dumps(record, indent=2) + "\n")
        history = {"history": result.history, "timing": result.timing}
        (staging / HISTORY_FILE).write_text(json.dumps(history, indent=2) + "\n")
    if args.privacy_json:
        write_json_atomic(record, args.privacy_json)
    log.info(
        "saved %s (%d steps, %.2f steps/s): epsilon %s",
        args.out_dir,
        record["steps"],
        result.timing["steps_per_second"],
        "n/a (no DP)" if record["epsilon"] is None else f"{record['epsilon']:.3f}",
    )
