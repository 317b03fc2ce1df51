"""Helpers shared by all rules: config validation, paths, parameter values."""

import json
import os
import re
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from synthdeid.labels import CANONICAL_LABELS, LabelMap, coarse_view
from synthdeid.notes import UNSPLIT
from synthdeid.errors import ConfigError
from synthdeid.ner.sweeps import ARM, expand_runs
from synthdeid.ner.sweeps import arms as run_arms
from synthdeid.readers import get_reader
from synthdeid.split import check_fractions
from synthdeid.surrogate.keying import (
    DEMO_CORPUS_FILE,
    DEMO_SOURCE,
    SurrogateKey,
    demo_key_refusal,
    is_demo_key,
    load_key,
    read_key_file,
)
from synthdeid.tabular.synthesizers import DPGAN_ENV, SYNTHESIZERS
from synthdeid.teacher.teachers import check_settings as check_teacher_settings
from synthdeid.workflow_support import ensure_cli_on_path

validate(config, schema="../schemas/config.schema.yaml")

# what the schema cannot say, checked before any job is planned
try:
    check_fractions(config["split"]["fractions"])
except ConfigError as exc:
    raise WorkflowError(f"config: {exc}") from None

ensure_cli_on_path()

CORPUS = config["corpus"]["name"]


wildcard_constraints:
    corpus=CORPUS,


def corpus_path(settings=None):
    """A corpus location: from the environment variable named by path_env, or path.

    settings is a corpus entry (config["corpus"] by default, or one of evaluation.corpora).
    """
    settings = settings or config["corpus"]
    variable = settings.get("path_env")
    if variable:
        value = os.environ.get(variable)
        if not value:
            raise WorkflowError(
                f"corpus {settings['name']!r}: path_env is {variable!r} but that environment "
                f"variable is not set; export {variable}=/path/to/the/corpus"
            )
        return Path(value)
    return Path(settings["path"])


def reader_files(settings):
    """Every file a corpus reader will read, so that a changed file reruns its ingest."""
    path = corpus_path(settings)
    files = get_reader(settings["format"]).input_files(path)
    if not files:
        raise WorkflowError(
            f"corpus {settings['name']!r}: no {settings['format']} corpus files found at {path}"
        )
    return [str(f) for f in files]


def corpus_files(wildcards):
    return reader_files(config["corpus"])


def as_json(value):
    """A config value as compact JSON, for passing dicts through params to the CLI."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


LABEL_MAP = as_json(
    config["labels"]["mapping"] or {label: label for label in CANONICAL_LABELS}
)
COARSE_VIEW = as_json(coarse_view(config["labels"]["coarse_view"]))


def key_fingerprint(rule):
    """Fingerprint of the surrogate key (never the key), for ``rule``'s params."""
    try:
        return load_key(config["surrogate"]["key_file"]).fingerprint()
    except ConfigError as exc:
        raise WorkflowError(f"{rule}: {exc}") from None


def surrogate_key_fingerprint(wildcards):
    """A new key reruns replace_surrogates."""
    return key_fingerprint("replace_surrogates")


def deid_key_fingerprint(wildcards):
    """In surrogate mode a new key reruns predict_ner; redaction needs no key."""
    if config["ner"]["deid"]["mode"] != "surrogate":
        return ""
    return key_fingerprint("predict_ner")


def uses_embedded_demo_corpus():
    """Whether the corpus is the synthetic demo corpus shipped in resources/demo/."""
    corpus = config["corpus"]
    return (
        not corpus.get("path_env")
        and corpus.get("source") == DEMO_SOURCE
        and Path(corpus.get("path") or "").resolve() == Path(DEMO_CORPUS_FILE).resolve()
    )


