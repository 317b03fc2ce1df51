"""Text of every report table: Markdown tables, numbers, percentages and intervals.

Undefined figures (None or NaN, see :func:`synthdeid.stats.is_undefined`) are
written :data:`NOT_AVAILABLE`, never 0. An interval is written
``estimate [lo, hi]`` (:func:`interval_text`; ``0.912 [0.900, 0.930]``), with
n/a for the bounds where only they are undefined.

A Markdown table (:func:`markdown_table`) is a header row, a ``|---|``
separator and one row per line; ``|`` inside a cell is escaped and line
breaks become ``<br>``, so no cell can break its table. An empty cell is a
single space (``| |``).
"""

from __future__ import annotations

import base64
import csv
import html
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthdeid.artifacts import atomic_text
from synthdeid.stats import Interval, is_undefined

NOT_AVAILABLE = "n/a"  # written where a figure is undefined (never 0)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def number_or_na(value: float | None, spec: str = ".3f") -> str:
    """A figure formatted by ``spec``, or n/a where it is undefined (None or NaN)."""
    return NOT_AVAILABLE if value is None or math.isnan(value) else format(value, spec)


def percent(share: float | None, decimals: int = 1, *, sign: str = "%") -> str:
    """``0.1234`` -> ``12.3%`` (``sign=""``: ``12.3``); n/a where the share is undefined."""
    if share is None or math.isnan(share):
        return NOT_AVAILABLE
    return f"{100 * share:.{decimals}f}{sign}"


def bounds_text(lo: float | None, hi: float | None, spec: str = ".3f", sep: str = ", ") -> str:
    """``0.900, 0.930``; n/a where either bound is undefined."""
    if is_undefined(lo) or is_undefined(hi):
        return NOT_AVAILABLE
    return f"{lo:{spec}}{sep}{hi:{spec}}"


def interval_text(
    estimate: float | None,
    lo: float | None,
    hi: float | None,
    spec: str = ".3f",
    sep: str = ", ",
) -> str:
    """``0.912 [0.900, 0.930]``; ``0.912 [n/a]`` without bounds; n/a without an estimate."""
    if is_undefined(estimate):
        return NOT_AVAILABLE
    return f"{estimate:{spec}} [{bounds_text(lo, hi, spec, sep)}]"


def format_interval(interval: Interval, spec: str = ".3f", sep: str = ", ") -> str:
    """An :class:`~synthdeid.stats.Interval` as :func:`interval_text` writes it."""
    return interval_text(interval.estimate, interval.lo, interval.hi, spec, sep)


def p_text(p: float | None, n_resamples: int, m: int = 1) -> str:
    """A bootstrap p with four decimals; n/a where there is no test.

    A p of 0 (no resample changed sign) is below the resolution of the
    resamples, ``2 / n_resamples`` two-sided (``m`` times that for a
    Bonferroni-adjusted p over ``m`` tests), and is written ``<0.0010``.
    """
    if is_undefined(p):
        return NOT_AVAILABLE
    if p == 0:
        return f"<{min(1.0, 2.0 * max(m, 1) / n_resamples):.4f}"
    return f"{p:.4f}"


def undefined_to_none(row: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``row`` with NaN values as None (JSON null, an empty CSV cell)."""
    return {key: None if is_undefined(value) else value for key, value in row.items()}


def escape_cell(text: str) -> str:
    """A cell's text with ``|`` escaped and line breaks as ``<br>``."""
    return _LINE_BREAK.sub("<br>", text.replace("|", "\\|"))


def markdown_row(cells: Sequence[str]) -> str:
    """``| a | b |``; an empty cell is ``| |``."""
    return "|" + "|".join(f" {escape_cell(cell)} " if cell else " " for cell in cells) + "|"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table: header, separator, then one line per row."""
    return [markdown_row(header), "|" + "---|" * len(header), *(markdown_row(r) for r in rows)]


def markdown_to_html(markdown: str, title: str, images: Mapping[str, Path] | None = None) -> str:
    """A standalone HTML page of Markdown with tables (CommonMark + GFM tables).

    A Snakemake report shows an HTML result inline (a Markdown one only as a
    download), so every table the report holds is written through this.
    ``images`` maps an image link of the Markdown (``max_rouge_l.png``) to its
    PNG file, which is embedded in the page as a data URI: the page then shows
    its figures wherever it is opened (a Snakemake report shows it from a data
    URI, where relative links lead nowhere).
    """
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
    for link, path in (images or {}).items():
        encoded = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        body = body.replace(f'src="{link}"', f'src="data:image/png;base64,{encoded}"')
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:1em auto}"
        "table{border-collapse:collapse;margin:1em 0}"
        "th,td{border:1px solid #bbb;padding:.25em .6em;text-align:right}"
        "th:first-child,td:first-child{text-align:left}"
    )
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>\n{body}</body></html>\n"
    )


def write_html(markdown: str, title: str, path: Path) -> None:
    """Write ``markdown`` as a standalone HTML page (:func:`markdown_to_html`), atomically."""
    with atomic_text(path) as handle:
        handle.write(markdown_to_html(markdown, title))


def write_csv(rows: Sequence[dict[str, Any]], fields: Sequence[str], path: Path) -> None:
    with atomic_text(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=list(fields), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
