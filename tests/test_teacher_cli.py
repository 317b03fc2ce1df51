"""label-teacher and combine-teachers through the CLI: the LLM teacher against a real
HTTP server on 127.0.0.1 (scripted and adversarial answers), the rules teacher, ensembles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import llm_server
from llm_server import ScriptedChatServer, last_user_message, ok_body
from ner_helpers import note_from_pieces
from synthdeid.cli import main
from synthdeid.notes import Note, read_notes, write_notes
from synthdeid.teacher.outputs import FOLDER_FILES, LEDGER, SUMMARY, read_teacher_outputs

chat_server = llm_server.chat_server  # the fixture

# made-up notes (no real PHI); gold spans exist but the teacher must never see them
NOTES = [
    note_from_pieces(
        "twice",
        "p1",
        [
            "Seen by Dr. ",
            ("Okafor", "DOCTOR"),
            " on ",
            ("3/14", "DATE"),
            ". ",
            ("Okafor", "DOCTOR"),
            " to call back.",
        ],
        "seed",
    ),
    note_from_pieces(
        "relaxed",
        "p2",
        ["Daughter ", ("Mira  Lindqvist", "PATIENT"), " visited; call ", ("617-555-0199", "PHONE")],
        "seed",
    ),
    note_from_pieces("wrong_type", "p3", ["MRN ", ("4455667", "ID"), " reviewed 4/2."], "seed"),
    note_from_pieces("invalid", "p4", ["Admitted ", ("5/6", "DATE"), " via ED."], "seed"),
    note_from_pieces("holdout", "p5", ["Discharged ", ("7/8", "DATE"), "."], "holdout"),
]

ANSWERS = {
    # "Okafor" occurs twice; "Jane Roe" is nowhere in the note (a hallucination)
    "twice": {
        "DOCTOR": [{"text": "Okafor", "confidence": 0.95}],
        "DATE": [{"text": "3/14", "confidence": 0.97}],
        "PATIENT": [{"text": "Jane Roe", "confidence": 0.9}],
    },
    # case and spacing differ from the note; a phone below the PHONE threshold
    "relaxed": {
        "PATIENT": [{"text": "mira lindqvist", "confidence": 0.9}],
        "PHONE": [{"text": "617-555-0199", "confidence": 0.4}],
    },
    # a type the prompt does not define, a confidence that is no number, a good ID
    "wrong_type": {
        "SSN": [{"text": "4455667", "confidence": 0.9}],
        "DATE": [{"text": "4/2", "confidence": "high"}],
        "ID": [{"text": "4455667", "confidence": 0.8}],
    },
}


def answer_for(request_json: Any) -> tuple[int, Any, dict[str, str]]:
    """The scripted answer for whichever note the request carries."""
    user = last_user_message(request_json)
    note_text = user.rsplit("Clinical note:\n", 1)[-1]
    for note in NOTES:
        if note.text in note_text:
            if note.note_id == "invalid":
                return (
                    200,
                    ok_body(
                        "Sure! The dates are 5/6 and that's all.",
                        prompt_tokens=900,
                        completion_tokens=12,
                    ),
                    {},
                )
            body = json.dumps(ANSWERS.get(note.note_id, {}))
            return (
                200,
                ok_body(f"```json\n{body}\n```", prompt_tokens=1000, completion_tokens=40),
                {},
            )
    return 500, {"error": {"message": "unknown note"}}, {}


def llm_settings(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "llm",
        "backend": {"kind": "openai", "base_url": url, "model": "scripted", "max_retries": 0},
        "trusted_hosts": ["127.0.0.1"],
        "thresholds": {"default": 0.5},
        "pricing": {"input_per_million": 0.15, "output_per_million": 1.25},
        "projection": {"corpus_notes": 13000},
        **extra,
    }


@pytest.fixture
def notes_path(tmp_path: Path) -> Path:
    path = tmp_path / "notes.parquet"
    write_notes(NOTES, path)
    return path


def label(
    notes: Path,
    out: Path,
    name: str,
    settings: dict[str, Any],
    *parts: str,
    shard: str | None = None,
) -> int:
    return main(
        [
            "label-teacher",
            "--notes",
            str(notes),
            "--parts",
            *(parts or ("seed",)),
            "--teacher",
            name,
            "--settings",
            json.dumps(settings),
            "--out-dir",
            str(out),
            *(["--shard", shard] if shard else []),
        ]
    )


def spans_of(notes: list[Note]) -> dict[str, list[tuple[str, str]]]:
    return {n.note_id: [(s.label, n.text[s.start : s.end]) for s in n.spans] for n in notes}


def test_llm_teacher_aligns_counts_and_keeps_failures_out(
    chat_server: ScriptedChatServer, notes_path: Path, tmp_path: Path
) -> None:
    chat_server.handler = answer_for
    out = tmp_path / "llm"
    assert label(notes_path, out, "llm", llm_settings(chat_server.url)) == 0
    assert chat_server.count == 4  # the seed notes only; the holdout note was not sent

    # the request carried the raw note and the extraction prompt, greedy and as JSON
    body = chat_server.requests[0]
    assert body["temperature"] == 0.0 and body["response_format"] == {"type": "json_object"}
    assert "Clinical note:" in last_user_message(body)

    labels = spans_of(read_notes(out / "labels.parquet"))
    # both occurrences of the name, the date; the hallucinated patient dropped
    assert labels["twice"] == [("DOCTOR", "Okafor"), ("DATE", "3/14"), ("DOCTOR", "Okafor")]
    # aligned ignoring case and spacing: the span is the note's own text
    assert labels["relaxed"] == [("PATIENT", "Mira  Lindqvist")]
    assert labels["wrong_type"] == [("ID", "4455667")]
    assert labels["invalid"] == []

    silver = read_notes(out / "silver.parquet")
    assert [n.note_id for n in silver] == ["twice", "relaxed", "wrong_type"]
    assert {n.source for n in silver} == {"silver:llm"}

    meta = {r["note_id"]: r for r in pq.read_table(out / "metadata.parquet").to_pylist()}
    twice, relaxed, wrong, invalid = (
        meta[k] for k in ("twice", "relaxed", "wrong_type", "invalid")
    )
    assert (twice["entities"], twice["aligned_exact"], twice["occurrences"]) == (3, 2, 3)
    assert twice["absent"] == 1 and twice["status"] == "ok"
    assert (relaxed["aligned_relaxed"], relaxed["below_threshold"]) == (1, 1)
    assert (wrong["unknown_type"], wrong["malformed"], wrong["n_spans"]) == (1, 1, 1)
    assert invalid["status"] == "invalid_json" and invalid["n_spans"] == 0
    assert "5/6" not in invalid["detail"]  # failure details carry no note text
    assert twice["min_confidence"] == pytest.approx(0.95)

    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["notes_by_status"] == {"invalid_json": 1, "ok": 3}
    assert summary["counts"]["absent"] == 1 and summary["counts"]["unknown_type"] == 1

    ledger = json.loads((out / "ledger.json").read_text())["ledger"]
    assert ledger["measured"]["input_tokens"] == 3 * 1000 + 900
    assert ledger["measured"]["output_tokens"] == 3 * 40 + 12
    projected = ledger["projection"]["corpus_notes"]
    assert projected["input_tokens"] == pytest.approx(13000 * 3900 / 4)


# a small model's typical answer: entities it names, none of which can be used
UNUSABLE_NOTES = [
    note_from_pieces("dropped", "p6", ["Seen by ", ("Dr. Ngata", "DOCTOR"), " today."], "seed"),
    note_from_pieces("quiet", "p7", ["Vitals stable overnight."], "seed"),
    note_from_pieces("weak", "p8", ["Call ", ("Hollis", "PATIENT"), " at home."], "seed"),
]
UNUSABLE_ANSWERS = {
    # a type the prompt does not define, an item without text, a string not in the note
    "dropped": {
        "PHYSICIAN": [{"text": "Dr. Ngata", "confidence": 0.9}],
        "DOCTOR": [{"confidence": 0.9}, {"text": "Dr. Amadi", "confidence": 0.9}],
    },
    # nothing named: the teacher's word that the note holds no PHI
    "quiet": {},
    # named, but under the threshold
    "weak": {"PATIENT": [{"text": "Hollis", "confidence": 0.2}]},
}


def unusable_answer(request_json: Any) -> tuple[int, Any, dict[str, str]]:
    note_text = last_user_message(request_json).rsplit("Clinical note:\n", 1)[-1]
    note = next(n for n in UNUSABLE_NOTES if n.text in note_text)
    return 200, ok_body(json.dumps(UNUSABLE_ANSWERS[note.note_id])), {}


def test_a_note_whose_named_entities_were_all_dropped_stays_out_of_the_pool(
    chat_server: ScriptedChatServer, tmp_path: Path
) -> None:
    notes = tmp_path / "unusable.parquet"
    write_notes(UNUSABLE_NOTES, notes)
    chat_server.handler = unusable_answer
    out = tmp_path / "llm"
    assert label(notes, out, "llm", llm_settings(chat_server.url)) == 0

    # an empty span list means "no PHI" only where the teacher named nothing
    assert [n.note_id for n in read_notes(out / "silver.parquet")] == ["quiet"]
    meta = {r["note_id"]: r for r in pq.read_table(out / "metadata.parquet").to_pylist()}
    assert meta["quiet"]["status"] == "ok" and meta["quiet"]["entities"] == 0
    dropped, weak = meta["dropped"], meta["weak"]
    assert dropped["status"] == weak["status"] == "no_usable_entities"
    assert (dropped["entities"], dropped["unknown_type"], dropped["malformed"]) == (3, 1, 1)
    assert dropped["absent"] == 1 and dropped["n_spans"] == 0
    assert dropped["detail"] == (
        "the teacher named 3 entities and none was kept (absent 1, unknown_type 1, malformed 1)"
    )
    assert weak["below_threshold"] == 1
    assert "Ngata" not in dropped["detail"] and "Hollis" not in weak["detail"]
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["notes_by_status"] == {"no_usable_entities": 2, "ok": 1}


def test_a_host_not_on_the_allowlist_is_refused_before_any_request(
    chat_server: ScriptedChatServer, notes_path: Path, tmp_path: Path, capsys
) -> None:
    chat_server.handler = answer_for
    # the same server, named by an address that is not listed
    settings = llm_settings(chat_server.url, trusted_hosts=["localhost", "gpu-node-01"])
    assert label(notes_path, tmp_path / "refused", "llm", settings) == 2
    assert "refusing endpoint host '127.0.0.1'" in capsys.readouterr().err
    cloud = llm_settings("https://api.openai.com/v1")
    assert label(notes_path, tmp_path / "cloud", "llm", cloud) == 2
    assert "'api.openai.com'" in capsys.readouterr().err
    assert chat_server.count == 0
    assert not (tmp_path / "refused").exists() and not (tmp_path / "cloud").exists()


def test_a_redirect_to_another_host_is_not_followed(
    chat_server: ScriptedChatServer, notes_path: Path, tmp_path: Path
) -> None:
    with ScriptedChatServer() as elsewhere:
        target = f"{elsewhere.url}/chat/completions"
        chat_server.handler = lambda body: (307, "moved", {"Location": target})
        assert label(notes_path, tmp_path / "redirect", "llm", llm_settings(chat_server.url)) == 0
        assert elsewhere.count == 0
    meta = pq.read_table(tmp_path / "redirect" / "metadata.parquet").to_pylist()
    assert {r["status"] for r in meta} == {"request_failed"}
    assert all("redirect" in r["detail"] for r in meta)
    assert read_notes(tmp_path / "redirect" / "silver.parquet") == []


def test_rules_teacher_with_a_dictionary(notes_path: Path, tmp_path: Path) -> None:
    terms = tmp_path / "doctors.txt"
    terms.write_text("# staff names\nOkafor\n\nLi\n")  # "Li" is shorter than min_term_chars
    settings = {
        "kind": "rules",
        "detectors": ["DATE", "PHONE"],
        "dictionaries": {"DOCTOR": str(terms)},
    }
    assert label(notes_path, tmp_path / "rules", "rules", settings, "seed", "holdout") == 0
    labels = spans_of(read_notes(tmp_path / "rules" / "labels.parquet"))
    assert labels["twice"] == [("DOCTOR", "Okafor"), ("DATE", "3/14"), ("DOCTOR", "Okafor")]
    assert labels["relaxed"] == [("PHONE", "617-555-0199")]
    assert labels["holdout"] == [("DATE", "7/8")]
    ledger = json.loads((tmp_path / "rules" / "ledger.json").read_text())["ledger"]
    assert ledger["llm"] is False


def test_unknown_settings_are_refused(notes_path: Path, tmp_path: Path, capsys) -> None:
    assert label(notes_path, tmp_path / "x", "rules", {"kind": "rules", "backend": {}}) == 2
    assert "unknown key(s) ['backend'] for kind 'rules'" in capsys.readouterr().err
    assert label(notes_path, tmp_path / "x", "x", {"kind": "oracle"}) == 2


def combine(out: Path, members: dict[str, Path], policy: dict[str, Any]) -> int:
    argv = ["combine-teachers", "--teacher", "ens", "--out-dir", str(out)]
    for name, folder in members.items():
        argv += ["--member", f"{name}={folder}"]
    return main([*argv, "--policy", json.dumps(policy)])


def test_ensemble_union_and_vote(
    chat_server: ScriptedChatServer, notes_path: Path, tmp_path: Path
) -> None:
    chat_server.handler = answer_for
    assert label(notes_path, tmp_path / "llm", "llm", llm_settings(chat_server.url)) == 0
    rules = {"kind": "rules", "detectors": ["DATE", "PHONE", "ID"]}
    assert label(notes_path, tmp_path / "rules", "rules", rules) == 0
    members = {"llm": tmp_path / "llm", "rules": tmp_path / "rules"}

    assert combine(tmp_path / "union", members, {"default": "union"}) == 0
    notes, labels = read_teacher_outputs(tmp_path / "union")
    union = spans_of(notes)
    assert union["twice"] == [("DOCTOR", "Okafor"), ("DATE", "3/14"), ("DOCTOR", "Okafor")]
    # a note the LLM failed on is a failed ensemble note, kept out of the pool
    assert labels["invalid"].status == "member_failed" and union["invalid"] == []
    assert "invalid" not in {n.note_id for n in read_notes(tmp_path / "union" / "silver.parquet")}
    # the rules' date 4/2 (the LLM's was malformed) is kept by the union
    assert ("DATE", "4/2") in union["wrong_type"]

    assert combine(tmp_path / "vote", members, {"default": "vote", "min_votes": 2}) == 0
    vote = spans_of(read_notes(tmp_path / "vote" / "labels.parquet"))
    assert vote["twice"] == [("DATE", "3/14")]  # only the date has both members' votes
    assert vote["wrong_type"] == [("ID", "4455667")]
    _, vote_labels = read_teacher_outputs(tmp_path / "vote")
    assert vote_labels["twice"].spans[0].confidence == pytest.approx(1.0)


def test_ensemble_members_must_label_the_same_notes(
    notes_path: Path, tmp_path: Path, capsys
) -> None:
    rules = {"kind": "rules"}
    assert label(notes_path, tmp_path / "a", "a", rules, "seed") == 0
    assert label(notes_path, tmp_path / "b", "b", rules, "seed", "holdout") == 0
    assert combine(tmp_path / "ens", {"a": tmp_path / "a", "b": tmp_path / "b"}, {}) == 2
    assert "labels other notes than the first member" in capsys.readouterr().err


def test_teacher_never_sees_gold_spans(notes_path: Path, tmp_path: Path) -> None:
    """A rules teacher with no detectors labels nothing, whatever gold the notes carry."""
    assert label(notes_path, tmp_path / "none", "none", {"kind": "rules", "detectors": []}) == 0
    assert all(not n.spans for n in read_notes(tmp_path / "none" / "labels.parquet"))


def test_llm_teacher_on_a_local_transformers_model(
    notes_path: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A local model needs no allowlist; its (untrained, so unusable) answers are counted."""
    from lm_helpers import tiny_causal_lm_dir

    model = tiny_causal_lm_dir(tmp_path_factory, n_positions=512)
    prompt = tmp_path / "short_prompt.yaml"
    prompt.write_text(
        'name: short\nversion: "1"\nsystem: Return PHI as JSON.\nuser: "Note: $clinical_text"\n'
    )
    settings = {
        "kind": "llm",
        "backend": {"kind": "transformers", "model": str(model), "device": "cpu"},
        "prompt": str(prompt),
        "generation": {"max_tokens": 8},
    }
    assert label(notes_path, tmp_path / "local", "local", settings) == 0
    meta = pq.read_table(tmp_path / "local" / "metadata.parquet").to_pylist()
    assert len(meta) == 4
    assert {r["status"] for r in meta} <= {"ok", "invalid_json"}  # answered, not failed
    assert all(r["input_tokens"] > 0 and 0 < r["output_tokens"] <= 8 for r in meta)
    summary = json.loads((tmp_path / "local" / "summary.json").read_text())["summary"]
    assert summary["notes"] == 4


