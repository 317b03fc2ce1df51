"""Answer shapes: the matcher, the GBNF grammar, shaped decoding, system folding."""

from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path

import pytest

from lm_helpers import train_tokenizer
from synthdeid.llm.answers import parse_json_object
from synthdeid.llm.base import ChatMessage, ChatRequest, ChatResponse, fold_system_messages
from synthdeid.llm.constraints import Free, Literal, NoteShape, ShapeMatcher
from synthdeid.llm.openai_http import OpenAICompatibleBackend

TWO = NoteShape("note", ("[[DATE_1]]", "[[DOCTOR_1]]"))


def shape_regex(shape: NoteShape) -> re.Pattern[str]:
    """The same language as a regular expression, written independently of the matcher."""
    seg = r'(?:[^"\\\[\]{}\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\\["\\/nrt])*'
    text = r'(?:[^"\\\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\\["\\/nrt])*'
    pattern = ""
    for part in shape.parts():
        if isinstance(part, Literal):
            pattern += re.escape(part.text)
        else:
            assert isinstance(part, Free)
            pattern += text if part.brackets else seg
    return re.compile(pattern, re.DOTALL)


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ('{"note": "Seen [[DATE_1]] by [[DOCTOR_1]]."}', True),
        ('{"note": "[[DATE_1]][[DOCTOR_1]]"}', True),
        ('{"note": "line one\nline two [[DATE_1]] \\"quoted\\" [[DOCTOR_1]]\\n"}', True),
        ('{"note": "Seen [[DOCTOR_1]] by [[DATE_1]]."}', False),  # order
        ('{"note": "Seen [[DATE_1]]."}', False),  # one missing
        ('{"note": "Seen [[DATE_1]] [[DATE_2]] by [[DOCTOR_1]]."}', False),  # an extra one
        ('{"note": "Seen [DATE_1] [[DATE_1]] by [[DOCTOR_1]]."}', False),  # pseudo
        ('{"note": "[[DATE_1]] [[DOCTOR_1]] \\q"}', False),  # bad escape
        ('{"note": "[[DATE_1]] [[DOCTOR_1]]"} trailing', False),
        ('{"note": "[[DATE_1]] [[DOCTOR_1]]', False),  # unfinished
        ('{"note":"[[DATE_1]] [[DOCTOR_1]]"}', False),  # the opening is exact
    ],
)
def test_matcher_accepts_exactly_the_shape(answer: str, ok: bool) -> None:
    assert ShapeMatcher(TWO).matches(answer) is ok
    assert bool(shape_regex(TWO).fullmatch(answer)) is ok


def test_json_only_and_no_placeholder_shapes() -> None:
    json_only = ShapeMatcher(NoteShape("note"))
    assert json_only.matches('{"note": "anything [DATE_1] {x} [[A_1]]"}')
    assert not json_only.matches('{"note": "a "quote" inside"}')
    none = ShapeMatcher(NoteShape("note", ()))
    assert none.matches('{"note": "no identifiers here."}')
    assert not none.matches('{"note": "seen on [[DATE_1]]"}')


def test_matcher_agrees_with_an_independent_regex_on_random_answers() -> None:
    rng = random.Random(3)
    alphabet = ['"', "\\", "[", "]", "{", "}", "a", " ", "\n", "\x01", "n", "[[DATE_1]]"]
    matcher, regex = ShapeMatcher(TWO), shape_regex(TWO)

    def segment() -> str:
        plain = "".join(rng.choice("ab \n,") for _ in range(rng.randint(0, 3)))
        noise = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 2)))
        return plain + (noise if rng.random() < 0.3 else "")

    outcomes = []
    for _ in range(3000):
        body = segment() + "[[DATE_1]]" + segment() + "[[DOCTOR_1]]" + segment()
        answer = '{"note": "' + body + '"}'
        expected = bool(regex.fullmatch(answer))
        assert matcher.matches(answer) is expected, answer
        outcomes.append(expected)
    assert 300 < sum(outcomes) < 2700  # the sample reaches both outcomes


def test_prefix_states_and_completion() -> None:
    matcher = ShapeMatcher(TWO)
    state = matcher.advance(matcher.start(), '{"note": "Seen [[DA')
    assert state is not None and not matcher.complete(state)
    assert matcher.advance(state, "X") is None  # inside a literal: only its text
    done = matcher.advance(state, 'TE_1]] by [[DOCTOR_1]]"}')
    assert done is not None and matcher.complete(done)
    assert matcher.advance(done, " ") is None  # nothing after a complete answer


