"""archive-run, and compare-ner / tabulate-study reading an archive instead of live runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthdeid.cli import main
from synthdeid.errors import InputError
from synthdeid.evaluation.archive import (
    RUN_RECORD,
    UNKEYED_FORMAT,
    add_training_outcome,
    hashed_note_id,
    key_id,
    note_key,
    read_archive,
    read_archives,
    read_train_time,
    read_training_outcome,
    rekey_archived_run,
)
from synthdeid.evaluation.report import PER_DOCUMENT, read_per_document
from synthdeid.notes import note_texts, read_notes, write_notes
from test_evaluation_cli import compare, evaluate, mixture_summary, tables  # noqa: F401

BENCHMARK_HEADER = (
    "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"
)


def benchmark(path: Path, wall: str, cpu: str) -> Path:
    """A Snakemake benchmark file as the benchmark directive writes it."""
    path.write_text(f"{BENCHMARK_HEADER}\n{wall}\t0:20:00\t900\t1\t1\t1\t0\t0\t180\t{cpu}\n")
    return path


# the machine a training history names (synthdeid.compute_env.describe_machine)
MACHINE = {"code_version": "0.1.0+gabc", "cpu": "a test CPU", "cpu_capability": "AVX2"}


def history(settings: dict[str, object], environment: object = MACHINE) -> dict[str, object]:
    """A train-ner training history: settings, the epoch kept of 3, fp32, the machine."""
    recorded = {
        "run": "x",
        "config": settings,
        "precision": {"requested": "fp32", "resolved": "fp32", "reason": "set explicitly"},
        "best_epoch": 2,
        "timing": {"train_seconds": 60.0, "steps": 30, "epochs": 3},
    }
    return recorded if environment is None else {**recorded, "environment": environment}


def archive(out: Path, run: str, evaluation: Path, *extra: str, notes: Path | None = None) -> int:
    """archive-run of ``evaluation``; its notes are the gold table beside it (``tables``)."""
    notes = notes or evaluation.parent / "gold.parquet"
    argv = ["archive-run", "--run", run, "--evaluation", str(evaluation), "--notes", str(notes)]
    return main([*argv, "--out-dir", str(out), *extra])


def scored_key(evaluation: Path) -> bytes:
    """The key of an archive of ``evaluation``: from the texts of the notes it scored."""
    scored = read_per_document(evaluation / PER_DOCUMENT).note_ids
    return note_key(note_texts(evaluation.parent / "gold.parquet", scored))


def as_format_1(folder: Path, evaluation: Path) -> None:
    """Rewrite an archived run as format 1 wrote it: note ids hashed without a key."""
    path = folder / PER_DOCUMENT
    table = pq.read_table(path)
    live = read_per_document(evaluation / PER_DOCUMENT).note_ids
    unkeyed = [hashed_note_id(note_id, None) for note_id in live]
    column = table.column_names.index("note_id")
    pq.write_table(table.set_column(column, table.field(column), [unkeyed]), path)
    record = json.loads((folder / RUN_RECORD).read_text())
    del record["note_key"]
    (folder / RUN_RECORD).write_text(json.dumps({**record, "format": UNKEYED_FORMAT}))


@pytest.fixture
def evaluations(tables: dict[str, Path], tmp_path: Path) -> dict[str, Path]:  # noqa: F811
    evaluate(tables["gold"], tables["weak"], tmp_path / "weak")
    evaluate(tables["gold"], tables["perfect"], tmp_path / "perfect")
    return {"weak": tmp_path / "weak", "perfect": tmp_path / "perfect"}


def test_train_time_is_read_from_a_benchmark_file(tmp_path: Path) -> None:
    time = read_train_time(benchmark(tmp_path / "b.tsv", "1200.5", "2301.0"))
    assert (time.wall_s, time.cpu_s) == (1200.5, 2301.0)
    assert read_train_time(benchmark(tmp_path / "na.tsv", "60", "NA")).cpu_s is None
    (tmp_path / "bad.tsv").write_text("x\ty\n1\t2\n")
    with pytest.raises(InputError, match="no 's' column"):
        read_train_time(tmp_path / "bad.tsv")
    (tmp_path / "text.tsv").write_text(f"{BENCHMARK_HEADER}\nabc\t0\t0\t0\t0\t0\t0\t0\t0\t1\n")
    with pytest.raises(InputError, match="line 2"):
        read_train_time(tmp_path / "text.tsv")


def test_an_archived_run_keeps_counts_sizes_budget_and_time_but_no_note_id(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    privacy = tmp_path / "privacy.json"
    privacy.write_text(json.dumps({"epsilon": 3.99, "delta": 1e-4, "noise_multiplier": 0.9}))
    out = tmp_path / "archive" / "dp-seed1"
    pools = {"dplm_pii": "sha256:" + "a" * 64}
    summary = mixture_summary(tmp_path / "m.json", 120, 20, pools)
    extra = ["--arm", "dp", "--mixture", str(summary)]
    extra += [
        "--privacy",
        str(privacy),
        "--benchmark",
        str(benchmark(tmp_path / "b.tsv", "90", "170")),
    ]
    model = tmp_path / "model"
    model.mkdir()
    settings = {"epochs": 4, "precision": "fp32", "seed": 1}
    (model / "training_history.json").write_text(json.dumps(history(settings)))
    extra += ["--model", str(model), "--config-md5", "0" * 32]
    assert archive(out, "dp-seed1", evaluations["perfect"], *extra) == 0
    assert {p.name for p in out.iterdir()} == {PER_DOCUMENT, RUN_RECORD}
    record = json.loads((out / RUN_RECORD).read_text())
    assert record["run"] == "dp-seed1" and record["arm"] == "dp"
    assert record["mixture"]["n_train_total"] == 120
    assert record["mixture"]["realized_synthetic_fraction"] == pytest.approx(20 / 120)
    assert record["mixture"]["regime"] is None  # not in this summary: null, never invented
    # the version of each pool drawn from: its file's digest, as build-mixture recorded it
    assert record["mixture"]["pool_digests"] == pools
    assert record["privacy"] == {"epsilon": 3.99, "delta": 1e-4}
    assert record["train"] == {"wall_s": 90.0, "cpu_s": 170.0}
    assert record["training_config"] == {**settings, "precision_resolved": "fp32"}
    assert record["trained"] == {"best_epoch": 2, "epochs": 3, "environment": MACHINE}
    assert record["provenance"]["params"]["config_md5"] == "0" * 32
    live = read_per_document(evaluations["perfect"] / PER_DOCUMENT)
    archived = read_per_document(out / PER_DOCUMENT)
    key = scored_key(evaluations["perfect"])
    assert archived.note_ids == tuple(hashed_note_id(n, key) for n in live.note_ids)
    assert record["note_key"] == key_id(key)
    assert not set(archived.note_ids) & set(live.note_ids)
    # keyed: not the hash anyone could compute from a guessed note id alone
    assert not set(archived.note_ids) & {hashed_note_id(n, None) for n in live.note_ids}
    assert (archived.values == live.values).all()
    (run,) = read_archive(tmp_path / "archive")
    assert (run.name, run.arm, run.train and run.train.cpu_s) == ("dp-seed1", "dp", 170.0)
    assert run.trained is not None and run.trained.environment == MACHINE
    # runs archived before pool digests were recorded still read; a malformed one does not
    for digests in (None, {"dplm_pii": 3}):
        older = {**record, "mixture": {**record["mixture"]}}
        if digests is None:
            del older["mixture"]["pool_digests"]
        else:
            older["mixture"]["pool_digests"] = digests
        (out / RUN_RECORD).write_text(json.dumps(older))
        if digests is None:
            assert "pool_digests" not in read_archive(tmp_path / "archive")[0].mixture
        else:
            with pytest.raises(InputError, match="pool_digests"):
                read_archive(tmp_path / "archive")


def test_a_resumed_run_is_archived_with_the_train_time_of_every_call(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    """The benchmark file times the call that finished the run; the calls before are in the
    history's seconds_before_resume; their CPU time was not measured: null, not a part."""
    model = tmp_path / "model"
    model.mkdir()
    recorded = history({"epochs": 4, "precision": "fp32", "seed": 1})
    timing = {"train_seconds": 2300.0, "steps": 30, "epochs": 3, "resumed_after_epoch": 2}
    recorded["timing"] = {**timing, "seconds_before_resume": 1500.0}
    (model / "training_history.json").write_text(json.dumps(recorded))
    extra = ["--benchmark", str(benchmark(tmp_path / "b.tsv", "900", "1700"))]
    out = tmp_path / "archive" / "long-seed1"
    assert archive(out, "long-seed1", evaluations["perfect"], *extra, "--model", str(model)) == 0
    record = json.loads((out / RUN_RECORD).read_text())
    assert record["train"] == {"wall_s": 2400.0, "cpu_s": None}
    recorded["timing"] = {**timing, "seconds_before_resume": "long"}
    (model / "training_history.json").write_text(json.dumps(recorded))
    broken = tmp_path / "archive" / "broken-seed1"
    assert (
        archive(broken, "broken-seed1", evaluations["perfect"], *extra, "--model", str(model)) == 2
    )
    assert not broken.exists()


