"""``precision: auto``: bf16 where the hardware has it natively, fp32 otherwise, and the record of it.

The CPU's native bf16 (``synthdeid.runtime.native_cpu_bf16``) and a GPU's
(``torch.cuda.is_bf16_supported``) are simulated, so every branch runs here.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ner_helpers import TAPT_RUN_CONFIG, made_up_sentences, note_from_pieces, tiny_encoder_dir
from synthdeid import runtime
from synthdeid.errors import ConfigError
from synthdeid.evaluation.archive import read_training_config
from synthdeid.ner import inference
from synthdeid.ner import tapt as tapt_module
from synthdeid.ner import training as training_module
from synthdeid.ner.model import INFERENCE_PRECISIONS, NER_CONFIG_FILE, DeidTagger, NerSettings
from synthdeid.ner.model_card import CARD_FILE, HISTORY_FILE, save_model_directory
from synthdeid.ner.tapt import TAPT_CONFIG_FILE, TaptConfig, continue_pretraining
from synthdeid.ner.training import TrainingConfig, TrainingResult, autocast_dtype, train
from synthdeid.runtime import PRECISIONS, ResolvedPrecision, resolve_precision
from synthdeid.stages import predict_ner

CPU = torch.device("cpu")
CUDA = torch.device("cuda")


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A CPU with native bf16 (AVX512-BF16 or AMX)."""
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: True)
    yield


