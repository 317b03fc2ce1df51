"""generate-templates and fill-templates end to end against a real HTTP server on 127.0.0.1.

The scripted server answers each seed's request with a good, malformed or
adversarial template; each must be accepted or rejected for the right reason.
A canary patient name planted in the seeds must never reach the server (one
seed still carries it after masking, as a masking miss would: the guard must
refuse that request) and never appear in any output. All text is invented.
"""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

import llm_server
from llm_server import ScriptedChatServer, ok_body
from synthdeid import cli
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.local_only import LOCAL_ONLY_KEY
from synthdeid.notes import Note, Span, read_notes, write_notes
from synthdeid.shards import Shard, merge_summaries, shard_path
from synthdeid.synthesis.prompts import Variant
from synthdeid.synthesis.templates import (
    SHARD_MERGE_RULES,
    GenerationReport,
    TemplateJob,
    TemplateRecord,
)
from synthdeid.synthesis.validator import Verdict, reject

chat_server = llm_server.chat_server  # the fixture

CANARY = "Zebulon Quartermaine"
FILLER = (
    "Vital signs stable overnight on room air, tolerating a regular diet, ambulating in "
    "the hallway with assistance. Urine output adequate. Continue current plan and "
    "reassess in the morning with the team."
)
# condition word -> how the server answers the seed that mentions it
SCRIPT = {
    "pneumonia": "good",
    "cellulitis": "malformed",
    "pancreatitis": "hallucinated_name",
    "appendicitis": "date",
    "syncope": "bad_placeholder",
    "hyponatremia": "copied_seed",
    "sepsis": "never_sent",
}
GOOD = (
    "Admitted on [[DATE_1]] for a new infiltrate; started on antibiotics by [[DOCTOR_1]]. "
    "Afebrile since, sputum thinner, weaned to two liters nasal cannula this afternoon. "
    "Eating half of meals, walked twice with physical therapy. Family aware of plan."
)


def seed_notes() -> list[Note]:
    notes = []
    for i, condition in enumerate(SCRIPT):
        prefix = f"Pt {CANARY} seen for {condition} by "
        doctor = "Dr. Halvorsen"
        text = prefix + doctor + ". " + FILLER
        spans = [
            Span(3, 3 + len(CANARY), "PATIENT"),
            Span(len(prefix), len(prefix) + len(doctor), "DOCTOR"),
        ]
        if condition == "sepsis":
            # a masking miss: the canary is in the text but not labelled in this note
            spans = spans[1:]
        notes.append(Note(f"s{i}", f"p{i}", text, tuple(spans), "test", "seed"))
    return notes


def answer_for(request_json) -> tuple[int, object, dict]:
    user = llm_server.last_user_message(request_json)
    kind = next(kind for word, kind in SCRIPT.items() if word in user)
    masked = re.search(r"<note>\n(.*)\n</note>", user, re.DOTALL).group(1)
    content = {
        "good": json.dumps({"note": GOOD}),
        "malformed": '{"note": "Admitted for observation',
        "hallucinated_name": json.dumps({"note": GOOD.replace("[[DOCTOR_1]]", "Dr. Jennifer")}),
        "date": json.dumps({"note": GOOD.replace("[[DATE_1]]", "3/14/2019")}),
        "bad_placeholder": json.dumps({"note": GOOD + " Contact [[EMAIL_1]] for results."}),
        "copied_seed": json.dumps({"note": masked}),
    }[kind]
    return 200, ok_body(content), {}


@pytest.fixture
def seed_files(tmp_path):
    notes_path = tmp_path / "split" / "notes.parquet"
    write_notes(seed_notes(), notes_path)
    masked, removed = tmp_path / "masked.parquet", tmp_path / "local" / "removed.parquet"
    code = cli.main(
        [
            "mask-seeds",
            "--notes",
            str(notes_path),
            "--parts",
            "seed",
            "--out",
            str(masked),
            "--removed",
            str(removed),
            "--summary",
            str(tmp_path / "mask.json"),
        ]
    )
    assert code == 0
    return notes_path, masked, removed


def run_generate(tmp_path, masked, removed, settings, *extra: str, shard: str = "") -> int:
    """``synthdeid generate-templates`` on the seed files; outputs in ``tmp_path``, at their
    shard paths with ``shard`` (K/N; the sent requests at the default path)."""

    def place(name: str) -> str:
        path = str(tmp_path / name)
        return shard_path(path, Shard.parse(shard).label) if shard else path

    return cli.main(
        [
            "generate-templates",
            "--masked",
            str(masked),
            "--removed",
            str(removed),
            "--allowlist",
            "resources/placeholders.yaml",
            "--prompt",
            "resources/prompts/template_rewrite.yaml",
            "--settings",
            json.dumps(settings),
            "--out",
            place("templates.parquet"),
            "--summary",
            place("templates.json"),
            "--no-progress",
            *(["--shard", shard] if shard else []),
            *extra,
        ]
    )


