"""Writing a lexicon-stacker directory, with its card, in one atomic step."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synthdeid.artifacts import atomic_directory
from synthdeid.ner.lexicons import LEXICONS, lexicon
from synthdeid.ner.model_card import CARD_FILE, card_metrics_table, decoding_lines
from synthdeid.ner.operating_point import OperatingPoint
from synthdeid.ner.stacker import StackedTagger, StackerFit, relative_base
from synthdeid.reporting import markdown_table, number_or_na


def stacker_card(
    tagger: StackedTagger,
    base_path: str,
    fit: StackerFit,
    point: OperatingPoint,
    development: Mapping[str, Any],
    base_development: Mapping[str, float],
    run: str,
) -> str:
    settings = tagger.settings
    record = fit.record
    coefficients = tagger.stacker.coefficients()
    lines = [
        "---",
        "tags: [de-identification, clinical, synthdeid, lexicons]",
        "---",
        f"# synthdeid de-identification with lexicons: run `{run}`",
        "",
        "A base tagger whose probability of O per token is replaced by a logistic regression "
        "over that probability, the word's casing and its membership in name and place "
        "lexicons; the label of a span stays the base's choice. Load it with "
        "`synthdeid predict-ner --model <this directory>`. The base's weights are not copied here: "
        f"keep its directory where `{base_path}` points (relative to this directory).",
        "",
        "## Lexicons",
        *markdown_table(
            ["lexicon", "entries", "sources", "licence"],
            [
                [
                    name,
                    str(len(lexicon(name))),
                    "; ".join(LEXICONS[name].sources),
                    LEXICONS[name].licence,
                ]
                for name in tagger.stacker.lexicons
            ],
        ),
    ]
    lines += [
        "",
        "## Fit",
        f"- development notes: {development['kept']} (parts {', '.join(development['parts'])} "
        f"and the base run's validation notes, less {development['trained_on']} of "
        f"{development['offered']} offered whose note or patient the base trained on; "
        "never the holdout)",
        f"- {record['tokens']} tokens, {record['phi_tokens']} of them PHI, of "
        f"{record['patients']} patients",
        f"- L2 logistic regression, balanced class weights with the intercept corrected back "
        f"to the base rate; C = {record['C']:g} chosen by grouped {record['folds']}-fold "
        "cross-validation (patients never split across folds)",
        f"- held-out log loss of P(PHI): {number_or_na(record['cv_log_loss'], '.4f')} stacked, "
        f"{number_or_na(record['base_log_loss'], '.4f')} the base model's own",
        "",
        *markdown_table(
            ["feature", "weight"],
            [
                *([f"`{name}`", f"{weight:+.3f}"] for name, weight in coefficients.items()),
                ["intercept", f"{tagger.stacker.intercept:+.3f}"],
            ],
        ),
        "",
        "## Operating point",
        "- chosen on the development notes' out-of-fold stacked probabilities",
        f"- rule: {point.rule.mode}; O threshold {settings.o_threshold} "
        "(tokens are PHI when the stacked P(O) is below it)",
        *decoding_lines(settings, point.chosen),
        "",
        "## The base alone on the same development notes (its own threshold)",
        *card_metrics_table(base_development),
        "",
        "## Limitations",
        "- Lexicons list US names and places; names and places outside them get no help, and "
        "common words that are also names (kept when not in the small common-word list) may "
        "be over-redacted when capitalized.",
        "- Scores above are on development notes; held-out figures are in the workflow's "
        "`evaluate_ner` results.",
        "- A missed identifier leaks the whole note: review output before any release.",
        "",
    ]
    return "\n".join(lines)


def save_stacked_directory(
    tagger: StackedTagger,
    base_dir: Path,
    out_dir: str | Path,
    *,
    fit: StackerFit,
    point: OperatingPoint,
    development: Mapping[str, Any],
    base_development: Mapping[str, float],
    run: str,
) -> Path:
    """The stacker file and card; replaces ``out_dir`` atomically."""
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as staging:
        tagger.save(
            staging,
            base_dir,
            target=out_dir,
            extra={
                "run": run,
                "development_notes": dict(development),
                "fit": fit.record,
                "operating_point_sweep": point.sweep,
                "validation_at_operating_point": point.chosen,
                "base_at_its_threshold": dict(base_development),
            },
        )
        base_path = relative_base(base_dir, out_dir)
        (staging / CARD_FILE).write_text(
            stacker_card(tagger, base_path, fit, point, development, base_development, run)
        )
    return out_dir
