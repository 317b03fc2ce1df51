"""Task-adaptive pretraining on made-up sentences: config, chunking, a short run, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tests.ner_helpers import TAPT_RUN_CONFIG, made_up_sentences

from synthdeid.cli import main
from synthdeid.encoders import default_model_path
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.mixtures import MixtureNote, write_mixture
from synthdeid.ner.tapt import (
    TAPT_CONFIG_FILE,
    TaptConfig,
    TaptResult,
    continue_pretraining,
    heldout_indices,
    make_chunks,
)
from synthdeid.notes import UNSPLIT, Note, write_notes

TOO_SHORT = ("Stable.", "No acute events.", "Seen today.")
# 40 texts: 37 made-up sentences and 3 under min_words (5)
TEXTS = [*made_up_sentences(37, step=3), *TOO_SHORT]
RUN_CONFIG: dict[str, Any] = dict(TAPT_RUN_CONFIG)


# --- config ------------------------------------------------------------------------------


def test_config_defaults_and_round_trip() -> None:
    config = TaptConfig.from_mapping({})
    assert config == TaptConfig()
    assert (config.model, config.max_steps, config.learning_rate) == (None, 200, 1e-4)
    assert (config.warmup_steps, config.weight_decay, config.batch_size) == (0, 0.01, 16)
    assert (config.max_length, config.mlm_probability, config.seed, config.min_words) == (
        128,
        0.15,
        0,
        5,
    )
    assert TaptConfig.from_mapping(config.to_json()) == config
    assert json.loads(json.dumps(config.to_json())) == config.to_json()
    assert TaptConfig.from_mapping({"learning_rate": 1}).learning_rate == 1.0


@pytest.mark.parametrize(
    "mapping",
    [
        {"epochs": 3},
        {"max_steps": 0},
        {"max_steps": 2.5},
        {"max_steps": True},
        {"batch_size": 0},
        {"max_length": 4},
        {"mlm_probability": 0.0},
        {"mlm_probability": 1.0},
        {"learning_rate": 0},
        {"learning_rate": "1e-4"},
        {"warmup_steps": -1},
        {"min_words": -1},
        {"heldout_fraction": 1.0},
        {"precision": "fp8"},
        {"model": 3},
    ],
)
def test_config_rejects_bad_values(mapping: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        TaptConfig.from_mapping(mapping)


def test_warmup_is_clamped_below_max_steps() -> None:
    assert TaptConfig(max_steps=10, warmup_steps=1000).effective_warmup_steps == 9
    assert TaptConfig(max_steps=1, warmup_steps=5).effective_warmup_steps == 0
    assert TaptConfig(max_steps=100, warmup_steps=10).effective_warmup_steps == 10


# --- chunking and held-out split ---------------------------------------------------------


def test_chunks_concatenate_texts_into_fixed_windows() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    texts = TEXTS[:10]
    chunks, n_tokens = make_chunks(texts, tokenizer, 16)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert n_tokens == sum(len(x) for x in ids) + len(texts) - 1  # texts joined by [SEP]
    assert all(c[0] == tokenizer.cls_token_id and c[-1] == tokenizer.sep_token_id for c in chunks)
    assert all(len(c) == 16 for c in chunks[:-1]) and 3 <= len(chunks[-1]) <= 16
    stream = [token for chunk in chunks for token in chunk[1:-1]]
    expected = ids[0]
    for x in ids[1:]:
        expected = [*expected, tokenizer.sep_token_id, *x]
    assert stream == expected
    assert make_chunks([], tokenizer, 16) == ([], 0)


def test_heldout_indices_are_deterministic_and_never_empty() -> None:
    assert heldout_indices(1, 0.05, 0) == []
    assert heldout_indices(10, 0.0, 0) == []
    assert len(heldout_indices(2, 0.05, 0)) == 1
    assert len(heldout_indices(100, 0.05, 0)) == 5
    assert heldout_indices(100, 0.05, 7) == heldout_indices(100, 0.05, 7)
    assert heldout_indices(100, 0.05, 7) != heldout_indices(100, 0.05, 8)


def test_no_usable_text_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="at least 5 words"):
        continue_pretraining(list(TOO_SHORT), TaptConfig(), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


# --- a short run on the bundled MiniLM ----------------------------------------------------


@pytest.fixture(scope="module")
def api_run(tmp_path_factory: pytest.TempPathFactory) -> TaptResult:
    out_dir = tmp_path_factory.mktemp("tapt") / "checkpoint"
    config = TaptConfig.from_mapping(RUN_CONFIG)
    return continue_pretraining(
        TEXTS, config, out_dir, device="cpu", progress=False, provenance={"corpus": "made-up"}
    )


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same corpus and config through ``synthdeid tapt-encoder``, split over two Parquet files."""
    folder = tmp_path_factory.mktemp("tapt_cli")
    notes = [
        Note(f"n{i:02d}", f"p{i % 4}", text, (), "made-up", UNSPLIT) for i, text in enumerate(TEXTS)
    ]
    write_notes(notes[:25], folder / "a.parquet")
    write_notes(notes[25:], folder / "b.parquet")
    out_dir = folder / "checkpoint"
    code = main(
        [
            "tapt-encoder",
            "--corpus",
            str(folder / "a.parquet"),
            "--corpus",
            str(folder / "b.parquet"),
            "--settings",
            json.dumps(RUN_CONFIG),
            "--out-dir",
            str(out_dir),
            "--device",
            "cpu",
            "--no-progress",
        ]
    )
    assert code == 0
    return out_dir