def test_matched_answers_parse_to_the_note_with_its_placeholders() -> None:
    answer = '{"note": "Seen\non [[DATE_1]] by [[DOCTOR_1]], \\"fine\\"."}'
    assert ShapeMatcher(TWO).matches(answer)
    note = parse_json_object(answer)["note"]
    assert note == 'Seen\non [[DATE_1]] by [[DOCTOR_1]], "fine".'


def test_shape_refuses_what_cannot_go_into_json() -> None:
    with pytest.raises(ValueError, match="JSON key"):
        NoteShape('no"te')
    with pytest.raises(ValueError, match="cannot go into a JSON string"):
        NoteShape("note", ('[[A"1]]',))


def test_gbnf_lists_the_placeholders_in_order() -> None:
    grammar = TWO.gbnf()
    root = grammar.splitlines()[0]
    assert root == (
        r'root ::= "{\"note\": \"" segchar* "[[DATE_1]]" segchar* "[[DOCTOR_1]]" segchar* "\"}"'
    )
    assert "textchar*" in NoteShape("note").gbnf().splitlines()[0]
    bounded = NoteShape("note", ("[[DATE_1]]",), max_chars=(5, 0)).gbnf().splitlines()[0]
    assert "segchar{0,5}" in bounded and "segchar{0,0}" in bounded


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (scripts/setup-llm-server.sh installs it)",
)
def test_gbnf_compiles_in_llama_cpp() -> None:
    from llama_cpp import LlamaGrammar

    for shape in (TWO, NoteShape("note"), NoteShape("note", ())):
        assert LlamaGrammar.from_string(shape.gbnf(), verbose=False) is not None


# -- shaped decoding with a local model -------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lm_helpers import tiny_causal_lm_dir

    return tiny_causal_lm_dir(tmp_path_factory)


def test_transformers_decodes_inside_the_shape(tiny_lm: Path) -> None:
    from synthdeid.llm.transformers_local import TransformersBackend

    backend = TransformersBackend(str(tiny_lm), batch_size=3)
    shapes = [TWO, NoteShape("note", ()), NoteShape("note", ("[[DATE_1]]",))]
    requests = [
        ChatRequest.of(None, "Write a note.", max_tokens=400, seed=i, temperature=0.7, shape=s)
        for i, s in enumerate(shapes)
    ]
    results = backend.complete_many(requests)
    for shape, result in zip(shapes, results, strict=True):
        assert isinstance(result, ChatResponse)
        matcher = ShapeMatcher(shape)
        state = matcher.advance(matcher.start(), result.text)
        assert state is not None, "the answer left its shape"  # a prefix at the very least
        if result.output_tokens is not None and result.output_tokens < 400:
            assert matcher.complete(state)  # it stopped because the answer was whole


# -- system messages ----------------------------------------------------------------


def test_fold_system_messages() -> None:
    messages = (ChatMessage("system", "Be brief."), ChatMessage("user", "Write."))
    assert fold_system_messages(messages) == (ChatMessage("user", "Be brief.\n\nWrite."),)
    assert fold_system_messages(messages[1:]) == messages[1:]
    assert fold_system_messages(messages[:1]) == (ChatMessage("user", "Be brief."),)