def test_archive_run_refuses_bad_input_and_writes_nothing(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "archive" / "weak"
    assert archive(out, "other", evaluations["weak"]) == 2  # folder not named after the run
    assert archive(out, "weak", evaluations["weak"], "--config-md5", "xyz") == 2
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"n_train_total": 10}))
    assert archive(out, "weak", evaluations["weak"], "--mixture", str(flat)) == 2
    no_model = tmp_path / "no-model"
    no_model.mkdir()  # a folder without training_history.json
    assert archive(out, "weak", evaluations["weak"], "--model", str(no_model)) == 2
    (no_model / "training_history.json").write_text(json.dumps({"config": {"epochs": 4}}))
    assert archive(out, "weak", evaluations["weak"], "--model", str(no_model)) == 2
    # a notes table without every scored note: no key, no archive
    gold = read_notes(evaluations["weak"].parent / "gold.parquet")
    write_notes(gold[1:], tmp_path / "fewer.parquet")
    assert archive(out, "weak", evaluations["weak"], notes=tmp_path / "fewer.parquet") == 2
    assert not out.exists()


def test_the_note_key_is_the_scored_notes_in_any_order_and_only_them() -> None:
    texts = {"n1": "Pt seen.", "n2": "Seen again."}
    key = note_key(texts)
    assert note_key(dict(reversed(texts.items()))) == key
    assert note_key({**texts, "n2": "Seen again!"}) != key
    assert note_key({**texts, "n3": ""}) != key
    assert note_key({"n1": "Pt seen.Seen again.", "n2": ""}) != key  # no run-together
    assert hashed_note_id("n1", key) != hashed_note_id("n1", note_key({"n1": "x"}))
    assert len(key_id(key)) == 16 and key_id(key) != key.hex()[:16]


