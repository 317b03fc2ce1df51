"""DP-SGD on a pretrained model: LoRA adapters and added-token rows, or every weight.

The "pretrained" model is a tiny Llama written to disk from a config
(tests/dplm_helpers.py); everything runs on the CPU in seconds.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tests.dplm_helpers import WORDS, tiny_pretrained_lm
from tests.synthesis_helpers import allowlist

from synthdeid.dplm.adapters import (
    AddedTokenEmbedding,
    LoraSettings,
    apply_lora,
    merge_adapters,
)
from synthdeid.dplm.corpus import (
    ControlCoder,
    control_token,
    placeholder_tokens,
    training_examples,
)
from synthdeid.dplm.model import ScratchConfig, build_lm, load_lm, save_lm
from synthdeid.dplm.privacy import PrivacyConfig, default_delta
from synthdeid.dplm.training import LmTrainingConfig, train_lm
from synthdeid.errors import ConfigError

CPU = torch.device("cpu")
TRAINING = LmTrainingConfig(
    max_steps=4, logical_batch_size=6, physical_batch_size=4, max_length=48, learning_rate=5e-2
)
LORA = LoraSettings(rank=4, alpha=8.0)


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_pretrained_lm(tmp_path_factory.mktemp("tiny_llama"))


def texts(n: int = 24) -> list[str]:
    rng = random.Random(0)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        + (" seen by [[DOCTOR_1]] on [[DATE_1]]." if i % 2 else ".")
        for i in range(n)
    ]


def setup(pretrained: Path, *, resize: bool):
    notes = texts()
    coder = ControlCoder.fit(["pii"], notes)
    examples = training_examples([(f"n{i}", t) for i, t in enumerate(notes)], [], coder)
    special = [control_token(c) for c in coder.all_codes()] + placeholder_tokens(allowlist(), notes)
    built = build_lm(str(pretrained), ScratchConfig(), notes, special, seed=0, resize=resize)
    return examples, built


def train(pretrained: Path, privacy: PrivacyConfig | None, lora: LoraSettings | None):
    examples, built = setup(pretrained, resize=lora is None)
    return train_lm(
        examples,
        built.model,
        built.tokenizer,
        TRAINING,
        privacy,
        device=CPU,
        progress=False,
        lora=lora,
        base_vocabulary=built.base_vocabulary,
    ), built


def test_a_pretrained_model_gets_the_pipelines_tokens(pretrained: Path) -> None:
    _, built = setup(pretrained, resize=True)
    assert built.described["source"]["kind"] == "directory"
    assert built.described["tokenizer_fit_on_training_text"] is False
    added = len(built.tokenizer) - built.base_vocabulary
    assert added >= 3  # <|ctl:pii|>, <|ctl:no_pii|>, [[DOCTOR_1]], [[DATE_1]], ...
    assert built.model.get_input_embeddings().num_embeddings == len(built.tokenizer)
    ids = built.tokenizer.encode("seen by [[DOCTOR_1]]", add_special_tokens=False)
    assert ids[-1] >= built.base_vocabulary  # the placeholder is one added token
    _, kept = setup(pretrained, resize=False)
    assert kept.model.get_input_embeddings().num_embeddings == kept.base_vocabulary


def test_added_token_rows_extend_the_frozen_embedding_exactly(pretrained: Path) -> None:
    from synthdeid.dplm.adapters import attach_added_tokens

    _, built = setup(pretrained, resize=False)
    model, vocabulary = built.model, len(built.tokenizer)
    original = model.get_input_embeddings().weight.detach().clone()
    assert attach_added_tokens(model, built.base_vocabulary, vocabulary) == (
        vocabulary - built.base_vocabulary
    )
    embedding = model.get_input_embeddings()
    assert isinstance(embedding, AddedTokenEmbedding)
    ids = torch.tensor([[0, 5, built.base_vocabulary, vocabulary - 1]])
    out = embedding(ids)
    torch.testing.assert_close(out[0, :2], original[[0, 5]])
    torch.testing.assert_close(out[0, 2], original.mean(dim=0))  # mean initialisation
    logits = model(input_ids=ids).logits
    assert logits.shape[-1] == vocabulary


def test_dp_lora_trains_only_adapters_and_added_rows(pretrained: Path) -> None:
    from opacus.accountants import RDPAccountant

    original = {
        k: v.clone() for k, v in setup(pretrained, resize=False)[1].model.state_dict().items()
    }
    result, built = train(pretrained, PrivacyConfig(target_epsilon=4.0), LORA)
    trained = result.trained
    assert trained["mode"] == "lora"
    assert 0 < trained["trained"] < 0.25 * trained["total"]
    assert all(("lora_" in n) or n.endswith("added.weight") for n in trained["names"]), trained
    assert any("q_proj.lora_A" in n for n in trained["names"])
    assert any("embed_tokens.added" in n for n in trained["names"])
    # epsilon: the accountant's, recomputed directly
    record = result.privacy
    direct = RDPAccountant()
    direct.history = [(record["noise_multiplier"], record["sample_rate"], record["steps"])]
    assert record["epsilon"] == pytest.approx(direct.get_epsilon(delta=default_delta(24)))
    assert 3.5 < record["epsilon"] <= 4.01
    # merged back into a standard model: frozen weights as they were, adapted ones moved
    model = result.model
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.get_input_embeddings().num_embeddings == len(built.tokenizer)
    assert model.config.tie_word_embeddings is False
    state = model.state_dict()
    base = built.base_vocabulary
    key = "model.layers.0.mlp.down_proj.weight"
    torch.testing.assert_close(state[key], original[key])
    torch.testing.assert_close(
        state["model.embed_tokens.weight"][:base], original["model.embed_tokens.weight"]
    )
    q = "model.layers.0.self_attn.q_proj.weight"
    assert (state[q] - original[q]).abs().max() > 0


def test_merging_keeps_the_adapted_models_function(pretrained: Path, tmp_path: Path) -> None:
    _, built = setup(pretrained, resize=False)
    model = apply_lora(
        built.model, LORA, base_vocabulary=built.base_vocabulary, vocabulary=len(built.tokenizer)
    )
    with torch.no_grad():  # move the adapters and the added rows away from their start
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn_like(parameter))
                assert "lora_" in name or "added" in name
    ids = torch.tensor([[1, 7, 30, built.base_vocabulary, len(built.tokenizer) - 1]])
    model.eval()
    before = model(input_ids=ids).logits
    merged = merge_adapters(model)
    torch.testing.assert_close(merged(input_ids=ids).logits, before, atol=1e-5, rtol=1e-4)
    save_lm(merged, built.tokenizer, tmp_path)
    loaded, _ = load_lm(tmp_path, CPU)
    torch.testing.assert_close(loaded(input_ids=ids).logits, before, atol=1e-5, rtol=1e-4)


def test_lora_without_noise_or_clipping_takes_the_non_dp_steps(pretrained: Path) -> None:
    plain, _ = train(pretrained, None, LORA)
    unclipped, _ = train(pretrained, PrivacyConfig(noise_multiplier=0.0, max_grad_norm=1e9), LORA)
    assert plain.trained == unclipped.trained
    a, b = plain.model.state_dict(), unclipped.model.state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=2e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("clipping", ["flat", "ghost"])
def test_full_fine_tuning_of_a_pretrained_model_with_dp(pretrained: Path, clipping: str) -> None:
    result, built = train(pretrained, PrivacyConfig(target_epsilon=8.0, clipping=clipping), None)
    assert result.trained["mode"] == "full"
    assert result.trained["trained"] == result.trained["total"]
    assert result.privacy["epsilon"] <= 8.01
    assert result.model.get_input_embeddings().num_embeddings == len(built.tokenizer)
    assert not any(torch.isnan(p).any() for p in result.model.parameters())


def test_lora_settings_are_checked() -> None:
    assert LoraSettings.from_mapping({"target_modules": ["q_proj"]}).target_modules == ("q_proj",)
    with pytest.raises(ConfigError, match="rank"):
        LoraSettings.from_mapping({"rank": 0})
    with pytest.raises(ConfigError, match="unknown"):
        LoraSettings.from_mapping({"r": 8})


def test_lora_on_modules_the_model_lacks_is_a_config_error(pretrained: Path) -> None:
    _, built = setup(pretrained, resize=False)
    with pytest.raises(ConfigError, match=r"synth\.dplm\.lora"):
        apply_lora(
            built.model,
            LoraSettings(target_modules=("no_such_proj",)),
            base_vocabulary=built.base_vocabulary,
            vocabulary=len(built.tokenizer),
        )


def test_biogpt_tokenizer_and_model_build_offline_from_a_config(tmp_path: Path) -> None:
    """BioGPT (the method's model) needs sacremoses for its tokenizer; both classes
    construct without the hub from local files and a config."""
    import json

    from transformers import BioGptConfig, BioGptForCausalLM, BioGptTokenizer

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for word in ("patient</w>", "stable</w>", "over", "night</w>", "p", "a", "t"):
        vocab[word] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("o v\nov e\nove r\n")
    tokenizer = BioGptTokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    # sacremoses splits the words; the BPE maps them to the vocabulary
    assert tokenizer.moses_tokenize("stable, patient", "en") == ["stable", ",", "patient"]
    ids = tokenizer.encode("stable patient")
    assert ids[0] == vocab["</s>"] and all(0 <= i < len(vocab) for i in ids)
    config = BioGptConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = BioGptForCausalLM(config)
    assert model(input_ids=torch.tensor([ids])).logits.shape == (1, len(ids), len(vocab))
