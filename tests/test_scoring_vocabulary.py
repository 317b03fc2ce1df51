"""The metric registry, and per-document tables written before a counter existed."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from synthdeid.errors import InputError
from synthdeid.evaluation.archive import read_archive, write_archived_run
from synthdeid.evaluation.arms import ARM_METRICS, LOWER_IS_BETTER
from synthdeid.evaluation.bootstrap import bootstrap_metrics
from synthdeid.evaluation.compare import RUN_METRICS
from synthdeid.evaluation.cross_corpus import CROSS_METRICS
from synthdeid.evaluation.report import (
    METRIC_LABELS,
    PER_DOCUMENT,
    PER_DOCUMENT_VERSION,
    PER_DOCUMENT_VERSION_KEY,
    per_document_version,
    read_per_document,
    write_per_document,
)
from synthdeid.evaluation.study_table import FOREST_METRICS, HEADLINE_METRIC
from synthdeid.ner.model_card import CARD_METRICS
from synthdeid.notes import write_notes
from synthdeid.scoring.metrics import (
    DEFINITIONS,
    HEADLINE_COUNTS,
    HEADLINE_RATIOS,
    LABEL_RATIOS,
    CountTable,
    count_table,
    split_column,
    table_headline,
    table_per_label,
)
from synthdeid.scoring.vocabulary import (
    CORE_COUNTERS,
    DOCUMENT_COUNTERS,
    LABEL_COUNTERS,
    METRICS,
    label,
    metric,
    select,
)
from test_evaluation_cli import compare, gold_notes, weak_predictions

# -- the registry ---------------------------------------------------------------------


def test_every_metric_is_named_once_and_computed_from_known_counters() -> None:
    keys = [m.key for m in METRICS]
    assert len(keys) == len(set(keys))
    assert len({m.label for m in METRICS}) == len(METRICS)
    counters = set(LABEL_COUNTERS) | set(DOCUMENT_COUNTERS)
    for m in METRICS:
        assert m.counters and set(m.counters) <= counters, m.key
        assert m.definition and m.label
        assert (m.better is None) == (m.kind == "count")
    assert counters >= CORE_COUNTERS


def test_the_lists_of_metrics_are_selections_of_the_registry() -> None:
    assert tuple(m.key for m in METRICS if m.kind == "ratio") == HEADLINE_RATIOS
    assert HEADLINE_COUNTS == ("n_notes", "n_notes_with_phi", "n_gold_spans", "n_predicted_spans")
    assert tuple(metric(k).per_label for k in HEADLINE_RATIOS[4:]) == LABEL_RATIOS
    for chosen in (RUN_METRICS, CROSS_METRICS, ARM_METRICS, CARD_METRICS, FOREST_METRICS):
        assert set(chosen) <= set(HEADLINE_RATIOS)
    assert HEADLINE_METRIC in ARM_METRICS
    assert set(DEFINITIONS) == {*(m.key for m in METRICS), "conventions"}
    assert {k for k in HEADLINE_RATIOS if k.startswith("leakage_")} == LOWER_IS_BETTER
    with pytest.raises(KeyError, match="no metric 'span_f1'"):
        select("span_overlap_f1", "span_f1")


def test_one_wording_per_metric_in_tables_and_axes() -> None:
    assert label("span_overlap_f1") == label("overlap_f1") == "span-overlap F1"
    assert METRIC_LABELS["exact_recall"] == "span-exact recall"
    assert label("leakage_overlap_all") == "label-consistent document leakage"
    assert not [text for text in METRIC_LABELS.values() if "span overlap" in text]
    assert metric("span_overlap_f1").difference_unit() == "difference on the 0-1 scale"
    assert metric("leakage_detection_all").difference_unit() == ("difference in the share of notes")


# -- per-document tables of another version -------------------------------------------


@pytest.fixture
def counts() -> CountTable:
    holdout = [n for n in gold_notes() if n.split == "holdout"]
    return count_table(holdout, weak_predictions())


def scored_notes(note_ids: tuple[str, ...], path: Path) -> Path:
    """The notes table the counts were scored on (the key of an archive's note ids)."""
    write_notes([n for n in gold_notes() if n.note_id in set(note_ids)], path)
    return path


def written(counts: CountTable, path: Path) -> Path:
    write_per_document(counts, path, {"step": "test"})
    return path


def older(source: Path, path: Path, *counters: str) -> Path:
    """``source`` as a file from before ``counters`` and before versions were recorded."""
    table = pq.read_table(source)
    dropped = [name for name in table.column_names if split_column(name)[1] in counters]
    table = table.drop_columns(dropped)
    metadata = dict(table.schema.metadata or {})
    metadata.pop(PER_DOCUMENT_VERSION_KEY)
    pq.write_table(table.replace_schema_metadata(metadata), path)
    return path


def assert_same_except(full: dict[str, float], partial: dict[str, float], na: set[str]) -> None:
    assert set(full) == set(partial)
    for name in full:
        if name in na or math.isnan(full[name]):
            assert math.isnan(partial[name]), name
        else:
            assert partial[name] == full[name], name


def test_the_version_is_recorded_on_write(counts: CountTable, tmp_path: Path) -> None:
    path = written(counts, tmp_path / PER_DOCUMENT)
    metadata = pq.read_schema(path).metadata
    assert metadata[PER_DOCUMENT_VERSION_KEY] == str(PER_DOCUMENT_VERSION).encode()
    assert per_document_version(metadata, path) == PER_DOCUMENT_VERSION
    again = read_per_document(path)
    assert again.missing == frozenset() and (again.values == counts.values).all()
    # a file from before the version was recorded is version 1
    assert per_document_version(None, path) == 1
    with pytest.raises(InputError, match="schema version"):
        per_document_version({PER_DOCUMENT_VERSION_KEY: b"two"}, path)


@pytest.mark.parametrize(
    ("counter", "needing"),
    [
        ("coverage80_found", {"coverage80_recall"}),
        ("leak_detection", {"leakage_detection_all", "leakage_detection_phi"}),
        ("token_pred", {"token_precision", "token_f1"}),
    ],
)
def test_an_archive_without_a_counter_reads_its_figures_n_a_and_the_rest_unchanged(
    counts: CountTable, tmp_path: Path, counter: str, needing: set[str]
) -> None:
    full = written(counts, tmp_path / "full.parquet")
    table = read_per_document(older(full, tmp_path / "old.parquet", counter))
    assert table.missing == {counter}
    assert (table.labels, table.note_ids) == (counts.labels, counts.note_ids)
    assert_same_except(table_headline(counts), table_headline(table), needing)
    per_label = {m.per_label or "" for m in METRICS if m.key in needing} - {""}
    for lab, figures in table_per_label(counts).items():
        assert_same_except(figures, table_per_label(table)[lab], per_label)
    # bootstrap intervals: undefined, never 0, for the figures that need the counter
    result = bootstrap_metrics(table, n_resamples=50, seed=1)
    expected = bootstrap_metrics(counts, n_resamples=50, seed=1)
    for name in HEADLINE_RATIOS:
        if name in needing:
            assert not result.headline[name].defined
        else:
            assert result.headline[name].as_dict() == expected.headline[name].as_dict()


def test_a_counter_it_does_not_know_is_ignored(counts: CountTable, tmp_path: Path) -> None:
    path = written(counts, tmp_path / "newer.parquet")
    table = pq.read_table(path)
    for name in ("DATE.partial_tp", "ALL.partial_tp", "ALL.new_flag"):
        table = table.append_column(name, table.column("ALL.gold"))
    pq.write_table(table, path)
    again = read_per_document(path)
    assert again.missing == frozenset() and again.labels == counts.labels
    assert (again.values == counts.values).all()


def test_a_counter_held_for_some_labels_only_or_a_core_counter_missing_is_refused(
    counts: CountTable, tmp_path: Path
) -> None:
    path = written(counts, tmp_path / "full.parquet")
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["DATE.token_tp"]), tmp_path / "torn.parquet")
    with pytest.raises(InputError, match=r"DATE\.token_tp"):
        read_per_document(tmp_path / "torn.parquet")
    older(path, tmp_path / "no_gold.parquet", "gold")
    with pytest.raises(InputError, match=r"missing columns \[\'DOCTOR\.gold\'"):
        read_per_document(tmp_path / "no_gold.parquet")


