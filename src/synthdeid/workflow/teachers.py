"""The teachers of ``teacher.teachers``: their folders, inputs, settings and targets.

A teacher labels notes as if unlabelled (label_teacher); an ensemble teacher
combines its members' labels instead (combine_teachers). Its ``pool`` subset
is the silver pool ``silver_<teacher>``; its ``holdout`` subset is scored
against its student.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.workflow.arguments import flags, joined, parent
from synthdeid.workflow.ner_inputs import metrics_file
from synthdeid.workflow.ner_runs import NerRuns
from synthdeid.workflow.outputs import Output, RuleOutputs

# keys the workflow reads itself; the rest is the teacher's own settings
WORKFLOW_TEACHER_KEYS = ("name", "student")


@dataclass(frozen=True)
class Teachers:
    """Every configured teacher by name, the parts they label and whether noise is scored."""

    entries: dict[str, dict[str, Any]]
    parts: list[str]
    noise: bool

    @classmethod
    def from_config(cls, teacher: Mapping[str, Any]) -> Teachers:
        return cls(
            entries={entry["name"]: entry for entry in teacher["teachers"]},
            parts=list(teacher["parts"]),
            noise=bool(teacher["noise"]),
        )

    def step(self, name: str) -> str:
        """The rule that writes a teacher's labels: combine_teachers for an ensemble."""
        return "combine_teachers" if self.entries[name]["kind"] == "ensemble" else "label_teacher"

    def labels(self, name: str, subset: str, output: str = "silver") -> Output:
        """An output of the teacher's labelling of a subset (``silver``, ``summary``, ...)."""
        return Output(self.step(name), output, {"teacher": name, "subset": subset})

    def silver_pools(self) -> dict[str, Output]:
        """Teacher -> its silver labels of the pool subset (the pool silver_<teacher>)."""
        return {name: self.labels(name, "pool") for name in self.entries}

    def settings(self, name: str) -> dict[str, Any]:
        """The teacher's own settings (not its name or student: changing those reruns nothing)."""
        return {k: v for k, v in self.entries[name].items() if k not in WORKFLOW_TEACHER_KEYS}

    def gpus(self, name: str) -> int:
        """One GPU for a model teacher or a local transformers LLM; none for HTTP or rules."""
        entry = self.entries[name]
        local_llm = (
            entry["kind"] == "llm" and entry.get("backend", {}).get("kind") == "transformers"
        )
        return 1 if entry["kind"] == "model" or local_llm else 0

    def model_run(self, name: str, runs: NerRuns) -> str | None:
        """The ner run whose model a model teacher applies (None: a model directory path)."""
        return runs.named_run(self.entries[name].get("model"))

    def student_run(self, name: str, runs: NerRuns) -> str | None:
        """The ner run a teacher's student is (its arm's first training seed for an arm)."""
        return runs.named_run(self.entries[name].get("student"))

    def run_references(self, runs: NerRuns) -> set[str]:
        """The ner runs teachers apply (model teachers) or compare with (students)."""
        named = (
            run
            for name in self.entries
            for run in (self.model_run(name, runs), self.student_run(name, runs))
        )
        return {run for run in named if run is not None}

    def inputs(self, name: str, corpus: str, runs: NerRuns, outputs: RuleOutputs) -> dict[str, str]:
        """label_teacher's inputs: the split notes, and a model teacher's model directory."""
        inputs = {"notes": outputs.path(Output("split_notes", "notes"), corpus=corpus)}
        entry = self.entries[name]
        if entry["kind"] == "model":
            run = self.model_run(name, runs)
            inputs["model"] = runs.model_dir(run, corpus, outputs) if run else entry["model"]
        return inputs

    def member_files(
        self, name: str, subset: str, corpus: str, outputs: RuleOutputs
    ) -> dict[str, str]:
        """Each member's metadata table for the same subset (the folder holds the rest)."""
        return {
            member: outputs.path(self.labels(member, subset, "metadata"), corpus=corpus)
            for member in self.entries[name]["members"]
        }

    def labels_file(self, name: str, subset: str, corpus: str, outputs: RuleOutputs) -> str:
        """What evaluate_teacher scores: every holdout note, or the silver pool as trained on."""
        output = "labels" if subset == "holdout" else "silver"
        return outputs.path(self.labels(name, subset, output), corpus=corpus)

    def member_arguments(self, name: str, inputs: Mapping[str, str]) -> str:
        """--member NAME=FOLDER for each member of an ensemble teacher, from its metadata input."""
        members = self.entries[name]["members"]
        return flags("--member", ((member, parent(inputs[member])) for member in members))

    def compared_student(self, name: str, runs: NerRuns) -> str:
        """The student run compare_teacher compares the teacher with (ConfigError: none)."""
        student = self.student_run(name, runs)
        if student is None:
            raise ConfigError(f"teacher.teachers[{name}]: no student run to compare it with")
        return student

    def student_metrics(self, name: str, corpus: str, runs: NerRuns, outputs: RuleOutputs) -> str:
        """The student's scores on the holdout (compare_teacher's student input)."""
        return metrics_file(corpus, self.compared_student(name, runs), outputs)

    def distillation_arguments(self, name: str, runs: NerRuns, inputs: Mapping[str, str]) -> str:
        """--teacher NAME=FOLDER --student RUN=FOLDER for compare_teacher, from its inputs."""
        return joined(
            flags("--teacher", [(name, parent(inputs["teacher"]))]),
            flags("--student", [(self.compared_student(name, runs), parent(inputs["student"]))]),
        )

    def targets(self, corpus: str, outputs: RuleOutputs) -> list[str]:
        """Per teacher: the silver-noise table (when scored) and the student comparison, or
        else its silver pool."""
        targets = []
        for name, entry in self.entries.items():
            wanted = []
            if self.noise:
                wanted.append(Output("measure_silver_noise", "table", {"teacher": name}))
            if entry.get("student"):
                wanted.append(Output("compare_teacher", "table", {"teacher": name}))
            targets += [outputs.path(output, corpus=corpus) for output in wanted]
            if not wanted:
                targets.append(outputs.path(self.labels(name, "pool"), corpus=corpus))
        return targets


def model_argument(inputs: Mapping[str, str]) -> str:
    """--model DIR for a model teacher (label_teacher has a model input), else nothing."""
    model = inputs.get("model")
    return f"--model {shlex.quote(model)}" if model is not None else ""


def silver_argument(teacher: str, silver_metrics: str) -> str:
    """--silver NAME=FOLDER for measure_silver_noise: the teacher's scores on its silver pool."""
    return flags("--silver", [(teacher, parent(silver_metrics))])
