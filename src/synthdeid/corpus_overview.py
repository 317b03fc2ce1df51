"""The split corpus at a glance: notes, PHI-bearing notes and spans per label, per part.

A table and its figure; the ``plot-corpus-overview`` stage
(:mod:`synthdeid.stages.plot_corpus_overview`) writes them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from synthdeid.figures import PALETTE, SERIES_COLORS, pyplot, save_figure
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Note
from synthdeid.split import PARTS

log = logging.getLogger(__name__)

WITHOUT_PHI_ALPHA = 0.4  # notes without PHI: their part's colour, lighter and hatched


def overview_table(notes: list[Note]) -> pd.DataFrame:
    """One row per split part: patients, notes, PHI-bearing notes, spans per label."""
    rows = []
    for part in PARTS:
        members = [n for n in notes if n.split == part]
        labels = Counter(s.label for n in members for s in n.spans)
        row: dict[str, object] = {
            "part": part,
            "patients": len({n.patient_id for n in members}),
            "notes": len(members),
            "notes_with_phi": sum(1 for n in members if n.spans),
            "spans": sum(labels.values()),
        }
        row.update({label: labels.get(label, 0) for label in CANONICAL_LABELS})
        rows.append(row)
    return pd.DataFrame(rows)


def count_labels(values: Iterable[int]) -> list[str]:
    """Bar labels: the count, blank for an empty bar (nothing to point at)."""
    return [str(int(v)) if v else "" for v in values]


def plot_overview(table: pd.DataFrame, path: Path, title: str) -> Any:
    """Notes with / without PHI per part, and gold spans per label and part, counts on the bars.

    Returns the (closed) figure.
    """
    plt = pyplot()
    from matplotlib.patches import Patch

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2.4]})
    parts = table["part"].tolist()
    # one meaning per colour: a part's colour in both panels; PHI-free notes the same colour
    # hatched and light (the legend shows the two fillings in grey)
    colours = {part: SERIES_COLORS[i % len(SERIES_COLORS)] for i, part in enumerate(parts)}
    without = table["notes"] - table["notes_with_phi"]
    with_phi = left.bar(parts, table["notes_with_phi"], color=[colours[p] for p in parts])
    no_phi = left.bar(
        parts,
        without,
        bottom=table["notes_with_phi"],
        color=[colours[p] for p in parts],
        alpha=WITHOUT_PHI_ALPHA,
        hatch="//",
        edgecolor="white",
    )
    for bars, values in ((with_phi, table["notes_with_phi"]), (no_phi, without)):
        left.bar_label(bars, labels=count_labels(values), label_type="center", fontsize=7)
    left.legend(
        handles=[
            Patch(facecolor=PALETTE["grey"], label="with PHI"),
            Patch(
                facecolor=PALETTE["grey"],
                alpha=WITHOUT_PHI_ALPHA,
                hatch="//",
                edgecolor="white",
                label="without PHI",
            ),
        ],
        frameon=False,
        loc="upper right",
    )
    left.set_xlabel("part of the split")
    left.set_ylabel("notes")
    left.set_title(f"Notes per part (n = {int(table['notes'].sum())})")
    left.set_ylim(0, max(1, int(table["notes"].max())) * 1.3)  # room for the legend
    width = 0.8 / len(parts)
    for i, part in enumerate(parts):
        counts = table.loc[table["part"] == part, list(CANONICAL_LABELS)].iloc[0]
        positions = [x + (i - (len(parts) - 1) / 2) * width for x in range(len(CANONICAL_LABELS))]
        bars = right.bar(positions, counts.to_numpy(), width=width, label=part, color=colours[part])
        right.bar_label(bars, labels=count_labels(counts), fontsize=6)
    right.set_xticks(range(len(CANONICAL_LABELS)), CANONICAL_LABELS, rotation=30, ha="right")
    right.set_xlabel("canonical PHI label")
    right.set_ylabel("gold spans")
    right.set_title(f"Spans per label and part (n = {int(table['spans'].sum())})")
    right.legend(frameon=False, title="part")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
    return fig