def test_an_older_archive_is_archived_and_compared_with_its_counter_missing(
    counts: CountTable, tmp_path: Path
) -> None:
    full, old = tmp_path / "full", tmp_path / "old"
    full.mkdir()
    old.mkdir()
    written(counts, full / PER_DOCUMENT)
    older(full / PER_DOCUMENT, old / PER_DOCUMENT, "leak_detection")
    # re-archived, the missing counter stays missing (no column of zeros is made up)
    write_archived_run(
        tmp_path / "archive" / "old",
        run="old",
        arm="old",
        evaluation=old,
        mixture=None,
        privacy=None,
        train=None,
        provenance={},
        notes=scored_notes(counts.note_ids, tmp_path / "notes.parquet"),
    )
    (archived,) = read_archive(tmp_path / "archive")
    columns = pq.read_schema(archived.folder / PER_DOCUMENT).names
    assert not [name for name in columns if name.endswith(".leak_detection")]
    assert read_per_document(archived.folder / PER_DOCUMENT).missing == {"leak_detection"}
    # compare-ner: the old run's label-agnostic leakage is n/a, its other figures those of
    # the full file
    assert compare(tmp_path / "c", f"full={full}", f"old={old}") == 0
    with (tmp_path / "c" / "runs.csv").open() as handle:
        rows = {row["run"]: row for row in csv.DictReader(handle)}
    for name in RUN_METRICS:
        for suffix in ("", "_lo", "_hi"):
            column = f"{name}{suffix}"
            if name.startswith("leakage_detection"):
                assert rows["old"][column] == "" and rows["full"][column] != ""
            else:
                assert rows["old"][column] == rows["full"][column]
    assert np.isnan(table_headline(read_per_document(old / PER_DOCUMENT))["leakage_detection_phi"])