def check_demo_key():
    """The public demo key is refused for any corpus but the embedded demo corpus.

    Named configs merge over config.yaml, so one that does not reset
    surrogate.key_file inherits the demo key file; it is recognised by its
    fingerprint, wherever it lies.
    """
    key_file = config["surrogate"]["key_file"]
    if not key_file or uses_embedded_demo_corpus():
        return
    try:
        demo = is_demo_key(SurrogateKey(read_key_file(key_file)))
    except ConfigError:
        return  # unreadable: the rules that need the key say why
    if demo:
        raise WorkflowError(
            demo_key_refusal("surrogate.key_file", f"corpus {CORPUS!r}")
        )


check_demo_key()


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
        f"results/evaluate_tabular/{TABLE}/comparison.json",
        f"results/check_faithfulness/{TABLE}/faithfulness.json",
        *[f"results/evaluate_ner/{CORPUS}/{run}/metrics.json" for run in NER_RUNS],
        *[
            f"results/report_errors/{CORPUS}/{run}/summary.json"
            for run in ERROR_REPORT["runs"]
        ],
        f"results/compare_ner/{CORPUS}/runs.png",
        f"results/tabulate_study/{CORPUS}/study.png",
        *teacher_targets(),
    ]


# ------------------------------------------------------------ template synthesis

TEMPLATE = config["synth"]["template"]
# responses cached by request hash, kept across reruns (not an output of any rule)
LLM_CACHE_DIR = "cache/llm_responses"