@pytest.fixture
def emulated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A CPU without native bf16 (AVX2 only: bf16 is emulated)."""
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: False)
    yield


def gpu(monkeypatch: pytest.MonkeyPatch, *, bf16: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


# ------------------------------------------------------------------------------- resolver


@pytest.mark.usefixtures("native")
def test_auto_on_a_cpu_with_native_bf16_is_bf16() -> None:
    resolved = resolve_precision("auto", CPU)
    assert resolved == ResolvedPrecision("auto", "bf16", "native bf16 on this CPU")
    assert resolved.dtype is torch.bfloat16
    assert resolved.autocast_dtype is torch.bfloat16
    assert resolved.describe() == "auto -> bf16 (native bf16 on this CPU)"
    assert resolved.record() == {
        "requested": "auto",
        "resolved": "bf16",
        "reason": "native bf16 on this CPU",
    }


@pytest.mark.usefixtures("emulated")
def test_auto_on_a_cpu_without_native_bf16_is_fp32() -> None:
    resolved = resolve_precision("auto", CPU)
    assert (resolved.name, resolved.reason) == ("fp32", "CPU without native bf16")
    assert resolved.dtype is torch.float32
    assert resolved.autocast_dtype is None  # autocast off
    assert resolved.describe() == "auto -> fp32 (CPU without native bf16)"


@pytest.mark.parametrize(
    ("bf16", "allow_fp16", "expected"),
    [(True, True, "bf16"), (False, True, "fp16"), (True, False, "bf16"), (False, False, "fp32")],
)
@pytest.mark.usefixtures("emulated")  # the CPU's bf16 has no say on a GPU
def test_auto_on_a_gpu_is_bf16_where_it_has_it(
    monkeypatch: pytest.MonkeyPatch, bf16: bool, allow_fp16: bool, expected: str
) -> None:
    gpu(monkeypatch, bf16=bf16)
    resolved = resolve_precision("auto", CUDA, allow_fp16=allow_fp16)
    assert resolved.name == expected
    assert resolved.reason == ("GPU with bf16" if bf16 else "GPU without bf16")
    assert (
        resolved.dtype
        is {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[expected]
    )


@pytest.mark.parametrize("has_native", [True, False])
@pytest.mark.parametrize(
    ("requested", "device", "dtype"),
    [
        ("fp32", CPU, None),
        ("bf16", CPU, torch.bfloat16),
        ("fp32", CUDA, None),
        ("bf16", CUDA, torch.bfloat16),
        ("fp16", CUDA, torch.float16),
    ],
)
def test_explicit_settings_keep_their_meaning(
    monkeypatch: pytest.MonkeyPatch,
    has_native: bool,
    requested: str,
    device: torch.device,
    dtype: torch.dtype | None,
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: has_native)

    def no_probe() -> bool:
        raise AssertionError("an explicit setting never asks the GPU")

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", no_probe)
    resolved = resolve_precision(requested, device)
    assert (resolved.requested, resolved.name) == (requested, requested)
    assert resolved.autocast_dtype is dtype
    assert autocast_dtype(requested, device) is dtype
    emulated = requested == "bf16" and device.type == "cpu" and not has_native
    assert resolved.reason == (
        "set explicitly; emulated on this CPU without native bf16" if emulated else "set explicitly"
    )
    assert resolved.describe() == f"{requested} ({resolved.reason})"


def test_fp16_off_a_gpu_and_unknown_names_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"ner\.tapt\.precision fp16 needs a CUDA device"):
        resolve_precision("fp16", CPU, setting="ner.tapt.precision")
    with pytest.raises(ConfigError, match=r"ner\.training\.precision fp16 needs a CUDA"):
        autocast_dtype("fp16", CPU)
    with pytest.raises(ConfigError, match="'fp8' is not one of"):
        resolve_precision("fp8", CPU)
    with pytest.raises(ConfigError, match="'fp16' is not one of"):  # no fp16 inference
        resolve_precision("fp16", CUDA, allow_fp16=False)


def test_other_devices_stay_in_fp32() -> None:
    resolved = resolve_precision("auto", torch.device("meta"))
    assert resolved.name == "fp32" and resolved.reason == "no bf16 rule for meta devices"


def test_autocast_dtype_follows_the_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: True)
    assert autocast_dtype("auto", CPU) is torch.bfloat16
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: False)
    assert autocast_dtype("auto", CPU) is None
    gpu(monkeypatch, bf16=False)
    assert autocast_dtype("auto", CUDA) is torch.float16


def test_auto_is_the_default_everywhere_and_the_names_agree(tmp_path: Path) -> None:
    assert TrainingConfig().precision == "auto"
    assert TaptConfig().precision == "auto"
    assert set(training_module.PRECISIONS) == set(PRECISIONS)
    assert inference.PRECISIONS == INFERENCE_PRECISIONS
    assert "auto" in INFERENCE_PRECISIONS
    parser = argparse.ArgumentParser()
    predict_ner.register_arguments(parser)
    notes = tmp_path / "notes.parquet"
    notes.write_bytes(b"")
    argv = ["--model", str(tmp_path), "--notes", str(notes), "--out", str(tmp_path / "o.parquet")]
    args = parser.parse_args(argv)
    assert args.precision == "auto"


# ------------------------------------------------------------------------- predict-ner


@pytest.mark.parametrize(("has_native", "expected"), [(True, "bf16"), (False, "fp32")])
def test_predict_ner_resolves_auto_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, has_native: bool, expected: str
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: has_native)
    record = inference.resolved_precision("auto", "cpu")
    assert record["requested"] == "auto" and record["resolved"] == expected
    # explicit formats are passed through as they are
    assert inference.resolved_precision("fp32", "cpu")["resolved"] == "fp32"
    assert inference.resolved_precision("bf16", "cpu")["resolved"] == "bf16"
    assert inference.resolved_precision("int8", "cpu") == {
        "requested": "int8",
        "resolved": "int8",
        "reason": "set explicitly",
    }


def test_predict_ner_auto_on_a_gpu_without_bf16_is_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu(monkeypatch, bf16=False)  # inference casts weights: no fp16 there
    assert inference.resolved_precision("auto", "cuda")["resolved"] == "fp32"
    gpu(monkeypatch, bf16=True)
    assert inference.resolved_precision("auto", "auto")["resolved"] == "bf16"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved (untrained) token-classification model directory with its settings."""
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(0)
    directory = tiny_encoder_dir(tmp_path_factory.mktemp("precision") / "model")
    settings = NerSettings(labels=["DOCTOR"], max_length=64, stride=8)
    model = AutoModelForTokenClassification.from_pretrained(
        directory, num_labels=len(settings.tags)
    )
    model.save_pretrained(directory)
    settings.save(directory)
    return directory