def test_runs_scored_on_other_notes_are_not_paired(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    """The same note ids with another text (another corpus version): another key, refused."""
    gold = read_notes(evaluations["weak"].parent / "gold.parquet")
    changed = [gold[0].with_text(gold[0].text + " ", gold[0].spans), *gold[1:]]
    write_notes(changed, tmp_path / "changed.parquet")
    first, second = tmp_path / "a", tmp_path / "b"
    assert archive(first / "weak", "weak", evaluations["weak"]) == 0
    assert archive(second / "perfect", "perfect", evaluations["perfect"]) == 0
    assert len(read_archives([first, second])) == 2
    notes = tmp_path / "changed.parquet"
    assert archive(second / "other", "other", evaluations["perfect"], notes=notes) == 0
    with pytest.raises(InputError, match=r"run 'other' is archived under note key .* pair"):
        read_archives([first, second])


def test_a_format_1_run_is_rekeyed_to_what_archive_run_writes_now(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    now, old = tmp_path / "now" / "weak", tmp_path / "old" / "weak"
    gold = evaluations["weak"].parent / "gold.parquet"
    assert archive(now, "weak", evaluations["weak"]) == 0
    assert archive(old, "weak", evaluations["weak"]) == 0
    as_format_1(old, evaluations["weak"])
    with pytest.raises(InputError, match=r"no note key \(format 1\)"):
        read_archives([now.parent, old.parent])
    before = {path.name: path.read_bytes() for path in old.iterdir()}
    write_notes(read_notes(gold)[1:], tmp_path / "fewer.parquet")
    with pytest.raises(InputError, match="hash no note id"):
        rekey_archived_run(old, tmp_path / "fewer.parquet")
    assert {path.name: path.read_bytes() for path in old.iterdir()} == before  # untouched
    assert rekey_archived_run(old, gold)
    assert not rekey_archived_run(old, gold)  # keyed already: nothing written
    (fresh,), (rekeyed,) = read_archive(now.parent), read_archive(old.parent)
    assert rekeyed.record == fresh.record
    counts, fresh_counts = (
        read_per_document(old / PER_DOCUMENT),
        read_per_document(now / PER_DOCUMENT),
    )
    assert counts.note_ids == fresh_counts.note_ids
    assert (counts.values == fresh_counts.values).all()
    # the file's own metadata (provenance, per-document version) is kept
    assert (
        pq.read_schema(old / PER_DOCUMENT).metadata == pq.read_schema(now / PER_DOCUMENT).metadata
    )
    assert len(read_archives([now.parent, old.parent])) == 1


def test_read_archive_names_the_folder_and_the_problem(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    assert archive(root / "weak", "weak", evaluations["weak"]) == 0
    record = json.loads((root / "weak" / RUN_RECORD).read_text())
    assert record["mixture"] is None and record["train"] is None and record["arm"] == "weak"
    moved = root / "renamed"
    (root / "weak").rename(moved)
    with pytest.raises(InputError, match="records run 'weak' in folder 'renamed'"):
        read_archive(root)
    moved.rename(root / "weak")
    (root / "weak" / RUN_RECORD).write_text(json.dumps({**record, "format": "other/1"}))
    with pytest.raises(InputError, match="not an archived run record"):
        read_archive(root)
    (root / "empty").mkdir()
    with pytest.raises(InputError, match=r"without run\.json"):
        read_archive(root)


def test_the_study_from_an_archive_equals_the_study_from_the_runs(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    """compare-ner --archive / tabulate-study --archive give the live runs' numbers."""
    runs = {"real-seed1": "weak", "real-seed2": "perfect", "dp-seed1": "perfect"}
    arms = {"real-seed1": "real", "real-seed2": "real", "dp-seed1": "dp"}
    sizes = {"real-seed1": (100, 0), "real-seed2": (100, 0), "dp-seed1": (120, 20)}
    times = {"real-seed1": ("60", "100"), "real-seed2": ("120", "200"), "dp-seed1": ("90", "NA")}
    root = tmp_path / "archive"
    live: list[str] = []
    for run, evaluation in runs.items():
        summary = mixture_summary(tmp_path / f"{run}.json", *sizes[run])
        bench = benchmark(tmp_path / f"{run}.tsv", *times[run])
        model = tmp_path / f"model-{run}"
        model.mkdir()
        # dp-seed1 trained before histories named the machine
        machine = None if run == "dp-seed1" else MACHINE
        settings = {"epochs": 4, "precision": "fp32"}
        (model / "training_history.json").write_text(json.dumps(history(settings, machine)))
        extra = ["--arm", arms[run], "--mixture", str(summary), "--benchmark", str(bench)]
        extra += ["--model", str(model)]
        assert archive(root / run, run, evaluations[evaluation], *extra) == 0
        live += ["--mixture", f"{run}={summary}", "--benchmark", f"{run}={bench}"]
        live += ["--model", f"{run}={model}"]
    pairs = [f"{run}={evaluations[e]}" for run, e in runs.items()]
    arm_flags = tuple(f"{run}={arm}" for run, arm in arms.items())
    assert compare(tmp_path / "c_live", *pairs, reference="real-seed1", arms=arm_flags) == 0
    argv = ["compare-ner", "--archive", str(root), "--reference", "real-seed1"]
    assert main([*argv, "--resamples", "200", "--out-dir", str(tmp_path / "c_arch")]) == 0
    # the same rows; their order follows the runs' (the archive lists them by name)
    for name in ("arms.csv", "arm_tests.csv"):
        live_rows = (tmp_path / "c_live" / name).read_text().splitlines()
        archive_rows = (tmp_path / "c_arch" / name).read_text().splitlines()
        assert live_rows[0] == archive_rows[0] and sorted(live_rows) == sorted(archive_rows)

    def tabulate(comparison: Path, out: Path, *extra: str) -> list[dict[str, str]]:
        argv = ["tabulate-study", "--comparison", str(comparison / "comparison.json")]
        assert main([*argv, *extra, "--out-dir", str(out)]) == 0
        with (out / "study.csv").open() as handle:
            return list(csv.DictReader(handle))

    from_runs = tabulate(tmp_path / "c_live", tmp_path / "s_live", *live)
    from_archive = tabulate(tmp_path / "c_arch", tmp_path / "s_arch", "--archive", str(root))
    assert sorted(from_runs, key=str) == sorted(from_archive, key=str)
    rows = {row["arm"]: row for row in from_archive}
    assert float(rows["real"]["train_wall_min"]) == pytest.approx(1.5)  # (60 + 120) / 2 / 60
    assert float(rows["real"]["train_cpu_min"]) == pytest.approx(2.5)
    assert float(rows["dp"]["train_wall_min"]) == pytest.approx(1.5)
    assert rows["dp"]["train_cpu_min"] == ""  # unmeasured: empty, never 0
    table = (tmp_path / "s_arch" / "study.md").read_text()
    assert "| 1.5 (2.5) |" in table and "| 1.5 (n/a) |" in table
    # one row per run, the same from the runs and from the archive (which lists them by name)
    for name in ("study_runs.csv", "study_runs.md"):
        live_lines = (tmp_path / "s_live" / name).read_text().splitlines()
        assert sorted(live_lines) == sorted((tmp_path / "s_arch" / name).read_text().splitlines())
    with (tmp_path / "s_arch" / "study_runs.csv").open() as handle:
        by_run = {row["run"]: row for row in csv.DictReader(handle)}
    assert set(by_run) == set(runs)
    assert (by_run["dp-seed1"]["arm"], by_run["dp-seed1"]["train_notes"]) == ("dp", "120")
    assert by_run["real-seed1"]["best_epoch"] == "2" and by_run["real-seed1"]["epochs"] == "3"
    assert by_run["real-seed1"]["machine"] == "a test CPU, AVX2"
    assert by_run["dp-seed1"]["machine"] == by_run["dp-seed1"]["code_version"] == ""
    live_f1 = json.loads((evaluations["weak"] / "metrics.json").read_text())["headline"]
    assert float(by_run["real-seed1"]["span_overlap_f1"]) == pytest.approx(
        live_f1["span_overlap_f1"]["estimate"]
    )
    runs_table = (tmp_path / "s_arch" / "study_runs.md").read_text().splitlines()
    (dp_line,) = (line for line in runs_table if line.startswith("| dp-seed1 |"))
    # no machine recorded: n/a, never a guess; the epoch kept of those run
    assert dp_line.startswith(
        "| dp-seed1 | dp | 120 (16.7% synthetic) | 2 of 3 | fp32 | n/a | n/a |"
    )
    (real_line,) = (line for line in runs_table if line.startswith("| real-seed1 |"))
    assert "| 0.1.0+gabc | a test CPU, AVX2 |" in real_line and real_line.endswith("| 1.0 (1.7) |")


def test_compare_ner_needs_a_run_or_an_archive(tmp_path: Path) -> None:
    assert main(["compare-ner", "--out-dir", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_archives_read_together_keep_a_run_found_twice_once_if_its_counts_agree(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    first, second = tmp_path / "bf16", tmp_path / "fp32"
    assert archive(first / "weak", "weak", evaluations["weak"]) == 0
    assert archive(first / "perfect", "perfect", evaluations["perfect"]) == 0
    assert archive(second / "weak", "weak", evaluations["weak"], "--arm", "w") == 0
    runs = read_archives([first, second])
    assert [(r.name, r.arm, r.folder.parent) for r in runs] == [
        ("perfect", "perfect", first),
        ("weak", "weak", first),
    ]
    # the same name with other counts: the archives disagree
    assert archive(second / "perfect", "perfect", evaluations["weak"]) == 0
    with pytest.raises(InputError, match=r"run 'perfect' is also in .* with other per-document"):
        read_archives([first, second])


def test_the_training_outcome_reads_older_histories_and_refuses_broken_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "training_history.json"
    path.write_text(json.dumps(history({"epochs": 4}, environment=None)))
    outcome = read_training_outcome(path)
    # written before histories named the machine: n/a, not invented
    assert (outcome.best_epoch, outcome.epochs, outcome.environment) == (2, 3, None)
    for broken in ({"best_epoch": 4}, {"best_epoch": None}, {"timing": {}}):
        path.write_text(json.dumps({**history({"epochs": 4}), **broken}))
        with pytest.raises(InputError, match="best_epoch <= epochs"):
            read_training_outcome(path)


def test_an_older_archived_run_gains_its_outcome_from_its_own_history_only(
    evaluations: dict[str, Path], tmp_path: Path
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    settings = {"epochs": 4, "precision": "fp32"}
    (model / "training_history.json").write_text(json.dumps(history(settings)))
    out = tmp_path / "archive" / "weak"
    assert archive(out, "weak", evaluations["weak"], "--model", str(model)) == 0
    record = json.loads((out / RUN_RECORD).read_text())
    del record["trained"]  # as archived before the outcome was recorded
    (out / RUN_RECORD).write_text(json.dumps(record))
    assert read_archive(tmp_path / "archive")[0].trained is None
    other = tmp_path / "other.json"
    other.write_text(json.dumps(history({**settings, "epochs": 5})))
    with pytest.raises(InputError, match="not the training history"):
        add_training_outcome(out, other)
    assert "trained" not in json.loads((out / RUN_RECORD).read_text())
    assert add_training_outcome(out, model / "training_history.json")
    assert not add_training_outcome(out, model / "training_history.json")  # once
    (run,) = read_archive(tmp_path / "archive")
    assert run.trained is not None and (run.trained.best_epoch, run.trained.epochs) == (2, 3)
    assert json.loads((out / RUN_RECORD).read_text()) == {
        **record,
        "trained": run.trained.as_dict(),
    }
    # a malformed outcome does not read
    (out / RUN_RECORD).write_text(json.dumps({**record, "trained": {"best_epoch": 1}}))
    with pytest.raises(InputError, match="trained must be null"):
        read_archive(tmp_path / "archive")
