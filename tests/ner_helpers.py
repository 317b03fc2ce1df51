"""A tiny BERT token classifier built from a config (no download), for fast tests."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, BertConfig, BertModel

from synthdeid.ner.model import default_model_path


def tiny_encoder_dir(directory: Path, *, layers: int = 2, hidden: int = 32) -> Path:
    """An untrained 2-layer BERT encoder with the bundled MiniLM tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
