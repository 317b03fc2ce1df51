"""The look every figure of the workflow shares: a headless matplotlib whose
colour cycle is :data:`SERIES_COLORS`, the one colour-blind-safe palette
(:data:`PALETTE`, Okabe and Ito), error bars from intervals, n/a markers where a
figure is undefined, and atomic PNG writing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from synthdeid.artifacts import atomic_path
from synthdeid.reporting import NOT_AVAILABLE
from synthdeid.stats import Interval, is_undefined

# The Okabe-Ito palette: distinguishable with every common colour-vision
# deficiency. Every figure takes its colours from here; none pairs red with green.
PALETTE: dict[str, str] = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "yellow": "#F0E442",
    "grey": "#999999",
    "black": "#000000",
}


# the colour cycle of every axes (series in order: blue, orange, sky blue, ...)
SERIES_COLORS: tuple[str, ...] = tuple(
    PALETTE[name] for name in ("blue", "orange", "sky", "green", "vermillion", "purple", "yellow")
)


def pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend, with the shared colour cycle."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.rcsetup import cycler

    plt.rcParams["axes.prop_cycle"] = cycler(color=list(SERIES_COLORS))
    return plt


def error_bars(intervals: Sequence[Interval]) -> np.ndarray:
    """Matplotlib ``yerr`` / ``xerr`` (2 x n) from intervals, never negative; 0 where undefined."""
    lower = [0.0 if is_undefined(i.lo) else max(0.0, i.estimate - i.lo) for i in intervals]
    upper = [0.0 if is_undefined(i.hi) else max(0.0, i.hi - i.estimate) for i in intervals]
    return cast(np.ndarray, np.nan_to_num(np.array([lower, upper], dtype=float)))


def share_limits(
    intervals: Sequence[Interval], *, margin: float = 0.1, min_width: float = 0.05
) -> tuple[float, float]:
    """Axis limits for shares (0-1) that fit the intervals drawn, so that values
    such as 0.97-1.0 or 0-0.018 are not squeezed against one end of a 0-1 axis.

    The range of the defined estimates and bounds, widened to ``min_width`` and
    padded by ``margin`` of its width on each side, clipped to [0, 1.02]; the
    whole 0-1.02 range where nothing is defined.
    """
    values = [v for i in intervals for v in (i.estimate, i.lo, i.hi) if not is_undefined(v)]
    if not values:
        return 0.0, 1.02
    lo, hi = min(values), max(values)
    width = max(hi - lo, min_width)
    centre = (lo + hi) / 2
    lo, hi = centre - width / 2, centre + width / 2
    pad = margin * width
    return max(0.0, lo - pad), min(1.02, hi + pad)


def mark_undefined(
    ax: Any, positions: Sequence[float], *, horizontal: bool = False, text: str = NOT_AVAILABLE
) -> None:
    """Write n/a (or ``text``) where a figure is undefined; nothing is drawn there.

    ``positions`` are category positions (x for vertical plots, y for
    horizontal ones); the marker sits at the axis' left or bottom end.
    """
    # horizontal: at the x axis' left end, beside the category; else above the bottom
    coords = ("axes fraction", "data") if horizontal else ("data", "axes fraction")
    offset, align = ((4, 0), {"va": "center"}) if horizontal else ((0, 4), {"ha": "center"})
    for position in positions:
        ax.annotate(
            text,
            (0.0, position) if horizontal else (position, 0.0),
            xycoords=coords,
            xytext=offset,
            textcoords="offset points",
            fontsize=8,
            color=PALETTE["grey"],
            **align,
        )


def save_figure(fig: Any, path: Path) -> None:
    plt = pyplot()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
