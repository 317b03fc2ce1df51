"""The committed study tables, rebuilt from the committed archives by today's code.

``docs/results/physionet-study.md`` states figures built from the archived runs
under ``docs/results/``:

- "The study on the full recipe": ``physionet-study-full-runs/`` (``snakemake
  study`` with the config files of the page's command: ``compare_ner_archive``
  and ``tabulate_study_archive`` over ``ner.study_archive``): its status section's
  arm table and per-run table (``study.md`` and ``study_runs.md``);
- "Both archives together": ``physionet-study-runs/`` and
  ``physionet-study-runs-fp32/`` (the ``synthdeid`` commands printed there, with
  the resamples and seed the profile's section names).

Each test runs compare-ner and tabulate-study (the commands, in this process)
on the committed archive and checks every figure of the committed table against
the rebuilt one, to the decimals the table prints. Nothing numeric is written
here: the committed page is the expectation.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from synthdeid.cli import main
from synthdeid.evaluation.report import PER_DOCUMENT, read_per_document
from synthdeid.scoring.metrics import split_column
from synthdeid.scoring.vocabulary import DOCUMENT_COUNTERS, LABEL_COUNTERS, METRICS
from synthdeid.workflow.ner_inputs import archived_reference
from synthdeid.workflow.ner_runs import NerRuns
from workflow_helpers import merge_config

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
STUDY_PAGE = RESULTS / "physionet-study.md"
# the study page's older column names: the span-overlap figures (label-consistent), and
# leakage before "document" was part of its name; every other column is a metric's label
PAGE_WORDING = {
    "F1": "span_overlap_f1",
    "recall": "span_overlap_recall",
    "precision": "span_overlap_precision",
    "label-consistent leakage": "leakage_overlap_all",
    "label-agnostic leakage": "leakage_detection_all",
}
# a printed figure, or n/a where it is undefined (a CPU time not measured)
FIGURE = re.compile(r"[+-]?\d+(?:\.\d+)?|n/a")


def metric_key(header: str) -> str:
    """The metric a column of the page names."""
    by_label = {m.label: m.key for m in METRICS}
    return PAGE_WORDING.get(header) or by_label[header]


def section(text: str, heading: str) -> str:
    """The lines under ``heading`` up to the next heading of its level or above."""
    level = heading.split(" ")[0]
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next(
        (
            k
            for k in range(start, len(lines))
            if lines[k].startswith("#") and len(lines[k].split(" ")[0]) <= len(level)
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def tables(text: str) -> Iterator[list[dict[str, str]]]:
    """Every Markdown table of ``text``: its rows as header -> cell."""
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif block:
            header, _, *rows = block
            yield [dict(zip(header, row, strict=True)) for row in rows]
            block = []


def table_with(text: str, first: str) -> list[dict[str, str]]:
    """The first table of ``text`` whose first column is ``first``."""
    return next(rows for rows in tables(text) if next(iter(rows[0])) == first)


def command(text: str, program: str) -> list[str]:
    """The arguments of the indented ``program`` command of ``text`` (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    line = next(line.strip() for line in joined.splitlines() if line.strip().startswith(program))
    return shlex.split(line)[len(program.split()) :]


def checked(arguments: list[str], out: Mapping[str, Path]) -> list[str]:
    """``arguments`` with repository paths made absolute and ``out`` replacing the values
    of its options (``--out-dir``, ``--comparison``)."""
    result = []
    for k, argument in enumerate(arguments):
        previous = arguments[k - 1] if k else ""
        if previous in out:
            result.append(str(out[previous]))
        elif argument.startswith("docs/"):
            result.append(str(ROOT / argument))
        else:
            result.append(argument)
    return result


def close(printed: str, value: Any) -> bool:
    """Whether ``value`` prints as ``printed`` to the decimals shown (n/a: undefined)."""
    if printed == "n/a":
        return value is None or value == "" or math.isnan(float(value))
    if value is None or value == "":
        return False
    decimals = len(printed.partition(".")[2])
    return abs(float(value) - float(printed)) <= 0.5 * 10**-decimals + 1e-9


def assert_figures(cell: str, values: list[Any], where: str) -> None:
    """The numbers of ``cell`` are ``values``, each to the decimals printed."""
    printed = FIGURE.findall(cell)
    assert len(printed) == len(values), f"{where}: {cell!r} against {values}"
    for text, value in zip(printed, values, strict=True):
        assert close(text, value), f"{where}: {cell!r} against {values}"


def assert_spread_cell(cell: str, row: Mapping[str, Any], key: str, where: str) -> None:
    """``mean [+- SD] [lo, hi]`` of a study.csv row."""
    names = ("mean", "sd", "ci_lo", "ci_hi") if "+-" in cell else ("mean", "ci_lo", "ci_hi")
    assert_figures(cell, [row[f"{key}_{name}"] for name in names], where)


def assert_delta_cell(cell: str, row: Mapping[str, Any], key: str, where: str) -> None:
    """``diff [lo, hi] p=P *`` (or ``p<P``: a p of 0 below the resolution) of a study.csv row."""
    if cell == "(reference)":
        assert row["reference"] == "True", where
        return
    interval, _, p = cell.partition(" p")
    assert_figures(interval, [row[f"{key}_{n}"] for n in ("diff", "diff_lo", "diff_hi")], where)
    bound = p.removesuffix(" *")
    if bound.startswith("<"):
        assert float(row[f"{key}_p_bonferroni"]) < float(bound[1:]), where
    else:
        assert close(bound.removeprefix("="), row[f"{key}_p_bonferroni"]), where
    assert (row[f"{key}_significant"] == "True") == p.endswith("*"), where


def assert_study_row(committed: Mapping[str, str], row: Mapping[str, Any]) -> None:
    """Every cell of a committed study-table row against the rebuilt study.csv row."""
    arm = row["arm"]
    for header, cell in committed.items():
        where = f"{arm}, {header}"
        if header == "arm":
            assert cell.removesuffix(" (reference)") == arm
            assert (row["reference"] == "True") == cell.endswith(" (reference)")
        elif header == "seeds":
            assert int(cell) == int(row["seeds"]), where
        elif header == "train notes":
            assert_figures(cell, [row["train_notes"]], where)
        elif header == "synthetic share":
            assert close(cell.removesuffix("%"), 100 * float(row["synthetic_share"])), where
        elif header == "epsilon":
            assert close(cell, row["epsilon"]), where
        elif header.startswith("train min"):
            assert_figures(cell, [row["train_wall_min"], row["train_cpu_min"]], where)
        elif header.startswith("MDE "):
            key = metric_key(header.removeprefix("MDE "))
            assert close(cell, row[f"{key}_mde_bonferroni"]), where
        elif header.startswith("reading ("):
            key = metric_key(header.removeprefix("reading (").removesuffix(")"))
            text, _, mde = cell.partition(" (MDE ")
            assert text == (row[f"{key}_reading"] or "n/a"), where
            assert not mde or close(mde.removesuffix(")"), row[f"{key}_mde_bonferroni"]), where
        elif header.startswith("delta "):
            assert_delta_cell(cell, row, metric_key(header.removeprefix("delta ")), where)
        else:
            assert_spread_cell(cell, row, metric_key(header), where)


def rebuild(compare: list[str], tabulate: list[str], out: Path) -> dict[str, dict[str, Any]]:
    """Run compare-ner then tabulate-study; the rebuilt study.csv rows by arm."""
    comparison, study = out / "compare", out / "study"
    assert main(["compare-ner", *checked(compare, {"--out-dir": comparison})]) == 0
    replaced = {"--comparison": comparison / "comparison.json", "--out-dir": study}
    assert main(["tabulate-study", *checked(tabulate, replaced)]) == 0
    with (study / "study.csv").open() as handle:
        return {row["arm"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def page() -> str:
    return STUDY_PAGE.read_text(encoding="utf-8")


def test_every_committed_archive_holds_exactly_the_counters_of_version_1() -> None:
    """The per-document tables written before versions were recorded are version 1."""
    paths = sorted(RESULTS.rglob(PER_DOCUMENT))
    assert paths
    for path in paths:
        counters = {split_column(name)[1] for name in pq.read_schema(path).names} - {"note_id"}
        assert counters == set(LABEL_COUNTERS) | set(DOCUMENT_COUNTERS), path
        assert read_per_document(path).missing == frozenset(), path


def test_both_archives_together_rebuild_the_committed_study_table(
    page: str, tmp_path: Path
) -> None:
    text = section(page, "#### Both archives together")
    profile = section(page, "## The 4-epoch CPU profile")
    settings = re.search(r"\(([\d,]+) resamples, seed (\d+)\)", profile)
    assert settings is not None
    resamples, seed = settings.groups()
    compare = command(text, "synthdeid compare-ner")
    compare += ["--resamples", resamples.replace(",", ""), "--seed", seed]
    rows = rebuild(compare, command(text, "synthdeid tabulate-study"), tmp_path)
    committed = table_with(text, "arm")
    assert {row["arm"].removesuffix(" (reference)") for row in committed} == set(rows)
    for entry in committed:
        assert_study_row(entry, rows[entry["arm"].removesuffix(" (reference)")])


def configuration(snakemake_command: list[str]) -> dict[str, Any]:
    """config/config.yaml updated by the ``--configfile`` files of a snakemake command, as
    snakemake merges them (workflow_helpers.merge_config)."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    files = snakemake_command[snakemake_command.index("--configfile") + 1 :]
    for name in files:
        merge_config(config, yaml.safe_load((ROOT / name).read_text()) or {})
    return config


def test_the_full_recipe_archive_rebuilds_its_arm_and_run_tables(page: str, tmp_path: Path) -> None:
    text = section(page, "## The study on the full recipe")
    ner = configuration(command(text, "snakemake --cores 2 study"))["ner"]
    archive = ner["study_archive"]
    assert (ROOT / archive).resolve() == (RESULTS / "physionet-study-full-runs").resolve()
    # the arguments of the rules compare_ner_archive and tabulate_study_archive
    reference = archived_reference(str(ROOT / archive), NerRuns.from_config(ner))
    evaluation = ner["evaluation"]
    compare = ["--archive", archive, "--reference", reference, "--out-dir", "-"]
    compare += ["--resamples", str(evaluation["resamples"]), "--seed", str(evaluation["seed"])]
    tabulate = ["--comparison", "-", "--archive", archive, "--title", ner["study_title"]]
    rows = rebuild(compare, [*tabulate, "--out-dir", "-"], tmp_path)
    status = section(text, "### Status")
    # the arms table: every figure against the rebuilt study.csv
    committed = table_with(status, "arm")
    assert {row["arm"].removesuffix(" (reference)") for row in committed} == set(rows)
    for entry in committed:
        assert_study_row(entry, rows[entry["arm"].removesuffix(" (reference)")])
    # the runs table: the rebuilt study_runs.md's, cell for cell (figures with their
    # document intervals, the epoch kept, the code and machine, the train time)
    rebuilt_runs = table_with((tmp_path / "study" / "study_runs.md").read_text(), "run")
    comparison = json.loads((tmp_path / "compare" / "comparison.json").read_text())
    assert {entry["run"] for entry in rebuilt_runs} == set(comparison["runs"])
    assert table_with(status, "run") == rebuilt_runs
