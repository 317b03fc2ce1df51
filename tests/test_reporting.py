"""Tests for the shared report text: n/a, percentages, intervals and Markdown tables."""

from __future__ import annotations

import re

import pytest

from synthdeid.reporting import (
    NOT_AVAILABLE,
    bounds_text,
    escape_cell,
    format_interval,
    interval_text,
    markdown_row,
    markdown_table,
    markdown_to_html,
    number_or_na,
    p_text,
    percent,
    undefined_to_none,
)
from synthdeid.stats import Interval

NAN = float("nan")


def test_undefined_figures_are_na_never_zero() -> None:
    assert NOT_AVAILABLE == "n/a"
    assert number_or_na(None) == number_or_na(NAN) == "n/a"
    assert number_or_na(0.0) == "0.000" and number_or_na(0.91234, ".2f") == "0.91"
    assert number_or_na(120.0, ".0f") == "120" and number_or_na(1e-4, ".2e") == "1.00e-04"
    assert undefined_to_none({"a": NAN, "b": None, "c": 0.0, "d": "x"}) == {
        "a": None,
        "b": None,
        "c": 0.0,
        "d": "x",
    }


@pytest.mark.parametrize("share", [0.0, 0.1234, 1 / 6, 0.9995, 1.0, 0.004999])
def test_percent_is_python_percent_format(share: float) -> None:
    assert percent(share) == format(share, ".1%")
    assert percent(share, 2) == format(share, ".2%")
    assert percent(share, sign="") == format(share, ".1%").removesuffix("%")


def test_percent_of_an_undefined_share() -> None:
    assert percent(0.1234) == "12.3%" and percent(0.1234, 2) == "12.34%"
    assert percent(None) == percent(NAN) == "n/a"


def test_interval_text() -> None:
    assert interval_text(0.912, 0.9, 0.93) == "0.912 [0.900, 0.930]"
    assert interval_text(0.25, -0.125, 0.5, "+.3f") == "+0.250 [-0.125, +0.500]"
    assert interval_text(0.891, 0.862, 0.93, ".2f", sep="-") == "0.89 [0.86-0.93]"
    assert interval_text(41.5, 30, 52.25, ".0f") == "42 [30, 52]"
    assert interval_text(0.5, NAN, NAN) == "0.500 [n/a]"
    assert interval_text(0.5, 0.4, None) == "0.500 [n/a]"
    assert interval_text(None, 0.4, 0.6) == interval_text(NAN, NAN, NAN) == "n/a"
    assert bounds_text(0.4, 0.6) == "0.400, 0.600" and bounds_text(NAN, 0.6) == "n/a"
    assert format_interval(Interval(0.812, 0.79, 0.833)) == "0.812 [0.790, 0.833]"
    assert format_interval(Interval(1.0, 1.0, 1.0), ".2f", sep="-") == "1.00 [1.00-1.00]"
    assert format_interval(Interval(NAN, NAN, NAN)) == "n/a"


def test_cells_are_escaped() -> None:
    assert escape_cell("a|b") == "a\\|b"
    assert escape_cell("one\ntwo\r\nthree\rfour") == "one<br>two<br>three<br>four"
    assert escape_cell("plain `code` [x]") == "plain `code` [x]"
    assert markdown_row(["a|b", "c\nd"]) == "| a\\|b | c<br>d |"


def test_markdown_table_lines() -> None:
    assert markdown_table(["metric", "value"], [["recall", "0.912"], ["precision", "n/a"]]) == [
        "| metric | value |",
        "|---|---|",
        "| recall | 0.912 |",
        "| precision | n/a |",
    ]
    assert markdown_table(["a"], []) == ["| a |", "|---|"]
    # an empty cell is a single space
    assert markdown_row(["real held-out", "", "", "0.625", ""]) == "| real held-out | | | 0.625 | |"


def test_every_row_has_the_header_s_columns_even_with_pipes_and_breaks() -> None:
    header = ["run", "estimate [95% CI]", "note"]
    rows = [["a|b", "0.500 [0.400, 0.600]", "two\nlines"], ["", "n/a", "x | y"]]
    lines = markdown_table(header, rows)
    unescaped = [len(re.findall(r"(?<!\\)\|", line)) for line in lines]
    assert unescaped == [len(header) + 1] * len(lines)
    page = markdown_to_html("\n".join(lines) + "\n", "t")
    assert page.count("<tr>") == 3 and page.count("<th>") == 3 and page.count("<td>") == 6
    assert "<td>a|b</td>" in page and "<td>x | y</td>" in page and "<td></td>" in page
    assert "<td>two<br>lines</td>" in page


def test_a_p_value_is_written_one_way_with_its_resolution() -> None:
    assert p_text(0.04, 2000) == "0.0400"
    assert p_text(1.0, 2000) == "1.0000"
    # no resample changed sign: below 2 / n (two-sided), m times that when adjusted
    assert p_text(0.0, 2000) == "<0.0010"
    assert p_text(0.0, 2000, m=4) == "<0.0040"
    assert p_text(0.0, 10, m=9) == "<1.0000"
    assert p_text(None, 2000) == NOT_AVAILABLE
    assert p_text(float("nan"), 2000) == NOT_AVAILABLE
