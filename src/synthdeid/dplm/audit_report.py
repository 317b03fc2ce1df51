"""Privacy and text quality of the language models' samples, beside their memorization audit.

:func:`read_samples` reads a model's samples and how many ended and passed the
template validator; :func:`quality_for` measures one model (its privacy
record, held-out perplexity, canary exposure, distinct-n and word counts
against the held-out real notes, :func:`heldout_masked`);
:func:`quality_markdown` is their table and :func:`audit_rows` joins them to
the memorization audit's rows (Zecevic et al., secs. 4.6, 4.7).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthdeid.artifacts import read_parquet_with_provenance, require_columns
from synthdeid.errors import InputError
from synthdeid.notes import read_notes
from synthdeid.reporting import (
    NOT_AVAILABLE,
    bounds_text,
    interval_text,
    markdown_table,
    number_or_na,
)
from synthdeid.stats import wilson_interval

if TYPE_CHECKING:  # the audit and the canary test are imported when the stage runs
    from synthdeid.dplm.canaries import CanaryReport
    from synthdeid.dplm.memorization import MemorizationAudit

log = logging.getLogger(__name__)

DISTINCT_N = (1, 2, 3)


def read_samples(path: Path) -> tuple[list[str], dict[str, Any] | None]:
    """The samples' texts, and how many ended (EOS) and passed the template validator
    with Wilson intervals (None for a table without the ``finished``/``status`` columns)."""
    from synthdeid.synthesis.validator import ACCEPTED

    table, _ = read_parquet_with_provenance(path)
    require_columns(path, table.column_names, ["text"], "a samples table")
    texts = table.column("text").to_pylist()
    if not texts:
        raise InputError(path, None, "no samples to audit")
    if not {"finished", "status"} <= set(table.column_names):
        return texts, None
    ended = sum(table.column("finished").to_pylist())
    accepted = sum(s == ACCEPTED for s in table.column("status").to_pylist())
    outcomes = {
        "samples": len(texts),
        "ended": ended,
        "ended_share": wilson_interval(ended, len(texts)).as_dict(),
        "accepted": accepted,
        "accepted_share": wilson_interval(accepted, len(texts)).as_dict(),
    }
    return texts, outcomes


def heldout_masked(notes_path: Path, parts: list[str]) -> list[str]:
    """The held-out real notes, masked as the seeds were (placeholders for their PHI)."""
    from synthdeid.mask import mask_note

    notes = [n for n in read_notes(notes_path) if n.split in set(parts)]
    if not notes:
        raise InputError(notes_path, None, f"no notes in parts {parts} to score perplexity on")
    return [mask_note(n).note.text for n in notes]


def quality_for(
    name: str,
    samples: list[str],
    model_dir: Path,
    heldout: list[str],
    *,
    device: Any,
    canaries: tuple[list[str], list[str]] | None = None,
    resamples: int = 2000,
    seed: int = 42,
) -> dict[str, Any]:
    """Privacy record, held-out perplexity, distinct-n and lengths of one model; with
    ``canaries`` (planted texts, reference texts) also the canaries' exposure."""
    from synthdeid.dplm.corpus import ControlCoder
    from synthdeid.dplm.model import load_lm
    from synthdeid.dplm.sampling import perplexity
    from synthdeid.dplm.text_quality import distinct_n, length_comparison
    from synthdeid.dplm.training import PRIVACY_FILE, read_lm_settings

    lm = read_lm_settings(model_dir)
    coder = ControlCoder.from_json(lm["control_codes"])
    model, tokenizer = load_lm(model_dir, device)
    ppl = perplexity(
        model,
        tokenizer,
        [(coder.code(t), t) for t in heldout],
        max_length=int(lm["max_length"]),
        device=device,
    )
    log.info("%s: held-out perplexity %.2f over %d tokens", name, ppl.perplexity, ppl.tokens)
    exposure = None
    if canaries is not None:
        from synthdeid.dplm.canaries import canary_exposure

        planted, references = (
            perplexity(
                model,
                tokenizer,
                [(coder.code(t), t) for t in texts],
                max_length=int(lm["max_length"]),
                device=device,
            ).per_note
            for texts in canaries
        )
        report = canary_exposure(planted, references, resamples=resamples, seed=seed)
        exposure = report.to_json()
        log.info(
            "%s: canary exposure %.2f bits on average (chance %.2f, ceiling %.2f)",
            name,
            report.mean.estimate,
            report.chance,
            report.ceiling,
        )
    return {
        "exposure": exposure,
        "privacy": json.loads((model_dir / PRIVACY_FILE).read_text()),
        "perplexity": ppl.to_json(),
        "distinct": {f"distinct_{n}": distinct_n(samples, n) for n in DISTINCT_N},
        "lengths": length_comparison(samples, heldout),
    }


