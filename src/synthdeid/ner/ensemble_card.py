"""Writing an ensemble directory, with its card, in one atomic step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from synthdeid.artifacts import atomic_directory
from synthdeid.ner.ensemble import EnsembleTagger
from synthdeid.ner.model_card import CARD_FILE, decoding_lines
from synthdeid.ner.operating_point import OperatingPoint
from synthdeid.reporting import markdown_table


def ensemble_card(
    tagger: EnsembleTagger,
    member_paths: Sequence[str],
    point: OperatingPoint,
    validation_counts: Mapping[str, int],
    run: str,
) -> str:
    settings = tagger.settings
    lines = [
        "---",
        "tags: [de-identification, clinical, synthdeid, ensemble]",
        "---",
        f"# synthdeid de-identification ensemble: run `{run}`",
        "",
        "The mean of its members' per-token tag probabilities, decoded with BIO rules at "
        "an O threshold of its own. Load it with `synthdeid predict-ner --model <this directory>`. "
        "The members' weights are not copied here: keep their directories where the "
        "paths below point (relative to this directory).",
        "",
        "## Members",
        *markdown_table(
            ["member", "directory", "its O threshold"],
            [
                [name, f"`{path}`", str(member.settings.o_threshold)]
                for (name, member), path in zip(tagger.members, member_paths, strict=True)
            ],
        ),
    ]
    lines += [
        "",
        "## Operating point",
        f"- chosen on {validation_counts['kept']} validation notes that no member trained on "
        f"({validation_counts['trained_on']} of {validation_counts['offered']} distinct notes "
        "offered were dropped because a member trained on the note or its patient)",
        f"- rule: {point.rule.mode}; O threshold {settings.o_threshold} "
        "(tokens are PHI when the mean P(O) is below it)",
        *decoding_lines(settings, point.chosen),
    ]
    lines += [
        "",
        "## Limitations",
        "- Tagging costs one forward pass per member: throughput falls by the number of members.",
        "- A missed identifier leaks the whole note: review output before any release.",
        "",
    ]
    return "\n".join(lines)


def save_ensemble_directory(
    tagger: EnsembleTagger,
    member_dirs: Sequence[Path],
    out_dir: str | Path,
    *,
    point: OperatingPoint,
    validation_counts: Mapping[str, int],
    run: str,
) -> Path:
    """The ensemble file and card; replaces ``out_dir`` atomically."""
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as staging:
        tagger.save(
            staging,
            member_dirs,
            target=out_dir,
            extra={
                "run": run,
                "validation_notes": dict(validation_counts),
                "operating_point_sweep": point.sweep,
                "validation_at_operating_point": point.chosen,
            },
        )
        paths = [m["path"] for m in tagger.member_records(member_dirs, target=out_dir)]
        (staging / CARD_FILE).write_text(
            ensemble_card(tagger, paths, point, validation_counts, run)
        )
    return out_dir