def template_settings(backend=None):
    """The generate_templates slice of synth.template, as JSON (pools settings excluded).

    backend replaces synth.template.backend (the control pool's backend none).
    """
    keys = (
        "backend",
        "variants",
        "generation",
        "seed",
        "validator",
        "guard",
        "seed_sample",
    )
    settings = {key: TEMPLATE[key] for key in keys}
    if backend is not None:
        settings["backend"] = backend
    return as_json(settings)


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

    So a privacy change reruns the DP branch only. ``lora`` is passed only when set,
    so runs without adapters keep the settings (and results) they had.
    """
    keys = ["model", "scratch", "control_codes", "training"]
    if DPLM.get("lora") is not None:
        keys.append("lora")
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


# ------------------------------------------------------------ DP tabular synthesis

TABULAR = config["synth"]["tabular"]
TABLE = TABULAR["table"]["name"]
MAIN_ENV_SYNTHESIZERS = [n for n, i in SYNTHESIZERS.items() if i.env != DPGAN_ENV]
DPGAN_ENV_SYNTHESIZERS = [n for n, i in SYNTHESIZERS.items() if i.env == DPGAN_ENV]


wildcard_constraints:
    table=TABLE,
    budget="non_dp|eps[0-9.]+",


def tabular_budgets(name):
    """eps<epsilon> for each configured epsilon of a DP synthesizer; non_dp for a baseline."""
    if SYNTHESIZERS[name].dp:
        return [f"eps{epsilon:g}" for epsilon in TABULAR["epsilons"]]
    return ["non_dp"]


# every fitted synthesizer: (input name, synthesizer, budget)
TABULAR_RUNS = [
    (f"{name}_{budget}".replace(".", "_"), name, budget)
    for name in TABULAR["synthesizers"]
    for budget in tabular_budgets(name)
]


def tabular_samples_path(name, budget):
    return f"results/fit_dp_tabular/{TABLE}/{name}/{budget}/samples.parquet"


def tabular_source_files(wildcards):
    """The source table file (nothing for a scikit-learn dataset), so a new file reruns."""
    source = TABULAR["table"]["source"]
    return {"source": source["path"]} if "path" in source else {}


def tabular_budget_arguments(wildcards):
    if wildcards.budget == "non_dp":
        return ""
    return (
        f"--epsilon {wildcards.budget[3:]}"
        f" --preprocessor-epsilon {TABULAR['preprocessor_epsilon']}"
    )


def tabular_options(wildcards):
    """Only this synthesizer's options: changing another's does not rerun it."""
    return as_json(TABULAR["options"].get(wildcards.synthesizer, {}))


def tabular_sample_files(wildcards):
    return {
        key: tabular_samples_path(name, budget) for key, name, budget in TABULAR_RUNS
    }


def tabular_run_arguments(wildcards, input):
    """--run LABEL=SAMPLES for every fitted synthesizer (labels as the table shows them)."""
    runs = []
    for key, name, budget in TABULAR_RUNS:
        label = name if budget == "non_dp" else f"{name} (eps {budget[3:]})"
        pair = shlex.quote(f"{label}={input[key]}")
        runs.append(f"--run {pair}")
    return " ".join(runs)


def tabular_evaluation_dir(wildcards, output):
    return str(Path(output.json).parent)


def tabular_faithfulness_dir(wildcards, output):
    return str(Path(output.json).parent)


def tabular_verbalized_samples(wildcards):
    """The samples of the synthesizer whose rows are verbalized (Lorenzo et al. 2026: PATE-CTGAN)."""
    name = TABULAR["subsample"]["synthesizer"]
    if name not in TABULAR["synthesizers"]:
        raise WorkflowError(
            f"synth.tabular.subsample.synthesizer {name!r} is not one of "
            f"synth.tabular.synthesizers {TABULAR['synthesizers']}"
        )
    epsilon = TABULAR["subsample"]["epsilon"] or TABULAR["epsilons"][0]
    budget = f"eps{epsilon:g}" if SYNTHESIZERS[name].dp else "non_dp"
    return tabular_samples_path(name, budget)


def tabular_verbalize_settings():
    keys = ("backend", "rules", "generation", "seed", "fill_seed")
    return as_json({key: TABULAR["verbalize"][key] for key in keys})


def tabular_verbalize_gpus(wildcards):
    return 1 if TABULAR["verbalize"]["backend"]["kind"] == "transformers" else 0


# ------------------------------------------------------------ de-identification models

NER = config["ner"]
# every configured run with its sweep and training seeds expanded into named runs
try:
    NER_RUNS = {
        run["name"]: run
        for run in expand_runs(NER["runs"], NER["training_seeds"], NER["arm_seeds"])
    }
except ConfigError as exc:
    raise WorkflowError(f"config: {exc}") from None
# arm -> its runs (one per training seed); compare_ner aggregates each arm over them
NER_ARMS = run_arms(NER_RUNS.values())
REFERENCE_ARM = NER["reference_run"] or next(iter(NER_ARMS))
if REFERENCE_ARM in NER_RUNS:
    REFERENCE_ARM = NER_RUNS[REFERENCE_ARM].get("arm") or REFERENCE_ARM
if REFERENCE_ARM not in NER_ARMS:
    raise WorkflowError(
        f"ner.reference_run {REFERENCE_ARM!r} is neither a run nor an arm: runs "
        f"{sorted(NER_RUNS)}, arms {sorted(NER_ARMS)}"
    )
# the run-level reference: the reference arm's first training seed
REFERENCE_RUN = NER_ARMS[REFERENCE_ARM][0]
# runs that average trained runs' token probabilities instead of training a model
ENSEMBLE_RUNS = {
    name: run["members"] for name, run in NER_RUNS.items() if "members" in run
}
# runs that stack name and place lexicons over a trained run's token probabilities
STACKED_RUNS = {name: run["base"] for name, run in NER_RUNS.items() if "base" in run}
# runs with a mixture and a model of their own (neither ensembles nor stacked)
TRAINED_RUNS = [
    name for name in NER_RUNS if name not in ENSEMBLE_RUNS and name not in STACKED_RUNS
]


def check_ensemble_runs():
    """Members are trained runs; an ensemble has none of a trained run's settings."""
    for name, members in ENSEMBLE_RUNS.items():
        run = NER_RUNS[name]
        for member in members:
            if member not in TRAINED_RUNS:
                raise WorkflowError(
                    f"ner run {name!r}: member {member!r} is not a trained run (one "
                    f"with a mixture): {sorted(TRAINED_RUNS)}"
                )
        if run.get("pools") or run.get("tapt") or run.get("training"):
            raise WorkflowError(
                f"ner run {name!r} is an ensemble: pools, tapt and training belong to "
                "its member runs"
            )


