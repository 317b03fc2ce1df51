"""build-mixture, train-ner, predict-ner and evaluate-ner end to end through the CLI, on made-up notes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.artifacts import read_parquet_with_provenance
from synthdeid.cli import main
from synthdeid.detectors import detect
from synthdeid.local_only import LOCAL_ONLY_KEY
from synthdeid.ner.model import NER_CONFIG_FILE
from synthdeid.notes import Note, read_notes, write_notes
from synthdeid.surrogate.keying import DEMO_KEY_FILE, SECRET_VARIABLE, SurrogateKey

pytestmark = pytest.mark.slow

SURNAMES = ("Abernathy", "Quillfeather", "Lindqvist", "Brightwater", "Castellano", "Oyelaran")
NO_PHI = "Patient resting comfortably, no acute events overnight."
FILLER = "Vitals stable, lungs clear and the plan is unchanged for now. "


def made_up_notes() -> list[Note]:
    """24 train notes of 6 patients, 6 holdout notes of 2 other patients."""
    notes = []
    for i in range(30):
        holdout = i >= 24
        patient = f"h{i % 2}" if holdout else f"t{i % 6}"
        split = "holdout" if holdout else "train"
        if i % 5 == 4:
            notes.append(note_from_pieces(f"n{i:02d}", patient, [NO_PHI], split))
            continue
        name = SURNAMES[i % len(SURNAMES)]
        date = f"{i % 12 + 1}/{(5 * i) % 27 + 1}"
        pieces: list[str | tuple[str, str]] = [
            "Seen by Dr. ",
            (name, "DOCTOR"),
            " on ",
            (date, "DATE"),
            ".",
        ]
        if i % 6 == 0:  # several 64-token windows
            pieces += [" ", FILLER * 5, "Recheck on ", ("12/30/2024", "DATE"), "."]
        notes.append(note_from_pieces(f"n{i:02d}", patient, pieces, split))
    return notes


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Restore torch's thread count after the stages set it (--threads 1)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Notes table, mixture and a trained model directory, built through the CLI."""
    root = tmp_path_factory.mktemp("ner_cli")
    torch.manual_seed(0)
    encoder = tiny_encoder_dir(root / "encoder")
    paths = {
        "notes": root / "notes.parquet",
        "train": root / "mixture" / "train.parquet",
        "validation": root / "mixture" / "validation.parquet",
        "summary": root / "mixture" / "summary.json",
        "model": root / "model",
        "root": root,
    }
    write_notes(made_up_notes(), paths["notes"])
    spec = '{"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}'
    assert (
        main(
            [
                "build-mixture",
                "--notes",
                str(paths["notes"]),
                "--spec",
                spec,
                "--out-train",
                str(paths["train"]),
                "--out-validation",
                str(paths["validation"]),
                "--summary",
                str(paths["summary"]),
            ]
        )
        == 0
    )
    config = {
        "model": str(encoder),
        "epochs": 1,
        "max_length": 64,
        "stride": 8,
        "learning_rate": 1e-3,
        "batch_size": 8,
        "operating_point": {"grid": [0.5, 0.9]},
    }
    code = main(
        [
            "train-ner",
            "--train",
            str(paths["train"]),
            "--validation",
            str(paths["validation"]),
            "--mixture-summary",
            str(paths["summary"]),
            "--settings",
            json.dumps(config),
            "--run",
            "cli-run",
            "--out-dir",
            str(paths["model"]),
            "--threads",
            "1",
            "--no-progress",
        ]
    )
    assert code == 0
    return paths


def predict_ner(work: dict[str, Path], name: str, *extra: str) -> tuple[int, Path]:
    out = work["root"] / name / "predictions.parquet"
    argv = [
        "predict-ner",
        "--model",
        str(work["model"]),
        "--notes",
        str(work["notes"]),
        "--parts",
        "holdout",
        "--out",
        str(out),
        "--threads",
        "1",
        *extra,
    ]
    return main(argv), out


def holdout() -> list[Note]:
    return [note for note in made_up_notes() if note.split == "holdout"]


def summary_of(predictions: Path) -> dict:
    return json.loads(predictions.with_suffix(".summary.json").read_text())["summary"]


# ---------------------------------------------------------------- mixture and training


