"""The request guard: seed PHI surfaces and identifier-like strings never reach a server."""

from __future__ import annotations

import json
import logging
import random
import re
import time
from pathlib import Path

import pytest

import llm_server
from llm_server import ScriptedChatServer
from synthdeid.artifacts import write_parquet_atomic
from synthdeid.errors import InputError
from synthdeid.identifiers import IdentifierScanner
from synthdeid.llm import (
    ChatFailure,
    ChatRequest,
    ChatResponse,
    GuardedBackend,
    OpenAICompatibleBackend,
    RequestGuard,
    load_phi_surfaces,
)
from synthdeid.mask import RemovedValue, removed_table
from synthdeid.synthesis.placeholders import load_allowlist

chat_server = llm_server.chat_server  # the fixture

REPO = Path(__file__).resolve().parents[1]
# the allowlisted placeholder names (DOCTOR, PATIENT, DATE, ...): the only ones blanked
PLACEHOLDERS = load_allowlist(REPO / "resources" / "placeholders.yaml").names

CANARY = "Zebulon Quackenbush"
SURFACES = [
    (CANARY, "PATIENT"),
    ("Dr. Ann Smythe", "DOCTOR"),
    ("Ann", "PATIENT"),
    ("Mercy General", "HOSPITAL"),
    ("mercy general", "LOCATION"),
    ("JT", "DOCTOR"),
    ("42", "AGE"),
]
CLEAN = (
    "[[DOCTOR_1]] saw [[PATIENT_1]] on [[DATE_1]] at [[HOSPITAL_1]] for chest pain. "
    "BP 132/84, HR 88. Troponin negative. Continue aspirin 81 mg daily; annual exam due."
)


@pytest.fixture(scope="module")
def scanner() -> IdentifierScanner:
    return IdentifierScanner()


@pytest.fixture
def guard(scanner: IdentifierScanner) -> RequestGuard:
    return RequestGuard(SURFACES, scanner, placeholders=PLACEHOLDERS)


def prompt(note: str) -> ChatRequest:
    return ChatRequest.of("Rewrite the masked note as JSON.", f"<note>\n{note}\n</note>")


def test_canary_request_is_refused_and_never_sent(
    chat_server: ScriptedChatServer, guard: RequestGuard
) -> None:
    inner = OpenAICompatibleBackend(chat_server.url, "m", backoff_s=0.0, max_retries=0)
    guarded = GuardedBackend(inner, guard)
    notes = [
        CLEAN,
        f"Seen with ZEBULON   quackenbush today. {CLEAN}",
        CLEAN.replace("chest", "back"),
    ]
    results = guarded.complete_many([prompt(n) for n in notes])
    assert isinstance(results[0], ChatResponse) and isinstance(results[2], ChatResponse)
    assert results[2].text.startswith("echo: ") and "back pain" in results[2].text  # order kept
    assert isinstance(results[1], ChatFailure)
    assert results[1].reason == "refused by guard: seed PHI surface (label PATIENT, 21 chars)"
    assert chat_server.count == 2
    sent = json.dumps(chat_server.requests).casefold()
    assert "quackenbush" not in sent and "zebulon" not in sent
    assert (guarded.sent, guarded.refused) == (2, 1)
    assert guarded.refusal_reasons == {"phi_surface": 1}


def test_nothing_is_sent_when_every_request_is_refused(
    chat_server: ScriptedChatServer, guard: RequestGuard
) -> None:
    guarded = GuardedBackend(OpenAICompatibleBackend(chat_server.url, "m"), guard)
    results = guarded.complete_many([prompt(f"{CANARY} again"), prompt("Mercy General ED")])
    assert all(isinstance(r, ChatFailure) for r in results)
    assert chat_server.count == 0
    assert guarded.sent == 0 and guarded.refused == 2