@pytest.mark.parametrize(("has_native", "dtype"), [(True, torch.bfloat16), (False, torch.float32)])
def test_a_model_loads_in_auto_as_the_cpu_allows(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    model_dir: Path,
    has_native: bool,
    dtype: torch.dtype,
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: has_native)
    with caplog.at_level(logging.WARNING, logger="synthdeid.runtime"):
        tagger = DeidTagger.load(model_dir, device="cpu", precision="auto")
    assert next(tagger.model.parameters()).dtype is dtype
    assert not [r for r in caplog.records if r.name == "synthdeid.runtime"]  # never emulated
    assert next(DeidTagger.load(model_dir, device="cpu").model.parameters()).dtype is torch.float32


# ------------------------------------------------------------- model card and settings


def fake_result(tmp_path: Path, device: torch.device = CPU) -> TrainingResult:
    """A TrainingResult whose tagger saves placeholder files: enough for the card and settings."""

    def save_pretrained(name: str) -> Any:
        return lambda directory: (Path(directory) / name).write_text("placeholder")

    settings = NerSettings(labels=["DOCTOR"], max_length=64, stride=8, o_threshold=0.7)
    settings.operating_point = {"mode": "recall"}
    tagger = SimpleNamespace(
        model=SimpleNamespace(save_pretrained=save_pretrained("model.safetensors")),
        tokenizer=SimpleNamespace(save_pretrained=save_pretrained("tokenizer.json")),
        settings=settings,
        device=device,
    )
    metrics = {
        "leakage_overlap_all": 0.1,
        "detection_recall": 0.9,
        "detection_precision": 0.8,
        "span_overlap_f1": 0.85,
        "span_exact_f1": 0.8,
    }
    return TrainingResult(
        tagger=tagger,
        history=[],
        best_epoch=1,
        validation=metrics,
        sweep=[],
        class_weights={},
        timing={"train_seconds": 1.0, "steps": 2, "epochs": 1},
        environment={"cpu": "a test CPU"},
    )


@pytest.mark.parametrize(
    ("has_native", "requested", "line", "resolved"),
    [
        (True, "auto", "- precision: auto -> bf16 (native bf16 on this CPU)", "bf16"),
        (False, "auto", "- precision: auto -> fp32 (CPU without native bf16)", "fp32"),
        (False, "fp32", "- precision: fp32 (set explicitly)", "fp32"),
        (
            False,
            "bf16",
            "- precision: bf16 (set explicitly; emulated on this CPU without native bf16)",
            "bf16",
        ),
    ],
)
def test_the_model_directory_records_the_resolved_precision(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    has_native: bool,
    requested: str,
    line: str,
    resolved: str,
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: has_native)
    result = fake_result(tmp_path)
    config = TrainingConfig(precision=requested)
    out = save_model_directory(result, config, tmp_path / "model", mixture={}, run="r")
    card = (out / CARD_FILE).read_text().splitlines()
    assert line in card
    settings = json.loads((out / NER_CONFIG_FILE).read_text())
    assert settings["training_precision"]["requested"] == requested
    assert settings["training_precision"]["resolved"] == resolved
    assert NerSettings.load(out).training_precision == settings["training_precision"]
    history = json.loads((out / HISTORY_FILE).read_text())
    assert history["precision"] == settings["training_precision"]
    assert history["config"]["precision"] == requested  # the setting itself, unchanged
    # archive-run keeps the format next to the setting
    archived = read_training_config(out / HISTORY_FILE)
    assert (archived["precision"], archived["precision_resolved"]) == (requested, resolved)


def test_a_card_on_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpu(monkeypatch, bf16=False)
    out = save_model_directory(
        fake_result(tmp_path, CUDA), TrainingConfig(), tmp_path / "m", mixture={}, run="r"
    )
    assert "- precision: auto -> fp16 (GPU without bf16)" in (out / CARD_FILE).read_text()


