"""The ``synthdeid`` command: ``synthdeid <stage> [options]``.

Each stage is a module exposing ``register_arguments(parser)`` and
``run(args) -> None``; this module only dispatches. Rules call the same
command, so every stage runs the same way inside and outside Snakemake.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from synthdeid import __version__
from synthdeid.errors import ConfigError, InputError, StepError
from synthdeid.logs import configure_logging

# stage name -> module implementing it, in DAG order
STAGES: dict[str, str] = {
    "make-demo": "synthdeid.demo_corpus",
    "ingest": "synthdeid.ingest",
    "split": "synthdeid.split",
    "corpus-overview": "synthdeid.corpus_overview",
    "mask": "synthdeid.mask",
    "surrogate": "synthdeid.surrogate.stage",
    "generate-templates": "synthdeid.synthesis.template_stage",
    "fill-templates": "synthdeid.synthesis.pool_stage",
    "diagnose-synthetic": "synthdeid.synthesis.diagnostics_stage",
    "plant-canaries": "synthdeid.dplm.canary_stage",
    "train-dp-lm": "synthdeid.dplm.train_stage",
    "sample-dp-lm": "synthdeid.dplm.sample_stage",
    "audit-dp-lm": "synthdeid.dplm.audit_stage",
    "label-teacher": "synthdeid.teacher.label_stage",
    "combine-teachers": "synthdeid.teacher.combine_stage",
    "build-mixture": "synthdeid.ner.mixture_stage",
    "tapt": "synthdeid.ner.tapt_stage",
    "train-ner": "synthdeid.ner.train_stage",
    "ensemble-ner": "synthdeid.ner.ensemble_stage",
    "deid": "synthdeid.ner.deid_stage",
    "evaluate-ner": "synthdeid.evaluation.stage",
    "compare-ner": "synthdeid.evaluation.compare",
    "compare-teacher": "synthdeid.teacher.compare_stage",
    "prepare-tabular": "synthdeid.tabular.prepare_stage",
    "fit-dp-tabular": "synthdeid.tabular.fit_stage",
    "evaluate-tabular": "synthdeid.tabular.evaluate_stage",
    "subsample-tabular": "synthdeid.tabular.subsample_stage",
    "verbalize-tabular": "synthdeid.tabular.verbalize_stage",
    "check-faithfulness": "synthdeid.tabular.faithfulness_stage",
    "probe-env": "synthdeid.probe_env",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="synthdeid",
        description="Privacy-preserving synthetic clinical text and de-identification.",
    )
    parser.add_argument("--version", action="version", version=f"synthdeid {__version__}")
    parser.add_argument("--log", help="also write the log to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")
    for name, module_name in STAGES.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip().splitlines()[0]
        stage_parser = sub.add_parser(name, help=doc, description=module.__doc__)
        module.register_arguments(stage_parser)
        stage_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log, verbose=args.verbose)
    log = logging.getLogger("synthdeid")
    try:
        args._run(args)
    except (InputError, ConfigError, StepError) as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