# ---------------------------------------------------------------- shards


def label_in_shards(
    notes: Path, out: Path, name: str, settings: dict[str, Any], parts: list[str], count: int
) -> list[str]:
    """Label in ``count`` shards (last first), gather; the gathered folder's files."""
    for k in reversed(range(1, count + 1)):
        assert label(notes, out, name, settings, *parts, shard=f"{k}/{count}") == 0
    files = [str(out / name) for name in FOLDER_FILES]
    assert main(["gather-shards", "--count", str(count), *files]) == 0
    return files


def assert_same_files(one_job: Path, gathered: Path) -> None:
    for name in FOLDER_FILES:
        assert (gathered / name).read_bytes() == (one_job / name).read_bytes(), name


def test_llm_teacher_shards_gather_to_the_one_job_folder(
    chat_server: ScriptedChatServer, notes_path: Path, tmp_path: Path
) -> None:
    """Every file byte-equal; the ledger's means, costs and projections recomputed."""

    def answer_without_counts_for_holdout(body: Any) -> tuple[int, Any, dict[str, str]]:
        status, answer, headers = answer_for(body)
        if "Discharged" in last_user_message(body):
            answer.pop("usage")  # an estimated note beside the measured ones
        return status, answer, headers

    chat_server.handler = answer_without_counts_for_holdout
    settings = llm_settings(
        chat_server.url, projection={"corpus_notes": 13000, "corpus_characters": 10**9}
    )
    parts = ["seed", "holdout"]
    assert label(notes_path, tmp_path / "one", "llm", settings, *parts) == 0
    label_in_shards(notes_path, tmp_path / "gathered", "llm", settings, parts, 3)
    assert chat_server.count == 2 * 5  # each note sent once by one job and once by a shard
    assert_same_files(tmp_path / "one", tmp_path / "gathered")
    summary = json.loads((tmp_path / "gathered" / SUMMARY).read_text())
    # 1 absent of 8 entities; the shard that holds it alone says 1 of 3
    assert "shard" not in summary and summary["summary"]["hallucination_rate"] == 0.125
    ledger = json.loads((tmp_path / "gathered" / LEDGER).read_text())["ledger"]
    assert (ledger["measured"]["notes"], ledger["estimated"]["notes"]) == (4, 1)
    assert ledger["measured"]["mean_input_tokens_per_note"] == pytest.approx(3900 / 4)


