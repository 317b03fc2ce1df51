"""BIO tags from character spans, and notes cut into overlapping token windows.

A note is tokenized once, without special tokens, by the model's *fast*
tokenizer, whose offset mapping ties every token to a character range of the
original text. Gold spans become one tag per token: ``B-LABEL`` on the first
token that overlaps a span, ``I-LABEL`` on the following ones, ``O`` elsewhere.
Every sub-word token carries a tag, so decoding can work on characters
without a first-sub-word convention.

Notes longer than the model's window are cut into windows of ``max_length``
tokens (special tokens included) that overlap by ``stride`` tokens, the
sliding-window scheme of VetSynth (512 / 64).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synthdeid.errors import ConfigError
from synthdeid.ner.casing import token_case_types
from synthdeid.notes import Note, Span

OUTSIDE = "O"
IGNORE_INDEX = -100  # positions the loss skips: special tokens and padding


def tag_names(labels: Sequence[str]) -> list[str]:
    """``O`` then ``B-X``, ``I-X`` for every label, in label order."""
    names = [OUTSIDE]
    for label in labels:
        names += [f"B-{label}", f"I-{label}"]
    return names


@dataclass(frozen=True)
class EncodedNote:
    """One note's tokens: ids, character offsets and (for training) tag ids."""

    note_id: str
    input_ids: np.ndarray  # int64, (n_tokens,)
    offsets: np.ndarray  # int64, (n_tokens, 2): [start, end) in the note text
    tags: np.ndarray | None  # int64, (n_tokens,) or None when no gold is wanted
    case_types: np.ndarray | None = None  # int64, (n_tokens,): see synthdeid.ner.casing

    @property
    def n_tokens(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class Window:
    """A model input: ``max_length`` tokens at most, special tokens included."""

    note_index: int  # position of the note in the encoded list
    token_start: int  # first note token inside the window
    input_ids: np.ndarray  # with [CLS] ... [SEP]
    tags: np.ndarray | None  # IGNORE_INDEX at the special tokens
    type_ids: np.ndarray | None = None  # casing types, 0 at the special tokens

    @property
    def n_content(self) -> int:
        return int(self.input_ids.shape[0]) - 2


def spans_to_tags(
    offsets: np.ndarray, spans: Sequence[Span], tag_index: dict[str, int]
) -> np.ndarray:
    """One tag id per token: B- on a span's first overlapping token, I- after it."""
    tags = np.zeros(len(offsets), dtype=np.int64)
    if not spans or len(offsets) == 0:
        return tags
    starts = offsets[:, 0]
    ends = offsets[:, 1]
    for span in spans:
        inside = np.nonzero((starts < span.end) & (ends > span.start))[0]
        if inside.size == 0:
            continue
        tags[inside] = tag_index[f"I-{span.label}"]
        tags[inside[0]] = tag_index[f"B-{span.label}"]
    return tags


def encode_notes(
    tokenizer: Any,
    notes: Sequence[Note],
    tag_index: dict[str, int] | None = None,
    *,
    batch_size: int = 256,
    case_types: bool = False,
) -> list[EncodedNote]:
    """Tokenize notes with offsets; with ``tag_index``, tag the gold spans too.

    ``case_types`` adds every token's word casing (:mod:`synthdeid.ner.casing`).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(
            "ner.model: the tokenizer must be a fast (Rust) tokenizer, which gives the "
            "character offsets that spans are mapped through"
        )
    encoded: list[EncodedNote] = []
    for first in range(0, len(notes), batch_size):
        chunk = notes[first : first + batch_size]
        batch = tokenizer(
            [note.text for note in chunk],
            add_special_tokens=False,
            return_offsets_mapping=True,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )
        for note, ids, offsets in zip(
            chunk, batch["input_ids"], batch["offset_mapping"], strict=True
        ):
            offset_array = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
            tags = None
            if tag_index is not None:
                tags = spans_to_tags(offset_array, note.spans, tag_index)
            casing = token_case_types(note.text, offset_array) if case_types else None
            encoded.append(
                EncodedNote(
                    note.note_id, np.asarray(ids, dtype=np.int64), offset_array, tags, casing
                )
            )
    return encoded


def window_starts(n_tokens: int, content_length: int, stride: int) -> list[int]:
    """Start positions of windows of ``content_length`` tokens overlapping by ``stride``."""
    if n_tokens <= content_length:
        return [0]
    step = content_length - stride
    starts = list(range(0, n_tokens - content_length, step))
    starts.append(n_tokens - content_length)  # the last window ends at the note's end
    return starts


def check_window_settings(max_length: int, stride: int) -> None:
    if max_length < 8:
        raise ConfigError(f"ner.max_length: {max_length} leaves no room for tokens")
    if not 0 <= stride < max_length - 2:
        raise ConfigError(
            f"ner.stride: {stride} must be at least 0 and below max_length - 2 ({max_length - 2})"
        )


def make_windows(
    encoded: Sequence[EncodedNote],
    *,
    max_length: int,
    stride: int,
    cls_id: int,
    sep_id: int,
) -> list[Window]:
    """Cut every note into windows; a note shorter than one window gives one window."""
    check_window_settings(max_length, stride)
    content = max_length - 2
    windows: list[Window] = []
    for index, note in enumerate(encoded):
        for start in window_starts(note.n_tokens, content, stride):
            stop = min(start + content, note.n_tokens)
            ids = np.concatenate(([cls_id], note.input_ids[start:stop], [sep_id]))
            tags = None
            if note.tags is not None:
                tags = np.concatenate(([IGNORE_INDEX], note.tags[start:stop], [IGNORE_INDEX]))
            type_ids = None
            if note.case_types is not None:
                type_ids = np.concatenate(([0], note.case_types[start:stop], [0]))
            windows.append(Window(index, start, ids.astype(np.int64), tags, type_ids))
    return windows
