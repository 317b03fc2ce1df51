"""Word casing as token types, and initials attached to predicted names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.encoders import default_model_path
from synthdeid.errors import ConfigError
from synthdeid.ner.batching import collate
from synthdeid.ner.casing import (
    LOWER,
    N_CASE_TYPES,
    TITLE,
    UPPER,
    check_case_types,
    enable_case_types,
    token_case_types,
    word_case,
)
from synthdeid.ner.decoding import attach_initials
from synthdeid.ner.model import NER_CONFIG_FILE, DeidTagger
from synthdeid.ner.model_card import CARD_FILE, save_model_directory
from synthdeid.ner.tagging import encode_notes, make_windows
from synthdeid.ner.training import TrainingConfig, train
from synthdeid.notes import Span


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(default_model_path())


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("pt", LOWER),
        ("10/15", LOWER),
        (".", LOWER),
        ("Rixford", TITLE),
        ("McDonald", TITLE),
        ("MRSA", UPPER),
        ("E", UPPER),
        ("O'NEIL", UPPER),
        ("iPhone", LOWER),
    ],
)
def test_word_case(word: str, expected: int) -> None:
    assert word_case(word) == expected


def test_every_sub_word_takes_its_whole_words_casing(tokenizer) -> None:
    text = "Seen by Dr. Quillfeather, MRSA neg, pt 10/15 ok"
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = np.asarray(encoding["offset_mapping"], dtype=np.int64)
    types = token_case_types(text, offsets)
    by_word: dict[str, set[int]] = {}
    for (start, end), kind in zip(offsets.tolist(), types.tolist(), strict=True):
        by_word.setdefault(text[start:end], set()).add(kind)

    def types_within(word: str) -> list[int]:
        first = text.index(word)
        inside = range(first, first + len(word))
        return [int(types[k]) for k, (start, _) in enumerate(offsets.tolist()) if start in inside]

    assert len(types_within("Quillfeather")) > 1  # sub-words of one word...
    assert set(types_within("Quillfeather")) == {TITLE}  # ...share its casing
    assert set(types_within("MRSA")) == {UPPER}  # the offsets see the original capitals
    assert by_word["pt"] == {LOWER} and by_word["10"] == {LOWER} and by_word["/"] == {LOWER}
    assert by_word["Seen"] == {TITLE} and by_word[","] == {LOWER}


def test_windows_and_batches_carry_the_types(tokenizer) -> None:
    note = note_from_pieces("n1", "p1", ["Seen by Dr. ", ("WELSH", "DOCTOR"), " today " * 20])
    (encoded,) = encode_notes(tokenizer, [note], case_types=True)
    assert encoded.case_types is not None and encoded.case_types.shape == encoded.input_ids.shape
    windows = make_windows([encoded], max_length=16, stride=4, cls_id=101, sep_id=102)
    assert len(windows) > 1
    for window in windows:
        assert window.type_ids is not None
        assert window.type_ids[0] == 0 and window.type_ids[-1] == 0  # [CLS], [SEP]
        body = encoded.case_types[window.token_start : window.token_start + window.n_content]
        np.testing.assert_array_equal(window.type_ids[1:-1], body)
    batch = collate(windows, [0, len(windows) - 1], pad_id=0)
    assert batch["token_type_ids"].shape == batch["input_ids"].shape
    assert int(batch["token_type_ids"].max()) == UPPER  # "WELSH" in the first window
    (untyped,) = encode_notes(tokenizer, [note])
    plain = make_windows([untyped], max_length=16, stride=4, cls_id=101, sep_id=102)
    assert "token_type_ids" not in collate(plain, [0], pad_id=0)


def tiny_bert(**extra: object) -> BertForTokenClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=3,
        **extra,
    )
    return BertForTokenClassification(config).eval()


def test_enabling_case_types_starts_from_the_pretrained_behaviour() -> None:
    model = tiny_bert()
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    before = model(input_ids=ids).logits
    enable_case_types(model)
    table = model.bert.embeddings.token_type_embeddings
    assert table.num_embeddings == N_CASE_TYPES == model.config.type_vocab_size
    for row in (1, 2):
        torch.testing.assert_close(table.weight[row], table.weight[0])
    typed = torch.tensor([[0, 1, 2, 1, 0]])
    after = model(input_ids=ids, token_type_ids=typed).logits
    torch.testing.assert_close(before, after)  # new rows copy row 0: nothing changes yet
    enable_case_types(model)  # idempotent
    assert model.bert.embeddings.token_type_embeddings is table
    check_case_types(model)


def test_case_types_need_token_type_embeddings() -> None:
    from transformers import DistilBertConfig, DistilBertForTokenClassification

    config = DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32)
    with pytest.raises(ConfigError, match=r"no token type embeddings.*case_feature: false"):
        enable_case_types(DistilBertForTokenClassification(config))
    with pytest.raises(ConfigError, match="2 token types"):
        check_case_types(tiny_bert())


# ---------------------------------------------------------------- initials

TEXT = "AS PER E. WELSH: and J. R. Smith. Dr. Jones saw x.y Bob; Q. 10/15"


def span_of(word: str, label: str = "DOCTOR") -> Span:
    start = TEXT.index(word)
    return Span(start, start + len(word), label)


def surfaces(spans: list[Span]) -> list[tuple[str, str]]:
    return [(TEXT[s.start : s.end], s.label) for s in spans]


PREDICTED = [
    span_of("WELSH"),
    span_of("Smith"),
    span_of("Jones"),
    span_of("Bob", "PATIENT"),
    span_of("10/15", "DATE"),
]


def test_initials_become_spans_of_their_own() -> None:
    assert surfaces(attach_initials(PREDICTED, TEXT, "separate")) == [
        ("E", "DOCTOR"),
        ("WELSH", "DOCTOR"),
        ("J", "DOCTOR"),
        ("R", "DOCTOR"),
        ("Smith", "DOCTOR"),
        ("Jones", "DOCTOR"),  # "Dr." is a title, not an initial
        ("Bob", "PATIENT"),  # "y" has no period after it
        ("10/15", "DATE"),  # only names take initials
    ]


def test_initials_join_the_name_span() -> None:
    assert surfaces(attach_initials(PREDICTED, TEXT, "join"))[:2] == [
        ("E. WELSH", "DOCTOR"),
        ("J. R. Smith", "DOCTOR"),
    ]


def test_initials_off_changes_nothing_and_bad_modes_fail() -> None:
    assert attach_initials(PREDICTED, TEXT, "off") == PREDICTED
    with pytest.raises(ValueError, match=r"initials mode 'both'"):
        attach_initials(PREDICTED, TEXT, "both")


def test_an_initial_already_predicted_is_not_added_twice() -> None:
    initial = TEXT.index("E. WELSH")
    predicted = [Span(initial, initial + 1, "DOCTOR"), span_of("WELSH")]
    assert attach_initials(predicted, TEXT, "separate") == predicted


@pytest.mark.parametrize(
    ("text", "name", "initials"),
    [
        # "g." ends a word: only "V" is an initial, not the "g" of "evening"
        ("Vent weaned later this evening. \nV. Finn, RRT", "Finn", ["V"]),
        ("F/U AS APPROP. \nPG 33445", "PG", []),  # a line break is no gap
        ("SPUTUM THICK WHITE. \nPASSY MUIR VALVE", "PASSY", []),
        ("see E.\tWELSH", "WELSH", ["E"]),  # a tab is a gap, like one space
        ("E.  WELSH", "WELSH", []),  # two spaces are too wide a gap
    ],
)
def test_a_letter_ending_a_word_or_a_line_is_no_initial(
    text: str, name: str, initials: list[str]
) -> None:
    start = text.index(name)
    predicted = [Span(start, start + len(name), "DOCTOR")]
    added = attach_initials(predicted, text, "separate")[:-1]
    assert [text[s.start : s.end] for s in added] == initials


# ---------------------------------------------------------------- training with both


@pytest.mark.slow
def test_a_model_trained_with_casing_saves_loads_and_predicts(tmp_path: Path) -> None:
    torch.manual_seed(0)
    encoder = tiny_encoder_dir(tmp_path / "encoder", layers=1, hidden=16)
    notes = [
        note_from_pieces(
            f"n{i}",
            f"p{i % 4}",
            ["Seen by Dr. ", ("E", "DOCTOR"), ". ", (name, "DOCTOR"), " today."],
        )
        for i, name in enumerate(["WELSH", "Miller", "PRICE", "Spears", "RUTH", "Clifford"] * 2)
    ]
    config = TrainingConfig.from_mapping(
        {
            "model": str(encoder),
            "max_length": 32,
            "stride": 4,
            "epochs": 1,
            "batch_size": 4,
            "case_feature": True,
            "initials": "separate",
            "threads": 1,
        }
    )
    result = train(notes[:8], notes[8:], config, progress=False)
    assert result.tagger.model.config.type_vocab_size == N_CASE_TYPES
    out = save_model_directory(result, config, tmp_path / "model", mixture={}, run="cased")
    settings = json.loads((out / NER_CONFIG_FILE).read_text())
    assert settings["case_feature"] is True and settings["initials"] == "separate"
    assert json.loads((out / "config.json").read_text())["type_vocab_size"] == N_CASE_TYPES
    card = (out / CARD_FILE).read_text()
    assert "casing as token types (lower / Title / UPPER): yes" in card
    assert "initials before predicted names: separate" in card
    loaded = DeidTagger.load(out, device="cpu")
    ours = result.tagger.token_probabilities(result.tagger.encode(notes))
    theirs = loaded.token_probabilities(loaded.encode(notes))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert loaded.predict_spans(notes, o_threshold=0.99) == result.tagger.predict_spans(
        notes, o_threshold=0.99
    )


def test_training_config_checks_the_initials_mode() -> None:
    with pytest.raises(ConfigError, match=r"ner\.training\.initials: 'both'"):
        TrainingConfig.from_mapping({"initials": "both"})
