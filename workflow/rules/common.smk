"""Shared by all rules: config validation, the tables the rules read, shared input functions.

The logic is the synthdeid.workflow package; rules call it through thin
functions (named here when several rules share one, else inline).
"""

import functools
import re

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from synthdeid.code_identity import stage_code_digest
from synthdeid.errors import ConfigError
from synthdeid.labels import coarse_view
from synthdeid.notes import UNSPLIT
from synthdeid.workflow import (
    corpora,
    ledger,
    ner_inputs,
    pools,
    stage_names,
    surrogate_key,
    synthesis,
    tabular,
    teachers,
)
from synthdeid.workflow.arguments import (
    as_json,
    beside_output,
    folder_of,
    label_map_json,
)
from synthdeid.workflow.environment import ensure_cli_on_path
from synthdeid.workflow.outputs import Output, RuleOutputs
from synthdeid.workflow.sharding import (
    SHARD_PATTERN,
    shard_counts,
    shard_flag,
    shard_inputs,
    sharded,
)
from synthdeid.workflow.tables import Tables

validate(config, schema="../schemas/config.schema.yaml")


def refusing(function):
    """``function`` with the package's ConfigError raised as Snakemake's WorkflowError.

    The one translation: a config value that cannot work stops the workflow
    with the package's message, at parse time or in the input function that
    needs it.
    """

    @functools.wraps(function)
    def refused(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ConfigError as exc:
            raise WorkflowError(str(exc)) from None

    return refused


# what the schema cannot say, checked before any job is planned
TABLES = refusing(Tables.from_config)(config)

ensure_cli_on_path()

# checked lazily: only the rules that need them refuse a missing corpus, key or synthesizer
corpus_path = refusing(corpora.corpus_path)
reader_files = refusing(corpora.reader_files)
evaluation_reader_files = refusing(corpora.evaluation_reader_files)
anchor_path = refusing(corpora.anchor_path)
key_fingerprint = refusing(surrogate_key.key_fingerprint)

CORPUS = TABLES.corpus
LABEL_MAP = label_map_json(config["labels"]["mapping"])
COARSE_VIEW = as_json(coarse_view(config["labels"]["coarse_view"]))
# further labelled corpora every run's model de-identifies whole and is scored on
EVAL_CORPORA = TABLES.evaluation_corpora
# external de-identifiers' predictions on the corpus, scored as runs (evaluation.anchors)
ANCHORS = TABLES.anchors

TEMPLATE = config["synth"]["template"]
# responses cached by request hash, kept across reruns (not an output of any rule)
LLM_CACHE_DIR = "cache/llm_responses"

DPLM = config["synth"]["dplm"]
DPLM_MODELS = synthesis.dplm_models(DPLM)

TABULAR = config["synth"]["tabular"]
TABLE = TABLES.table
# the source table: {path: ...} or {sklearn: ...}, a key a named config set to null dropped
TABLE_SOURCE = refusing(tabular.table_source)(TABULAR)
# every fitted synthesizer: its evaluate_tabular input name, synthesizer and budget
TABULAR_RUNS = TABLES.tabular_runs

NER = config["ner"]
# every configured run with its sweep and training seeds expanded into named runs
RUNS = TABLES.runs
NER_RUNS = RUNS.runs
# archived runs `snakemake study` tabulates instead of the runs themselves (null: the runs)
STUDY_ARCHIVE = NER["study_archive"]
archive_files = refusing(ner_inputs.archive_files)
archived_reference = refusing(ner_inputs.archived_reference)
# runs whose errors on development notes are listed (report_errors; trained runs only)
ERROR_REPORT = NER["error_report"]
# labelled pools a mixture can draw from, silver pools of the teachers included
POOLS = TABLES.pools

# the fitted synthesizer whose rows are verbalized (subsample_tabular)
VERBALIZED = refusing(tabular.verbalized_run)(TABULAR)
# the budgets per population, checked against the configured epsilons of every DP
# release now (the ledger_privacy step reads ledger_releases below)
LEDGER_BUDGETS = ledger.budgets(CORPUS, TABLE, config["privacy"]["budgets"])
refusing(ledger.check_planned)(
    ledger.planned_releases(CORPUS, TABLE, TABULAR_RUNS),
    DPLM["privacy"]["target_epsilon"],
    TABULAR_RUNS,
    LEDGER_BUDGETS,
)

# jobs per sharded step (1: one job, no gather)
SHARDS = refusing(shard_counts)(config)

TEACHERS = TABLES.teachers
# runs others build on, or asked for by name: never part of a degenerate arm (plan_runs)
PROTECTED_RUNS = (
    RUNS.built_upon() | set(TABLES.error_report_runs) | TEACHERS.run_references(RUNS)
)
# answers of an LLM teacher hold the notes' PHI: local disk, like the notes, never shared
TEACHER_CACHE_DIR = "cache/teacher_responses"


wildcard_constraints:
    corpus=CORPUS,
    privacy="dp|non_dp",
    table=TABLE,
    budget="non_dp|eps[0-9.]+",
    run="|".join(re.escape(name) for name in NER_RUNS),
    anchor="|".join(re.escape(name) for name in ANCHORS) or "(?!)",
    target="|".join(re.escape(name) for name in EVAL_CORPORA) or "(?!)",
    teacher="|".join(TEACHERS.entries) or "(?!)",
    subset="pool|holdout",
    shard=SHARD_PATTERN,


@functools.cache
def rule_outputs():
    """Every rule's declared outputs, which the tables name instead of paths
    (synthdeid.workflow.outputs): read once every rule is defined, by `rule all` and
    the input functions."""
    return RuleOutputs.from_rules(workflow.rules)


def all_targets():
    provenance = Output("list_provenance", "record")
    return [
        *TABLES.targets(rule_outputs()),
        rule_outputs().path(provenance, corpus=CORPUS),
    ]


def provenance_inputs(wildcards):
    """The final artifacts that record their provenance (Parquet and JSON targets)."""
    return [
        t for t in TABLES.targets(rule_outputs()) if t.endswith((".parquet", ".json"))
    ]


def distinct_runs(wildcards_or_corpus):
    """What is trained, scored and archived: RUNS, less the degenerate arms of plan_runs'
    plan with ner.degenerate_arms: skip."""
    if not TABLES.skip_degenerate_arms:
        return RUNS
    corpus = getattr(wildcards_or_corpus, "corpus", wildcards_or_corpus)
    plan = checkpoints.plan_runs.get(corpus=corpus).output.plan
    return RUNS.without_arms(ner_inputs.read_run_plan(plan).degenerate_arms)


def add_code_params(defined):
    """Give every defined step that runs a stage the param ``code``: the digest of that
    stage's code, so that a change to it reruns the step (Snakemake's params trigger); the
    shell command, ``synthdeid <stage> ...``, stays the same when the code behind it changes.
    """
    for step in defined:
        if step.shellcmd:
            step.set_params(
                code=stage_code_digest(stage_names.stage_command(step.name))
            )


def eval_corpus(wildcards):
    return EVAL_CORPORA[wildcards.target]


def deid_key_fingerprint(wildcards):
    """In surrogate mode a new key reruns predict_ner; redaction needs no key."""
    if NER["deid"]["mode"] != "surrogate":
        return ""
    return key_fingerprint(config["surrogate"]["key_file"], "predict_ner")


def tabular_budget_arguments(wildcards):
    return tabular.budget_arguments(wildcards.budget, TABULAR["preprocessor_epsilon"])


def tabular_options(wildcards):
    """Only this synthesizer's options: changing another's does not rerun it."""
    return as_json(TABULAR["options"].get(wildcards.synthesizer, {}))


def run_model(wildcards):
    return RUNS.model_dir(wildcards.run, wildcards.corpus, rule_outputs())


@functools.cache
def ledger_releases():
    """Every DP release with its privacy.json (rule ledger_privacy)."""
    return ledger.release_specs(CORPUS, TABLE, TABULAR_RUNS, VERBALIZED, rule_outputs())


def operating_point_settings(wildcards):
    """An ensemble's or stacked run's operating-point rule, as JSON."""
    return as_json({"operating_point": RUNS.operating_point(wildcards.run)})


def teacher_parts(wildcards):
    """pool: the parts labelled as if unlabelled; holdout: the parts the students are scored on."""
    return TEACHERS.parts if wildcards.subset == "pool" else NER["deid"]["parts"]