check_ensemble_runs()


def check_stacked_runs():
    """A stacked run's base is a trained run; it has none of a trained run's settings."""
    for name, base in STACKED_RUNS.items():
        run = NER_RUNS[name]
        if base not in TRAINED_RUNS:
            raise WorkflowError(
                f"ner run {name!r}: base {base!r} is not a trained run (one with a "
                f"mixture): {sorted(TRAINED_RUNS)}"
            )
        if run.get("pools") or run.get("tapt") or run.get("training"):
            raise WorkflowError(
                f"ner run {name!r} stacks lexicons over {base!r}: mixture, pools, tapt and "
                "training belong to its base run"
            )


check_stacked_runs()

# labelled pools a mixture can draw from: name -> (artifact, split parts used)
POOLS = {
    "surrogates": ("results/replace_surrogates/{corpus}/notes.parquet", ["seed"]),
    "template_pii": ("results/fill_templates/{corpus}/pii.parquet", ["synthetic"]),
    "template_no_pii": (
        "results/fill_templates/{corpus}/no_pii.parquet",
        ["synthetic"],
    ),
    # the control of the template pool: backend none on the same seeds
    "template_none": (
        "results/fill_templates/{corpus}/control/pii.parquet",
        ["synthetic"],
    ),
    "dplm_pii": ("results/sample_dp_lm/{corpus}/dp/pii.parquet", ["synthetic"]),
    "dplm_no_pii": ("results/sample_dp_lm/{corpus}/dp/no_pii.parquet", ["synthetic"]),
    "tabular_reports": (
        f"results/verbalize_tabular/{TABLE}/pii.parquet",
        ["synthetic"],
    ),
}
# encoders after task-adaptive pretraining, by the name a run gives in `tapt`
TAPT_MODELS = {
    "dplm": "results/tapt_encoder/{corpus}/dplm/model",
    "own": "results/tapt_encoder/{corpus}/own/{run}/model",
    "seeds_masked": "results/tapt_encoder/{corpus}/seeds_masked/model",
    "seeds_surrogates": "results/tapt_encoder/{corpus}/seeds_surrogates/model",
}


wildcard_constraints:
    run="|".join(re.escape(name) for name in NER_RUNS),


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


def run_training(run):
    """ner.training with the run's own overrides on top."""
    return {**NER["training"], **NER_RUNS[run]["training"]}


def tapt_model(wildcards):
    """The adapted encoder a run starts from, or None for a run without TAPT."""
    tapt = NER_RUNS[wildcards.run].get("tapt")
    if not tapt:
        return None
    return TAPT_MODELS[tapt].format(corpus=wildcards.corpus, run=wildcards.run)


def training_settings(wildcards):
    """The run's training settings as JSON (one run's own params).

    A run with `tapt` starts from the adapted encoder instead of its training model.
    """
    settings = run_training(wildcards.run)
    model = tapt_model(wildcards)
    if model:
        settings["model"] = model
    return as_json(settings)


def tapt_input(wildcards):
    """The adapted encoder a run starts from (nothing for a run without TAPT)."""
    model = tapt_model(wildcards)
    return {"tapt": model} if model else {}


def own_tapt_settings(wildcards):
    """ner.tapt with the encoder the run would otherwise start from, as JSON."""
    return as_json({**NER["tapt"], "model": run_training(wildcards.run)["model"]})


def run_model_dir(run, corpus):
    """Where a run's model directory is: trained (train_ner), combined (ensemble_ner)
    or stacked over lexicons (stack_lexicons)."""
    if run in STACKED_RUNS:
        step = "stack_lexicons"
    else:
        step = "ensemble_ner" if run in ENSEMBLE_RUNS else "train_ner"
    return f"results/{step}/{corpus}/{run}/model"


