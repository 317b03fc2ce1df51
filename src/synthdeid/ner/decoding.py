"""From window tag probabilities back to labelled character spans of a note.

Two steps:

1. :func:`merge_windows` gives every note token one probability vector. A
   token seen by several overlapping windows keeps the vector of the window
   that was most confident about it (highest maximum probability).
2. :func:`decode_spans` turns tokens into spans. A token is PHI when the
   probability of ``O`` is below ``o_threshold`` (0.5 is plain argmax for two
   classes; a higher threshold trades precision for recall, and the operating
   point picks it on validation notes). Its label is the label with the most
   B+I probability. Tokens written together (no whitespace between them, as
   in "10/15") always form one span; across whitespace, consecutive PHI
   tokens with the same label form one span unless a token prefers ``B`` over
   ``I`` (BIO boundaries between adjacent entities). Punctuation alone is
   never a span. Spans are then snapped outwards to whole words, so a name
   split into sub-words is never left half-redacted.
3. :func:`attach_initials` (optional) takes in the initials written before a
   predicted name ("E. WELSH", "J. R. Smith"): a lone letter followed by a
   period is a token the encoder sees as a stray character and rarely tags,
   yet it identifies the person as much as the surname does. ``separate``
   makes each initial its own span of the name's label (the PhysioNet
   convention: "E" and "WELSH" are two gold spans); ``join`` widens the name
   span over them (corpora that annotate "E. Welsh" as one span).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synthdeid.notes import Span


def merge_windows(
    n_tokens: int,
    token_starts: Sequence[int],
    window_probs: Sequence[np.ndarray],
    n_tags: int,
) -> np.ndarray:
    """Per-token probabilities (n_tokens, n_tags) from overlapping windows.

    ``window_probs[i]`` holds the content tokens of window ``i`` (special
    tokens already removed), starting at note token ``token_starts[i]``.
    """
    merged = np.zeros((n_tokens, n_tags), dtype=np.float32)
    best = np.full(n_tokens, -1.0, dtype=np.float32)
    for start, probs in zip(token_starts, window_probs, strict=True):
        stop = start + probs.shape[0]
        confidence = probs.max(axis=1)
        better = confidence > best[start:stop]
        rows = np.nonzero(better)[0]
        merged[start + rows] = probs[rows]
        best[start + rows] = confidence[rows]
    if n_tokens and (best < 0).any():
        raise ValueError("merge_windows: some tokens are covered by no window")
    return merged


def _is_word_char(char: str) -> bool:
    return char.isalnum()


def snap_to_words(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen [start, end) so that it does not cut a word (letters and digits) in two."""
    while start > 0 and _is_word_char(text[start - 1]) and _is_word_char(text[start]):
        start -= 1
    while end < len(text) and _is_word_char(text[end]) and _is_word_char(text[end - 1]):
        end += 1
    return start, end


def _drop_loose_punctuation(is_phi: np.ndarray, offsets: np.ndarray, text: str) -> np.ndarray:
    """PHI punctuation tokens survive only inside a written unit with PHI on both sides.

    The "/" of "10/15" stays when "10" and "15" are PHI; a lone "/" or the
    trailing "/" of "10/" is dropped, so fragments never become spans.
    """
    kept = is_phi.copy()
    n = len(is_phi)
    for token in np.nonzero(is_phi)[0]:
        start, end = int(offsets[token, 0]), int(offsets[token, 1])
        if any(char.isalnum() for char in text[start:end]):
            continue
        left = token > 0 and is_phi[token - 1] and int(offsets[token - 1, 1]) == start
        right = token + 1 < n and is_phi[token + 1] and int(offsets[token + 1, 0]) == end
        kept[token] = left and right
    return kept


def decode_spans(
    probs: np.ndarray,
    offsets: np.ndarray,
    text: str,
    labels: Sequence[str],
    *,
    o_threshold: float = 0.5,
) -> list[Span]:
    """Labelled, non-overlapping character spans from per-token probabilities.

    ``probs`` columns follow :func:`synthdeid.ner.tagging.tag_names`:
    O, B-labels[0], I-labels[0], B-labels[1], ...
    """
    if probs.shape[0] == 0:
        return []
    begin = probs[:, 1::2]
    inside = probs[:, 2::2]
    is_phi = probs[:, 0] < o_threshold
    label_ids = (begin + inside).argmax(axis=1)
    prefers_begin = (
        begin[np.arange(len(label_ids)), label_ids] > inside[np.arange(len(label_ids)), label_ids]
    )

    is_phi = _drop_loose_punctuation(is_phi, offsets, text)
    raw: list[tuple[int, int, int]] = []  # (start, end, label id)
    for token in np.nonzero(is_phi)[0]:
        start, end = int(offsets[token, 0]), int(offsets[token, 1])
        label = int(label_ids[token])
        if raw:
            prev_start, prev_end, prev_label = raw[-1]
            contiguous = token > 0 and is_phi[token - 1]
            # no whitespace between the tokens: one written unit ("10/15", "O'Neil")
            same_unit = start == prev_end
            new_entity = bool(prefers_begin[token]) and not same_unit
            if contiguous and (same_unit or (prev_label == label and not new_entity)):
                raw[-1] = (prev_start, end, prev_label)
                continue
        raw.append((start, end, label))

    spans: list[Span] = []
    for start, end, label in raw:
        start, end = snap_to_words(text, start, end)
        if spans and start < spans[-1].end:
            # snapping joined two spans inside one word: keep one span over both
            previous = spans.pop()
            start = previous.start
            end = max(end, previous.end)
            label_name = previous.label
        else:
            label_name = labels[label]
        spans.append(Span(start, end, label_name))
    return spans


NAME_LABELS = ("DOCTOR", "PATIENT")
INITIAL_MODES = ("off", "separate", "join")
_INITIAL_GAP = " \t"


def _initial_before(text: str, position: int) -> int | None:
    """Start of the initial ("E. ") that ends right before ``position``, if any.

    An initial is one ASCII letter that starts a word (nothing alphanumeric
    before it), then a period, then at most one space or tab. A line break in
    between, or a letter that ends a word ("evening.\nV. Finn"), is no initial.
    """
    end = position
    if end > 0 and text[end - 1] in _INITIAL_GAP:
        end -= 1
    letter = end - 2
    if letter < 0 or text[end - 1] != ".":
        return None
    if not (text[letter].isascii() and text[letter].isalpha()):
        return None
    if letter > 0 and text[letter - 1].isalnum():
        return None
    return letter


def attach_initials(
    spans: Sequence[Span], text: str, mode: str, labels: Sequence[str] = NAME_LABELS
) -> list[Span]:
    """Add the initials written before predicted name spans (see the module docstring)."""
    if mode not in INITIAL_MODES:
        raise ValueError(f"initials mode {mode!r} is not one of {INITIAL_MODES}")
    if mode == "off" or not spans:
        return list(spans)
    ordered = sorted(spans)
    out: list[Span] = []
    for k, span in enumerate(ordered):
        if span.label not in labels:
            out.append(span)
            continue
        floor = out[-1].end if out else (ordered[k - 1].end if k else 0)
        start = span.start
        initials: list[int] = []
        while (found := _initial_before(text, start)) is not None and found >= floor:
            initials.append(found)
            start = found
        if mode == "join":
            out.append(Span(start, span.end, span.label))
        else:
            out += [Span(i, i + 1, span.label) for i in reversed(initials)]
            out.append(span)
    return out
