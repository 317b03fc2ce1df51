"""The ``synthdeid`` command: ``synthdeid <stage> [options]``.

Each stage is a module exposing ``register_arguments(parser)`` and
``run(args) -> None``; this module only dispatches. Rules call the same
command, so every stage runs the same way inside and outside Snakemake.

A stage's module is imported only when that stage runs (or prints its help):
``synthdeid --help`` lists the stages from :data:`STAGES` alone. Before a stage
runs, the command refuses two path arguments naming the same file when one of
them is written, and removes the temporary files a killed run left beside the
stage's outputs; while it runs, SIGTERM, SIGHUP and SIGINT unwind it so that
its temporary files are removed too.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from synthdeid import __version__
from synthdeid.cli_types import (
    PathCollision,
    PathValue,
    output_file,
    path_values,
    refuse_colliding_paths,
)
from synthdeid.errors import ConfigError, InputError, StepError
from synthdeid.logs import configure_logging
from synthdeid.termination import Terminated, signals_as_exceptions


@dataclass(frozen=True)
class Stage:
    """A stage: the module implementing it and its one-line help.

    ``summary`` is the first line of the module's docstring (a test keeps the
    two equal), so ``synthdeid --help`` needs no import.
    """

    module: str
    summary: str


# stage name -> module implementing it, in DAG order
STAGES: dict[str, Stage] = {
    "make-demo": Stage(
        "synthdeid.demo.generator",
        "Generate the synthetic demo corpus (resources/demo/).",
    ),
    "ingest": Stage(
        "synthdeid.ingest",
        "Import a labelled corpus into the canonical notes table (notes.parquet).",
    ),
    "split": Stage(
        "synthdeid.split",
        "Split notes by patient into seed / train / holdout, deterministically.",
    ),
    "corpus-overview": Stage(
        "synthdeid.corpus_overview",
        "Plot and tabulate the split corpus: notes, PHI-bearing notes and spans per label, per part.",
    ),
    "mask": Stage(
        "synthdeid.mask",
        "Mask seed notes: PHI spans become typed, numbered placeholders ([[DOCTOR_1]]).",
    ),
    "surrogate": Stage(
        "synthdeid.surrogate.stage",
        "Replace the labelled PHI of a notes table by keyed, consistent surrogates.",
    ),
    "generate-templates": Stage(
        "synthdeid.synthesis.template_stage",
        "Generate templates from masked seeds with an LLM backend (or none), validated.",
    ),
    "fill-templates": Stage(
        "synthdeid.synthesis.pool_stage",
        "Fill accepted templates locally and write the PII / no-PII synthetic pools.",
    ),
    "diagnose-synthetic": Stage(
        "synthdeid.synthesis.diagnostics_stage",
        "Compare synthetic and real notes: lengths, label mix, PII structure, JSD, Fréchet distance.",
    ),
    "plant-canaries": Stage(
        "synthdeid.dplm.canary_stage",
        "Write the canary notes planted in the language model's training set.",
    ),
    "train-dp-lm": Stage(
        "synthdeid.dplm.train_stage",
        "Fine-tune a causal LM on masked seed notes with DP-SGD (or --no-dp, same code path).",
    ),
    "sample-dp-lm": Stage(
        "synthdeid.dplm.sample_stage",
        "Sample the DP language model by control code; validate and fill the samples into pools.",
    ),
    "audit-dp-lm": Stage(
        "synthdeid.dplm.audit_stage",
        "Memorization audit and text quality of the language models' samples (Zecevic et al., secs. 4.6, 4.7).",
    ),
    "label-teacher": Stage(
        "synthdeid.teacher.label_stage",
        "Label notes with a teacher, as if they had no gold: silver spans, metadata and a ledger.",
    ),
    "combine-teachers": Stage(
        "synthdeid.teacher.combine_stage",
        "Combine teachers' labels into an ensemble teacher's (union or vote per label).",
    ),
    "build-mixture": Stage(
        "synthdeid.ner.mixture_stage",
        "Build a de-identification training mixture: real train notes plus labelled pools.",
    ),
    "tapt": Stage(
        "synthdeid.ner.tapt_stage",
        "Task-adaptive pretraining: continue MLM training of the encoder on a notes corpus.",
    ),
    "train-ner": Stage(
        "synthdeid.ner.train_stage",
        "Train a de-identification model on a built mixture; write a Hugging Face model directory.",
    ),
    "ensemble-ner": Stage(
        "synthdeid.ner.ensemble_stage",
        "Combine trained models into an ensemble directory with its own operating point.",
    ),
    "stack-lexicons": Stage(
        "synthdeid.ner.stacker_stage",
        "Fit name and place lexicons as a calibrated stacker over a trained tagger (stack-lexicons).",
    ),
    "deid": Stage(
        "synthdeid.ner.deid_stage",
        "De-identify notes with a trained model: predicted spans, then redacted or surrogate text.",
    ),
    "report-errors": Stage(
        "synthdeid.ner.report_errors",
        "Every missed and every spurious span of a model on development notes (report-errors).",
    ),
    "evaluate-ner": Stage(
        "synthdeid.evaluation.stage",
        "Score predicted PHI spans against gold notes, with bootstrap intervals (evaluate-ner).",
    ),
    "compare-ner": Stage(
        "synthdeid.evaluation.compare",
        "Compare evaluated NER runs: a table with intervals and paired tests (compare-ner).",
    ),
    "tabulate-study": Stage(
        "synthdeid.evaluation.study_stage",
        "The study table and forest plot: every arm against the reference arm (tabulate-study).",
    ),
    "compare-teacher": Stage(
        "synthdeid.teacher.compare_stage",
        "Teacher vs. student per PHI category, and the noise of the silver labels (compare-teacher).",
    ),
    "prepare-tabular": Stage(
        "synthdeid.tabular.prepare_stage",
        "Discretize a table of clinical variables by its spec and split it 50/50 into train / holdout.",
    ),
    "fit-dp-tabular": Stage(
        "synthdeid.tabular.fit_stage",
        "Fit one tabular synthesizer on the train half and draw independent synthetic samples.",
    ),
    "evaluate-tabular": Stage(
        "synthdeid.tabular.evaluate_stage",
        "Compare tabular synthesizers: fidelity, similarity and novelty over their samples (Lorenzo et al. 2026, Table 1).",
    ),
    "subsample-tabular": Stage(
        "synthdeid.tabular.subsample_stage",
        "Draw the stratified, frequency-weighted subsample of synthetic rows to verbalize (Lorenzo et al. 2026, sec. 2.3).",
    ),
    "verbalize-tabular": Stage(
        "synthdeid.tabular.verbalize_stage",
        "Verbalize synthetic rows into reports with PHI placeholders, filled locally into a pool.",
    ),
    "check-faithfulness": Stage(
        "synthdeid.tabular.faithfulness_stage",
        "Score how faithfully each report states its row (Lorenzo et al. 2026, Tables 2 and 3); keep the faithful pairs.",
    ),
    "serve-llm": Stage(
        "synthdeid.llm.serve_stage",
        "Start, stop or check a local llama.cpp chat server on loopback (serve-llm).",
    ),
    "probe-env": Stage(
        "synthdeid.probe_env",
        "Record the compute environment a rule ran in (host, SLURM job, accelerators).",
    ),
}


class StageParser(argparse.ArgumentParser):
    """A stage's parser, filled from its module the first time it is used."""

    def __init__(self, *, module: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.module_name = module
        self._loaded = False

    def load(self) -> None:
        """Import the stage's module and register its arguments (once)."""
        if self._loaded:
            return
        module = importlib.import_module(self.module_name)
        self.description = module.__doc__
        module.register_arguments(self)
        self.set_defaults(_run=module.run)
        self._loaded = True

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.load()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self.load()
        return super().format_help()

    def format_usage(self) -> str:
        self.load()
        return super().format_usage()

    def path_values(self, args: argparse.Namespace) -> list[PathValue]:
        """The paths ``args`` hold for this stage's arguments, with their roles."""
        self.load()
        return path_values(self._actions, args)


class CommandParser(argparse.ArgumentParser):
    """The ``synthdeid`` parser; ``stage_parsers`` maps each stage to its parser."""

    stage_parsers: dict[str, StageParser]


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog="synthdeid",
        description="Privacy-preserving synthetic clinical text and de-identification.",
    )
    parser.add_argument("--version", action="version", version=f"synthdeid {__version__}")
    parser.add_argument("--log", type=output_file, help="also write the log to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(
        dest="stage", required=True, metavar="<stage>", parser_class=StageParser
    )
    parser.stage_parsers = {
        name: sub.add_parser(name, help=stage.summary, module=stage.module)
        for name, stage in STAGES.items()
    }
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``synthdeid`` with ``argv``; returns the exit status.

    0: done; 2: refused (a usage error, bad input or configuration, an unsafe
    result, a path the system refused), with one line saying why;
    128 + N: stopped by signal N, temporary files removed.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version or a usage error, already printed
        return exc.code if isinstance(exc.code, int) else 2
    log = logging.getLogger("synthdeid")
    paths = parser.stage_parsers[args.stage].path_values(args)
    try:
        refuse_colliding_paths(
            [PathValue("--log", "output", args.log), *paths] if args.log else paths
        )
    except PathCollision as exc:
        configure_logging(None if "--log" in exc.arguments else args.log, verbose=args.verbose)
        log.error("%s", exc)
        return 2
    configure_logging(args.log, verbose=args.verbose)
    # imported here: pyarrow is not needed to print help
    from synthdeid.artifacts import remove_stale_temporaries

    with signals_as_exceptions():
        try:
            remove_stale_temporaries(p.path for p in paths if p.role == "output")
            args._run(args)
        except (InputError, ConfigError, StepError) as exc:
            log.error("%s", exc)
            return 2
        except OSError as exc:
            if exc.filename is None:  # not about a path: a bug or the system, keep the traceback
                raise
            log.error("%s", describe_os_error(exc))
            return 2
        except Terminated as exc:
            log.error("%s; the step's temporary files were removed", exc)
            return exc.exit_code
    return 0


def describe_os_error(exc: OSError) -> str:
    """One line naming the path(s) and the problem: ``out.parquet: Is a directory``."""
    where = str(exc.filename)
    if exc.filename2 is not None:
        where += f" -> {exc.filename2}"
    return f"{where}: {exc.strerror or exc}"


if __name__ == "__main__":
    sys.exit(main())
