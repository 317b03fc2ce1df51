"""Helpers shared by all rules: config validation, paths, parameter values."""

import json
import os
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from synthdeid.labels import CANONICAL_LABELS, coarse_view
from synthdeid.errors import ConfigError
from synthdeid.readers import get_reader
from synthdeid.surrogate.keying import load_key
from synthdeid.workflow_support import ensure_cli_on_path

validate(config, schema="../schemas/config.schema.yaml")

ensure_cli_on_path()

CORPUS = config["corpus"]["name"]


wildcard_constraints:
    corpus=CORPUS,


def corpus_path():
    """The corpus location: from the environment variable named by corpus.path_env, or corpus.path."""
    variable = config["corpus"].get("path_env")
    if variable:
        value = os.environ.get(variable)
        if not value:
            raise WorkflowError(
                f"corpus.path_env is {variable!r} but that environment variable is not set; "
                f"export {variable}=/path/to/the/corpus"
            )
        return Path(value)
    return Path(config["corpus"]["path"])


def corpus_files(wildcards):
    """Every file the corpus reader will read, so that a changed file reruns ingest."""
    path = corpus_path()
    files = get_reader(config["corpus"]["format"]).input_files(path)
    if not files:
        raise WorkflowError(
            f"no {config['corpus']['format']} corpus files found at {path}"
        )
    return [str(f) for f in files]


def as_json(value):
    """A config value as compact JSON, for passing dicts through params to the CLI."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


LABEL_MAP = as_json(
    config["labels"]["mapping"] or {label: label for label in CANONICAL_LABELS}
)
COARSE_VIEW = as_json(coarse_view(config["labels"]["coarse_view"]))


def surrogate_key_fingerprint(wildcards):
    """Fingerprint of the surrogate key (never the key): a new key reruns replace_surrogates."""
    try:
        return load_key(config["surrogate"]["key_file"]).fingerprint()
    except ConfigError as exc:
        raise WorkflowError(f"replace_surrogates: {exc}") from None


def overview_title(wildcards):
    return f"Corpus {wildcards.corpus}: patient-level split"


def all_targets():
    return [
        f"results/ingest_corpus/{CORPUS}/notes.parquet",
        f"results/split_notes/{CORPUS}/notes.parquet",
        f"results/mask_seeds/{CORPUS}/masked.parquet",
        f"results/plot_corpus_overview/{CORPUS}/overview.png",
        f"results/replace_surrogates/{CORPUS}/notes.parquet",
        f"results/fill_templates/{CORPUS}/pii.parquet",
        f"results/diagnose_synthetic/{CORPUS}/diagnostics.json",
        f"results/audit_dp_lm/{CORPUS}/audit.json",
        *[f"results/evaluate_ner/{CORPUS}/{run}/metrics.json" for run in NER_RUNS],
        f"results/compare_ner/{CORPUS}/runs.png",
    ]


# ------------------------------------------------------------ template synthesis

TEMPLATE = config["synth"]["template"]
# responses cached by request hash, kept across reruns (not an output of any rule)
LLM_CACHE_DIR = "cache/llm_responses"


def template_settings():
    """The generate_templates slice of synth.template, as JSON (pools settings excluded)."""
    keys = ("backend", "variants", "generation", "seed", "validator", "guard")
    return as_json({key: TEMPLATE[key] for key in keys})


def template_gpus(wildcards):
    """One GPU for a local transformers backend; none for an HTTP endpoint or none."""
    return 1 if TEMPLATE["backend"]["kind"] == "transformers" else 0


def diagnostics_dir(wildcards, output):
    """The folder of diagnose_synthetic's outputs (the stage writes them all there)."""
    return str(Path(output.json).parent)


# ------------------------------------------------------------ DP language model

DPLM = config["synth"]["dplm"]
# the DP model, and the non-DP baseline the memorization audit compares it with
DPLM_MODELS = ["dp", "non_dp"] if DPLM["baseline"] else ["dp"]


wildcard_constraints:
    privacy="dp|non_dp",


def dplm_training_settings(wildcards):
    """The train_dp_lm slice of synth.dplm, as JSON; the non-DP model's has no privacy.

    So a privacy change reruns the DP branch only.
    """
    keys = ["model", "scratch", "control_codes", "training"]
    if wildcards.privacy == "dp":
        keys.append("privacy")
    return as_json({key: DPLM[key] for key in keys})


