"""Settings of the synthesis rules: template generation, the DP language model, TAPT.

Each builder takes the slice of the config a rule needs, so that a change
elsewhere does not rerun it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from synthdeid.workflow.arguments import flags
from synthdeid.workflow.outputs import Output, RuleOutputs

# the generate_templates slice of synth.template (the pools settings are fill_templates')
TEMPLATE_KEYS = ("backend", "variants", "generation", "seed", "validator", "guard", "seed_sample")
DP, NON_DP = "dp", "non_dp"


def backend_gpus(backend: Mapping[str, Any]) -> int:
    """One GPU for a local transformers backend; none for an HTTP endpoint or none."""
    return 1 if backend.get("kind") == "transformers" else 0


def template_settings(
    template: Mapping[str, Any], backend: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The generate_templates slice of synth.template; ``backend`` replaces its backend.

    (The control pool's templates come from backend none on the same seeds.)
    """
    settings = {key: template[key] for key in TEMPLATE_KEYS}
    if backend is not None:
        settings["backend"] = backend
    return settings


def dplm_models(dplm: Mapping[str, Any]) -> list[str]:
    """The DP model, and the non-DP baseline the memorization audit compares it with."""
    return [DP, NON_DP] if dplm["baseline"] else [DP]


def dplm_training_settings(dplm: Mapping[str, Any], privacy: str) -> dict[str, Any]:
    """The train_dp_lm slice of synth.dplm; the non-DP model's has no privacy.

    So a privacy change reruns the DP branch only. ``lora`` is passed only when
    set, so runs without adapters keep the settings (and results) they had.
    """
    keys = ["model", "scratch", "control_codes", "training"]
    if dplm.get("lora") is not None:
        keys.append("lora")
    if privacy == DP:
        keys.append("privacy")
    return {key: dplm[key] for key in keys}


def dp_lm_privacy_file(corpus: str, outputs: RuleOutputs) -> str:
    """The privacy record (epsilon, delta) of the DP language model (train_dp_lm, privacy dp)."""
    return outputs.path(Output("train_dp_lm", "privacy"), corpus=corpus, privacy=DP)


def audit_inputs(models: Sequence[str], corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """Samples and model directory of every trained LM, named samples_<m> / model_<m>."""
    inputs = {}
    for name in models:
        where = {"corpus": corpus, "privacy": name}
        inputs[f"samples_{name}"] = outputs.path(Output("sample_dp_lm", "samples"), **where)
        inputs[f"model_{name}"] = outputs.path(Output("train_dp_lm", "model"), **where)
    return inputs


def audit_arguments(models: Sequence[str], inputs: Mapping[str, str]) -> str:
    """--run NAME=SAMPLES:MODEL for every trained LM (audit_dp_lm)."""
    return flags(
        "--run",
        ((name, f"{inputs[f'samples_{name}']}:{inputs[f'model_{name}']}") for name in models),
    )


def tapt_settings(tapt: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """TAPT settings (synth.dplm.tapt or ner.tapt) with the encoder to adapt."""
    return {**tapt, "model": model}
