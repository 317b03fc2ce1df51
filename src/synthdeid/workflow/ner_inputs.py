"""Inputs, settings and CLI arguments of the NER rules, from the expanded runs."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.ner.duplicates import RunPlan, read_plan, settings_digest
from synthdeid.ner.sweeps import ARM
from synthdeid.workflow.arguments import flags, joined, parent
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.outputs import BENCHMARK, Output, RuleOutputs
from synthdeid.workflow.pools import tapt_model
from synthdeid.workflow.synthesis import dp_lm_privacy_file

# a run's predictions as the workflow names them: gather_predict_ner's outputs, which are
# predict_ner's own when it runs as one job (shards.predict_ner 1)
PREDICTIONS = Output("gather_predict_ner", "predictions")


def mixture_file(corpus: str, run: str, name: str, outputs: RuleOutputs) -> str:
    """A file of a run's mixture (build_mixture's output ``train``, ``validation`` or
    ``summary``)."""
    return outputs.path(Output("build_mixture", name), corpus=corpus, run=run)


def metrics_file(corpus: str, run: str, outputs: RuleOutputs) -> str:
    """A run's scores on its own holdout (evaluate_ner)."""
    return outputs.path(Output("evaluate_ner", "metrics"), corpus=corpus, run=run)


def predictions_file(
    corpus: str, run: str, outputs: RuleOutputs, anchors: Collection[str] = ()
) -> str:
    """What evaluate_ner scores: a run's predictions (predict_ner), or an anchor's predictions
    made into the same table (score_anchor)."""
    if run in anchors:
        return outputs.path(Output("score_anchor", "predictions"), corpus=corpus, anchor=run)
    return outputs.path(PREDICTIONS, corpus=corpus, run=run)


def cross_metrics_file(corpus: str, run: str, target: str, outputs: RuleOutputs) -> str:
    """A run's scores on a corpus of evaluation.corpora (evaluate_ner_cross)."""
    return outputs.path(
        Output("evaluate_ner_cross", "metrics"), corpus=corpus, run=run, target=target
    )


