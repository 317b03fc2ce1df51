"""A tiny "pretrained" causal LM on disk: a Llama-style model built from a config.

It stands in for SmolLM2 or BioGPT in tests (same code path: a Hugging Face
directory with its tokenizer, loaded with ``from_pretrained``), trained on
nothing. The tokenizer is a byte-level BPE over invented words.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

WORDS = [
    "patient",
    "stable",
    "overnight",
    "pain",
    "controlled",
    "with",
    "oral",
    "medication",
    "family",
    "visited",
    "nurse",
    "noted",
    "fever",
    "resolved",
    "pressure",
    "rate",
    "rhythm",
    "breathing",
    "comfortably",
    "ambulating",
    "diet",
]


def tiny_pretrained_lm(directory: Path, *, tie: bool = True) -> Path:
    """Write a 2-layer Llama (tied embeddings, like SmolLM2) and its tokenizer to ``directory``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from synthdeid.dplm.model import train_bpe_tokenizer

    texts = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1, special_tokens=[])
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def made_up_lm_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` made-up notes of WORDS; every other one ends with two placeholders."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))
        texts.append(body + (" seen by [[DOCTOR_1]] on [[DATE_1]]." if i % 2 else "."))
    return texts


def tiny_scratch_and_training():
    """The tiny scratch GPT-2 and the 6-step training settings the DP-SGD tests share."""
    from synthdeid.dplm.model import ScratchConfig
    from synthdeid.dplm.training import LmTrainingConfig

    scratch = ScratchConfig(
        n_layer=1, n_head=2, n_embd=32, n_positions=96, vocab_size=400, min_frequency=2
    )
    training = LmTrainingConfig(
        max_steps=6,
        logical_batch_size=6,
        physical_batch_size=4,
        max_length=48,
        learning_rate=1e-2,
        seed=3,
    )
    return scratch, training