def run_model(wildcards):
    return run_model_dir(wildcards.run, wildcards.corpus)


# runs whose errors on development notes are listed (report_errors; trained runs only)
ERROR_REPORT = NER["error_report"]
for _run in ERROR_REPORT["runs"]:
    if _run not in TRAINED_RUNS:
        raise WorkflowError(
            f"ner.error_report.runs: {_run!r} is not a trained run: {sorted(TRAINED_RUNS)}"
        )


# ------------------------------------------------------------ cross-corpus evaluation

# further labelled corpora every run's model de-identifies whole and is scored on
EVAL_CORPORA = {
    entry["name"]: entry for entry in config.get("evaluation", {}).get("corpora", [])
}
if CORPUS in EVAL_CORPORA:
    raise WorkflowError(
        f"evaluation.corpora: {CORPUS!r} is the corpus itself (its holdout is always scored); "
        "give the other corpus another name"
    )
if len(EVAL_CORPORA) != len(config.get("evaluation", {}).get("corpora", [])):
    raise WorkflowError(
        "evaluation.corpora: two corpora share a name; names must be unique"
    )
for _name, _entry in EVAL_CORPORA.items():
    try:
        LabelMap(_entry.get("labels", {}).get("mapping") or {})
    except ConfigError as exc:
        raise WorkflowError(f"evaluation.corpora[{_name}]: {exc}") from None


wildcard_constraints:
    target="|".join(re.escape(name) for name in EVAL_CORPORA) or "(?!)",


def eval_corpus(wildcards):
    return EVAL_CORPORA[wildcards.target]


def eval_corpus_files(wildcards):
    return reader_files(eval_corpus(wildcards))


def eval_label_map(wildcards):
    mapping = eval_corpus(wildcards).get("labels", {}).get("mapping") or {}
    return as_json(mapping or {label: label for label in CANONICAL_LABELS})


def cross_evaluation_outputs(wildcards):
    """metrics.json of every run on every corpus of evaluation.corpora."""
    return {
        f"cross_{target}_{run}": (
            f"results/evaluate_ner_cross/{wildcards.corpus}/{run}/{target}/metrics.json"
        )
        for target in EVAL_CORPORA
        for run in NER_RUNS
    }


def cross_arguments(wildcards, input):
    """--corpus-name and one --cross CORPUS RUN DIR per run and corpus, for compare_ner."""
    arguments = [f"--corpus-name {shlex.quote(wildcards.corpus)}"]
    arguments += [
        "--cross "
        + " ".join(
            shlex.quote(value)
            for value in (target, run, str(Path(input[f"cross_{target}_{run}"]).parent))
        )
        for target in EVAL_CORPORA
        for run in NER_RUNS
    ]
    return " ".join(arguments)


def stacked_base_inputs(wildcards):
    """The base run's model, and its validation and training notes (development notes)."""
    base = STACKED_RUNS[wildcards.run]
    mixture = f"results/build_mixture/{wildcards.corpus}/{base}"
    return {
        "model": run_model_dir(base, wildcards.corpus),
        "validation": f"{mixture}/validation.parquet",
        "train": f"{mixture}/train.parquet",
    }


def stacked_lexicons(wildcards):
    return ",".join(NER_RUNS[wildcards.run]["lexicons"])


def stacked_parts(wildcards):
    """The split parts whose notes, with the base's validation notes, fit the stacker."""
    return NER_RUNS[wildcards.run].get("parts") or ["seed"]


def stacked_settings(wildcards):
    """The stacked run's operating-point rule (its own, else ner.training's), as JSON."""
    point_rule = NER_RUNS[wildcards.run].get("operating_point") or NER["training"].get(
        "operating_point", {}
    )
    return as_json({"operating_point": point_rule})