def test_mixture_and_model_directory(work: dict[str, Path]) -> None:
    validation = read_notes(work["validation"])
    assert validation and {note.split for note in validation} == {"validation"}
    assert not {note.patient_id for note in validation} & {"h0", "h1"}
    summary = json.loads(work["summary"].read_text())["summary"]
    assert summary["n_synthetic"] == 0
    names = {path.name for path in work["model"].iterdir()}
    assert {NER_CONFIG_FILE, "config.json", "model.safetensors", "README.md"} <= names
    history = json.loads((work["model"] / "training_history.json").read_text())
    assert history["run"] == "cli-run"
    assert history["mixture"]["regime"] == "augmentation"
    assert history["config"]["max_length"] == 64
    assert len(history["history"]) == 1
    settings = json.loads((work["model"] / NER_CONFIG_FILE).read_text())
    assert settings["o_threshold"] in (0.5, 0.9)


# ---------------------------------------------------------------- predict-ner


def test_predict_ner_redacts_the_holdout_notes(work: dict[str, Path]) -> None:
    redacted_path = work["root"] / "redact" / "redacted.parquet"
    # a high O threshold: the barely trained tagger surely predicts spans to redact
    code, out = predict_ner(
        work,
        "redact",
        "--mode",
        "redact",
        "--o-threshold",
        "0.999",
        "--out-deidentified",
        str(redacted_path),
    )
    assert code == 0
    originals = {note.note_id: note for note in holdout()}
    predicted = read_notes(out)
    assert [note.note_id for note in predicted] == sorted(originals)
    for note in predicted:
        assert note.text == originals[note.note_id].text
        assert note.split == "holdout"
    n_spans = sum(len(note.spans) for note in predicted)
    assert n_spans > 0
    assert summary_of(out)["predicted_spans"] == n_spans

    redacted = {note.note_id: note for note in read_notes(redacted_path)}
    assert set(redacted) == set(originals)
    for note in predicted:
        red = redacted[note.note_id]
        assert [s.label for s in red.spans] == [s.label for s in note.spans]
        for span in red.spans:
            assert span.surface(red.text) == f"[{span.label}]"
        for old, new in zip(note.spans, red.spans, strict=True):
            assert new.surface(red.text) != old.surface(note.text)
        # the text between the spans is kept as it was
        assert gaps(red) == gaps(note)


def gaps(note: Note) -> list[str]:
    bounds = [0, *[b for s in note.spans for b in (s.start, s.end)], len(note.text)]
    return [note.text[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2)]


def test_predict_ner_unions_regex_dates(work: dict[str, Path]) -> None:
    code, out = predict_ner(work, "regex", "--regex", "DATE", "--mode", "none")
    assert code == 0
    assert summary_of(out)["regex_spans_added"] >= 0
    for note in read_notes(out):
        dates = detect(note.text, ["DATE"])
        for date in dates:
            assert any(s.start < date.end and date.start < s.end for s in note.spans), date

    # threshold 0: no token is PHI for the model, so every span is a regex date, exactly
    code, out = predict_ner(work, "regex_only", "--regex", "DATE", "--o-threshold", "0")
    assert code == 0
    params = json.loads(out.with_suffix(".summary.json").read_text())["provenance"]["params"]
    assert params["o_threshold"] == 0.0  # recorded as given, not replaced by the model's
    expected = {note.note_id: detect(note.text, ["DATE"]) for note in holdout()}
    assert sum(map(len, expected.values())) >= 4
    assert summary_of(out)["regex_spans_added"] == sum(map(len, expected.values()))
    assert {note.note_id: list(note.spans) for note in read_notes(out)} == expected


def test_predict_ner_records_the_safe_harbor_ages_policy(work: dict[str, Path]) -> None:
    code, out = predict_ner(work, "ages_off", "--o-threshold", "0.999")
    assert code == 0
    assert summary_of(out)["young_ages_dropped"] == 0
    code, out_on = predict_ner(work, "ages_on", "--o-threshold", "0.999", "--safe-harbor-ages")
    assert code == 0
    params = json.loads(out_on.with_suffix(".summary.json").read_text())["provenance"]["params"]
    assert params["safe_harbor_ages"] is True
    # the made-up notes write no age: the policy changes nothing there
    assert summary_of(out_on)["young_ages_dropped"] == 0
    assert read_notes(out_on) == read_notes(out)


