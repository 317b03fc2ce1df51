"""A :class:`~synthdeid.llm.constraints.NoteShape` enforced on a transformers model.

:class:`ShapeLogitsProcessor` masks, at every decoding step and for every row
of a batch, the tokens whose text would take the answer out of the row's
shape (rows without a shape are left alone). It follows each row with a
:class:`~synthdeid.llm.constraints.ShapeMatcher`; once a row's answer is
complete only an end-of-sequence token is allowed.

Masks are computed once per (shape, matcher state) and reused: inside a free
segment every position with room for the longest token allows the same
tokens, so a long note costs a dictionary lookup per step. Computing one mask checks, character by
character, only the tokens that could leave the segment or match the next
literal (:class:`TokenTable` groups the vocabulary for that); every token of
plain text is allowed by a precomputed vector.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from synthdeid.llm.constraints import (
    ESCAPES,
    Free,
    Literal,
    MatchState,
    NoteShape,
    ShapeMatcher,
    free_char,
)

_REPLACEMENT = "\ufffd"


class TokenTable:
    """The text every token adds when it follows other text, grouped for masking.

    A token's text is read as ``decode([anchor, token])`` minus the anchor's
    text, so tokenizers that drop a word's leading space when it is decoded
    alone (SentencePiece) keep it. Special tokens, empty texts and tokens
    that decode to a partial UTF-8 sequence are never allowed in a shaped
    answer.
    """

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        anchor = tokenizer.encode("a", add_special_tokens=False)[:1]
        prefix = tokenizer.decode(anchor, clean_up_tokenization_spaces=False)
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        size = min(vocab_size, len(tokenizer))
        pairs = [[*anchor, i] for i in range(size)]
        decoded = tokenizer.batch_decode(pairs, clean_up_tokenization_spaces=False)
        self.texts: list[str] = [""] * vocab_size
        for i, text in enumerate(decoded):
            if i in special or not text.startswith(prefix):
                continue
            piece = text[len(prefix) :]
            if piece and _REPLACEMENT not in piece:
                self.texts[i] = piece
        self.longest = max(len(text) for text in self.texts)
        self.lengths = torch.tensor([len(text) for text in self.texts])
        # tokens of plain free text, with and without brackets allowed
        self.plain = {
            brackets: torch.tensor(
                [bool(t) and all(free_char(c, brackets) for c in t) for t in self.texts]
            )
            for brackets in (False, True)
        }
        # every usable token by its first character
        self.by_first: dict[str, list[int]] = defaultdict(list)
        for i, text in enumerate(self.texts):
            if text:
                self.by_first[text[0]].append(i)
        # tokens with some text that is not plain, by brackets setting
        self.mixed = {
            brackets: [
                i
                for i, text in enumerate(self.texts)
                if text and not self.plain[brackets][i].item()
            ]
            for brackets in (False, True)
        }


class ShapeLogitsProcessor:
    """Masks each row's scores to the tokens its shape allows (a transformers
    ``LogitsProcessor``). ``shapes[i]``: the shape of row ``i``, or None.
    ``prompt_width``: the (padded) prompt length, after which tokens are new."""

    def __init__(
        self,
        table: TokenTable,
        shapes: Sequence[NoteShape | None],
        prompt_width: int,
        eos_ids: Sequence[int],
    ) -> None:
        self.table = table
        self.matchers = [ShapeMatcher(s) if s is not None else None for s in shapes]
        self.states: list[MatchState | None] = [
            m.start() if m is not None else None for m in self.matchers
        ]
        self.width = prompt_width
        self.eos_ids = list(eos_ids)
        self.dead = [False] * len(shapes)
        self._masks: dict[tuple[NoteShape, tuple[int, int, bool]], torch.Tensor] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.width
        for row, matcher in enumerate(self.matchers):
            if matcher is None:
                continue
            if step > 0:
                self._follow(row, matcher, int(input_ids[row, -1]))
            allowed = self._allowed(row, matcher).to(scores.device)
            if allowed.shape[0] < scores.shape[1]:
                pad = torch.zeros(scores.shape[1] - allowed.shape[0], dtype=torch.bool)
                allowed = torch.cat([allowed, pad.to(scores.device)])
            scores[row] = scores[row].masked_fill(~allowed[: scores.shape[1]], float("-inf"))
        return scores

    def _follow(self, row: int, matcher: ShapeMatcher, token: int) -> None:
        state = self.states[row]
        if state is None or self.dead[row]:
            return
        if matcher.complete(state) or token in self.eos_ids:
            self.dead[row] = True  # finished: the row is padded from here on
            return
        text = self.table.texts[token] if token < self.table.vocab_size else ""
        new = matcher.advance(state, text) if text else None
        if new is None:  # cannot happen under the mask; keep decoding sane anyway
            self.dead[row] = True
            return
        self.states[row] = new

    def _allowed(self, row: int, matcher: ShapeMatcher) -> torch.Tensor:
        state = self.states[row]
        assert state is not None
        if self.dead[row] or matcher.complete(state):
            return self._eos_only()
        key = (matcher.shape, self._mask_key(matcher, state))
        mask = self._masks.get(key)
        if mask is None:
            mask = self._mask(matcher, state)
            self._masks[key] = mask
        return mask

    def _mask_key(self, matcher: ShapeMatcher, state: MatchState) -> tuple[int, int, bool]:
        """States that allow the same tokens share a key: in a free segment, every
        offset past the minimum with room for the longest token is the same, and so
        is every offset too far below the minimum for any token to reach it."""
        part = matcher.parts[state.part]
        longest = self.table.longest
        if isinstance(part, Literal):
            return (state.part, state.offset, False)
        if state.offset + longest < part.min_chars:  # no token reaches the minimum
            return (state.part, -2, state.escape)
        roomy = part.max_chars is None or part.max_chars - state.offset > longest
        if state.offset >= part.min_chars and roomy:
            return (state.part, -1, state.escape)
        return (state.part, state.offset, state.escape)

    def _eos_only(self) -> torch.Tensor:
        mask = torch.zeros(self.table.vocab_size, dtype=torch.bool)
        mask[[i for i in self.eos_ids if i < self.table.vocab_size]] = True
        return mask

    def _mask(self, matcher: ShapeMatcher, state: MatchState) -> torch.Tensor:
        table = self.table
        part = matcher.parts[state.part]
        if isinstance(part, Literal):
            mask = torch.zeros(table.vocab_size, dtype=torch.bool)
            candidates: list[int] = table.by_first.get(part.text[state.offset], [])
        elif state.escape:
            mask = torch.zeros(table.vocab_size, dtype=torch.bool)
            candidates = [i for char in ESCAPES for i in table.by_first.get(char, [])]
        else:
            assert isinstance(part, Free)
            mask = table.plain[part.brackets].clone()
            if part.max_chars is not None:  # near the end of a bounded segment: what still fits
                mask &= table.lengths <= part.max_chars - state.offset
            candidates = table.mixed[part.brackets]
        for token in candidates:
            new = matcher.advance(state, table.texts[token])
            if new is not None:  # None also when text follows a completed answer
                mask[token] = True
        return mask
