"""The design-precision report (bench/study_power.py) on the committed archive."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from bench_helpers import bench_module

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "docs" / "results" / "physionet-study-full-runs"


def study_power() -> ModuleType:
    return bench_module("study_power")


def test_the_report_projects_the_mde_and_tests_the_shared_seeds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--archive", str(ARCHIVE), "--arm", "real_only", "--arms", "16"]
    assert study_power().main([*args, "--seeds", "1", "3", "--pairing", "template-syn25"]) == 0
    out = capsys.readouterr().out
    assert "span_overlap_f1 of arm real_only, 5 runs" in out
    assert re.search(r"^\| 3 \| 0\.\d{4} \| 0\.\d{3} \| 0\.\d{3} \|", out, re.MULTILINE)
    row = re.search(
        r"^\| template-syn25 \| (1 2[ 3]*) \| (.+) \| (.+) \| (\S+) \| (\S+) \| (\S+) \|$",
        out,
        re.MULTILINE,
    )
    assert row is not None, out
    seeds = row.group(1).split()
    assert len(row.group(2).split(" / ")) == len(row.group(3).split(" / ")) == len(seeds)
    # a correlation over two seeds is no estimate
    if len(seeds) < 3:
        assert row.group(4) == "n/a"
    else:
        assert -1 <= float(row.group(4)) <= 1
    assert 0 < float(row.group(5)) < 0.1 and 0 < float(row.group(6)) < 0.1