def generate(tmp_path, server: ScriptedChatServer, masked, removed) -> int:
    settings = {
        "backend": {
            "kind": "openai",
            "base_url": server.url,
            "model": "scripted",
            "concurrency": 2,
            "max_retries": 0,
            "timeout_s": 10,
        },
        "variants": {"standard": 1},
        "generation": {"temperature": 0.9, "top_p": 0.95, "max_tokens": 512},
        "seed": 0,
        "validator": {"length_ratio": [0.5, 2.0], "max_copied_ngram_share": 0.5},
        "guard": {"min_surface_chars": 3},
    }
    return run_generate(tmp_path, masked, removed, settings, "--cache-dir", str(tmp_path / "cache"))


def test_scripted_answers_are_judged_and_the_canary_never_leaves(
    tmp_path, chat_server, seed_files, monkeypatch, repo
):
    monkeypatch.chdir(repo)
    notes_path, masked, removed = seed_files
    chat_server.handler = answer_for
    assert generate(tmp_path, chat_server, masked, removed) == 0

    rows = pq.read_table(tmp_path / "templates.parquet").to_pylist()
    outcome = {r["seed_note_id"]: (r["status"], r["reason"]) for r in rows}
    assert outcome == {
        "s0": ("accepted", None),
        "s1": ("rejected", "invalid_json"),
        "s2": ("rejected", "identifier_like:name"),
        "s3": ("rejected", "identifier_like:date"),
        "s4": ("rejected", "placeholder_not_allowlisted"),
        "s5": ("rejected", "copied_seed"),
        "s6": ("rejected", "refused_by_guard"),
    }
    summary = json.loads((tmp_path / "templates.json").read_text())["summary"]
    assert summary["guard"] == {
        "sent": 6,
        "refused": 1,
        "refusal_reasons": summary["guard"]["refusal_reasons"],
    }
    assert summary["acceptance_rate"] == pytest.approx(1 / 7)

    # the canary never reached the server, in any part of any request
    assert chat_server.count == 6
    bodies = json.dumps(chat_server.requests).casefold()
    assert "quartermaine" not in bodies and "zebulon" not in bodies
    assert "halvorsen" not in bodies

    # a rerun is served from the cache: nothing more is sent
    assert generate(tmp_path, chat_server, masked, removed) == 0
    assert chat_server.count == 6

    pools = {name: tmp_path / f"{name}.parquet" for name in ("pii", "no_pii", "removals")}
    code = cli.main(
        [
            "fill-templates",
            "--templates",
            str(tmp_path / "templates.parquet"),
            "--notes",
            str(notes_path),
            "--removed",
            str(removed),
            "--allowlist",
            "resources/placeholders.yaml",
            "--settings",
            json.dumps({"fill_seed": 1, "encoder": False}),
            "--pii",
            str(pools["pii"]),
            "--no-pii",
            str(pools["no_pii"]),
            "--removals",
            str(pools["removals"]),
            "--summary",
            str(tmp_path / "pools.json"),
        ]
    )
    assert code == 0
    pii = read_notes(pools["pii"])
    assert [n.note_id for n in pii] == ["syn:s0:standard:0"]
    assert [s.label for s in pii[0].spans] == ["DATE", "DOCTOR"]
    outputs = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in {".parquet", ".json"}]
    inputs = {notes_path, masked, removed}  # the seeds themselves (masked has the planted miss)
    checked = 0
    for path in outputs:
        if path in inputs or path.name == "mask.json":
            continue
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            content = json.dumps([table.to_pylist(), str(table.schema.metadata)], default=str)
        else:
            content = path.read_text(encoding="utf-8")
        assert "quartermaine" not in content.casefold(), path
        checked += 1
    assert checked >= 8  # templates, summaries, cached answers, pools, removals


