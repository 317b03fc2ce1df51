"""DP-SGD language model training: accounting, the shared DP / non-DP loop, refusals, sampling.

All text here is invented; models are tiny GPT-2s built from a config.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tests.dplm_helpers import made_up_lm_texts, tiny_scratch_and_training
from tests.synthesis_helpers import allowlist, validator

from synthdeid.dplm.corpus import (
    ControlCoder,
    LmExample,
    control_token,
    placeholder_tokens,
    strip_control_tokens,
    training_examples,
)
from synthdeid.dplm.model import (
    build_lm,
    conv1d_to_linear,
    linear_to_conv1d,
    prepare_for_opacus,
    save_lm,
)
from synthdeid.dplm.privacy import (
    PrivacyConfig,
    PrivacyRefused,
    accountant_epsilon,
    default_delta,
    plan_privacy,
)
from synthdeid.dplm.sampling import (
    PlaceholderConstraint,
    Sample,
    SamplingConfig,
    decode_sample,
    generate_samples,
    has_placeholder,
    perplexity,
    placeholder_shares,
    validate_sample,
)
from synthdeid.dplm.training import (
    LM_SETTINGS_FILE,
    LmTrainingConfig,
    read_lm_settings,
    sampling_plan,
    train_lm,
)
from synthdeid.errors import ConfigError, InputError
from synthdeid.synthesis.prompts import seed_variant

CPU = torch.device("cpu")
SCRATCH, TRAINING = tiny_scratch_and_training()


@pytest.fixture(autouse=True)
def quiet_opacus() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        warnings.filterwarnings("ignore", message="Optimal order is the")
        yield


def examples_and_model(n: int = 24, seed: int = 0) -> tuple[list[LmExample], object, object]:
    texts = made_up_lm_texts(n)
    coder = ControlCoder.fit(["pii"], texts)
    examples = training_examples([(f"n{i}", t) for i, t in enumerate(texts)], [], coder)
    special = [control_token(c) for c in coder.all_codes()] + placeholder_tokens(allowlist(), texts)
    built = build_lm(None, SCRATCH, texts, special, seed=seed)
    model, tokenizer = built.model, built.tokenizer
    return examples, model, tokenizer


def train(privacy: PrivacyConfig | None, config: LmTrainingConfig = TRAINING):
    examples, model, tokenizer = examples_and_model()
    return train_lm(examples, model, tokenizer, config, privacy, device=CPU, progress=False)


# ---------------------------------------------------------------- privacy accounting


def test_default_delta_is_one_over_n_log_n() -> None:
    assert default_delta(100) == pytest.approx(1 / (100 * math.log(100)))
    with pytest.raises(ConfigError):
        default_delta(1)


def test_exactly_one_of_target_epsilon_and_noise_multiplier() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        PrivacyConfig.from_mapping({})
    with pytest.raises(ConfigError, match="exactly one"):
        PrivacyConfig.from_mapping({"target_epsilon": 4.0, "noise_multiplier": 1.0})
    with pytest.raises(ConfigError, match="unknown keys"):
        PrivacyConfig.from_mapping({"target_epsilon": 4.0, "epsilon": 4.0})
    with pytest.raises(ConfigError, match="torchcsprng"):
        PrivacyConfig.from_mapping({"target_epsilon": 4.0, "secure_mode": True})


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_epsilon_after_training_matches_a_direct_opacus_computation(accountant: str) -> None:
    from opacus.accountants import PRVAccountant, RDPAccountant

    result = train(PrivacyConfig(target_epsilon=4.0, accountant=accountant))
    record = result.privacy
    assert record["dp"] is True and record["accountant"] == accountant
    assert record["steps"] == 6 and record["N"] == 24
    assert record["delta"] == pytest.approx(default_delta(24))
    direct = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    direct.history = [(record["noise_multiplier"], record["sample_rate"], record["steps"])]
    expected = direct.get_epsilon(delta=record["delta"])
    assert record["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert record["epsilon"] <= 4.0 + 0.01
    assert record["epsilon"] > 3.5  # the plan spends the budget, not a fraction of it


def test_a_target_that_cannot_be_met_is_refused_before_training() -> None:
    config = PrivacyConfig(target_epsilon=0.05, max_noise_multiplier=5.0)
    with pytest.raises(
        PrivacyRefused, match=r"needs noise multiplier .* above max_noise_multiplier"
    ):
        plan_privacy(config, n=50, sample_rate=0.5, steps=500)
    examples, model, tokenizer = examples_and_model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(PrivacyRefused, match="refused"):
        train_lm(examples, model, tokenizer, TRAINING, config, device=CPU, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_noise_multiplier_run_reports_the_accountants_epsilon() -> None:
    result = train(PrivacyConfig(noise_multiplier=1.3))
    record = result.privacy
    assert record["target_epsilon"] is None and record["noise_multiplier"] == 1.3
    assert record["epsilon"] == pytest.approx(
        accountant_epsilon("rdp", 1.3, record["sample_rate"], 6, record["delta"])
    )


# ---------------------------------------------------------------- one loop for DP and non-DP


def test_dp_without_noise_or_clipping_takes_the_non_dp_steps() -> None:
    plain = train(None)
    unclipped = train(PrivacyConfig(noise_multiplier=0.0, max_grad_norm=1e9))
    assert [h["batch"] for h in plain.history] == [h["batch"] for h in unclipped.history]
    a = dict(plain.model.named_parameters())
    b = dict(unclipped.model.named_parameters())
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=2e-4, rtol=1e-3, msg=name)
    # with noise the same loop moves elsewhere
    noisy = train(PrivacyConfig(noise_multiplier=1.0))
    c = dict(noisy.model.named_parameters())
    assert any((a[n] - c[n]).abs().max() > 1e-3 for n in a)
    assert set(plain.privacy) == set(noisy.privacy)
    assert plain.privacy["dp"] is False and plain.privacy["epsilon"] is None
    assert unclipped.privacy["epsilon"] is None
    assert any("infinite" in c for c in unclipped.privacy["caveats"])


def test_empty_poisson_batches_are_noise_steps_the_accountant_counts() -> None:
    examples, model, tokenizer = examples_and_model(n=4)
    config = LmTrainingConfig(
        max_steps=16, logical_batch_size=1, physical_batch_size=1, max_length=32
    )
    plan = sampling_plan(4, config)
    assert plan.sample_rate == 0.25
    result = train_lm(
        examples,
        model,
        tokenizer,
        config,
        PrivacyConfig(noise_multiplier=1.0),
        device=CPU,
        progress=False,
    )
    record = result.privacy
    assert record["empty_batches"] == sum(1 for h in result.history if h["batch"] == 0) > 0
    assert record["steps"] == 16
    assert record["epsilon"] == pytest.approx(
        accountant_epsilon("rdp", 1.0, 0.25, 16, record["delta"])
    )


def test_ghost_clipping_trains_with_an_untied_head() -> None:
    result = train(PrivacyConfig(target_epsilon=8.0, clipping="ghost"))
    assert result.privacy["clipping"] == "ghost"
    assert result.preparation is not None and result.preparation.untied
    head = result.model.get_output_embeddings().weight
    assert head is not result.model.get_input_embeddings().weight
    assert all(not math.isnan(h["loss"]) for h in result.history if h["batch"])


def test_conv1d_swap_keeps_the_function_and_saves_a_standard_checkpoint(tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    _, model, tokenizer = examples_and_model()
    ids = torch.tensor([[1, 5, 9, 12, 40]])
    model.eval()
    before = model(input_ids=ids).logits
    assert conv1d_to_linear(model) == 4  # c_attn, c_proj, c_fc, c_proj of one block
    torch.testing.assert_close(model(input_ids=ids).logits, before)
    model, prep = prepare_for_opacus(model.train(), untie=False)
    model.eval()
    assert prep.fixed_modules == []
    save_lm(model, tokenizer, tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded(input_ids=ids).logits, before)
    assert linear_to_conv1d(loaded) == 0  # already Conv1D


def test_training_config_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="unknown keys"):
        LmTrainingConfig.from_mapping({"batch_size": 8})
    with pytest.raises(ConfigError, match="max_length"):
        LmTrainingConfig.from_mapping({"max_length": 4})
    with pytest.raises(ConfigError, match="at least 2"):
        sampling_plan(1, LmTrainingConfig())


# ---------------------------------------------------------------- control codes


def test_control_codes_by_pii_and_length() -> None:
    texts = ["short note", "a much longer note with [[DOCTOR_1]] and more words here", "x y z"]
    coder = ControlCoder.fit(["pii", "length"], texts)
    assert coder.length_threshold == 3
    assert coder.code(texts[0]) == "no_pii-short"
    assert coder.code(texts[1]) == "pii-long"
    assert coder.all_codes() == ["pii-short", "pii-long", "no_pii-short", "no_pii-long"]
    assert ControlCoder.from_json(coder.to_json()) == coder
    with pytest.raises(ConfigError):
        ControlCoder(("colour",))


def test_placeholder_tokens_cover_the_largest_number_seen() -> None:
    tokens = placeholder_tokens(allowlist(), ["[[DATE_3]] and [[DOCTOR_1]] and [[NOPE_9]]"])
    assert "[[DATE_3]]" in tokens and "[[DOCTOR_3]]" in tokens
    assert "[[DATE_4]]" not in tokens and not any("NOPE" in t for t in tokens)


# ---------------------------------------------------------------- sampling and perplexity


def test_decode_stops_at_the_end_of_note_and_drops_control_tokens() -> None:
    _, _, tokenizer = examples_and_model()
    body = tokenizer.encode(
        control_token("pii") + "pain controlled [[DATE_1]]", add_special_tokens=False
    )
    ids = [*body, tokenizer.eos_token_id, *tokenizer.encode("fever", add_special_tokens=False)]
    text, n_tokens, finished = decode_sample(tokenizer, ids)
    assert text == "pain controlled [[DATE_1]]"
    assert finished and n_tokens == len(body)
    assert strip_control_tokens("<|ctl:no_pii|>ok") == "ok"


def test_sampling_is_seeded_per_code() -> None:
    _, model, tokenizer = examples_and_model()
    model.eval()
    config = SamplingConfig(per_code=3, max_new_tokens=12, batch_size=2, seed=5)
    first = generate_samples(
        model, tokenizer, ["pii", "no_pii"], config, device=CPU, progress=False
    )
    again = generate_samples(
        model, tokenizer, ["pii", "no_pii"], config, device=CPU, progress=False
    )
    assert first == again
    assert [s.code for s in first] == ["pii"] * 3 + ["no_pii"] * 3
    assert len({s.sample_id for s in first}) == 6


def test_samples_pass_the_template_validator_before_the_fill() -> None:
    check = validator()
    variant = seed_variant(allowlist())

    def verdict(text: str) -> str | None:
        return validate_sample(Sample("s", "pii", text, 0, True), check, variant, 4).reason

    assert verdict("pain controlled, seen by [[DOCTOR_1]] on [[DATE_1]] today") is None
    assert verdict("too short") == "too_short"
    assert (
        verdict("pain controlled, seen by [[DOCTOR_1] on the ward today") == "malformed_placeholder"
    )
    assert (
        verdict("pain controlled, call [[PAGER_1]] on the ward today")
        == "placeholder_not_allowlisted"
    )
    assert verdict("pain controlled, follow up on 03/14/2091 in clinic").startswith(
        "identifier_like"
    )


def test_perplexity_is_the_exponentiated_mean_token_loss() -> None:
    _, model, tokenizer = examples_and_model()
    model.eval()
    texts = [("pii", "pain controlled [[DATE_1]]"), ("no_pii", "fever resolved overnight")]
    result = perplexity(model, tokenizer, texts, max_length=48, batch_size=1, device=CPU)
    total, tokens = 0.0, 0
    for code, text in texts:
        ids = [
            tokenizer.bos_token_id,
            *tokenizer.encode(control_token(code) + text, add_special_tokens=False),
            tokenizer.eos_token_id,
        ]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
        losses = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")
        total += float(losses[1:].sum())  # the control token is given, not predicted
        tokens += len(ids) - 2
    assert result.tokens == tokens
    assert result.perplexity == pytest.approx(math.exp(total / tokens), rel=1e-5)


def test_lm_settings_must_be_a_json_object(tmp_path: Path) -> None:
    settings = tmp_path / LM_SETTINGS_FILE
    settings.write_text('{"special_tokens": ["<c0>"]}')
    assert read_lm_settings(tmp_path) == {"special_tokens": ["<c0>"]}
    settings.write_text('["<c0>"]')
    with pytest.raises(InputError, match="not a train-dp-lm model directory: not a JSON object"):
        read_lm_settings(tmp_path)
    settings.unlink()
    with pytest.raises(InputError, match="not a train-dp-lm model directory"):
        read_lm_settings(tmp_path)


# ---------------------------------------------------------------- placeholders at sampling


def test_constrained_sampling_gives_pii_samples_placeholders_and_no_pii_samples_none() -> None:
    """An untrained model seldom writes a placeholder; constrained, every finished pii sample
    has one and no no_pii sample has any (the share is counted per code)."""
    _, model, tokenizer = examples_and_model()
    model.eval()
    settings = {"per_code": 8, "max_new_tokens": 24, "batch_size": 4, "seed": 2}
    free = generate_samples(
        model, tokenizer, ["pii", "no_pii"], SamplingConfig(**settings), device=CPU,
        progress=False,
    )  # fmt: skip
    constrained = generate_samples(
        model, tokenizer, ["pii", "no_pii"],
        SamplingConfig(**settings, placeholders="constrained", placeholder_bias=6.0),
        device=CPU, progress=False,
    )  # fmt: skip
    shares = placeholder_shares(constrained)
    assert shares["no_pii"]["with_placeholder"] == 0
    assert all(has_placeholder(s.text) for s in constrained if s.code == "pii" and s.finished)
    assert shares["pii"]["share"] > placeholder_shares(free)["pii"]["share"]
    assert shares["pii"]["samples"] == 8


def test_the_constraint_masks_the_end_until_a_placeholder_is_written() -> None:
    scores = torch.zeros(2, 10)
    written = torch.tensor([[1, 2, 7], [1, 2, 3]])  # prompt of 2 tokens; row 0 wrote id 7
    out = PlaceholderConstraint([7, 8], eos_id=9, prompt_length=2, require=True, bias=2.0)(
        written, scores
    )
    assert out[0, 9] == 0 and out[1, 9] == float("-inf")
    assert out[1, 7] == 2.0 and out[1, 8] == 2.0
    forbid = PlaceholderConstraint([7, 8], eos_id=9, prompt_length=2, require=False)(
        written, scores
    )
    assert forbid[0, 7] == float("-inf") and forbid[0, 9] == 0


@pytest.mark.parametrize(
    "settings",
    [
        {"placeholders": "always"},
        {"placeholders": "constrained", "placeholder_bias": -1.0},
        {"placeholder_bias": 3.0},
    ],
)
def test_placeholder_settings_are_checked(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="placeholder"):
        SamplingConfig.from_mapping(settings)
