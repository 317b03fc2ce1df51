"""Test helpers: a tiny GPT-2 causal LM with a byte-level BPE tokenizer trained on the fly.

Nothing is downloaded: the tokenizer is trained with ``tokenizers`` on the
given texts and the model is initialised from a config, so tests of code that
loads, samples from or trains a causal LM run offline in seconds. The model
is untrained (its output is noise) unless a test trains it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from synthdeid.dplm.model import train_bpe_tokenizer

# "role: content" lines, then "assistant:" when a generation prompt is asked for
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

DEFAULT_TEXTS = (
    "The patient was admitted with chest pain and shortness of breath.",
    "Troponin was negative; aspirin and a statin were continued.",
    '{"template": "Seen by [[DOCTOR_1]] on [[DATE_1]] for follow up."}',
)


def _directory(where: Any, name: str) -> Path:
    """A fresh directory from a ``tmp_path_factory`` or under a path."""
    if hasattr(where, "mktemp"):
        return Path(where.mktemp(name))
    directory = Path(where) / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def train_tokenizer(
    texts: Iterable[str],
    *,
    vocab_size: int = 500,
    extra_special_tokens: Sequence[str] = (),
    chat_template: str | None = CHAT_TEMPLATE,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (any text encodes) trained on ``texts``.

    The project's own trainer (:func:`synthdeid.dplm.model.train_bpe_tokenizer`),
    merging every pair (no minimum frequency), plus a chat template.
    """
    tokenizer = train_bpe_tokenizer(
        texts, vocab_size=vocab_size, min_frequency=0, special_tokens=extra_special_tokens
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def tiny_causal_lm_dir(
    where: Any,
    texts: Iterable[str] = DEFAULT_TEXTS,
    *,
    name: str = "tiny-gpt2",
    vocab_size: int = 500,
    extra_special_tokens: Sequence[str] = (),
    chat_template: str | None = CHAT_TEMPLATE,
    seed: int = 0,
    **config: Any,
) -> Path:
    """Save an untrained tiny GPT-2 and its tokenizer; returns the directory.

    ``where`` is a ``tmp_path_factory`` (a fresh ``name`` directory is made)
    or a path (``where/name``). ``config`` overrides the GPT-2 config
    (default: 2 layers, 2 heads, 64 dimensions, 256 positions). Weights are
    initialised from ``seed``, so the same arguments give the same model.
    """
    directory = _directory(where, name)
    tokenizer = train_tokenizer(
        texts,
        vocab_size=vocab_size,
        extra_special_tokens=extra_special_tokens,
        chat_template=chat_template,
    )
    settings = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 256, **config}
    model_config = GPT2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **settings,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