@pytest.mark.slow
def test_local_transformers_backend_end_to_end(tmp_path, seed_files, monkeypatch, repo):
    """A tiny GPT-2 built from a config answers every request; the validator judges them."""
    from lm_helpers import tiny_causal_lm_dir

    monkeypatch.chdir(repo)
    _, masked, removed = seed_files
    # the prompt is ~900 tokens with a tokenizer trained on two sentences
    model_dir = tiny_causal_lm_dir(tmp_path, [FILLER, GOOD], n_positions=2048)
    settings = {
        "backend": {"kind": "transformers", "model": str(model_dir), "batch_size": 4},
        "variants": {"standard": 1, "no_pii": 1},
        "generation": {"temperature": 0.9, "top_p": 0.95, "max_tokens": 24},
    }
    out = tmp_path / "templates.parquet"
    code = run_generate(tmp_path, masked, removed, settings)
    assert code == 0
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 14  # 7 seeds x 2 variants
    sent = [r for r in rows if r["reason"] != "refused_by_guard"]
    assert len(sent) == 12  # the seed with the masking miss is refused twice
    # an untrained model decoded under the JSON shape (the default constraint) runs into
    # max_tokens or closes an empty note: every answer is judged, none crashes the step
    assert all(r["output_tokens"] and r["output_tokens"] > 0 for r in sent)
    assert {r["reason"] for r in sent} <= {"truncated", "empty"}
    audit = pq.read_table(tmp_path / "local" / "templates.sent_requests.parquet")
    assert audit.schema.metadata[b"synthdeid.local_only"] == b"true"
    assert sorted(audit.column("template_id").to_pylist()) == sorted(r["template_id"] for r in sent)
    assert all(
        json.loads(shape)["placeholders"] is None for shape in audit.column("shape").to_pylist()
    )
    summary = json.loads((tmp_path / "templates.json").read_text())["summary"]
    assert summary["backend_description"]["backend"] == "transformers"
    assert summary["output_tokens"] > 0


# ---------------------------------------------------------------- shards

# what generate-templates writes (the sent requests at their default, local path)
OUTPUTS = ("templates.parquet", "templates.json", "local/templates.sent_requests.parquet")


def mask(notes: list[Note], folder) -> tuple:
    """mask-seeds over every note: the masked seeds and the removed values."""
    write_notes(notes, folder / "notes.parquet")
    masked, removed = folder / "masked.parquet", folder / "local" / "removed.parquet"
    argv = [
        "mask-seeds",
        "--notes",
        str(folder / "notes.parquet"),
        "--parts",
        *{n.split for n in notes},
    ]
    argv += ["--out", str(masked), "--removed", str(removed), "--summary", str(folder / "m.json")]
    assert cli.main(argv) == 0
    return masked, removed


def generate_in_shards(folder, masked, removed, settings, count: int, *extra: str) -> list[str]:
    """Generate in ``count`` shards (last first), gather; the gathered outputs."""
    for k in (count, *range(1, count)):
        assert run_generate(folder, masked, removed, settings, *extra, shard=f"{k}/{count}") == 0
    outputs = [str(folder / name) for name in OUTPUTS]
    assert cli.main(["gather-shards", "--count", str(count), *outputs]) == 0
    return outputs


def assert_same_outputs(one_job, gathered) -> None:
    for name in OUTPUTS:
        assert (gathered / name).read_bytes() == (one_job / name).read_bytes(), name


def test_backend_none_shards_of_the_demo_seeds_gather_to_the_one_job_files(
    tmp_path, monkeypatch, repo
):
    """Every shard builds the validator's vocabulary from all seeds: its rows are one job's."""
    monkeypatch.chdir(repo)
    label_map = json.dumps({label: label for label in CANONICAL_LABELS})
    demo = tmp_path / "demo.parquet"
    argv = ["ingest-corpus", "--corpus", "resources/demo/notes.jsonl", "--format", "jsonl"]
    argv += ["--label-map", label_map, "--source", "demo", "--out", str(demo)]
    assert cli.main([*argv, "--summary", str(tmp_path / "demo.json")]) == 0
    masked, removed = mask(read_notes(demo), tmp_path)
    settings = {"backend": {"kind": "none"}, "seed_sample": {"size": 200, "seed": 3}}
    assert run_generate(tmp_path / "one", masked, removed, settings) == 0
    generate_in_shards(tmp_path / "gathered", masked, removed, settings, 3)
    assert_same_outputs(tmp_path / "one", tmp_path / "gathered")
    summary = json.loads((tmp_path / "gathered" / "templates.json").read_text())
    assert "shard" not in summary and summary["summary"]["seeds"] == 200
    assert summary["summary"]["requested"] == 200
    shard = pq.read_metadata(tmp_path / "gathered" / "templates.shard-2-of-3.parquet")
    assert json.loads(shard.metadata[b"synthdeid.shard"])["rows"] == [66, 133]


PLACES = {"HOSPITAL": "Lakeshore General", "LOCATION": "Brambleton"}


