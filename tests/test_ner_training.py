"""Fine-tuning a tiny tagger on made-up notes: weights, config, training loop, saving, int8."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.model import NER_CONFIG_FILE, DeidTagger, NerSettings
from synthdeid.ner.model_card import (
    CARD_FILE,
    HISTORY_FILE,
    decoding_lines,
    save_model_directory,
)
from synthdeid.ner.operating_point import OperatingPointRule
from synthdeid.ner.tagging import IGNORE_INDEX, Window, encode_notes, make_windows
from synthdeid.ner.training import (
    TrainingConfig,
    TrainingResult,
    autocast_dtype,
    class_weights,
    train,
)
from synthdeid.notes import Note
from synthdeid.scoring.metrics import HEADLINE_RATIOS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

MAX_LENGTH = 64
STRIDE = 8
GRID = (0.5, 0.7, 0.9, 0.99)
SURNAMES = (
    "Abernathy",
    "Quillfeather",
    "Okonkwo-Marsh",
    "Lindqvist",
    "Brightwater",
    "Castellano",
    "Nakamura",
    "Oyelaran",
    "Fairweather",
    "Tsang",
    "Verhoeven",
    "Dunmore",
)
FILLER = "Vitals stable, lungs clear and the plan is unchanged for now. "
NO_PHI = (
    "Patient resting comfortably, no acute events overnight.",
    "Continue current medications and encourage oral fluids.",
    "Wound clean and dry; dressing changed without difficulty.",
)


def made_up_note(i: int) -> Note:
    """Note ``i``: a visit line with a doctor and a date; every fifth without PHI; some long."""
    patient = f"p{i % 7}"
    if i % 5 == 4:
        return note_from_pieces(f"n{i:02d}", patient, [NO_PHI[i % len(NO_PHI)]])
    name = SURNAMES[i % len(SURNAMES)]
    date = f"{i % 12 + 1}/{(7 * i) % 28 + 1}"
    pieces: list[str | tuple[str, str]] = ["Seen by Dr. ", (name, "DOCTOR"), " on ", (date, "DATE")]
    pieces.append(".")
    if i % 6 == 0:  # long enough for several 64-token windows
        other = SURNAMES[(i + 5) % len(SURNAMES)]
        pieces += [" ", FILLER * 6, "Follow up with Dr. ", (other, "DOCTOR"), " next week."]
    return note_from_pieces(f"n{i:02d}", patient, pieces)


NOTES = [made_up_note(i) for i in range(30)]
TRAIN_NOTES = NOTES[:24]
VALIDATION = NOTES[24:]


def config_for(model_dir: Path, **overrides: object) -> TrainingConfig:
    values: dict[str, object] = {
        "model": str(model_dir),
        "max_length": MAX_LENGTH,
        "stride": STRIDE,
        "learning_rate": 1e-3,
        "epochs": 3,
        "batch_size": 8,
        "operating_point": {"grid": list(GRID)},
        **overrides,
    }
    return TrainingConfig.from_mapping(values)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_encoder_dir(tmp_path_factory.mktemp("tiny") / "encoder")


@pytest.fixture(scope="module")
def trained(tiny_model: Path) -> tuple[TrainingResult, TrainingConfig]:
    config = config_for(tiny_model)
    return train(TRAIN_NOTES, VALIDATION, config, progress=False), config


@pytest.fixture(scope="module")
def saved(
    trained: tuple[TrainingResult, TrainingConfig], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    result, config = trained
    out = tmp_path_factory.mktemp("saved") / "model"
    mixture = {"regime": "augmentation", "n_train_total": len(TRAIN_NOTES)}
    return save_model_directory(result, config, out, mixture=mixture, run="tiny-run-7")


def windows_of(tokenizer_dir: Path, notes: list[Note]) -> list[Window]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    return make_windows(
        encode_notes(tokenizer, notes),
        max_length=MAX_LENGTH,
        stride=STRIDE,
        cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id,
    )


# ---------------------------------------------------------------- class weights


def tagged_window(tags: list[int]) -> Window:
    body = np.asarray(tags, dtype=np.int64)
    return Window(
        0,
        0,
        np.arange(len(tags) + 2, dtype=np.int64),
        np.concatenate(([IGNORE_INDEX], body, [IGNORE_INDEX])),
    )


# O x 15, B-DOCTOR x 2, I-DOCTOR x 3, B-DATE x 1; I-DATE (4) never seen
WEIGHT_WINDOWS = [
    tagged_window([0] * 8 + [1, 2, 2] + [0] * 3),
    tagged_window([0, 0, 1, 2, 0, 3, 0]),
]
COUNTS = np.array([15, 2, 3, 1, 0], dtype=np.float64)


def test_class_weights_power_zero_is_unweighted() -> None:
    assert class_weights(WEIGHT_WINDOWS, 5, 0.0).tolist() == [1.0] * 5


def test_class_weights_balance_the_seen_tags() -> None:
    weights = class_weights(WEIGHT_WINDOWS, 5, 1.0)
    seen = COUNTS > 0
    assert weights[1:4].min() > weights[0]  # every PHI tag weighs more than O
    assert weights[3] > weights[1] > weights[2] > weights[0]  # rarer weighs more
    # balanced: every seen tag carries the same total weight
    totals = weights[seen] * COUNTS[seen]
    assert totals == pytest.approx(np.full(seen.sum(), totals[0]))
    # the loss keeps its scale: the token-weighted mean weight is 1
    assert (weights * COUNTS).sum() / COUNTS.sum() == pytest.approx(1.0)
    assert weights[4] == pytest.approx(weights[seen].max())  # unseen: the largest weight


def test_class_weights_half_power_is_between() -> None:
    half = class_weights(WEIGHT_WINDOWS, 5, 0.5)
    full = class_weights(WEIGHT_WINDOWS, 5, 1.0)
    assert (half * COUNTS).sum() / COUNTS.sum() == pytest.approx(1.0)
    assert 1.0 < half[3] / half[0] < full[3] / full[0]
    assert half[3] / half[0] == pytest.approx(np.sqrt(full[3] / full[0]))


def test_class_weights_ignore_special_tokens_and_padding() -> None:
    window = tagged_window([0, 1])
    padded = Window(0, 0, window.input_ids, np.concatenate((window.tags, [IGNORE_INDEX] * 5)))
    assert class_weights([padded], 3, 1.0).tolist() == class_weights([window], 3, 1.0).tolist()


# ---------------------------------------------------------------- config


def test_training_config_rejects_unknown_keys_by_name() -> None:
    with pytest.raises(ConfigError, match="learnin_rate"):
        TrainingConfig.from_mapping({"learnin_rate": 1e-3})


@pytest.mark.parametrize(
    ("mapping", "match"),
    [
        ({"precision": "fp8"}, "precision"),
        ({"epochs": 0}, "epochs"),
        ({"max_steps": 0}, "max_steps"),
        ({"labels": ["DOCTOR", "SHOE_SIZE"]}, "SHOE_SIZE"),
        ({"operating_point": {"mode": "vibes"}}, "mode"),
    ],
)
def test_training_config_rejects_bad_values(mapping: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrainingConfig.from_mapping(mapping)


def test_training_config_converts_nested_values() -> None:
    config = TrainingConfig.from_mapping(
        {
            "operating_point": {"mode": "leakage", "precision_floor": 0.7, "grid": [0.6, 0.9]},
            "labels": ["DOCTOR", "DATE"],
            "regex_detectors": ["DATE"],
        }
    )
    assert config.operating_point == OperatingPointRule(
        mode="leakage", precision_floor=0.7, grid=(0.6, 0.9)
    )
    assert config.labels == ("DOCTOR", "DATE")
    assert config.regex_detectors == ("DATE",)
    assert config.to_json()["operating_point"]["grid"] == (0.6, 0.9)
    assert TrainingConfig.from_mapping({}) == TrainingConfig()


# ---------------------------------------------------------------- autocast


def test_autocast_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from synthdeid import runtime

    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None
    # auto: fp32 on a CPU without native bf16, bf16 on one with it (tests/test_precision_auto.py)
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: False)
    assert autocast_dtype("auto", cpu) is None
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: True)
    assert autocast_dtype("auto", cpu) is torch.bfloat16
    assert autocast_dtype("bf16", cpu) is torch.bfloat16
    assert autocast_dtype("fp32", torch.device("cuda")) is None
    assert autocast_dtype("fp16", torch.device("cuda")) is torch.float16
    with pytest.raises(ConfigError, match="fp16"):
        autocast_dtype("fp16", cpu)


# ---------------------------------------------------------------- training


def test_the_made_up_notes_need_several_windows() -> None:
    assert sum(not note.spans for note in NOTES) >= 5
    assert {span.label for note in NOTES for span in note.spans} == {"DOCTOR", "DATE"}
    for note in NOTES:
        for span in note.spans:
            assert span.surface(note.text).strip() == span.surface(note.text) != ""


def test_train_refuses_empty_inputs(tiny_model: Path) -> None:
    config = config_for(tiny_model)
    with pytest.raises(InputError, match="no training notes"):
        train([], VALIDATION, config, progress=False)
    with pytest.raises(InputError, match="no validation notes"):
        train(TRAIN_NOTES, [], config, progress=False)
    without_phi = [note for note in NOTES if not note.spans]
    with pytest.raises(InputError, match="no gold spans"):
        train(without_phi[:3], without_phi[3:], config, progress=False)


def test_train_records_every_epoch_and_sets_the_operating_point(
    trained: tuple[TrainingResult, TrainingConfig],
) -> None:
    result, _ = trained
    # epochs 3 with patience 2 always runs all three epochs
    assert [record["epoch"] for record in result.history] == [1, 2, 3]
    assert result.timing["epochs"] == 3
    steps = [record["steps"] for record in result.history]
    assert steps[0] > 0 and steps == [steps[0], 2 * steps[0], 3 * steps[0]]
    assert result.timing["steps"] == steps[-1]
    for record in result.history:
        assert np.isfinite(record["train_loss"])
        for name in HEADLINE_RATIOS:
            assert 0.0 <= record[f"validation_{name}"] <= 1.0
        assert record["validation_n_notes"] == len(VALIDATION)
    assert 1 <= result.best_epoch <= 3

    settings = result.tagger.settings
    assert settings.labels == ["DOCTOR", "DATE"]
    assert (settings.max_length, settings.stride) == (MAX_LENGTH, STRIDE)
    assert settings.o_threshold in GRID
    assert settings.operating_point["o_threshold"] == settings.o_threshold
    assert settings.operating_point["mode"] == "recall"
    assert [row["o_threshold"] for row in result.sweep] == list(GRID)
    assert result.validation["o_threshold"] == settings.o_threshold
    assert result.validation in result.sweep
    assert set(result.class_weights) == {"O", "B-DOCTOR", "I-DOCTOR", "B-DATE", "I-DATE"}
    assert result.class_weights["B-DATE"] > result.class_weights["O"]


def test_train_keeps_the_best_epoch_weights(
    trained: tuple[TrainingResult, TrainingConfig],
) -> None:
    """The sweep row at 0.5 (argmax) reproduces the kept epoch's validation figures."""
    result, _ = trained
    best = result.history[result.best_epoch - 1]
    at_half = next(row for row in result.sweep if row["o_threshold"] == 0.5)
    for name in HEADLINE_RATIOS:
        assert at_half[name] == pytest.approx(best[f"validation_{name}"]), name
    keys = [
        (r["validation_leakage_overlap_all"], -r["validation_span_overlap_f1"])
        for r in result.history
    ]
    assert keys[result.best_epoch - 1] == min(keys)