def test_surfaces_match_any_case_and_spacing(guard: RequestGuard) -> None:
    assert guard.check("seen by zebulon\n   QUACKENBUSH, today") == [
        "seed PHI surface (label PATIENT, 22 chars)"
    ]
    # the doctor's name, and the patient surface "Ann" inside it
    assert guard.check("dr.  ann SMYTHE called") == [
        "seed PHI surface (label DOCTOR, 15 chars)",
        "seed PHI surface (label PATIENT, 3 chars)",
    ]
    # one surface under two labels: both named
    assert guard.check("transferred from MERCY GENERAL") == [
        "seed PHI surface (label HOSPITAL/LOCATION, 13 chars)"
    ]


def test_surfaces_match_whole_words_only() -> None:
    guard = RequestGuard([("Ann", "PATIENT")], None, placeholders=PLACEHOLDERS)
    assert guard.check("Annual exam. Joanne and Anna came; planned annually.") == []
    assert guard.check("Ann came in.") != []
    assert guard.check("seen by ann.") != []


def test_short_surfaces_are_skipped_and_counted(guard: RequestGuard) -> None:
    assert guard.skipped == 2
    assert guard.surfaces == 4  # the two spellings of Mercy General are one surface
    assert guard.check("JT reviewed; 42 mg given") == []
    stricter = RequestGuard(
        [("JT", "DOCTOR")], None, min_surface_chars=2, placeholders=PLACEHOLDERS
    )
    assert stricter.skipped == 0 and stricter.check("JT reviewed") != []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Seen on 3/14/2019 in clinic.", "identifier-like date (9 chars)"),
        ("Call (617) 555-0199 with questions.", "identifier-like phone (14 chars)"),
        ("Results to someone@example.org.", "identifier-like email (19 chars)"),
        ("Discussed with Jennifer.", "identifier-like name (8 chars)"),
    ],
)
def test_identifier_like_strings_are_refused(guard: RequestGuard, text: str, reason: str) -> None:
    assert guard.check(text) == [reason]


def test_placeholders_pass(guard: RequestGuard) -> None:
    assert guard.check(CLEAN) == []
    placeholder_words = RequestGuard([("Doctor", "DOCTOR")], None, placeholders=PLACEHOLDERS)
    assert placeholder_words.check("[[DOCTOR_1]] reviewed [[DOCTOR_2]]'s note") == []
    assert placeholder_words.check("The doctor reviewed it") != []