def place_seeds() -> list[Note]:
    """Seeds naming a hospital (2), a town (3), nothing (3), and one masking miss; "hall"."""
    notes = []
    for i in range(9):
        label = "HOSPITAL" if i < 2 else "LOCATION" if i < 5 else None
        text = f"Seen for review number {i + 1}. "
        spans: tuple[Span, ...] = ()
        if label is not None:
            spans = (Span(len(text) + 12, len(text) + 12 + len(PLACES[label]), label),)
            text += f"Transferred {PLACES[label]} this morning. "
        if i == 5:  # the hospital's name left unlabelled: the guard refuses this seed
            text += f"Records from {PLACES['HOSPITAL']} requested. "
        # a word in lower case in one seed is a common word in all: not a name in the last
        text += {0: "Walked twice in the hall. ", 8: "Discussed with Hall at the bedside. "}.get(
            i, ""
        )
        notes.append(Note(f"q{i}", f"p{i}", text + FILLER, spans, "test", "seed"))
    return notes


def test_llm_shards_gather_to_the_one_job_files(tmp_path, chat_server, monkeypatch, repo):
    """Through a scripted server: the seeds without places draw their stand-in placeholder
    from every seed's mix and the guard knows every seed's common words (the last shard
    holds only seeds without places, one with "Hall"); refusals and token counts add up,
    rates are recomputed; the sent requests stay local-only."""
    monkeypatch.chdir(repo)
    masked, removed = mask(place_seeds(), tmp_path)
    chat_server.handler = lambda body: (200, ok_body(json.dumps({"note": GOOD})), {})
    settings = {
        "backend": {"kind": "openai", "base_url": chat_server.url, "model": "scripted"},
        "variants": {"standard": 1, "per_absent_places": 1},
        # the answer's shape carries the placeholders asked for, a stand-in among them
        "generation": {"temperature": 0.9, "max_tokens": 512, "constrain": "placeholders"},
        "seed": 5,
    }
    cache = ("--cache-dir", str(tmp_path / "cache-one"))
    assert run_generate(tmp_path / "one", masked, removed, settings, *cache) == 0
    sent = chat_server.count
    cache = ("--cache-dir", str(tmp_path / "cache-shards"))  # shared by the shards
    generate_in_shards(tmp_path / "gathered", masked, removed, settings, 4, *cache)
    assert chat_server.count == 2 * sent == 2 * 16  # 9 seeds x 2 variants, 2 refused
    assert_same_outputs(tmp_path / "one", tmp_path / "gathered")
    summary = json.loads((tmp_path / "gathered" / "templates.json").read_text())["summary"]
    assert summary["guard"]["refused"] == 2 and summary["input_tokens"] == 16 * 11
    assert summary["acceptance_rate"] == summary["accepted"] / 18
    audit = pq.read_metadata(tmp_path / "gathered" / OUTPUTS[2])
    assert audit.metadata[LOCAL_ONLY_KEY] == b"true" and audit.num_rows == 16


def test_template_shards_gather_only_as_a_complete_set(tmp_path, capsys, monkeypatch, repo):
    monkeypatch.chdir(repo)
    masked, removed = mask(place_seeds(), tmp_path)
    settings = {"backend": {"kind": "none"}}
    outputs = generate_in_shards(tmp_path, masked, removed, settings, 2)
    (tmp_path / "local" / "templates.sent_requests.shard-2-of-2.parquet").unlink()
    assert cli.main(["gather-shards", "--count", "2", *outputs]) == 2
    assert "templates.sent_requests.shard-2-of-2.parquet are missing" in capsys.readouterr().err


@pytest.mark.parametrize("cuts", [(1, 5), (2, 2, 2), (0, 5, 1), (6,)])
def test_template_summaries_of_shards_merge_to_the_one_run_summary(cuts) -> None:
    """Counts by reason and by variant come back sorted as one run writes them, with
    rates recomputed from the summed counts, whichever variant a shard lacks."""
    seed = Note("s", "p", "Seen today.", (), "test", "seed")
    verdicts = [Verdict("ok"), reject("empty"), Verdict("ok"), reject("copied_seed")] * 2
    records = [
        TemplateRecord(
            TemplateJob(f"t{i}", seed, Variant(name, "", (), "none"), 0), verdicts[i], None, 3, 2
        )
        for i, name in enumerate(["zeta", "alpha", "zeta", "alpha", "zeta", "zeta"])
    ]
    extra = {"seeds": 1, "backend": {"kind": "none", "timeout_s": 5}}

    def summary(part: list[TemplateRecord]) -> dict:
        return GenerationReport(part, dict(extra)).summary()

    shards, start = [], 0
    for size in cuts:
        shards.append(summary(records[start : start + size]))
        start += size
    merged = merge_summaries(shards, rules=SHARD_MERGE_RULES)
    assert json.dumps(merged) == json.dumps(summary(records))