def test_an_older_history_without_the_record_archives_as_before(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    path.write_text(json.dumps({"config": {"precision": "bf16", "epochs": 4}}))
    assert read_training_config(path) == {"precision": "bf16", "epochs": 4}


def test_settings_saved_before_the_field_still_load(tmp_path: Path) -> None:
    (tmp_path / NER_CONFIG_FILE).write_text(
        json.dumps({"labels": ["DOCTOR"], "max_length": 64, "stride": 8})
    )
    assert NerSettings.load(tmp_path).training_precision == {}


# -------------------------------------------------------- training and TAPT, end to end


def made_up_notes(n: int) -> list[Any]:
    return [
        note_from_pieces(
            f"n{i:02d}",
            f"p{i % 3}",
            ["Seen by Dr. ", (("Abernathy", "Lindqvist", "Tsang")[i % 3], "DOCTOR"), " today."],
        )
        for i in range(n)
    ]


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize(
    ("has_native", "requested", "dtype", "warned"),
    [
        (True, "auto", torch.bfloat16, False),
        (False, "auto", None, False),
        (False, "bf16", torch.bfloat16, True),
    ],
)
def test_training_autocasts_in_the_resolved_format_and_the_card_says_so(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    has_native: bool,
    requested: str,
    dtype: torch.dtype | None,
    warned: bool,
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: has_native)
    seen: list[tuple[torch.dtype, bool]] = []
    real_autocast = torch.autocast

    def spy(device_type: str, dtype: torch.dtype, enabled: bool = True, **kw: Any) -> Any:
        seen.append((dtype, enabled))
        return real_autocast(device_type, dtype=dtype, enabled=enabled, **kw)

    monkeypatch.setattr(training_module.torch, "autocast", spy)
    torch.manual_seed(0)
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    notes = made_up_notes(8)
    config = TrainingConfig.from_mapping(
        {
            "model": str(encoder),
            "max_length": 32,
            "stride": 8,
            "epochs": 1,
            "batch_size": 4,
            "device": "cpu",
            "precision": requested,
            "operating_point": {"grid": [0.5]},
        }
    )
    with caplog.at_level(logging.WARNING, logger="synthdeid.runtime"):
        result = train(notes[:6], notes[6:], config, progress=False)
    assert seen  # the training steps
    assert {(d, e) for d, e in seen} == {(dtype or torch.float32, dtype is not None)}
    emulation = [r for r in caplog.records if "no native bf16" in r.getMessage()]
    assert [r.name for r in emulation] == (["synthdeid.runtime"] if warned else [])
    out = save_model_directory(result, config, tmp_path / "model", mixture={}, run="r")
    expected = resolve_precision(requested, CPU)
    assert expected.autocast_dtype is dtype
    assert f"- precision: {expected.describe()}" in (out / CARD_FILE).read_text()
    assert json.loads((out / NER_CONFIG_FILE).read_text())["training_precision"] == (
        expected.record()
    )


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize(("has_native", "dtype"), [(True, torch.bfloat16), (False, None)])
def test_tapt_autocasts_in_the_resolved_format_and_records_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, has_native: bool, dtype: torch.dtype | None
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: has_native)
    seen: list[torch.dtype | None] = []
    real = tapt_module._mlm_loss_sum

    def spy(model: Any, batch: Any, amp_dtype: torch.dtype | None, device: Any) -> Any:
        seen.append(amp_dtype)
        return real(model, batch, amp_dtype, device)

    monkeypatch.setattr(tapt_module, "_mlm_loss_sum", spy)
    config = TaptConfig.from_mapping({**TAPT_RUN_CONFIG, "max_steps": 1})
    result = continue_pretraining(
        made_up_sentences(12), config, tmp_path / "tapt", device="cpu", progress=False
    )
    assert seen and set(seen) == {dtype}
    expected = resolve_precision("auto", CPU)
    meta = json.loads((tmp_path / "tapt" / TAPT_CONFIG_FILE).read_text())
    assert meta["precision"] == expected.record() == result.metadata["precision"]
    assert meta["precision"]["resolved"] == ("bf16" if has_native else "fp32")


@pytest.mark.parametrize(
    ("checkpoint", "wording"),
    [
        ("leakage", "(lowest validation leakage, then highest span-overlap F1)"),
        ("f1", "(highest validation span-overlap F1, then lowest leakage)"),
    ],
)
def test_the_card_names_the_checkpoint_rule_and_the_machine(
    tmp_path: Path, checkpoint: str, wording: str
) -> None:
    result = fake_result(tmp_path)
    config = TrainingConfig(checkpoint=checkpoint)
    out = save_model_directory(result, config, tmp_path / "model", mixture={}, run="r")
    card = (out / CARD_FILE).read_text()
    assert f"kept epoch 1 {wording}" in card
    # what the machine description lacks reads n/a, not a made-up value
    assert "- trained on: n/a; CPU a test CPU (n/a kernels, native bf16: n/a)" in card