def test_reasons_and_logs_carry_no_phi(
    guard: RequestGuard, chat_server: ScriptedChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    identifiers = ["3/14/2019", "(617) 555-0199", "someone@example.org", "Jennifer"]
    text = " ".join([CANARY, "Dr. Ann Smythe", "Mercy General", "Ann", *identifiers])
    guarded = GuardedBackend(OpenAICompatibleBackend(chat_server.url, "m"), guard)
    [result] = guarded.complete_many([prompt(text)])
    assert isinstance(result, ChatFailure)
    reasons = guard.check(text)
    assert len(reasons) == 9  # 4 surfaces (Ann twice: alone and in the DOCTOR name), 5 scanner
    record = (
        result.reason + "\n".join(reasons) + caplog.text + json.dumps(guarded.describe())
    ).casefold()
    for secret in [*[s for s, _ in SURFACES if len(s) >= 3], *identifiers]:
        for word in secret.split():
            if len(word) >= 3:
                assert not re.search(rf"(?<!\w){re.escape(word.casefold())}(?!\w)", record), word
    assert guarded.refusal_reasons == {
        "phi_surface": 1,
        "date": 1,
        "phone": 1,
        "email": 1,
        "name": 1,
    }


def test_counters_add_up(chat_server: ScriptedChatServer, guard: RequestGuard) -> None:
    guarded = GuardedBackend(OpenAICompatibleBackend(chat_server.url, "m"), guard)
    batch = [prompt(CLEAN), prompt(f"{CANARY}"), prompt("Seen 3/14/2019"), prompt(CLEAN)]
    guarded.complete_many(batch)
    guarded.complete_many(batch[:2])
    assert (guarded.sent, guarded.refused) == (3, 3)
    assert guarded.refusal_reasons == {"phi_surface": 2, "date": 1}
    assert chat_server.count == 3


def test_guard_without_scanner_checks_surfaces_only() -> None:
    guard = RequestGuard([CANARY], None, placeholders=PLACEHOLDERS)
    assert guard.check("Seen 3/14/2019 by Jennifer") == []
    assert guard.check(f"Seen by {CANARY}") == ["seed PHI surface (label unknown, 19 chars)"]


def test_load_phi_surfaces(tmp_path: Path) -> None:
    def removed(surface: str, label: str) -> RemovedValue:
        return RemovedValue("n1", "p1", f"[[{label}_1]]", label, surface, 0, 1, 0, 1, False)

    path = tmp_path / "removed.parquet"
    values = [
        removed(CANARY, "PATIENT"),
        removed("Mercy General", "HOSPITAL"),
        removed(CANARY, "PATIENT"),
    ]
    write_parquet_atomic(removed_table(values), path)
    assert load_phi_surfaces(path) == [(CANARY, "PATIENT"), ("Mercy General", "HOSPITAL")]
    wrong = tmp_path / "wrong.parquet"
    write_parquet_atomic(removed_table(values).drop(["surface"]), wrong)
    with pytest.raises(InputError, match="surface"):
        load_phi_surfaces(wrong)


def test_guard_is_fast_on_thousands_of_surfaces(scanner: IdentifierScanner) -> None:
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    surfaces = [
        (" ".join("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(rng.randint(1, 3))), "X")
        for _ in range(2000)
    ]  # fmt: skip
    guard = RequestGuard(surfaces, scanner, placeholders=PLACEHOLDERS)
    note = (CLEAN + " ") * 25  # about 4,000 characters
    start = time.perf_counter()
    for _ in range(200):
        guard.check(note)
    per_request = (time.perf_counter() - start) / 200
    assert per_request < 0.05  # measured a few ms; this only catches a quadratic blow-up


# -- disguised surfaces -------------------------------------------------------------

PLAIN_REASON = "seed PHI surface (label PATIENT, 19 chars)"


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" for c in text)


@pytest.mark.parametrize(
    "disguised",
    [
        pytest.param(CANARY, id="plain"),
        pytest.param("Zebulon Quack\u200benbush", id="zero-width-space"),
        pytest.param("Zebu\u00adlon Quacken\u00adbush", id="soft-hyphen"),
        pytest.param("Zebulon Quack\u2060enbush", id="word-joiner"),
        pytest.param("\ufeffZebulon Quacken\ufeffbush", id="byte-order-mark"),
        pytest.param("Zebulon Quack\u200denbu\u200csh", id="zero-width-joiners"),
        pytest.param(fullwidth(CANARY), id="fullwidth"),
        pytest.param("Zebul\u043en Qu\u0430ck\u0435nbu\u0455h", id="cyrillic-homoglyphs"),
        pytest.param("\u0396ebul\u03bfn Quackenbush", id="greek-homoglyphs"),
        pytest.param("\U0001d419\U0001d41e\U0001d41b\U0001d42e\U0001d425\U0001d428\U0001d427 Quackenbush", id="math-bold"),
        pytest.param("Zebulon Quack-enbush", id="hyphen-split"),
        pytest.param("Zebulon Qua-ck-en-bush", id="hyphens-split"),
        pytest.param("Zebulon Quack\u2013enbush", id="en-dash-split"),
        pytest.param("Zebulon Quack\u2011enbush", id="non-breaking-hyphen-split"),
        pytest.param("Zebulon-Quackenbush", id="hyphen-as-word-break"),
        pytest.param("Zebulon Q\u0336uackenbush", id="combining-overlay"),
        pytest.param("ZEBULON qu\u0430ck\u200b-\uff45nbush", id="mixed"),
    ],
)  # fmt: skip
def test_disguised_surfaces_are_refused_as_the_plain_one(
    disguised: str, chat_server: ScriptedChatServer
) -> None:
    guard = RequestGuard([(CANARY, "PATIENT")], None, placeholders=PLACEHOLDERS)
    assert guard.check(f"Seen by {disguised} today. {CLEAN}") == [PLAIN_REASON]
    guarded = GuardedBackend(OpenAICompatibleBackend(chat_server.url, "m"), guard)
    [result] = guarded.complete_many([prompt(f"Seen by {disguised} today.")])
    assert result == ChatFailure("refused by guard: " + PLAIN_REASON)
    assert chat_server.count == 0


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(fullwidth(CANARY), id="fullwidth"),
        pytest.param("Zebulon Qu\u0430ck\u200benbush", id="cyrillic-and-zero-width"),
        pytest.param("Zebulon Quack-enbush", id="hyphen-split"),
    ],
)
def test_disguised_stored_surfaces_find_the_plain_text(stored: str) -> None:
    guard = RequestGuard([(stored, "PATIENT")], None, placeholders=PLACEHOLDERS)
    assert guard.check(f"Seen by {CANARY} today.") == [PLAIN_REASON]


def test_folding_keeps_whole_word_matching() -> None:
    guard = RequestGuard(
        [("Ann", "PATIENT"), ("Smythe", "DOCTOR"), ("Mary-Jo", "PATIENT")],
        None,
        placeholders=PLACEHOLDERS,
    )
    assert guard.surfaces == 3
    # a surface inside a hyphenated word is still found, as before folding
    assert guard.check("Seen with Smythe-Hall.") == ["seed PHI surface (label DOCTOR, 6 chars)"]
    assert guard.check("Seen with mary jo and MARYJO.") == [
        "seed PHI surface (label PATIENT, 7 chars)",
        "seed PHI surface (label PATIENT, 6 chars)",
    ]
    # joined words never create a whole-word match that was not there
    assert guard.check("An\u200bnual follow-up; Jo\u0430nne well-known; An-nual exam.") == []


def test_only_allowlisted_placeholders_are_blanked(scanner: IdentifierScanner) -> None:
    guard = RequestGuard([("Quackenbush", "PATIENT")], scanner, placeholders=PLACEHOLDERS)
    assert guard.check("[[DOCTOR_1]] saw [[PATIENT_2]] at [[HOSPITAL_1]].") == []
    # a seed surface written as a placeholder the allowlist does not have is searched
    assert guard.check("[[DOCTOR_1]] saw [[QUACKENBUSH_1]].") == [
        "seed PHI surface (label PATIENT, 11 chars)"
    ]
    only_doctor = RequestGuard([("Patient", "PATIENT")], None, placeholders=["DOCTOR"])
    assert only_doctor.check("[[DOCTOR_1]] saw [[PATIENT_1]]") == [
        "seed PHI surface (label PATIENT, 7 chars)"
    ]
    with pytest.raises(TypeError, match="placeholder names"):
        RequestGuard(SURFACES, None, placeholders="DOCTOR")


def test_disguised_placeholders_are_blanked() -> None:
    guard = RequestGuard([("Doctor", "DOCTOR")], None, placeholders=PLACEHOLDERS)
    assert guard.check("\uff3b\uff3bDOCTOR_1\uff3d\uff3d reviewed [[D\u041eCTOR_2]]") == []


def test_guard_is_fast_on_disguised_text(scanner: IdentifierScanner) -> None:
    guard = RequestGuard([(CANARY, "PATIENT")], scanner, placeholders=PLACEHOLDERS)
    note = (CLEAN.replace("a", "\u0430").replace("e", "e\u200b") + " follow-up ") * 25
    start = time.perf_counter()
    for _ in range(100):
        assert guard.check(note) == []
    per_request = (time.perf_counter() - start) / 100
    assert per_request < 0.05  # linear: a fold and two readings, no per-surface scan