def test_train_restores_the_best_epoch_and_stops_early(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epoch 1 made best by force: training stops after `patience` worse epochs, keeps epoch 1."""
    import synthdeid.ner.training as training

    per_epoch: list[list[np.ndarray]] = []
    original = training._validation_metrics

    def recording(*args: object, **kwargs: object):
        probabilities, metrics = original(*args, **kwargs)
        per_epoch.append([p.copy() for p in probabilities])
        return probabilities, metrics

    worse = iter(range(100))
    monkeypatch.setattr(training, "_validation_metrics", recording)
    monkeypatch.setattr(
        training, "selection_key", lambda metrics, rule="leakage": (float(next(worse)), 0.0)
    )
    config = config_for(tiny_model, epochs=6, patience=2)
    result = train(TRAIN_NOTES, VALIDATION, config, progress=False)
    assert result.best_epoch == 1
    assert [record["epoch"] for record in result.history] == [1, 2, 3]
    assert len(per_epoch) == 3
    final = result.tagger.token_probabilities(result.tagger.encode(VALIDATION))
    for kept, first in zip(final, per_epoch[0], strict=True):
        np.testing.assert_allclose(kept, first, atol=1e-6)
    # and the later epochs did change the weights
    assert not all(
        np.allclose(kept, last, atol=1e-4) for kept, last in zip(final, per_epoch[-1], strict=True)
    )


def test_max_steps_overrides_the_epochs(tiny_model: Path) -> None:
    # 24 notes make 2 batches of 16 per epoch: 5 steps need 3 epochs though 1 is configured
    config = config_for(tiny_model, epochs=1, batch_size=16, max_steps=5)
    result = train(TRAIN_NOTES, VALIDATION, config, progress=False)
    assert result.timing["steps"] == 5
    assert result.timing["epochs"] == 3
    assert [record["steps"] for record in result.history] == [2, 4, 5]


def test_copies_repeat_the_training_windows(tiny_model: Path, caplog) -> None:
    notes = [note for note in TRAIN_NOTES[:8]]
    copies = [3, 1, 1, 2, 1, 1, 1, 1]
    per_note = Counter(w.note_index for w in windows_of(tiny_model, notes))
    assert max(per_note.values()) > 1  # note 0 is long
    expected = sum(per_note[i] * n for i, n in enumerate(copies))
    assert expected > len(windows_of(tiny_model, notes)) > len(notes)

    config = config_for(tiny_model, epochs=1, batch_size=1)
    with caplog.at_level(logging.INFO, logger="synthdeid.ner.training"):
        result = train(notes, VALIDATION, config, copies=copies, progress=False)
    assert result.timing["steps"] == expected  # batch size 1: one step per window
    assert f"on {expected} windows" in caplog.text
    with pytest.raises(ValueError):
        train(notes, VALIDATION, config, copies=copies[:-1], progress=False)


# ---------------------------------------------------------------- saving and loading


def test_model_directory_holds_everything(saved: Path, trained) -> None:
    result, _ = trained
    names = {path.name for path in saved.iterdir()}
    expected = {"config.json", "model.safetensors", NER_CONFIG_FILE, HISTORY_FILE, CARD_FILE}
    assert expected <= names
    assert "tokenizer.json" in names and "tokenizer_config.json" in names
    assert not [name for name in names if name.startswith(".")]

    settings = json.loads((saved / NER_CONFIG_FILE).read_text())
    assert settings["labels"] == ["DOCTOR", "DATE"]
    assert settings["o_threshold"] == result.tagger.settings.o_threshold

    history = json.loads((saved / HISTORY_FILE).read_text())
    assert history["run"] == "tiny-run-7"
    assert history["best_epoch"] == result.best_epoch
    assert len(history["history"]) == 3
    assert history["config"]["operating_point"]["grid"] == list(GRID)
    assert history["mixture"]["regime"] == "augmentation"
    assert len(history["operating_point_sweep"]) == len(GRID)
    environment = history["environment"]
    assert environment == result.environment
    assert environment["device"] == "cpu" and environment["device_name"] is None
    assert environment["threads"] >= 1 and environment["torch"].startswith("2.")
    assert "hostname" not in environment  # the record leaves the machine

    card = (saved / CARD_FILE).read_text()
    assert "run `tiny-run-7`" in card
    assert f"O threshold {result.tagger.settings.o_threshold}" in card
    assert "rule: recall" in card
    assert f"windows: {MAX_LENGTH} tokens, stride {STRIDE}" in card
    assert f"CPU {environment['cpu']} ({environment['cpu_capability']} kernels" in card


def test_loaded_tagger_predicts_like_the_trained_one(saved: Path, trained) -> None:
    result, _ = trained
    loaded = DeidTagger.load(saved, device="cpu")
    # the same settings, up to JSON's lists for tuples
    assert asdict(loaded.settings) == json.loads(json.dumps(asdict(result.tagger.settings)))
    assert not loaded.model.training
    ours = result.tagger.token_probabilities(result.tagger.encode(NOTES))
    theirs = loaded.token_probabilities(loaded.encode(NOTES))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert loaded.predict_spans(NOTES) == result.tagger.predict_spans(NOTES)
    eager = loaded.predict_spans(NOTES, o_threshold=0.99)
    assert any(eager)
    assert eager == result.tagger.predict_spans(NOTES, o_threshold=0.99)


def test_saving_replaces_an_existing_directory(trained, tmp_path: Path) -> None:
    result, config = trained
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.bin").write_text("left over from an older run")
    save_model_directory(result, config, out, mixture={}, run="again")
    names = {path.name for path in out.iterdir()}
    assert "stale.bin" not in names
    assert NER_CONFIG_FILE in names
    assert "run `again`" in (out / CARD_FILE).read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_failed_save_leaves_no_partial_directory(
    trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, config = trained
    previous = save_model_directory(result, config, tmp_path / "model", mixture={}, run="old")
    before = {p.name: p.read_bytes() for p in previous.iterdir()}

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full (made up)")

    monkeypatch.setattr(result.tagger.tokenizer, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        save_model_directory(result, config, tmp_path / "model", mixture={}, run="new")
    with pytest.raises(OSError, match="disk full"):
        save_model_directory(result, config, tmp_path / "fresh", mixture={}, run="new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left over
    assert {p.name: p.read_bytes() for p in previous.iterdir()} == before


# ---------------------------------------------------------------- int8


def test_int8_tagger_is_close_to_fp32(saved: Path) -> None:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    full = DeidTagger.load(saved, device="cpu")
    int8 = DeidTagger.load(saved, device="cpu", precision="int8")
    modules = list(int8.model.modules())
    assert any(isinstance(m, DynamicQuantizedLinear) for m in modules)
    assert not any(type(m) is torch.nn.Linear for m in modules)
    assert any(type(m) is torch.nn.Linear for m in full.model.modules())

    spans = int8.predict_spans(NOTES)
    assert len(spans) == len(NOTES)
    for note, note_spans in zip(NOTES, spans, strict=True):
        assert all(0 <= s.start < s.end <= len(note.text) for s in note_spans)
    probs_full = full.token_probabilities(full.encode(NOTES))
    probs_int8 = int8.token_probabilities(int8.encode(NOTES))
    difference = np.concatenate(
        [np.abs(a - b).ravel() for a, b in zip(probs_full, probs_int8, strict=True)]
    )
    assert difference.mean() < 0.01
    for probs in probs_int8:
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_int8_on_cuda_without_cuda_is_a_config_error(saved: Path) -> None:
    with pytest.raises(ConfigError, match="CUDA"):
        DeidTagger.load(saved, device="cuda", precision="int8")


def test_int8_refuses_a_non_cpu_device(saved: Path) -> None:
    with pytest.raises(ConfigError, match="CPU only"):
        DeidTagger.load(saved, device="meta", precision="int8")


def test_bf16_tagger_is_close_to_fp32(saved: Path) -> None:
    full = DeidTagger.load(saved, device="cpu")
    half = DeidTagger.load(saved, device="cpu", precision="bf16")
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    probs_full = full.token_probabilities(full.encode(NOTES))
    probs_half = half.token_probabilities(half.encode(NOTES))
    for a, b in zip(probs_full, probs_half, strict=True):
        assert b.dtype == np.float32  # probabilities come back in fp32
        np.testing.assert_allclose(b.sum(axis=1), 1.0, atol=1e-4)
        assert np.abs(a - b).mean() < 0.02


def test_unknown_inference_precision_is_a_config_error(saved: Path) -> None:
    with pytest.raises(ConfigError, match="inference precision 'fp8'"):
        DeidTagger.load(saved, device="cpu", precision="fp8")


def test_cli_offers_exactly_the_inference_precisions() -> None:
    """predict-ner and deid offer a copy of the tuple, so the CLI starts without torch; the
    copies must agree."""
    from synthdeid.ner.inference import PRECISIONS
    from synthdeid.ner.model import INFERENCE_PRECISIONS

    assert PRECISIONS == INFERENCE_PRECISIONS


# ---------------------------------------------------------------- settings file


def test_settings_load_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=NER_CONFIG_FILE) as info:
        NerSettings.load(tmp_path)
    assert info.value.path == str(tmp_path)
    with pytest.raises(InputError, match=NER_CONFIG_FILE):
        DeidTagger.load(tmp_path, device="cpu")


def test_settings_load_rejects_unreadable_settings(tmp_path: Path) -> None:
    (tmp_path / NER_CONFIG_FILE).write_text('{"labels": ["DATE"], "max_length": 64, "bogus": 1}')
    with pytest.raises(InputError, match="unreadable model settings"):
        NerSettings.load(tmp_path)
    (tmp_path / NER_CONFIG_FILE).write_text("{not json")
    with pytest.raises(InputError, match="unreadable model settings"):
        NerSettings.load(tmp_path)


def test_card_metrics_table_is_written_exactly() -> None:
    settings = NerSettings(labels=["NAME"], max_length=64, stride=8, regex_detectors=["dates"])
    validation = {
        "leakage_overlap_all": 0.125,
        "detection_recall": 0.98765,
        "detection_precision": float("nan"),
        "span_overlap_f1": 0.5,
        "span_exact_f1": None,
    }
    assert decoding_lines(settings, validation) == [
        "- regex detectors unioned at inference: dates",
        "- initials before predicted names: off",
        "",
        "## Validation metrics at the operating point",
        "| metric | value |",
        "|---|---|",
        "| label-consistent document leakage | 0.1250 |",
        "| detection recall | 0.9877 |",
        "| detection precision | n/a |",
        "| span-overlap F1 | 0.5000 |",
        "| span-exact F1 | n/a |",
    ]