@pytest.mark.slow
def test_run_metadata_and_step_count(api_run: TaptResult) -> None:
    out_dir = api_run.out_dir
    assert api_run.steps == 8 and len(api_run.losses) == 8
    assert (api_run.n_texts, api_run.n_skipped) == (40, 3)
    assert api_run.n_heldout_chunks >= 1
    assert api_run.n_train_chunks + api_run.n_heldout_chunks == api_run.n_chunks
    meta = json.loads((out_dir / TAPT_CONFIG_FILE).read_text())
    assert meta["config"] == TaptConfig.from_mapping(RUN_CONFIG).to_json()
    assert meta["base_model"].startswith("bundled-minilm")
    assert meta["corpus"] == {"corpus": "made-up"}
    assert (meta["n_texts"], meta["n_skipped"], meta["n_texts_used"]) == (40, 3, 37)
    assert meta["n_chunks"] == api_run.n_chunks and meta["steps"] == 8
    assert meta["warmup_steps"] == 2
    assert [r["step"] for r in meta["history"]] == list(range(1, 9))
    assert meta["history"][-1]["learning_rate"] == 0.0
    before, after = meta["heldout_mlm_loss_before"], meta["heldout_mlm_loss_after"]
    assert before == api_run.heldout_loss_before and after == api_run.heldout_loss_after
    assert before is not None and after is not None
    # a fresh MLM head starts near log(vocab size); 8 steps at lr 1e-4 bring it down
    assert after < before and meta["heldout_mlm_loss_lowered"] is True
    # the directory was renamed into place: no staging directory is left beside it
    assert [p.name for p in out_dir.parent.iterdir()] == [out_dir.name]