def run_tapt_model(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> str | None:
    """The adapted encoder a run starts from, or None for a run without TAPT."""
    return tapt_model(runs.runs[run].get("tapt"), corpus, run, outputs)


def tapt_input(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """train_ner's TAPT input: the adapted encoder (nothing for a run without TAPT)."""
    model = run_tapt_model(runs, run, corpus, outputs)
    return {"tapt": model} if model else {}


# ner.training keys that only a run with distill_from uses
DISTILL_KEYS = ("distill_alpha", "distill_temperature")


def training_settings(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> dict[str, Any]:
    """The run's training settings; a run with `tapt` starts from the adapted encoder. The
    distillation keys are left out of a run without `distill_from` (unused there), so that
    changing them reruns only the distilled runs."""
    settings = used_training(runs, run)
    model = run_tapt_model(runs, run, corpus, outputs)
    if model:
        settings["model"] = model
    return settings


def used_training(runs: NerRuns, run: str) -> dict[str, Any]:
    """ner.training with the run's overrides, less the distillation keys of a run without
    `distill_from` (unused there)."""
    settings = runs.training(run)
    if not runs.runs[run].get("distill_from"):
        for key in DISTILL_KEYS:
            settings.pop(key, None)
    return settings


def settings_key(runs: NerRuns, run: str) -> str:
    """The digest of what besides its mixture decides the model a run trains: its training
    settings (seed included), the encoder it adapts (``tapt``) and its distillation teacher."""
    entry = runs.runs[run]
    return settings_digest(
        {
            "training": used_training(runs, run),
            "tapt": entry.get("tapt"),
            "distill": runs.distill_teacher(run),
        }
    )


def plan_inputs(runs: NerRuns, corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """plan_runs' inputs: each trained run's mixture summary, the reference arm's first."""
    return {
        f"mixture_{run}": mixture_file(corpus, run, "summary", outputs)
        for run in runs.in_plan_order()
    }


def plan_arguments(runs: NerRuns, protected: Collection[str]) -> str:
    """plan-runs' --arm and --settings per trained run and --protect per run others build
    on. Kept apart from the mixtures (which come from the rule's input) so that Snakemake
    compares them: a param derived from the input is not compared, and a change to a
    run's settings must rerun the plan."""
    order = runs.in_plan_order()
    return joined(
        flags("--arm", ((run, runs.runs[run].get(ARM) or run) for run in order)),
        flags("--settings", ((run, settings_key(runs, run)) for run in order)),
        *[f"--protect {shlex.quote(run)}" for run in order if run in protected],
    )


def plan_mixture_arguments(runs: NerRuns, inputs: Mapping[str, str]) -> str:
    """plan-runs' --mixture per trained run, in plan order (from the rule's input)."""
    return flags("--mixture", ((run, inputs[f"mixture_{run}"]) for run in runs.in_plan_order()))


def archive_files(folder: str | None) -> list[str]:
    """Every file of a study archive (run folders and plan.json), listed when the workflow
    is parsed, so that a run added, removed or changed there reruns the archived study;
    none without a folder (ConfigError: not a folder)."""
    if not folder:
        return []
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"ner.study_archive: {folder} is not a folder")
    return sorted(str(path) for path in root.rglob("*") if path.is_file())


def archived_reference(folder: str | None, runs: NerRuns) -> str:
    """The run compare-ner takes as the reference of an archived study: the first run of
    the reference arm the archive holds (ConfigError: it holds none)."""
    if not folder:
        return runs.reference_run
    held = [run for run in runs.arms[runs.reference_arm] if (Path(folder) / run).is_dir()]
    if not held:
        raise ConfigError(
            f"ner.study_archive: {folder} holds no run of the reference arm "
            f"{runs.reference_arm!r} ({', '.join(runs.arms[runs.reference_arm])})"
        )
    return held[0]


def read_run_plan(path: str) -> RunPlan:
    """The plan plan_runs wrote (ConfigError naming the file if it is not one)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return read_plan(json.load(handle))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not a readable run plan ({exc}); delete it to rebuild"
        ) from None


def soft_labels_file(corpus: str, run: str, outputs: RuleOutputs) -> str:
    """A distilled run's teacher soft labels on its training notes (soft_label_ner; local
    only: they say where the teacher saw PHI in real notes)."""
    return outputs.path(Output("soft_label_ner", "soft_labels"), corpus=corpus, run=run)


def teacher_model(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> str:
    """soft_label_ner's teacher: the model directory of the run's `distill_from` (trained,
    ensemble or stacked)."""
    teacher = runs.distill_teacher(run)
    if teacher is None:
        raise ConfigError(f"ner run {run!r} has no distill_from: it learns no soft labels")
    return runs.model_dir(teacher, corpus, outputs)


def distill_input(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """train_ner's distillation input: the teacher's soft labels (nothing for a run without
    `distill_from`)."""
    if not runs.distill_teacher(run):
        return {}
    return {"soft_labels": soft_labels_file(corpus, run, outputs)}


def distill_arguments(inputs: Mapping[str, str]) -> str:
    """train-ner's --soft-labels, for a run with the soft_labels input; else nothing."""
    # keys(): `in` on Snakemake's input object looks at the paths, not the names
    if "soft_labels" not in set(inputs.keys()):
        return ""
    return f"--soft-labels {shlex.quote(inputs['soft_labels'])}"


def development_inputs(
    runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs
) -> dict[str, str]:
    """A trained run's model, and its validation and training notes."""
    return {
        "model": runs.model_dir(run, corpus, outputs),
        "validation": mixture_file(corpus, run, "validation", outputs),
        "train": mixture_file(corpus, run, "train", outputs),
    }


def stacked_inputs(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """The base run's model, and its validation and training notes (development notes)."""
    return development_inputs(runs, runs.stacked[run], corpus, outputs)


def ensemble_inputs(runs: NerRuns, run: str, corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """Each member's model, and its validation and training notes (operating point)."""
    inputs: dict[str, str] = {}
    for member in runs.ensembles[run]:
        member_inputs = development_inputs(runs, member, corpus, outputs)
        inputs.update({f"{key}_{member}": path for key, path in member_inputs.items()})
    return inputs


def ensemble_arguments(runs: NerRuns, run: str, inputs: Mapping[str, str]) -> str:
    """--member NAME=DIR, --validation and --train for each member of an ensemble run."""
    return " ".join(
        f"{flags('--member', [(member, inputs[f'model_{member}'])])}"
        f" --validation {shlex.quote(inputs[f'validation_{member}'])}"
        f" --train {shlex.quote(inputs[f'train_{member}'])}"
        for member in runs.ensembles[run]
    )


def evaluation_outputs(
    runs: NerRuns, corpus: str, outputs: RuleOutputs, anchors: Collection[str] = ()
) -> dict[str, str]:
    """compare_ner's inputs: every run's metrics on its own holdout, then every anchor's
    (evaluation.anchors, scored as runs on the same notes), by name."""
    return {name: metrics_file(corpus, name, outputs) for name in (*runs.runs, *anchors)}


def cross_outputs(
    runs: NerRuns, targets: Collection[str], corpus: str, outputs: RuleOutputs
) -> dict[str, str]:
    """metrics.json of every run on every corpus of evaluation.corpora."""
    return {
        f"cross_{target}_{run}": cross_metrics_file(corpus, run, target, outputs)
        for target in targets
        for run in runs.runs
    }


def compare_arguments(
    runs: NerRuns, inputs: Mapping[str, str], anchors: Collection[str] = ()
) -> str:
    """--run NAME=DIR for compare_ner, from the metrics files of every run and anchor, and
    --arm NAME=ARM for each run of an arm with training seeds or a sweep (an anchor is an
    arm of its own)."""
    arm_runs = [
        (run, entry[ARM])
        for run, entry in runs.runs.items()
        if entry.get(ARM) and entry[ARM] != run
    ]
    return joined(
        flags("--run", ((name, parent(inputs[name])) for name in (*runs.runs, *anchors))),
        flags("--arm", arm_runs),
    )


def cross_arguments(
    corpus: str, targets: Collection[str], runs: NerRuns, inputs: Mapping[str, str]
) -> str:
    """--corpus-name and one --cross CORPUS RUN DIR per run and corpus, for compare_ner."""
    arguments = [f"--corpus-name {shlex.quote(corpus)}"]
    arguments += [
        "--cross "
        + " ".join(
            shlex.quote(value) for value in (target, run, parent(inputs[f"cross_{target}_{run}"]))
        )
        for target in targets
        for run in runs.runs
    ]
    return " ".join(arguments)


def train_benchmark(corpus: str, run: str, outputs: RuleOutputs) -> str:
    """The benchmark file of a run's train_ner job (wall and CPU time)."""
    return outputs.path(Output("train_ner", BENCHMARK), corpus=corpus, run=run)


def study_inputs(runs: NerRuns, corpus: str, outputs: RuleOutputs) -> dict[str, str]:
    """Each trained run's mixture summary, train benchmark and model folder (the epoch kept,
    the machine), and the DP model's privacy record where used."""
    inputs = {
        f"mixture_{run}": mixture_file(corpus, run, "summary", outputs) for run in runs.trained
    }
    inputs |= {f"benchmark_{run}": train_benchmark(corpus, run, outputs) for run in runs.trained}
    inputs |= {f"model_{run}": runs.model_dir(run, corpus, outputs) for run in runs.trained}
    if runs.dp_model_runs():
        inputs["privacy"] = dp_lm_privacy_file(corpus, outputs)
    return inputs


def study_arguments(runs: NerRuns, inputs: Mapping[str, str]) -> str:
    """--mixture, --benchmark and --model per trained run, --privacy RUN=PRIVACY per DP-model
    run."""
    return joined(
        flags("--mixture", ((run, inputs[f"mixture_{run}"]) for run in runs.trained)),
        flags("--benchmark", ((run, inputs[f"benchmark_{run}"]) for run in runs.trained)),
        flags("--model", ((run, inputs[f"model_{run}"]) for run in runs.trained)),
        flags("--privacy", ((run, inputs["privacy"]) for run in runs.dp_model_runs())),
    )


def archive_inputs(runs: NerRuns, corpus: str, run: str, outputs: RuleOutputs) -> dict[str, str]:
    """What archive_run reads of a run: its evaluation, and where it has them its mixture
    summary, train benchmark, model folder (its training settings) and the DP model's
    privacy record."""
    inputs = {"evaluation": metrics_file(corpus, run, outputs)}
    if run in runs.trained:
        inputs["mixture"] = mixture_file(corpus, run, "summary", outputs)
        inputs["benchmark"] = train_benchmark(corpus, run, outputs)
        inputs["model"] = runs.model_dir(run, corpus, outputs)
    if run in runs.dp_model_runs():
        inputs["privacy"] = dp_lm_privacy_file(corpus, outputs)
    return inputs


def archive_arguments(runs: NerRuns, run: str, inputs: Mapping[str, str]) -> str:
    """archive-run's --arm, --evaluation, --notes (the split the run was scored on) and the
    optional inputs, and --config-md5: the MD5
    of the run's expanded entry in ``ner.runs`` (name, pools, mixture, overrides). Settings
    shared by every run (``ner.training``: epochs, precision...) are not in it; archive-run
    records them from the model folder (``--model``)."""
    entry = runs.runs[run]
    digest = hashlib.md5(json.dumps(entry, sort_keys=True).encode()).hexdigest()
    # keys(): `in` on Snakemake's input object looks at the paths, not the names
    named = set(inputs.keys())
    optional = [
        f"--{name} {shlex.quote(inputs[name])}"
        for name in ("mixture", "benchmark", "model", "privacy")
        if name in named
    ]
    return joined(
        f"--arm {shlex.quote(entry.get(ARM) or run)}",
        f"--evaluation {shlex.quote(parent(inputs['evaluation']))}",
        f"--notes {shlex.quote(inputs['notes'])}",
        *optional,
        f"--config-md5 {digest}",
    )