def test_predict_ner_writes_keyed_surrogates(work: dict[str, Path], tmp_path: Path) -> None:
    key_file = tmp_path / "made-up.key"
    secret = hashlib.sha256(b"made-up test secret").hexdigest()
    key_file.write_text(f"# a made-up test secret\n{secret}\n")
    surrogate_path = work["root"] / "surrogate" / "surrogates.parquet"
    code, out = predict_ner(
        work,
        "surrogate",
        "--mode",
        "surrogate",
        "--key-file",
        str(key_file),
        "--o-threshold",
        "0.999",
        "--out-deidentified",
        str(surrogate_path),
    )
    assert code == 0
    predicted = {note.note_id: note for note in read_notes(out)}
    surrogates = read_notes(surrogate_path)
    assert sorted(note.note_id for note in surrogates) == sorted(predicted)
    changed = 0
    for note in surrogates:
        original = predicted[note.note_id]
        assert len(note.spans) == len(original.spans)
        for old, new in zip(original.spans, note.spans, strict=True):
            assert new.label == old.label
            assert new.surface(note.text) != old.surface(original.text)
            changed += 1
        assert gaps(note) == gaps(original)
    assert changed > 0
    # the key's fingerprint (never the key) is a parameter, as in replace_surrogates
    params = json.loads(out.with_suffix(".summary.json").read_text())["provenance"]["params"]
    assert params["key_fingerprint"] == SurrogateKey(secret.encode()).fingerprint()
    assert secret not in out.with_suffix(".summary.json").read_text()


