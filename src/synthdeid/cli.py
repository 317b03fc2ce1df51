"""The ``synthdeid`` command: ``synthdeid <stage> [options]``.

Each stage ``x-y`` is the module ``synthdeid.stages.x_y`` exposing
``register_arguments(parser)`` and ``run(args) -> None`` (the rule ``x_y``
runs it); this module only dispatches. Rules call the same
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
from synthdeid.code_identity import running, stage_module
from synthdeid.errors import ConfigError, InputError, StepError
from synthdeid.logs import configure_logging
from synthdeid.termination import Terminated, raise_if_stopped, signals_as_exceptions

# the package holding one module per stage, named after it


@dataclass(frozen=True)
class Stage:
    """A stage: its subcommand name and its one-line help.

    The module implementing it is named after it (:attr:`module`), and
    ``summary`` is the first line of that module's docstring (a test keeps the
    two equal), so ``synthdeid --help`` needs no import.
    """

    name: str
    summary: str

    @property
    def module(self) -> str:
        """``synthdeid.stages.<name with underscores>``."""
        return stage_module(self.name)


# stage name -> the stage, in DAG order
STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage(
            "make-demo",
            "Generate the synthetic demo corpus (resources/demo/).",
        ),
        Stage(
            "ingest-corpus",
            "Import a labelled corpus into the canonical notes table (notes.parquet).",
        ),
        Stage(
            "split-notes",
            "Split notes by patient into seed / train / holdout, deterministically.",
        ),
        Stage(
            "plot-corpus-overview",
            "Plot and tabulate the split corpus: notes, PHI-bearing notes and spans per label, per part.",
        ),
        Stage(
            "mask-seeds",
            "Mask seed notes: PHI spans become typed, numbered placeholders ([[DOCTOR_1]]).",
        ),
        Stage(
            "new-key",
            "Make a new surrogate key file: 32 random bytes as hex, readable by its owner only.",
        ),
        Stage(
            "replace-surrogates",
            "Replace the labelled PHI of a notes table by keyed, consistent surrogates.",
        ),
        Stage(
            "gather-shards",
            "Join the shards of a sharded step into the artifact one job would have written.",
        ),
        Stage(
            "generate-templates",
            "Generate templates from masked seeds with an LLM backend (or none), validated.",
        ),
        Stage(
            "fill-templates",
            "Fill accepted templates locally and write the PII / no-PII synthetic pools.",
        ),
        Stage(
            "diagnose-synthetic",
            "Compare synthetic and real notes: lengths, label mix, PII structure, JSD, Fréchet distance.",
        ),
        Stage(
            "plant-canaries",
            "Write the canary and outlier notes planted in the language model's training set.",
        ),
        Stage(
            "train-dp-lm",
            "Fine-tune a causal LM on masked seed notes with DP-SGD (or --no-dp, same code path).",
        ),
        Stage(
            "sample-dp-lm",
            "Sample the DP language model by control code; validate and fill the samples into pools.",
        ),
        Stage(
            "audit-dp-lm",
            "Memorization audit and text quality of the language models' samples (Zecevic et al., secs. 4.6, 4.7).",
        ),
        Stage(
            "label-teacher",
            "Label notes with a teacher, as if they had no gold: silver spans, metadata and a ledger.",
        ),
        Stage(
            "combine-teachers",
            "Combine teachers' labels into an ensemble teacher's (union or vote per label).",
        ),
        Stage(
            "build-mixture",
            "Build a de-identification training mixture: real train notes plus labelled pools.",
        ),
        Stage(
            "plan-runs",
            "Which trained runs would train the same model, and which arms are degenerate (plan-runs).",
        ),
        Stage(
            "tapt-encoder",
            "Task-adaptive pretraining: continue MLM training of the encoder on a notes corpus.",
        ),
        Stage(
            "train-ner",
            "Train a de-identification model on a built mixture; write a Hugging Face model directory.",
        ),
        Stage(
            "soft-label-ner",
            "A teacher tagger's soft labels (tag probabilities) on a mixture's training notes.",
        ),
        Stage(
            "ensemble-ner",
            "Combine trained models into an ensemble directory with its own operating point.",
        ),
        Stage(
            "stack-lexicons",
            "Fit name and place lexicons as a calibrated stacker over a trained tagger (stack-lexicons).",
        ),
        Stage(
            "predict-ner",
            "De-identify notes with a trained model: predicted spans, then redacted or surrogate text.",
        ),
        Stage(
            "deid",
            "De-identify your own notes with a trained model: text files, a folder, a CSV or a JSONL file.",
        ),
        Stage(
            "score-anchor",
            "Turn an external de-identifier's span predictions into a run's predictions table (score-anchor).",
        ),
        Stage(
            "report-errors",
            "Every missed and every spurious span of a model on development notes (report-errors).",
        ),
        Stage(
            "evaluate-ner",
            "Score predicted PHI spans against gold notes, with bootstrap intervals (evaluate-ner).",
        ),
        Stage(
            "compare-ner",
            "Compare evaluated NER runs: a table with intervals and paired tests (compare-ner).",
        ),
        Stage(
            "archive-run",
            "Archive what a study table needs of a run, small enough to commit (archive-run).",
        ),
        Stage(
            "tabulate-study",
            "The study table and forest plot: every arm against the reference arm (tabulate-study).",
        ),
        Stage(
            "compare-teacher",
            "Teacher vs. student per PHI category, and the noise of the silver labels (compare-teacher).",
        ),
        Stage(
            "prepare-tabular",
            "Discretize a table of clinical variables by its spec and split it 50/50 into train / holdout.",
        ),
        Stage(
            "fit-dp-tabular",
            "Fit one tabular synthesizer on the train half and draw independent synthetic samples.",
        ),
        Stage(
            "ledger-privacy",
            "The privacy ledger of a corpus: every DP release and the composed total (ledger-privacy).",
        ),
        Stage(
            "evaluate-tabular",
            "Compare tabular synthesizers: fidelity, similarity and novelty over their samples (Lorenzo et al. 2026, Table 1).",
        ),
        Stage(
            "subsample-tabular",
            "Draw the stratified, frequency-weighted subsample of synthetic rows to verbalize (Lorenzo et al. 2026, sec. 2.3).",
        ),
        Stage(
            "verbalize-tabular",
            "Verbalize synthetic rows into reports with PHI placeholders, filled locally into a pool.",
        ),
        Stage(
            "check-faithfulness",
            "Score how faithfully each report states its row (Lorenzo et al. 2026, Tables 2 and 3); keep the faithful pairs.",
        ),
        Stage(
            "extract-tabular",
            "Train an extractor on the synthetic report/value pairs; score it on reports of real rows (Lorenzo et al. 2026, sec. 4).",
        ),
        Stage(
            "serve-llm",
            "Start, stop or check a local llama.cpp chat server on loopback (serve-llm).",
        ),
        Stage(
            "list-provenance",
            "What made each final artifact: step, code digest, parameters digest (list-provenance).",
        ),
        Stage(
            "probe-gpu-env",
            "Record the compute environment a rule ran in (host, SLURM job, accelerators).",
        ),
    )
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
            # artifacts record the code digest of this stage (synthdeid.code_identity)
            with running(parser.stage_parsers[args.stage].module_name):
                args._run(args)
            raise_if_stopped()
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


def run_stage(*argv: str) -> None:
    """Run ``synthdeid *argv`` in this process, as a rule runs it (for scripts that chain
    stages and pay the imports once); SystemExit naming the stage when it fails."""
    code = main(list(argv))
    if code != 0:
        stage = next((a for a in argv if a in STAGES), "")
        raise SystemExit(f"synthdeid {stage} failed with exit code {code}")


def describe_os_error(exc: OSError) -> str:
    """One line naming the path(s) and the problem: ``out.parquet: Is a directory``."""
    where = str(exc.filename)
    if exc.filename2 is not None:
        where += f" -> {exc.filename2}"
    return f"{where}: {exc.strerror or exc}"


if __name__ == "__main__":
    sys.exit(main())