def quality_markdown(quality: dict[str, dict[str, Any]], real_distinct: dict[str, float]) -> str:
    def share(outcomes: dict[str, Any] | None, key: str) -> str:
        if outcomes is None:
            return NOT_AVAILABLE
        interval = outcomes[f"{key}_share"]
        bounds = bounds_text(interval["ci_lo"], interval["ci_hi"], ".2f")
        return f"{outcomes[key]} / {outcomes['samples']} [{bounds}]"

    def distinct(values: dict[str, float]) -> list[str]:
        return [f"{values[f'distinct_{n}']:.3f}" for n in DISTINCT_N]

    def words(lengths: dict[str, Any]) -> str:
        return interval_text(lengths["median"], lengths["q1"], lengths["q3"], ".0f")

    rows = []
    for name, q in quality.items():
        p, o = q["privacy"], q.get("outcomes")
        rows.append(
            [
                name,
                "yes" if p["dp"] else "no",
                number_or_na(p["epsilon"], ".2f"),
                number_or_na(p["delta"], ".2e"),
                number_or_na(p["noise_multiplier"], ".3f"),
                str(p["steps"]),
                f"{q['perplexity']['perplexity']:.1f}",
                share(o, "ended"),
                share(o, "accepted"),
                *distinct(q["distinct"]),
                words(q["lengths"]["synthetic"]),
                f"{q['lengths']['ks_statistic']:.3f}",
            ]
        )
    real = next(iter(quality.values()))["lengths"]["real"]
    rows.append(["real held-out", *([""] * 8), *distinct(real_distinct), words(real), ""])
    exposures = {name: q["exposure"] for name, q in quality.items() if q.get("exposure")}
    lines = ["## Privacy and text quality", ""]
    lines += markdown_table(
        [
            "model",
            "DP",
            "epsilon",
            "delta",
            "noise multiplier",
            "steps",
            "held-out perplexity",
            "ended (EOS)",
            "passed the validator",
            *(f"distinct-{n}" for n in DISTINCT_N),
            "words, median [IQR]",
            "KS vs real",
        ],
        rows,
    )
    lines += [
        "",
        "Perplexity: held-out real notes, masked like the seeds, each after its control code. "
        "Ended: samples that wrote the end-of-note token before the token limit; passed: "
        "samples the template validator accepted (95% Wilson intervals). "
        "Distinct-n: unique / total word n-grams over all samples. KS: two-sample "
        "Kolmogorov-Smirnov statistic of word counts, samples vs held-out real notes.",
        "",
    ]
    if exposures:
        first = next(iter(exposures.values()))
        lines += [
            "### Canary exposure",
            "",
            f"Each planted canary ranked by the model's perplexity among itself and "
            f"{first['references']} canaries of the same generator that were never planted; "
            "exposure = log2(R + 1) - log2(rank) (Carlini et al. 2019). A model that learnt "
            f"nothing of the canaries scores {first['chance']:.2f} bits on average; one that "
            f"learnt a canary by heart scores {first['ceiling']:.2f} for it.",
            "",
        ]
        lines += markdown_table(
            ["model", "mean exposure, bits [95% CI]", "max", "canaries above chance"],
            [
                [
                    name,
                    interval_text(
                        e["mean"]["estimate"], e["mean"]["ci_lo"], e["mean"]["ci_hi"], ".2f"
                    ),
                    f"{e['maximum']:.2f}",
                    f"{sum(x > e['chance'] for x in e['exposures'])} / {len(e['exposures'])}",
                ]
                for name, e in exposures.items()
            ],
        )
        lines.append("")
    return "\n".join(lines)


def audit_rows(
    audits: Mapping[str, MemorizationAudit],
    quality: Mapping[str, dict[str, Any]],
    canary_reports: Mapping[str, CanaryReport],
    outlier_reports: Mapping[str, CanaryReport],
) -> list[dict[str, Any]]:
    """One row per model: its memorization audit (:func:`compare_audits`), privacy,
    perplexity, distinct-n, and its canaries' and, with any planted, outliers' figures."""
    from synthdeid.dplm.memorization import compare_audits

    rows = compare_audits(audits)
    for row in rows:
        q = quality[row["model"]]
        row.update(
            epsilon=q["privacy"]["epsilon"],
            perplexity=q["perplexity"]["perplexity"],
            **q["distinct"],
            canary_mean_best_rouge_l=canary_reports[row["model"]].mean_best_rouge_l.estimate,
            canaries_reproduced=canary_reports[row["model"]].n_canaries_reproduced,
        )
        if outlier_reports:
            row.update(
                outlier_mean_best_rouge_l=outlier_reports[row["model"]].mean_best_rouge_l.estimate,
                outliers_regenerated=outlier_reports[row["model"]].n_canaries_reproduced,
            )
    return rows