@pytest.mark.slow
def test_checkpoint_loads_as_masked_lm_with_tied_decoder(api_run: TaptResult) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out_dir = api_run.out_dir
    model = AutoModelForMaskedLM.from_pretrained(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    embeddings = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is embeddings
    saved = load_file(out_dir / "model.safetensors")
    assert torch.equal(embeddings, saved["bert.embeddings.word_embeddings.weight"])
    # the adapted encoder differs from the base one
    base = AutoModelForMaskedLM.from_pretrained(default_model_path())
    assert not torch.equal(base.get_input_embeddings().weight, embeddings)
    inputs = tokenizer("The patient was seen in the [MASK] this morning.", return_tensors="pt")
    with torch.inference_mode():
        logits = model(**inputs).logits
    assert logits.shape[-1] == len(tokenizer)


@pytest.mark.slow
def test_checkpoint_starts_ner_training(api_run: TaptResult) -> None:
    from transformers import AutoModelForTokenClassification

    from synthdeid.ner.tagging import tag_names
    from synthdeid.ner.training import _load_model_and_tokenizer

    out_dir = api_run.out_dir
    saved = load_file(out_dir / "model.safetensors")
    model = AutoModelForTokenClassification.from_pretrained(out_dir, num_labels=5)
    assert model.classifier.out_features == 5
    key = "bert.encoder.layer.5.output.dense.weight"
    assert torch.equal(model.state_dict()[key], saved[key])
    # the way the NER training rule loads ner.training.model
    tags = tag_names(["NAME", "DATE"])
    model, tokenizer = _load_model_and_tokenizer(str(out_dir), tags)
    assert model.config.id2label == dict(enumerate(tags))
    assert torch.equal(model.state_dict()[key], saved[key])
    assert tokenizer.mask_token == "[MASK]"


@pytest.mark.slow
def test_cli_run_is_deterministic_and_records_the_corpus(
    api_run: TaptResult, cli_run: Path
) -> None:
    """Same texts, config and seed through the CLI: identical weights and loss history."""
    ours = load_file(api_run.out_dir / "model.safetensors")
    theirs = load_file(cli_run / "model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    meta = json.loads((cli_run / TAPT_CONFIG_FILE).read_text())
    assert [r["train_loss"] for r in meta["history"]] == [round(x, 6) for x in api_run.losses]
    assert meta["heldout_mlm_loss_after"] == api_run.heldout_loss_after
    corpus = meta["corpus"]
    assert corpus["step"] == "tapt"
    assert sorted(Path(r["path"]).name for r in corpus["inputs"].values()) == [
        "a.parquet",
        "b.parquet",
    ]
    assert all(r["digest"].startswith("sha256:") for r in corpus["inputs"].values())
    assert corpus["fingerprint"].startswith("sha256:")
    assert sum(corpus["notes_per_file"].values()) == 40


@pytest.mark.slow
def test_rerun_replaces_the_directory(tmp_path: Path) -> None:
    out_dir = tmp_path / "checkpoint"
    out_dir.mkdir()
    (out_dir / "stale.txt").write_text("old")
    config = TaptConfig.from_mapping({**RUN_CONFIG, "max_steps": 1, "heldout_fraction": 0.0})
    result = continue_pretraining(TEXTS[:12], config, out_dir, device="cpu", progress=False)
    assert result.steps == 1 and result.n_heldout_chunks == 0
    assert result.heldout_loss_before is None and result.improved is None
    assert not (out_dir / "stale.txt").exists()
    assert (out_dir / TAPT_CONFIG_FILE).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]


def test_cli_adapts_to_a_mixtures_unique_training_notes(tmp_path: Path) -> None:
    """`tapt: own` reads a run's train.parquet: each unique note once, whatever its copies."""
    notes = [
        Note(f"n{i:02d}", f"p{i % 4}", text, (), "made-up", "train") for i, text in enumerate(TEXTS)
    ]
    mixture = [MixtureNote(note, "real", copies=1 + i % 3) for i, note in enumerate(notes)]
    write_mixture(mixture, tmp_path / "train.parquet")
    out_dir = tmp_path / "checkpoint"
    config = {**RUN_CONFIG, "max_steps": 1}
    argv = [
        "tapt-encoder",
        "--corpus",
        str(tmp_path / "train.parquet"),
        "--settings",
        json.dumps(config),
    ]
    assert main([*argv, "--out-dir", str(out_dir), "--device", "cpu", "--no-progress"]) == 0
    meta = json.loads((out_dir / TAPT_CONFIG_FILE).read_text())
    assert meta["corpus"]["notes_per_file"] == {str(tmp_path / "train.parquet"): len(TEXTS)}
    assert meta["n_texts"] == len(TEXTS) and meta["n_skipped"] == len(TOO_SHORT)


# --- CLI errors ---------------------------------------------------------------------------


def test_cli_empty_corpus_is_an_input_error(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write_notes([], tmp_path / "empty.parquet")
    out_dir = tmp_path / "out"
    argv = ["tapt-encoder", "--corpus", str(tmp_path / "empty.parquet"), "--out-dir", str(out_dir)]
    assert main([*argv, "--no-progress"]) == 2
    assert "no notes in the corpus" in capfd.readouterr().err
    assert not out_dir.exists()


def test_cli_missing_corpus_and_bad_config(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    assert (
        main(
            ["tapt-encoder", "--corpus", str(tmp_path / "nope.parquet"), "--out-dir", str(out_dir)]
        )
        == 2
    )
    assert "corpus file not found" in capfd.readouterr().err
    write_notes([Note("n1", "p1", TEXTS[0], (), "made-up", UNSPLIT)], tmp_path / "one.parquet")
    argv = ["tapt-encoder", "--corpus", str(tmp_path / "one.parquet"), "--out-dir", str(out_dir)]
    assert main([*argv, "--settings", '{"epochs": 3}']) == 2
    assert "unknown keys" in capfd.readouterr().err
    assert main([*argv, "--settings", "[1]"]) == 2
    assert not out_dir.exists()


def test_cli_an_empty_file_among_several_is_skipped_but_all_empty_is_an_error(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A DP model may write no PII-coded note: its empty pool beside a full one still trains."""
    notes = [Note(f"n{i}", "p", text, (), "synthetic") for i, text in enumerate(TEXTS)]
    write_notes(notes, tmp_path / "no_pii.parquet")
    write_notes([], tmp_path / "pii.parquet")
    corpus = ["--corpus", str(tmp_path / "pii.parquet"), str(tmp_path / "no_pii.parquet")]
    config = ["--settings", json.dumps({**RUN_CONFIG, "max_steps": 1})]
    out_dir = tmp_path / "checkpoint"
    argv = ["tapt-encoder", *corpus, *config, "--device", "cpu", "--no-progress"]
    assert main([*argv, "--out-dir", str(out_dir)]) == 0
    meta = json.loads((out_dir / TAPT_CONFIG_FILE).read_text())
    assert meta["corpus"]["notes_per_file"] == {
        str(tmp_path / "pii.parquet"): 0,
        str(tmp_path / "no_pii.parquet"): len(TEXTS),
    }
    assert "pii.parquet: no notes; TAPT trains on the other files" in capfd.readouterr().err
    write_notes([], tmp_path / "no_pii.parquet")
    assert main([*argv, "--out-dir", str(tmp_path / "none")]) == 2
    assert "no notes in the corpus" in capfd.readouterr().err
    assert not (tmp_path / "none").exists()