def test_predict_ner_refuses_the_public_demo_key_on_other_notes(
    work: dict[str, Path], repo: Path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    out_deid = work["root"] / "demo_key" / "surrogates.parquet"
    code, out = predict_ner(
        work,
        "demo_key",
        "--mode",
        "surrogate",
        "--key-file",
        str(repo / DEMO_KEY_FILE),
        "--out-deidentified",
        str(out_deid),
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "public demo key" in err and "'made-up'" in err and "surrogate.key_file: null" in err
    assert not out.exists() and not out_deid.exists()


def test_predict_ner_surrogates_need_a_key(
    work: dict[str, Path], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("SYNTHDEID_SECRET", raising=False)
    out_deid = work["root"] / "nokey" / "surrogates.parquet"
    code, _ = predict_ner(
        work,
        "nokey",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "missing.key"),
        "--out-deidentified",
        str(out_deid),
    )
    assert code == 2
    assert not out_deid.exists()


def test_predict_ner_quantized(work: dict[str, Path]) -> None:
    code, out = predict_ner(work, "int8", "--quantize", "--device", "cpu")
    assert code == 0
    predicted = read_notes(out)
    assert [note.note_id for note in predicted] == sorted(n.note_id for n in holdout())
    params = json.loads(out.with_suffix(".summary.json").read_text())["provenance"]["params"]
    assert params["precision"] == "int8"
    assert (
        params["o_threshold"]
        == json.loads((work["model"] / NER_CONFIG_FILE).read_text())["o_threshold"]
    )


def test_predict_ner_in_bf16(work: dict[str, Path]) -> None:
    code, out = predict_ner(work, "bf16", "--precision", "bf16", "--device", "cpu")
    assert code == 0
    params = json.loads(out.with_suffix(".summary.json").read_text())["provenance"]["params"]
    assert params["precision"] == "bf16"
    assert params["precision_resolved"] == "bf16"
    assert len(read_notes(out)) == len(holdout())


@pytest.mark.parametrize("native", [True, False])
def test_predict_ner_records_what_auto_came_to(
    work: dict[str, Path], monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    from synthdeid import runtime

    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: native)
    code, out = predict_ner(work, f"auto_{native}", "--device", "cpu")  # --precision auto
    assert code == 0
    params = json.loads(out.with_suffix(".summary.json").read_text())["provenance"]["params"]
    assert params["precision"] == "auto"
    assert params["precision_resolved"] == ("bf16" if native else "fp32")
    assert params["precision_reason"] == (
        "native bf16 on this CPU" if native else "CPU without native bf16"
    )


def test_evaluate_ner_scores_the_predictions(work: dict[str, Path]) -> None:
    code, out = predict_ner(work, "evaluate", "--regex", "none")
    assert code == 0
    metrics_dir = work["root"] / "metrics"
    argv = [
        "evaluate-ner",
        "--gold",
        str(work["notes"]),
        "--predictions",
        str(out),
        "--run",
        "cli-run",
        "--out-dir",
        str(metrics_dir),
        "--resamples",
        "20",
    ]
    assert main(argv) == 0
    metrics = json.loads((metrics_dir / "metrics.json").read_text())
    assert metrics["run"] == "cli-run"
    assert metrics["counts"]["n_notes"] == len(holdout())
    assert metrics["counts"]["n_gold_spans"] == sum(len(n.spans) for n in holdout())
    assert 0.0 <= metrics["headline"]["detection_recall"]["estimate"] <= 1.0


# ---------------------------------------------------------------- errors


def test_train_ner_refuses_a_config_that_is_not_an_object(
    work: dict[str, Path], tmp_path: Path
) -> None:
    argv = [
        "train-ner",
        "--train",
        str(work["train"]),
        "--validation",
        str(work["validation"]),
        "--settings",
        "[1]",
        "--out-dir",
        str(tmp_path / "model"),
    ]
    assert main(argv) == 2
    assert not (tmp_path / "model").exists()


def test_predict_ner_refuses_a_directory_that_is_no_model(
    work: dict[str, Path], tmp_path: Path
) -> None:
    not_a_model = tmp_path / "not_a_model"
    not_a_model.mkdir()
    (not_a_model / "config.json").write_text("{}")
    out = tmp_path / "out" / "predictions.parquet"
    argv = [
        "predict-ner",
        "--model",
        str(not_a_model),
        "--notes",
        str(work["notes"]),
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert not out.exists()
    assert not out.with_suffix(".summary.json").exists()


def test_predict_ner_refuses_an_unknown_regex_detector(work: dict[str, Path]) -> None:
    code, out = predict_ner(work, "bogus", "--regex", "BOGUS")
    assert code == 2
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir())


# ---------------------------------------------------------------- the model as a teacher


def test_label_teacher_applies_the_trained_model(work: dict[str, Path]) -> None:
    """A model teacher labels like predict-ner in fp32 (same spans) and adds a confidence per
    span. The teacher runs in fp32; predict-ner's default (auto) is bf16 on a CPU with native
    bf16, where an undertrained model's near-tied labels can come out otherwise."""
    import pyarrow.parquet as pq

    code, predictions = predict_ner(work, "for_teacher", "--regex", "DATE", "--precision", "fp32")
    assert code == 0
    out = work["root"] / "teacher"
    settings = {"kind": "model", "model": "cli-run", "regex": ["DATE"]}
    argv = [
        "label-teacher",
        "--notes",
        str(work["notes"]),
        "--parts",
        "holdout",
        "--teacher",
        "model",
        "--settings",
        json.dumps(settings),
        "--model",
        str(work["model"]),
        "--threads",
        "1",
        "--out-dir",
        str(out),
    ]
    assert main(argv) == 0
    silver = read_notes(out / "silver.parquet")
    assert {n.source for n in silver} == {"silver:model"}
    assert {n.note_id: n.spans for n in silver} == {
        n.note_id: n.spans for n in read_notes(predictions)
    }
    scores = pq.read_table(out / "span_scores.parquet").to_pylist()
    assert len(scores) == sum(len(n.spans) for n in silver)
    model_scores = [r["confidence"] for r in scores if r["confidence"] is not None]
    assert all(0.0 <= c <= 1.0 for c in model_scores)


# ---------------------------------------------------------------- ensembles


def ensemble_ner(work: dict[str, Path], out: Path, config: str = "{}") -> int:
    argv = ["ensemble-ner"]
    for name in ("a", "b"):  # the trained model twice: its mean is the model itself
        argv += ["--member", f"{name}={work['model']}", "--validation", str(work["validation"])]
        argv += ["--train", str(work["train"])]
    argv += ["--settings", config, "--run", "pair", "--out-dir", str(out), "--threads", "1"]
    return main([*argv, "--no-progress"])


def test_ensemble_of_a_model_with_itself_deidentifies_like_the_model(
    work: dict[str, Path],
) -> None:
    from synthdeid.ner.ensemble import ENSEMBLE_FILE

    out = work["root"] / "ensemble" / "model"
    config = json.dumps({"operating_point": {"grid": [0.5, 0.9]}})
    assert ensemble_ner(work, out, config) == 0
    ensemble = json.loads((out / ENSEMBLE_FILE).read_text())
    history = json.loads((work["model"] / "training_history.json").read_text())
    trained = json.loads((work["model"] / NER_CONFIG_FILE).read_text())
    # same probabilities, same validation notes, same rule: the same operating point
    assert ensemble["operating_point_sweep"] == history["operating_point_sweep"]
    assert ensemble["settings"]["o_threshold"] == trained["o_threshold"]
    assert ensemble["validation_notes"]["kept"] == len(read_notes(work["validation"]))
    assert ensemble["settings"]["base_model"] == "ensemble of a, b"
    assert "## Members" in (out / "README.md").read_text()

    work_ensemble = {**work, "model": out}
    # at the operating point, and at a high threshold where the barely trained model tags
    for name, extra in (("default", []), ("high", ["--o-threshold", "0.999"])):
        code, single = predict_ner(work, f"single_{name}", "--mode", "none", *extra)
        assert code == 0
        code, combined = predict_ner(work_ensemble, f"combined_{name}", "--mode", "none", *extra)
        assert code == 0
        spans = {n.note_id: n.spans for n in read_notes(single)}
        assert {n.note_id: n.spans for n in read_notes(combined)} == spans
    assert sum(map(len, spans.values())) > 0


def test_ensemble_ner_refuses_unknown_settings(work: dict[str, Path]) -> None:
    out = work["root"] / "bad_ensemble" / "model"
    assert ensemble_ner(work, out, '{"operating_points": {}}') == 2
    assert not out.exists()


def test_report_errors_lists_development_errors_locally(work: dict[str, Path]) -> None:
    out = work["root"] / "errors" / "local" / "errors.parquet"
    summary_path = work["root"] / "errors" / "summary.json"
    argv = ["report-errors", "--model", str(work["model"]), "--notes", str(work["notes"])]
    argv += ["--parts", "train", "--validation", str(work["validation"])]
    argv += ["--train", str(work["train"]), "--threads", "1"]
    assert main([*argv, "--out", str(out), "--summary", str(summary_path)]) == 0
    table, _ = read_parquet_with_provenance(out)
    assert table.schema.metadata[LOCAL_ONLY_KEY] == b"true"
    validation = {n.note_id: n for n in read_notes(work["validation"])}
    # every train note is in the mixture: only validation notes are development notes
    assert set(table.column("note_id").to_pylist()) <= set(validation)
    summary = json.loads(summary_path.read_text())["summary"]
    assert summary["notes"] == len(validation)
    assert summary["gold_spans"] == sum(len(n.spans) for n in validation.values())
    rows = table.to_pylist()
    assert sum(r["kind"] == "missed" for r in rows) == summary["errors"]["missed"]["count"]
    for row in rows:
        note = validation[row["note_id"]]
        assert note.text[row["start"] : row["end"]] == row["text"]
        assert row["p_o_min"] is None or 0.0 <= row["p_o_min"] <= row["p_o_mean"] <= 1.0
    # the holdout is never read, and the note text never leaves a local/ folder
    assert (
        main([*argv[:4], "--parts", "holdout", "--out", str(out), "--summary", str(summary_path)])
        == 2
    )
    outside = work["root"] / "errors" / "errors.parquet"
    assert main([*argv, "--out", str(outside), "--summary", str(summary_path)]) == 2
    assert not outside.exists()


def test_predict_ner_shards_gather_to_the_unsharded_artifacts(work: dict[str, Path]) -> None:
    """Three row-range shards, gathered, give the bytes of one job (redaction is deterministic)."""
    common = ("--mode", "redact", "--o-threshold", "0.999", "--chunk-notes", "2")
    whole_red = work["root"] / "whole" / "redacted.parquet"
    code, whole = predict_ner(work, "whole", *common, "--out-deidentified", str(whole_red))
    assert code == 0
    gathered = work["root"] / "gathered"
    for k in (1, 2, 3):
        label = f"{k}-of-3"
        argv = ["--out-deidentified", str(gathered / f"redacted.shard-{label}.parquet")]
        argv += ["--summary", str(gathered / f"predictions.shard-{label}.json")]
        code, out = predict_ner(work, "gathered", *common, *argv, "--shard", f"{k}/3")
        out.replace(gathered / f"predictions.shard-{label}.parquet")
        assert code == 0
    outputs = [gathered / name for name in ("predictions.parquet", "redacted.parquet")]
    summary = gathered / "predictions.json"
    shard_summaries = [gathered / f"predictions.shard-{k}-of-3.json" for k in (1, 2, 3)]
    starts_read = [json.loads(p.read_text())["shard"]["rows"][0] for p in shard_summaries]
    assert main(["gather-shards", "--count", "3", *map(str, [*outputs, summary])]) == 0
    assert outputs[0].read_bytes() == whole.read_bytes()
    assert outputs[1].read_bytes() == whole_red.read_bytes()
    # each shard starts on a whole chunk of --chunk-notes, as one job chunks the table
    assert all(start % 2 == 0 for start in starts_read)
    merged = json.loads(summary.read_text())["summary"]
    for key in ("notes", "predicted_spans", "predicted_by_label", "regex_spans_added"):
        assert merged[key] == summary_of(whole)[key]


def test_predict_ner_will_not_shard_surrogates(work: dict[str, Path], tmp_path: Path) -> None:
    out = str(tmp_path / "deid.parquet")
    argv = ["--mode", "surrogate", "--out-deidentified", out, "--shard", "1/2"]
    code, _ = predict_ner(work, "sharded-surrogates", *argv)
    assert code == 2