def test_rules_teacher_shards_without_notes_gather_too(notes_path: Path, tmp_path: Path) -> None:
    """6 shards of the 4 seed notes: two label nothing, and the folder is still one job's."""
    settings = {"kind": "rules", "detectors": ["DATE", "PHONE", "ID"]}
    assert label(notes_path, tmp_path / "one", "rules", settings, "seed") == 0
    label_in_shards(notes_path, tmp_path / "gathered", "rules", settings, ["seed"], 6)
    assert_same_files(tmp_path / "one", tmp_path / "gathered")
    empty = pq.read_metadata(tmp_path / "gathered" / "labels.shard-1-of-6.parquet")
    assert empty.num_rows == 0
    assert json.loads(empty.metadata[b"synthdeid.shard"])["rows"] == [0, 0]


def test_teacher_shards_gather_only_as_a_complete_set_of_one_run(
    notes_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rules"
    files = label_in_shards(notes_path, out, "rules", {"kind": "rules"}, ["seed"], 2)
    other = {"kind": "rules", "detectors": ["DATE"]}
    assert label(notes_path, out, "rules", other, "seed", shard="2/2") == 0
    assert main(["gather-shards", "--count", "2", *files]) == 2
    assert "its provenance differs" in capsys.readouterr().err
    (out / "labels.shard-1-of-2.parquet").unlink()
    assert main(["gather-shards", "--count", "2", *files]) == 2
    assert "labels.shard-1-of-2.parquet are missing" in capsys.readouterr().err