def model_ensemble_inputs(wildcards):
    """Each member's model, and its validation and training notes (operating point)."""
    inputs = {}
    for member in ENSEMBLE_RUNS[wildcards.run]:
        mixture = f"results/build_mixture/{wildcards.corpus}/{member}"
        inputs[f"model_{member}"] = run_model_dir(member, wildcards.corpus)
        inputs[f"validation_{member}"] = f"{mixture}/validation.parquet"
        inputs[f"train_{member}"] = f"{mixture}/train.parquet"
    return inputs


def model_ensemble_arguments(wildcards, input):
    """--member NAME=DIR, --validation and --train for each member."""
    arguments = []
    for member in ENSEMBLE_RUNS[wildcards.run]:
        model = input[f"model_{member}"]
        validation = shlex.quote(input[f"validation_{member}"])
        train = shlex.quote(input[f"train_{member}"])
        member_dir = shlex.quote(f"{member}={model}")
        arguments.append(
            f"--member {member_dir} --validation {validation} --train {train}"
        )
    return " ".join(arguments)


def model_ensemble_settings(wildcards):
    """The ensemble's operating-point rule (its own, else ner.training's), as JSON."""
    point_rule = NER_RUNS[wildcards.run].get("operating_point") or NER["training"].get(
        "operating_point", {}
    )
    return as_json({"operating_point": point_rule})


def evaluation_outputs(wildcards):
    return {
        run: f"results/evaluate_ner/{wildcards.corpus}/{run}/metrics.json"
        for run in NER_RUNS
    }


SEED_TEXT_NOTES = {
    "masked": "results/mask_seeds/{corpus}/masked.parquet",
    "surrogates": "results/replace_surrogates/{corpus}/notes.parquet",
}


def seed_text_notes(wildcards):
    """The seed notes TAPT reads: masked (mask_seeds) or with surrogates (replace_surrogates)."""
    return SEED_TEXT_NOTES[wildcards.text].format(corpus=wildcards.corpus)


def dp_model_runs():
    """Runs whose training data passed through the DP language model: its pools, or tapt: dplm."""
    return [
        run
        for run, entry in NER_RUNS.items()
        if entry.get("tapt") == "dplm"
        or any(p.startswith("dplm_") for p in entry.get("pools", []))
    ]


def study_inputs(wildcards):
    """Each trained run's mixture summary, and the DP model's privacy record where used."""
    inputs = {
        f"mixture_{run}": f"results/build_mixture/{wildcards.corpus}/{run}/summary.json"
        for run in TRAINED_RUNS
    }
    if dp_model_runs():
        inputs["privacy"] = f"results/train_dp_lm/{wildcards.corpus}/dp/privacy.json"
    return inputs


def study_arguments(wildcards, input):
    """--mixture RUN=SUMMARY per trained run, --privacy RUN=PRIVACY per DP-model run."""
    arguments = [
        f"--mixture {shlex.quote(run)}={shlex.quote(input[f'mixture_{run}'])}"
        for run in TRAINED_RUNS
    ]
    arguments += [
        f"--privacy {shlex.quote(f'{run}={input.privacy}')}" for run in dp_model_runs()
    ]
    return " ".join(arguments)


def run_arguments(wildcards, input):
    """--run NAME=DIR for compare_ner, from the metrics files of every run, and
    --arm NAME=ARM for each run of an arm with training seeds or a sweep."""
    arguments = [
        f"--run {shlex.quote(f'{run}={Path(input[run]).parent}')}" for run in NER_RUNS
    ]
    arguments += [
        f"--arm {shlex.quote(f'{run}={entry[ARM]}')}"
        for run, entry in NER_RUNS.items()
        if entry.get(ARM) and entry[ARM] != run
    ]
    return " ".join(arguments)


# ------------------------------------------------------------ teacher labelling

