"""Word casing as a model input, for uncased encoders.

An uncased tokenizer (the bundled MiniLM lower-cases everything) throws away
the strongest surface cue for names: "Rixford" and "rixford" become the same
tokens, and so do "MRSA" and "mrsa". The casing feature gives it back
through an input every BERT-style encoder already has, the token type
(segment) embedding: each token gets the type of the *word* it belongs to
(the maximal run of letters and digits around it, so sub-words of one word
agree):

``0`` (:data:`LOWER`)
    no upper-case letter, or no letter at all ("pt", "10/15", ".");
``1`` (:data:`TITLE`)
    an upper-case first letter followed by lower case somewhere ("Rixford",
    "McDonald");
``2`` (:data:`UPPER`)
    every letter upper case ("MRSA", "WELSH", the single initial "E").

Whether a note is written in capitals shows through its context: in an
all-capitals note every word is type 2, and the model learns not to read
anything into it.

:func:`enable_case_types` replaces the encoder's type embedding table (two
rows in BERT: sentence A and B) by three rows, all copies of row 0 (the only
segment a token-classification input ever uses), so the model starts exactly
where the pretrained weights left it and fine-tuning learns what casing
means. The table is saved with
the model (``type_vocab_size: 3`` in its config), so ``from_pretrained``
restores it with no custom code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from synthdeid.errors import ConfigError
from synthdeid.ner.decoding import snap_to_words

if TYPE_CHECKING:
    import torch

LOWER, TITLE, UPPER = 0, 1, 2
N_CASE_TYPES = 3


def word_case(word: str) -> int:
    """The casing type of one word (see the module docstring)."""
    letters = [char for char in word if char.isalpha()]
    if not letters or not any(char.isupper() for char in letters):
        return LOWER
    if all(char.isupper() for char in letters):
        return UPPER
    return TITLE if letters[0].isupper() else LOWER


def token_case_types(text: str, offsets: np.ndarray) -> np.ndarray:
    """One casing type per token (int64, like ``offsets[:, 0]``), from its whole word."""
    types = np.zeros(len(offsets), dtype=np.int64)
    cache: dict[tuple[int, int], int] = {}
    for k, (start, end) in enumerate(offsets.tolist()):
        bounds = snap_to_words(text, start, end) if start < end else (start, end)
        if bounds not in cache:
            cache[bounds] = word_case(text[bounds[0] : bounds[1]])
        types[k] = cache[bounds]
    return types


def _type_embeddings(model: torch.nn.Module) -> torch.nn.Embedding:
    import torch

    embeddings = getattr(getattr(model, "base_model", model), "embeddings", None)
    table = getattr(embeddings, "token_type_embeddings", None)
    if not isinstance(table, torch.nn.Embedding):
        raise ConfigError(
            f"ner.training.case_feature: {type(model).__name__} has no token type embeddings "
            "to carry word casing (BERT-style encoders such as MiniLM and BERT have them); "
            "set case_feature: false for this model"
        )
    return table


def enable_case_types(model: torch.nn.Module) -> None:
    """Give the encoder :data:`N_CASE_TYPES` token types, all copies of its row 0.

    A model whose config already says ``type_vocab_size: 3`` (one saved with
    the feature, trained on) is left as it is.
    """
    import torch

    table = _type_embeddings(model)
    if getattr(model.config, "type_vocab_size", None) == N_CASE_TYPES:
        check_case_types(model)
        return
    grown = torch.nn.Embedding(
        N_CASE_TYPES, table.embedding_dim, device=table.weight.device, dtype=table.weight.dtype
    )
    with torch.no_grad():
        grown.weight[:] = table.weight[0]
    # an HF model's base_model and config are plain attributes, which torch types as
    # Tensor | Module
    embeddings = model.base_model.embeddings  # type: ignore[union-attr]
    embeddings.token_type_embeddings = grown  # type: ignore[union-attr]
    # BERT keeps a buffer of zero type ids for calls without token_type_ids; its size
    # follows positions, not types, so it needs no change
    model.config.type_vocab_size = N_CASE_TYPES  # type: ignore[union-attr]


def check_case_types(model: torch.nn.Module) -> None:
    """A model directory saved with the casing feature must still have its three types."""
    table = _type_embeddings(model)
    if table.num_embeddings < N_CASE_TYPES:
        raise ConfigError(
            f"the model has {table.num_embeddings} token types but its settings say it was "
            f"trained with the casing feature ({N_CASE_TYPES} types)"
        )
