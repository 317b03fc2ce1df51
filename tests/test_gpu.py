"""The CUDA code paths, run for real on a GPU (``scripts/gpu-check.sh``); skipped without one.

Each test runs one of the package's GPU paths on a tiny model built from a
config (nothing is downloaded) and made-up text:

- NER fine-tuning on ``cuda`` under bf16 and fp16 autocast (fp16 with the
  gradient scaler), then saving and loading the model;
- NER inference on ``cuda`` in fp32 and bf16 against CPU fp32, and the
  refusal of int8 (CPU only) on ``cuda``;
- DP-SGD (Opacus) language-model training on ``cuda``, with the accountant's
  epsilon checked against a direct Opacus computation;
- task-adaptive MLM pretraining (TAPT) on ``cuda`` (autocast ``auto``);
- greedy ``generate`` of a tiny Llama on ``cuda``, equal to the CPU's in fp32.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dplm_helpers import made_up_lm_texts, tiny_pretrained_lm, tiny_scratch_and_training
from ner_helpers import TAPT_RUN_CONFIG, made_up_sentences, note_from_pieces, tiny_encoder_dir
from synthdeid.errors import ConfigError
from synthdeid.ner.model import DeidTagger
from synthdeid.ner.model_card import save_model_directory
from synthdeid.ner.training import TrainingConfig, train
from synthdeid.notes import Note
from synthesis_helpers import allowlist

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device: the GPU check runs where one is (scripts/gpu-check.sh)",
    ),
]

DEVICE = "cuda"

# ---------------------------------------------------------------- NER: made-up notes

MAX_LENGTH = 64
STRIDE = 8
SURNAMES = ("Abernathy", "Quillfeather", "Lindqvist", "Brightwater", "Nakamura", "Verhoeven")
FILLER = "Vitals stable, lungs clear and the plan is unchanged for now. "
NO_PHI = (
    "Patient resting comfortably, no acute events overnight.",
    "Wound clean and dry; dressing changed without difficulty.",
)


def made_up_note(i: int) -> Note:
    """A visit line with a doctor and a date; every fifth without PHI; every sixth long."""
    if i % 5 == 4:
        return note_from_pieces(f"n{i:02d}", f"p{i % 7}", [NO_PHI[i % len(NO_PHI)]])
    name = SURNAMES[i % len(SURNAMES)]
    date = f"{i % 12 + 1}/{(7 * i) % 28 + 1}"
    pieces: list[str | tuple[str, str]] = ["Seen by Dr. ", (name, "DOCTOR"), " on ", (date, "DATE")]
    pieces.append(".")
    if i % 6 == 0:  # several 64-token windows
        other = SURNAMES[(i + 5) % len(SURNAMES)]
        pieces += [" ", FILLER * 6, "Follow up with Dr. ", (other, "DOCTOR"), " next week."]
    return note_from_pieces(f"n{i:02d}", f"p{i % 7}", pieces)


NOTES = [made_up_note(i) for i in range(30)]
TRAIN_NOTES = NOTES[:24]
VALIDATION = NOTES[24:]


def ner_config(encoder: Path, device: str, precision: str) -> TrainingConfig:
    return TrainingConfig.from_mapping(
        {
            "model": str(encoder),
            "max_length": MAX_LENGTH,
            "stride": STRIDE,
            "learning_rate": 1e-3,
            "epochs": 1,
            "batch_size": 8,
            "device": device,
            "precision": precision,
            "operating_point": {"grid": [0.5, 0.7, 0.9, 0.99]},
        }
    )


def assert_valid_spans(spans: list[list], notes: list[Note]) -> None:
    assert len(spans) == len(notes)
    for note, note_spans in zip(notes, spans, strict=True):
        assert all(0 <= s.start < s.end <= len(note.text) for s in note_spans)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_ner_training_on_cuda_with_autocast(precision: str, tmp_path: Path) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this CUDA device has no bf16 support (fp16 is checked instead)")
    torch.manual_seed(0)
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    config = ner_config(encoder, DEVICE, precision)
    result = train(TRAIN_NOTES, VALIDATION, config, progress=False)

    assert [record["epoch"] for record in result.history] == [1]
    assert result.history[0]["steps"] > 0
    assert np.isfinite(result.history[0]["train_loss"])
    assert result.timing["epochs"] == 1
    assert result.tagger.device.type == "cuda"
    # autocast keeps the weights in fp32: only the matrix products run in half precision
    assert {p.device.type for p in result.tagger.model.parameters()} == {"cuda"}
    assert {p.dtype for p in result.tagger.model.parameters()} == {torch.float32}

    saved = save_model_directory(
        result, config, tmp_path / "model", mixture={}, run=f"gpu-check-{precision}"
    )
    loaded = DeidTagger.load(saved, device="cpu")
    assert loaded.device.type == "cpu"
    ours = result.tagger.token_probabilities(result.tagger.encode(NOTES))
    theirs = loaded.token_probabilities(loaded.encode(NOTES))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_ner_inference_on_cuda_agrees_with_cpu(tmp_path: Path) -> None:
    torch.manual_seed(0)
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    config = ner_config(encoder, "cpu", "fp32")
    result = train(TRAIN_NOTES, VALIDATION, config, progress=False)
    saved = save_model_directory(result, config, tmp_path / "model", mixture={}, run="gpu-check")

    cpu = DeidTagger.load(saved, device="cpu")
    full = DeidTagger.load(saved, device=DEVICE)
    half = DeidTagger.load(saved, device=DEVICE, precision="bf16")
    assert next(full.model.parameters()).device.type == "cuda"
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}

    probs_cpu = cpu.token_probabilities(cpu.encode(NOTES))
    probs_full = full.token_probabilities(full.encode(NOTES))
    probs_half = half.token_probabilities(half.encode(NOTES))
    for a, b, c in zip(probs_cpu, probs_full, probs_half, strict=True):
        assert b.dtype == c.dtype == np.float32  # probabilities come back in fp32 on the CPU
        np.testing.assert_allclose(b, a, atol=1e-4)
        np.testing.assert_allclose(c.sum(axis=1), 1.0, atol=1e-4)
        assert np.abs(c - a).mean() < 0.02

    for tagger in (cpu, full, half):
        assert_valid_spans(tagger.predict_spans(NOTES), NOTES)

    with pytest.raises(ConfigError, match="CPU only"):
        DeidTagger.load(saved, device=DEVICE, precision="int8")


# ---------------------------------------------------------------- DP-SGD (Opacus)


@pytest.mark.filterwarnings("ignore:Secure RNG turned off")
@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.filterwarnings("ignore:Optimal order is the")
def test_dp_sgd_on_cuda_spends_the_planned_budget() -> None:
    from opacus.accountants import RDPAccountant

    from synthdeid.dplm.corpus import (
        ControlCoder,
        control_token,
        placeholder_tokens,
        training_examples,
    )
    from synthdeid.dplm.model import build_lm
    from synthdeid.dplm.privacy import PrivacyConfig, default_delta
    from synthdeid.dplm.training import train_lm

    torch.manual_seed(0)
    texts = made_up_lm_texts(24)
    coder = ControlCoder.fit(["pii"], texts)
    examples = training_examples([(f"n{i}", t) for i, t in enumerate(texts)], [], coder)
    special = [control_token(c) for c in coder.all_codes()] + placeholder_tokens(allowlist(), texts)
    scratch, config = tiny_scratch_and_training()
    built = build_lm(None, scratch, texts, special, seed=0)
    before = built.model.get_input_embeddings().weight.detach().clone()
    result = train_lm(
        examples,
        built.model,
        built.tokenizer,
        config,
        PrivacyConfig(target_epsilon=4.0, accountant="rdp"),
        device=torch.device(DEVICE),
        progress=False,
    )

    record = result.privacy
    assert record["dp"] is True and record["accountant"] == "rdp"
    assert record["steps"] == 6 and record["N"] == 24
    assert record["delta"] == pytest.approx(default_delta(24))
    direct = RDPAccountant()
    direct.history = [(record["noise_multiplier"], record["sample_rate"], record["steps"])]
    assert record["epsilon"] == pytest.approx(direct.get_epsilon(delta=record["delta"]), rel=1e-6)
    assert math.isfinite(record["epsilon"]) and 0.0 < record["epsilon"] <= 4.0 + 0.01

    assert {p.device.type for p in result.model.parameters()} == {"cuda"}
    losses = [h["loss"] for h in result.history if h["batch"]]
    assert losses and all(math.isfinite(loss) for loss in losses)
    after = result.model.get_input_embeddings().weight.detach().cpu()
    assert not torch.equal(before, after)  # the noisy, clipped steps moved the weights


# ---------------------------------------------------------------- TAPT

TAPT_TEXTS = [*made_up_sentences(30, step=5), "Stable.", "Seen today."]


def test_tapt_on_cuda(tmp_path: Path) -> None:
    from transformers import AutoModelForMaskedLM

    from synthdeid.ner.tapt import TAPT_CONFIG_FILE, TaptConfig, continue_pretraining

    torch.manual_seed(0)
    encoder = tiny_encoder_dir(tmp_path / "encoder")
    config = TaptConfig.from_mapping({"model": str(encoder), **TAPT_RUN_CONFIG})
    assert config.precision == "auto"  # bf16 or fp16 autocast on a GPU
    result = continue_pretraining(
        TAPT_TEXTS,
        config,
        tmp_path / "checkpoint",
        device=DEVICE,
        progress=False,
        provenance={"corpus": "made-up"},
    )

    assert result.steps == 8 and len(result.losses) == 8
    assert all(math.isfinite(loss) for loss in result.losses)
    assert (result.n_texts, result.n_skipped) == (len(TAPT_TEXTS), 2)
    assert result.n_heldout_chunks >= 1
    assert result.heldout_loss_before is not None and math.isfinite(result.heldout_loss_before)
    assert result.heldout_loss_after is not None and math.isfinite(result.heldout_loss_after)
    meta = json.loads((result.out_dir / TAPT_CONFIG_FILE).read_text())
    assert meta["device"] == "cuda" and meta["steps"] == 8
    assert meta["corpus"] == {"corpus": "made-up"}
    assert [r["step"] for r in meta["history"]] == list(range(1, 9))

    model = AutoModelForMaskedLM.from_pretrained(result.out_dir)
    embeddings = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is embeddings
    base = AutoModelForMaskedLM.from_pretrained(encoder)
    assert not torch.equal(base.get_input_embeddings().weight, embeddings)


# ---------------------------------------------------------------- generation


def test_greedy_generation_on_cuda_matches_cpu(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    directory = tiny_pretrained_lm(tmp_path / "lm")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    on_cpu = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    on_cuda = copy.deepcopy(on_cpu).to(DEVICE).eval()
    prompt = tokenizer("patient stable overnight with", return_tensors="pt")
    n_prompt = prompt["input_ids"].shape[1]
    greedy = {
        "max_new_tokens": 8,
        "min_new_tokens": 8,
        "do_sample": False,
        "pad_token_id": tokenizer.pad_token_id,
    }

    with torch.inference_mode():
        logits_cpu = on_cpu(**prompt).logits
        logits_cuda = on_cuda(**{k: v.to(DEVICE) for k, v in prompt.items()}).logits
        out_cpu = on_cpu.generate(**prompt, **greedy)
        out_cuda = on_cuda.generate(**{k: v.to(DEVICE) for k, v in prompt.items()}, **greedy)

    assert out_cuda.device.type == "cuda"
    assert out_cpu.shape == out_cuda.shape == (1, n_prompt + 8)
    torch.testing.assert_close(logits_cuda.cpu(), logits_cpu, atol=1e-4, rtol=1e-4)
    assert out_cuda.cpu().tolist() == out_cpu.tolist()
    assert out_cuda[0, :n_prompt].cpu().tolist() == prompt["input_ids"][0].tolist()