def test_transformers_folds_system_when_the_template_drops_it(tmp_path: Path) -> None:
    from lm_helpers import tiny_causal_lm_dir
    from synthdeid.llm.transformers_local import TransformersBackend

    user_only = (
        "{% for message in messages %}{% if message['role'] == 'user' %}"
        "user: {{ message['content'] }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    dropping = TransformersBackend(str(tiny_causal_lm_dir(tmp_path, chat_template=user_only)))
    request = ChatRequest.of("Be brief.", "Write.")
    assert dropping.folds_system()
    assert dropping.prompt(request) == "user: Be brief.\n\nWrite.\nassistant:"
    kept = TransformersBackend(str(tiny_causal_lm_dir(tmp_path / "kept")))
    assert not kept.folds_system()
    forced = TransformersBackend(str(tiny_causal_lm_dir(tmp_path / "f")), fold_system=True)
    assert "system:" not in forced.prompt(request)


def test_openai_payload_carries_grammar_or_json_mode() -> None:
    shaped = ChatRequest.of("Be brief.", "Write.", shape=TWO)
    with_grammar = OpenAICompatibleBackend("http://127.0.0.1:1/v1", "m", grammar=True)
    body = with_grammar.payload(shaped)
    assert body["grammar"] == TWO.gbnf() and "response_format" not in body
    plain = OpenAICompatibleBackend("http://127.0.0.1:1/v1", "m").payload(shaped)
    assert "grammar" not in plain and plain["response_format"] == {"type": "json_object"}
    folded = OpenAICompatibleBackend("http://127.0.0.1:1/v1", "m", fold_system=True)
    assert folded.payload(shaped)["messages"] == [
        {"role": "user", "content": "Be brief.\n\nWrite."}
    ]
    assert with_grammar.cache_extra() == {"grammar": True}


def test_a_shape_changes_the_cache_key_and_no_shape_keeps_the_old_one() -> None:
    plain = ChatRequest.of(None, "Write.")
    assert "shape" not in plain.canonical()
    assert ChatRequest.of(None, "Write.", shape=TWO).canonical()["shape"] == {
        "key": "note",
        "placeholders": ["[[DATE_1]]", "[[DOCTOR_1]]"],
    }


def test_token_table_keeps_leading_spaces() -> None:
    from synthdeid.llm.shape_decoding import TokenTable

    tokenizer = train_tokenizer(["seen by the doctor on the day", '{"note": "[[DATE_1]]"}'])
    table = TokenTable(tokenizer, len(tokenizer))
    spaced = [t for t in table.texts if t.startswith(" ")]
    assert spaced, "byte-level tokens for ' word' keep their space"
    assert all(t == "" for i, t in enumerate(table.texts) if i in tokenizer.all_special_ids)


def test_segments_have_a_least_length() -> None:
    shape = NoteShape("note", ("[[DATE_1]]",), max_chars=(6, 4), min_chars=(3, 2))
    matcher = ShapeMatcher(shape)
    assert matcher.matches('{"note": "abc[[DATE_1]]de"}')
    assert not matcher.matches('{"note": "ab[[DATE_1]]de"}')  # first segment too short
    assert not matcher.matches('{"note": "abc[[DATE_1]]d"}')  # last segment too short
    assert "segchar{3,6}" in shape.gbnf() and "segchar{2,4}" in shape.gbnf()
    assert "segchar{5,}" in NoteShape("note", (), min_chars=(5,)).gbnf()
    with pytest.raises(ValueError, match="may not exceed"):
        NoteShape("note", (), max_chars=(2,), min_chars=(3,))


def test_segments_are_bounded_and_escapes_count_once() -> None:
    bounded = ShapeMatcher(NoteShape("note", ("[[DATE_1]]",), max_chars=(3, 2)))
    assert bounded.matches('{"note": "abc[[DATE_1]]de"}')
    assert bounded.matches('{"note": "a\\nb[[DATE_1]]"}')  # the escape is one character
    assert not bounded.matches('{"note": "abcd[[DATE_1]]de"}')
    assert not bounded.matches('{"note": "abc[[DATE_1]]def"}')
    with pytest.raises(ValueError, match="one per free segment"):
        NoteShape("note", ("[[DATE_1]]",), max_chars=(3,))


def test_bounded_segments_close_instead_of_overflowing(tiny_lm: Path) -> None:
    """Near a segment's bound only tokens that still fit (or end it) are allowed, and
    below its minimum none that ends it, so an answer under tight bounds is complete,
    never cut off inside its string, and long enough."""
    from synthdeid.llm.transformers_local import TransformersBackend

    backend = TransformersBackend(str(tiny_lm), batch_size=4)
    shapes = [
        NoteShape("note", ("[[DATE_1]]",), max_chars=(7, 5)),
        NoteShape("note", (), max_chars=(12,)),
        NoteShape("note", ("[[DATE_1]]",), max_chars=(30, 40), min_chars=(20, 25)),
    ]
    requests = [
        ChatRequest.of(None, "Write.", max_tokens=200, seed=s, temperature=1.0, shape=shape)
        for s in range(4)
        for shape in shapes
    ]
    for request, result in zip(requests, backend.complete_many(requests), strict=True):
        assert isinstance(result, ChatResponse)
        assert request.shape is not None and ShapeMatcher(request.shape).matches(result.text)
