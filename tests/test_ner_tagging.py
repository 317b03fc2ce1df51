"""BIO tagging through tokenizer offsets, windows, window merging and span decoding."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

from synthdeid.encoders import default_model_path
from synthdeid.errors import ConfigError
from synthdeid.ner.batching import collate, padding_share, shuffled_bucket_batches, sorted_batches
from synthdeid.ner.decoding import decode_spans, merge_windows, snap_to_words
from synthdeid.ner.tagging import (
    IGNORE_INDEX,
    encode_notes,
    make_windows,
    spans_to_tags,
    tag_names,
    window_starts,
)
from synthdeid.notes import Note, Span

LABELS = ("DOCTOR", "DATE")
TAGS = tag_names(LABELS)
TAG_INDEX = {tag: i for i, tag in enumerate(TAGS)}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(default_model_path())


def note(text: str, spans: list[Span], note_id: str = "n1") -> Note:
    return Note(note_id, "p1", text, tuple(spans), "made-up")


def test_tag_names_order() -> None:
    assert TAGS == ["O", "B-DOCTOR", "I-DOCTOR", "B-DATE", "I-DATE"]


def test_spans_become_bio_tags_through_offsets(tokenizer) -> None:
    text = "Seen by Dr. Abernathy-Quill on 11/15."
    start = text.index("Abernathy")
    end = text.index(" on")
    date = text.index("11/15")
    n = note(text, [Span(start, end, "DOCTOR"), Span(date, date + 5, "DATE")])
    (encoded,) = encode_notes(tokenizer, [n], TAG_INDEX)
    pieces = [text[s:e] for s, e in encoded.offsets]
    tags = [TAGS[t] for t in encoded.tags]
    tagged = [(p, t) for p, t in zip(pieces, tags, strict=True) if t != "O"]
    assert tagged[0][1] == "B-DOCTOR"
    assert all(t == "I-DOCTOR" for _, t in tagged[1:] if _ not in ("11", "/", "15"))
    assert [t for p, t in tagged if p in ("11", "/", "15")] == ["B-DATE", "I-DATE", "I-DATE"]
    assert "".join(p for p, t in tagged if t.endswith("DOCTOR")) == "Abernathy-Quill"
    assert tags[pieces.index("seen") if "seen" in pieces else 0] == "O"


def test_spans_to_tags_without_spans_is_all_outside() -> None:
    offsets = np.array([[0, 3], [4, 8]])
    assert spans_to_tags(offsets, [], TAG_INDEX).tolist() == [0, 0]


def test_window_starts_cover_the_note_with_overlap() -> None:
    assert window_starts(5, 10, 2) == [0]
    starts = window_starts(25, 10, 2)
    assert starts == [0, 8, 15]
    covered = set()
    for s in starts:
        covered |= set(range(s, s + 10))
    assert covered == set(range(25))


def test_window_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="stride"):
        make_windows([], max_length=16, stride=14, cls_id=1, sep_id=2)


def test_windows_add_special_tokens_and_ignore_them(tokenizer) -> None:
    text = " ".join(f"word{i}" for i in range(40))
    (encoded,) = encode_notes(tokenizer, [note(text, [])], TAG_INDEX)
    windows = make_windows(
        [encoded], max_length=16, stride=4, cls_id=tokenizer.cls_token_id, sep_id=101
    )
    assert len(windows) > 1
    for window in windows:
        assert window.input_ids[0] == tokenizer.cls_token_id
        assert window.tags is not None
        assert window.tags[0] == IGNORE_INDEX and window.tags[-1] == IGNORE_INDEX
        assert len(window.input_ids) <= 16
    assert windows[-1].token_start + windows[-1].n_content == encoded.n_tokens


def test_merge_windows_keeps_the_most_confident_window() -> None:
    # 6 tokens, two windows of 4 overlapping on tokens 2-3
    first = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.55, 0.45]], dtype=np.float32)
    second = np.array([[0.2, 0.8], [0.95, 0.05], [0.7, 0.3], [0.1, 0.9]], dtype=np.float32)
    merged = merge_windows(6, [0, 2], [first, second], 2)
    assert merged[:2].tolist() == first[:2].tolist()
    assert merged[2].tolist() == pytest.approx([0.2, 0.8])  # second window more confident
    assert merged[3].tolist() == pytest.approx([0.95, 0.05])
    assert merged[4:].tolist() == second[2:].tolist()


def test_merge_windows_rejects_uncovered_tokens() -> None:
    with pytest.raises(ValueError, match="no window"):
        merge_windows(5, [0], [np.ones((3, 2), dtype=np.float32) / 2], 2)


def one_hot(tags: list[str], confidence: float = 0.9) -> np.ndarray:
    probs = np.full((len(tags), len(TAGS)), (1 - confidence) / (len(TAGS) - 1), dtype=np.float32)
    for row, tag in enumerate(tags):
        probs[row, TAGS.index(tag)] = confidence
    return probs


def test_decode_joins_b_i_and_splits_adjacent_entities() -> None:
    text = "Dr Ann Lee Bob Ray saw"
    offsets = np.array([[0, 2], [3, 6], [7, 10], [11, 14], [15, 18], [19, 22]])
    tags = ["O", "B-DOCTOR", "I-DOCTOR", "B-DOCTOR", "I-DOCTOR", "O"]
    spans = decode_spans(one_hot(tags), offsets, text, LABELS)
    assert [s.surface(text) for s in spans] == ["Ann Lee", "Bob Ray"]
    assert all(s.label == "DOCTOR" for s in spans)


def test_decode_changes_span_on_label_change_and_snaps_subwords() -> None:
    text = "Abernathy 11/15"
    # sub-word pieces: "Aber" "nathy" | "11" "/" "15"; the second piece alone is tagged
    offsets = np.array([[0, 4], [4, 9], [10, 12], [12, 13], [13, 15]])
    tags = ["O", "I-DOCTOR", "B-DATE", "I-DATE", "I-DATE"]
    spans = decode_spans(one_hot(tags), offsets, text, LABELS)
    assert spans == [Span(0, 9, "DOCTOR"), Span(10, 15, "DATE")]


def test_o_threshold_trades_precision_for_recall() -> None:
    text = "Ann saw"
    offsets = np.array([[0, 3], [4, 7]])
    probs = np.array([[0.7, 0.2, 0.1, 0.0, 0.0], [0.99, 0.005, 0.005, 0.0, 0.0]], dtype=np.float32)
    assert decode_spans(probs, offsets, text, LABELS, o_threshold=0.5) == []
    assert decode_spans(probs, offsets, text, LABELS, o_threshold=0.8) == [Span(0, 3, "DOCTOR")]


def test_snap_to_words() -> None:
    assert snap_to_words("xx Abernathy yy", 5, 9) == (3, 12)
    assert snap_to_words("a 11/15 b", 2, 4) == (2, 4)


def test_window_merge_on_a_note_longer_than_one_window(tokenizer) -> None:
    """A note of many windows decodes to exactly its gold spans from oracle probabilities."""
    words = [f"w{i}" for i in range(150)]
    text = " ".join(words)
    gold = []
    for i in (3, 60, 61, 140):  # one span inside the overlap region of two windows
        start = text.index(f" {words[i]} ") + 1
        gold.append(Span(start, start + len(words[i]), "DOCTOR" if i != 61 else "DATE"))
    (encoded,) = encode_notes(tokenizer, [note(text, gold)], TAG_INDEX)
    windows = make_windows(
        [encoded], max_length=32, stride=8, cls_id=tokenizer.cls_token_id, sep_id=102
    )
    assert len(windows) > 5
    # each window is confident about its own tokens except near its edges
    window_probs = []
    for window in windows:
        content = window.tags[1:-1]
        probs = one_hot([TAGS[t] for t in content], confidence=0.9)
        probs[:2] = one_hot(["O"] * 2, confidence=0.51)  # unsure (and wrong) at the left edge
        window_probs.append(probs)
    merged = merge_windows(encoded.n_tokens, [w.token_start for w in windows], window_probs, 5)
    spans = decode_spans(merged, encoded.offsets, text, LABELS)
    assert spans == sorted(gold)


def test_length_bucketed_batches_waste_little_padding() -> None:
    from synthdeid.ner.tagging import Window

    rng = np.random.default_rng(0)
    windows = [
        Window(i, 0, np.ones(int(n), dtype=np.int64), np.zeros(int(n), dtype=np.int64))
        for i, n in enumerate(rng.integers(5, 500, size=400))
    ]
    random_batches = [list(range(i, i + 16)) for i in range(0, 400, 16)]
    bucketed = shuffled_bucket_batches(windows, 16, rng)
    assert sorted(i for b in bucketed for i in b) == list(range(400))
    assert padding_share(windows, bucketed) < 0.1 < padding_share(windows, random_batches)
    inference = sorted_batches(windows, 16)
    assert padding_share(windows, inference) < 0.05
    batch = collate(windows, inference[0], pad_id=0)
    assert batch["input_ids"].shape == batch["labels"].shape
    assert batch["input_ids"].shape[1] % 8 == 0
    assert batch["input_ids"].shape[1] - max(len(windows[i].input_ids) for i in inference[0]) < 8
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()
    assert int(batch["attention_mask"].sum()) == sum(
        len(windows[i].input_ids) for i in inference[0]
    )