TEACHER = config["teacher"]
TEACHERS = {entry["name"]: entry for entry in TEACHER["teachers"]}
# keys the workflow reads itself; the rest is the teacher's own settings
WORKFLOW_TEACHER_KEYS = ("name", "student")
# answers of an LLM teacher hold the notes' PHI: local disk, like the notes, never shared
TEACHER_CACHE_DIR = "cache/teacher_responses"


wildcard_constraints:
    teacher="|".join(TEACHERS) or "(?!)",
    subset="pool|holdout",


def teacher_folder(name, subset):
    """The folder a teacher writes for a subset (an ensemble is combined, not labelled)."""
    step = (
        "combine_teachers" if TEACHERS[name]["kind"] == "ensemble" else "label_teacher"
    )
    return f"results/{step}/{{corpus}}/{name}/{subset}"


def named_run(name):
    """The run a teacher names: a run, or an arm's first training seed (None: neither)."""
    if name in NER_RUNS:
        return name
    return NER_ARMS[name][0] if name in NER_ARMS else None


def teacher_model_run(name):
    """The ner run whose model a model teacher applies (None: a model directory path)."""
    return named_run(TEACHERS[name].get("model"))


def student_run(name):
    """The ner run a teacher's student is (its arm's first training seed for an arm)."""
    return named_run(TEACHERS[name]["student"])


def teacher_dependencies(name):
    """Teachers and runs a teacher needs (to refuse a teacher that needs its own labels)."""
    entry = TEACHERS[name]
    if entry["kind"] == "ensemble":
        return [("teacher", m) for m in entry.get("members", [])]
    run = teacher_model_run(name) if entry["kind"] == "model" else None
    return [("run", run)] if run else []


def run_dependencies(run):
    if run in ENSEMBLE_RUNS:
        return [("run", member) for member in ENSEMBLE_RUNS[run]]
    if run in STACKED_RUNS:
        return [("run", STACKED_RUNS[run])]
    return [
        ("teacher", pool[len("silver_") :])
        for pool in NER_RUNS[run].get("pools", [])
        if pool.startswith("silver_")
    ]


def check_teachers():
    """Every teacher's settings, members, student and model run, and no cycles."""
    for name, entry in TEACHERS.items():
        where = f"teacher.teachers[{name}]"
        try:
            check_teacher_settings(
                {k: v for k, v in entry.items() if k not in WORKFLOW_TEACHER_KEYS},
                where,
            )
        except ConfigError as exc:
            raise WorkflowError(str(exc)) from None
        for member in entry.get("members", []) if entry["kind"] == "ensemble" else []:
            if member not in TEACHERS:
                raise WorkflowError(f"{where}: member {member!r} is not a teacher")
        if entry["kind"] == "model" and not entry.get("model"):
            raise WorkflowError(
                f"{where}: a model teacher needs model (an ner run or a path)"
            )
        student = entry.get("student")
        if student and f"silver_{name}" not in NER_RUNS.get(named_run(student), {}).get(
            "pools", []
        ):
            raise WorkflowError(
                f"{where}: student {student!r} must be an ner run whose pools include "
                f"silver_{name}"
            )
    for run in NER_RUNS:
        for kind, name in run_dependencies(run):
            if kind == "teacher" and name not in TEACHERS:
                raise WorkflowError(
                    f"ner run {run!r}: pool silver_{name} names no teacher"
                )
    for name in TEACHERS:
        seen, todo = set(), list(teacher_dependencies(name))
        while todo:
            node = todo.pop()
            if node == ("teacher", name):
                raise WorkflowError(
                    f"teacher {name!r} depends on its own silver labels (through its "
                    "model run or members); train its model on other pools"
                )
            if node in seen:
                continue
            seen.add(node)
            kind, what = node
            todo += (
                teacher_dependencies(what)
                if kind == "teacher"
                else run_dependencies(what)
            )


check_teachers()