def dp_switch(wildcards):
    return "--no-dp" if wildcards.privacy == "non_dp" else ""


def audit_inputs(wildcards):
    """Samples and model directory of every trained LM, named samples_<m> / model_<m>."""
    inputs = {}
    for name in DPLM_MODELS:
        inputs[f"samples_{name}"] = (
            f"results/sample_dp_lm/{wildcards.corpus}/{name}/samples.parquet"
        )
        inputs[f"model_{name}"] = f"results/train_dp_lm/{wildcards.corpus}/{name}/model"
    return inputs


def audit_arguments(wildcards, input):
    return " ".join(
        f"--run {name}={input[f'samples_{name}']}:{input[f'model_{name}']}"
        for name in DPLM_MODELS
    )


def audit_dir(wildcards, output):
    return str(Path(output.json).parent)


def tapt_settings():
    """synth.dplm.tapt with the de-identification encoder (ner.training.model) to adapt."""
    return as_json({**DPLM["tapt"], "model": config["ner"]["training"]["model"]})


# ------------------------------------------------------------ de-identification models

NER = config["ner"]
NER_RUNS = {run["name"]: run for run in NER["runs"]}
REFERENCE_RUN = NER["reference_run"] or NER["runs"][0]["name"]
if REFERENCE_RUN not in NER_RUNS:
    raise WorkflowError(
        f"ner.reference_run {REFERENCE_RUN!r} is not one of the runs {sorted(NER_RUNS)}"
    )

# labelled pools a mixture can draw from: name -> (artifact, split parts used)
POOLS = {
    "surrogates": ("results/replace_surrogates/{corpus}/notes.parquet", ["seed"]),
    "template_pii": ("results/fill_templates/{corpus}/pii.parquet", ["synthetic"]),
    "template_no_pii": (
        "results/fill_templates/{corpus}/no_pii.parquet",
        ["synthetic"],
    ),
    "dplm_pii": ("results/sample_dp_lm/{corpus}/dp/pii.parquet", ["synthetic"]),
    "dplm_no_pii": ("results/sample_dp_lm/{corpus}/dp/no_pii.parquet", ["synthetic"]),
}
# encoders after task-adaptive pretraining, by the name a run gives in `tapt`
TAPT_MODELS = {"dplm": "results/tapt_encoder/{corpus}/dplm/model"}


wildcard_constraints:
    run="|".join(NER_RUNS),


def pool_files(wildcards):
    """The pools of one run, as named inputs of build_mixture."""
    return {
        name: POOLS[name][0].format(corpus=wildcards.corpus)
        for name in NER_RUNS[wildcards.run]["pools"]
    }


def pool_arguments(wildcards, input):
    """--pool NAME=PATH for each pool (paths come from the rule's own inputs)."""
    return " ".join(
        f"--pool {name}={input[name]}" for name in NER_RUNS[wildcards.run]["pools"]
    )


def pool_parts(wildcards):
    """The split parts taken from the run's pools (never the train or holdout notes)."""
    parts = sorted(
        {p for name in NER_RUNS[wildcards.run]["pools"] for p in POOLS[name][1]}
    )
    return parts or ["seed"]


def mixture_spec(wildcards):
    return as_json(NER_RUNS[wildcards.run]["mixture"])


def training_settings(wildcards):
    """ner.training with the run's overrides on top, as JSON (one run's own params).

    A run with `tapt` starts from the adapted encoder instead of ner.training.model.
    """
    settings = {**NER["training"], **NER_RUNS[wildcards.run]["training"]}
    tapt = NER_RUNS[wildcards.run].get("tapt")
    if tapt:
        settings["model"] = TAPT_MODELS[tapt].format(corpus=wildcards.corpus)
    return as_json(settings)


def tapt_input(wildcards):
    """The adapted encoder a run starts from (nothing for a run without TAPT)."""
    tapt = NER_RUNS[wildcards.run].get("tapt")
    return {"tapt": TAPT_MODELS[tapt].format(corpus=wildcards.corpus)} if tapt else {}


def evaluation_outputs(wildcards):
    return {
        run: f"results/evaluate_ner/{wildcards.corpus}/{run}/metrics.json"
        for run in NER_RUNS
    }


def run_arguments(wildcards, input):
    """--run NAME=DIR for compare_ner, from the metrics files of every run."""
    return " ".join(f"--run {run}={Path(input[run]).parent}" for run in NER_RUNS)