for _name in TEACHERS:
    POOLS[f"silver_{_name}"] = (
        f"{teacher_folder(_name, 'pool')}/silver.parquet",
        list(TEACHER["parts"]),
    )


def teacher_settings(wildcards):
    """The teacher's own settings as JSON (not its name or student: changing those reruns nothing)."""
    entry = TEACHERS[wildcards.teacher]
    return as_json({k: v for k, v in entry.items() if k not in WORKFLOW_TEACHER_KEYS})


def teacher_parts(wildcards):
    """pool: the parts labelled as if unlabelled; holdout: the parts the students are scored on."""
    return TEACHER["parts"] if wildcards.subset == "pool" else NER["deid"]["parts"]


def teacher_inputs(wildcards):
    """The split notes, and a model teacher's model directory."""
    inputs = {"notes": f"results/split_notes/{wildcards.corpus}/notes.parquet"}
    entry = TEACHERS[wildcards.teacher]
    if entry["kind"] == "model":
        run = teacher_model_run(wildcards.teacher)
        inputs["model"] = (
            run_model_dir(run, wildcards.corpus) if run else entry["model"]
        )
    return inputs


def teacher_model_argument(wildcards, input):
    return f"--model {shlex.quote(input.model)}" if "model" in input.keys() else ""


def teacher_gpus(wildcards):
    """One GPU for a model teacher or a local transformers LLM; none for HTTP or rules."""
    entry = TEACHERS[wildcards.teacher]
    local_llm = (
        entry["kind"] == "llm"
        and entry.get("backend", {}).get("kind") == "transformers"
    )
    return 1 if entry["kind"] == "model" or local_llm else 0


def ensemble_member_files(wildcards):
    """Each member's metadata table for the same subset (the folder holds the rest)."""
    members = TEACHERS[wildcards.teacher]["members"]
    return {
        member: f"{teacher_folder(member, wildcards.subset)}/metadata.parquet".format(
            corpus=wildcards.corpus
        )
        for member in members
    }


def ensemble_member_arguments(wildcards, input):
    members = TEACHERS[wildcards.teacher]["members"]
    pairs = [f"{member}={Path(input[member]).parent}" for member in members]
    return " ".join(f"--member {shlex.quote(pair)}" for pair in pairs)


def ensemble_policy(wildcards):
    return as_json(TEACHERS[wildcards.teacher].get("policy") or {})


def teacher_labels_file(wildcards):
    """What evaluate_teacher scores: every holdout note, or the silver pool as trained on."""
    name = "labels.parquet" if wildcards.subset == "holdout" else "silver.parquet"
    return f"{teacher_folder(wildcards.teacher, wildcards.subset)}/{name}".format(
        corpus=wildcards.corpus
    )


def teacher_skip_unpredicted(wildcards):
    return "--skip-unpredicted" if wildcards.subset == "pool" else ""


def student_metrics(wildcards):
    student = student_run(wildcards.teacher)
    return f"results/evaluate_ner/{wildcards.corpus}/{student}/metrics.json"


def teacher_student_arguments(wildcards, input):
    student = student_run(wildcards.teacher)
    teacher = shlex.quote(f"{wildcards.teacher}={Path(input.teacher).parent}")
    student_arg = shlex.quote(f"{student}={Path(input.student).parent}")
    return f"--teacher {teacher} --student {student_arg}"


def teacher_targets():
    """Per teacher: the silver-noise table (when scored) and the student comparison."""
    targets = []
    for name, entry in TEACHERS.items():
        if TEACHER["noise"]:
            targets.append(f"results/compare_teacher/{CORPUS}/{name}/silver_noise.md")
        if entry.get("student"):
            targets.append(f"results/compare_teacher/{CORPUS}/{name}/distillation.md")
        if not TEACHER["noise"] and not entry.get("student"):
            targets.append(
                f"{teacher_folder(name, 'pool')}/silver.parquet".format(corpus=CORPUS)
            )
    return targets
