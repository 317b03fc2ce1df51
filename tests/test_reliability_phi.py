"""Hostile tries at where PHI goes: tables of other runs, paths out of local/, holdout notes,
inputs that never end, and synthetic rows sent to endpoints that are not this machine.

Each try is refused with exit status 2 and one line naming the file (or argument) and
the problem, nothing written; the LLM tries run against a real HTTP server on
127.0.0.1 and check what reached it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import yaml

import llm_server
from llm_server import ok_body
from synthdeid.cli import main
from synthdeid.cli_types import input_dir, input_file, input_path
from synthdeid.errors import InputError
from synthdeid.local_only import is_local_path
from synthdeid.ner.report_errors import development_notes
from synthdeid.notes import Note, Span, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE
from synthdeid.tabular.spec import load_spec
from synthdeid.tabular.tables import write_table

chat_server = llm_server.chat_server  # the fixture

REPO = Path(__file__).resolve().parents[1]
ALLOWLIST = REPO / "resources" / "placeholders.yaml"
TEMPLATE_PROMPT = REPO / "resources" / "prompts" / "template_rewrite.yaml"
REPORT_PROMPT = REPO / "resources" / "prompts" / "tabular_report.yaml"
JUDGE_PROMPT = REPO / "resources" / "prompts" / "tabular_judge.yaml"
HANG_LIMIT_S = 60  # a refused input returns in seconds; a read that blocks runs into this


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``synthdeid argv`` in this process: exit status and its error lines on stderr."""
    capsys.readouterr()  # what earlier steps logged
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse usage errors
        status = exc.code if isinstance(exc.code, int) else 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, error_lines(err)


def error_lines(err: str) -> list[str]:
    """The lines of ``err`` that report an error (a refusal is exactly one)."""
    return [line for line in err.splitlines() if " ERROR " in line or ": error: " in line]


def run_apart(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``synthdeid argv`` in a process of its own, stopped after HANG_LIMIT_S."""
    return subprocess.run(
        [sys.executable, "-m", "synthdeid", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_LIMIT_S,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------- removed values of another run


FILLER = (
    "Vital signs stable overnight on room air, tolerating a regular diet, ambulating in "
    "the hallway with assistance. Continue current plan and reassess in the morning."
)


def seed_notes(surname: str) -> list[Note]:
    notes = []
    for i in range(3):
        prefix = f"Pt {surname} seen by "
        text = f"{prefix}Dr. Halvorsen. {FILLER}"
        spans = (
            Span(3, 3 + len(surname), "PATIENT"),
            Span(len(prefix), len(prefix) + len("Dr. Halvorsen"), "DOCTOR"),
        )
        notes.append(Note(f"{surname[:3].lower()}{i}", f"p{i}", text, spans, "test", "seed"))
    return notes


def mask(notes: list[Note], folder: Path, source: Path | None = None) -> tuple[Path, Path]:
    """mask-seeds over ``notes`` (written to ``source`` unless given): masked, removed."""
    if source is None:
        source = folder / "notes.parquet"
        write_notes(notes, source)
    masked, removed = folder / "masked.parquet", folder / "local" / "removed.parquet"
    argv = ["mask-seeds", "--notes", str(source), "--out", str(masked), "--removed", str(removed)]
    assert main([*argv, "--summary", str(folder / "mask.json")]) == 0
    return masked, removed


def generate_argv(masked: Path, removed: Path, out: Path, backend: dict) -> list[str]:
    settings = {"backend": backend, "variants": {"standard": 1}, "seed": 0}
    return [
        "generate-templates",
        "--masked",
        str(masked),
        "--removed",
        str(removed),
        "--allowlist",
        str(ALLOWLIST),
        "--prompt",
        str(TEMPLATE_PROMPT),
        "--settings",
        json.dumps(settings),
        "--out",
        str(out / "templates.parquet"),
        "--summary",
        str(out / "templates.json"),
        "--no-progress",
    ]


def test_generate_templates_refuses_removed_values_of_another_mask_run(
    tmp_path: Path, chat_server: llm_server.ScriptedChatServer, capsys
) -> None:
    masked_a, _ = mask(seed_notes("Quartermaine"), tmp_path / "a")
    _, removed_b = mask(seed_notes("Abernathy"), tmp_path / "b")
    backend = {"kind": "openai", "base_url": chat_server.url, "model": "m", "max_retries": 0}
    before = files_under(tmp_path)
    status, err = run(generate_argv(masked_a, removed_b, tmp_path / "out", backend), capsys)
    assert status == 2 and len(err) == 1, err
    assert str(removed_b) in err[0] and str(masked_a) in err[0] and "mask" in err[0]
    assert "Quartermaine" not in err[0] and "Abernathy" not in err[0]
    assert chat_server.count == 0  # refused before any request
    assert not (tmp_path / "out").exists() and files_under(tmp_path) == before


def test_a_rerun_of_mask_seeds_pairs_and_the_removed_table_is_recorded(
    tmp_path: Path, capsys
) -> None:
    notes = tmp_path / "notes.parquet"
    write_notes(seed_notes("Quartermaine"), notes)
    masked_a, _ = mask([], tmp_path / "a", source=notes)
    _, removed_c = mask([], tmp_path / "c", source=notes)  # byte-identical rerun
    out = tmp_path / "out"
    status, err = run(generate_argv(masked_a, removed_c, out, {"kind": "none"}), capsys)
    assert status == 0, err
    provenance = json.loads((out / "templates.json").read_text())["provenance"]
    recorded = provenance["inputs"]["removed"]
    assert recorded["path"] == str(removed_c) and recorded["digest"].startswith("sha256:")


def test_a_removed_table_that_records_no_masked_notes_is_refused(tmp_path: Path, capsys) -> None:
    from synthdeid.artifacts import write_parquet_atomic
    from synthdeid.mask import removed_table

    masked, removed = mask(seed_notes("Quartermaine"), tmp_path)
    write_parquet_atomic(removed_table([]), removed)  # no provenance: not mask-seeds' table
    status, err = run(generate_argv(masked, removed, tmp_path / "out", {"kind": "none"}), capsys)
    assert status == 2 and len(err) == 1 and str(removed) in err[0], err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- local-only paths


def test_local_paths_are_judged_where_they_really_are(tmp_path: Path, monkeypatch) -> None:
    assert not is_local_path("pub/local/../errors.parquet")
    assert is_local_path("pub/x/../local/errors.parquet")
    (tmp_path / "pub").mkdir()
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "shared").symlink_to(tmp_path / "pub")
    assert not is_local_path(tmp_path / "local" / "shared" / "errors.parquet")
    (tmp_path / "pub" / "private").symlink_to(tmp_path / "local")
    assert is_local_path(tmp_path / "pub" / "private" / "errors.parquet")
    # a working folder that happens to be called local does not make every path local
    (tmp_path / "local" / "work").mkdir()
    monkeypatch.chdir(tmp_path / "local" / "work")
    assert not is_local_path("results/errors.parquet")
    assert is_local_path("results/local/errors.parquet")


def test_report_errors_refuses_an_errors_table_that_leaves_local(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.parquet"
    write_notes(seed_notes("Quartermaine"), notes)
    (tmp_path / "model").mkdir()
    out = tmp_path / "pub" / "local" / ".." / "errors.parquet"
    argv = ["report-errors", "--model", str(tmp_path / "model"), "--notes", str(notes)]
    argv += ["--out", str(out), "--summary", str(tmp_path / "pub" / "summary.json")]
    status, err = run(argv, capsys)
    assert status == 2 and len(err) == 1, err
    assert "--out" in err[0] and "local/" in err[0]
    assert not (tmp_path / "pub").exists()


def test_mask_seeds_refuses_removed_values_outside_local(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.parquet"
    write_notes(seed_notes("Quartermaine"), notes)
    out = tmp_path / "out"
    argv = ["mask-seeds", "--notes", str(notes), "--out", str(out / "masked.parquet")]
    argv += ["--removed", str(out / "removed.parquet"), "--summary", str(out / "mask.json")]
    status, err = run(argv, capsys)
    assert status == 2 and len(err) == 1, err
    assert "--removed" in err[0] and "local/" in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    ("argument", "name"), [("--leftovers", "leftovers.json"), ("--offsets", "offsets.parquet")]
)
def test_replace_surrogates_refuses_side_outputs_outside_local(
    argument: str, name: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv(SECRET_VARIABLE, secrets.token_hex(32))
    notes = tmp_path / "notes.parquet"
    write_notes(seed_notes("Quartermaine"), notes)
    out = tmp_path / "out"
    argv = ["replace-surrogates", str(notes), str(out / "notes.parquet")]
    status, err = run([*argv, argument, str(out / "pub" / "local" / ".." / name)], capsys)
    assert status == 2 and len(err) == 1, err
    assert argument in err[0] and "local/" in err[0]
    assert not out.exists()


def test_generate_templates_refuses_sent_requests_outside_local(tmp_path: Path, capsys) -> None:
    masked, removed = mask(seed_notes("Quartermaine"), tmp_path)
    argv = generate_argv(masked, removed, tmp_path / "out", {"kind": "none"})
    status, err = run([*argv, "--sent-requests", str(tmp_path / "out" / "sent.parquet")], capsys)
    assert status == 2 and len(err) == 1, err
    assert "--sent-requests" in err[0] and "local/" in err[0]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- holdout notes


def test_development_notes_refuse_holdout_notes_from_any_file() -> None:
    notes = [Note("s1", "p1", "a", (), "unit", "seed")]
    validation = [
        Note("v1", "p2", "b", (), "unit", "validation"),
        Note("h1", "p3", "c", (), "unit", "holdout"),
        Note("h2", "p4", "d", (), "unit", "holdout"),
    ]
    with pytest.raises(InputError, match=r"v\.parquet.*2 holdout notes"):
        development_notes(notes, ["seed"], validation, set(), validation_path="v.parquet")


def test_report_errors_refuses_holdout_notes_given_as_validation(tmp_path: Path, capsys) -> None:
    notes, validation = tmp_path / "notes.parquet", tmp_path / "validation.parquet"
    write_notes(seed_notes("Quartermaine"), notes)
    holdout = [
        Note(f"h{i}", f"q{i}", f"Pt Abernathy seen. {FILLER}", (Span(3, 12, "PATIENT"),), "t", s)
        for i, s in enumerate(["validation", "holdout", "holdout"])
    ]
    write_notes(holdout, validation)
    (tmp_path / "model").mkdir()
    out = tmp_path / "local" / "errors.parquet"
    argv = ["report-errors", "--model", str(tmp_path / "model"), "--notes", str(notes)]
    argv += ["--validation", str(validation), "--out", str(out)]
    status, err = run([*argv, "--summary", str(tmp_path / "summary.json")], capsys)
    assert status == 2 and len(err) == 1, err
    assert str(validation) in err[0] and "2 holdout notes" in err[0]
    assert "Abernathy" not in err[0]
    assert not out.parent.exists() and not (tmp_path / "summary.json").exists()


# ---------------------------------------------------------------- inputs that never end


@pytest.mark.parametrize("path_type", [input_file, input_path, input_dir])
def test_input_path_types_refuse_devices_and_fifos(path_type, tmp_path: Path) -> None:
    fifo = tmp_path / "notes.parquet"
    os.mkfifo(fifo)
    for special in ("/dev/zero", str(fifo)):
        with pytest.raises(argparse.ArgumentTypeError, match="not a regular file"):
            path_type(special)


def test_ingest_refuses_a_fifo_corpus_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    argv = ["ingest-corpus", "--corpus", str(fifo), "--format", "jsonl", "--label-map", "{}"]
    argv += ["--source", "t", "--out", "out/notes.parquet", "--summary", "out/summary.json"]
    done = run_apart(argv, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "corpus.jsonl" in done.stderr and "not a regular file" in done.stderr
    assert not (tmp_path / "out").exists()


def test_ingest_refuses_a_fifo_inside_a_brat_folder_without_hanging(tmp_path: Path) -> None:
    corpus = tmp_path / "brat"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Dr. Ames")
    (corpus / "a.ann").write_text("T1\tDOCTOR 4 8\tAmes\n")
    os.mkfifo(corpus / "b.txt")
    (corpus / "b.ann").write_text("")
    argv = ["ingest-corpus", "--corpus", str(corpus), "--format", "brat"]
    argv += ["--label-map", '{"DOCTOR": "DOCTOR"}', "--source", "t"]
    argv += ["--out", "out/notes.parquet", "--summary", "out/summary.json"]
    done = run_apart(argv, tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(error_lines(done.stderr)) == 1 and "b.txt" in done.stderr
    assert "not a regular file" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_stage_given_a_fifo_notes_table_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "notes.parquet")
    argv = ["mask-seeds", "--notes", "notes.parquet", "--out", "out/m.parquet"]
    argv += ["--removed", "out/local/r.parquet", "--summary", "out/s.json"]
    done = run_apart(argv, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "notes.parquet" in done.stderr and "not a regular file" in done.stderr


# ---------------------------------------------------------------- tabular rows and endpoints


SPEC = {
    "name": "pathology",
    "report_title": "Breast pathology report",
    "variables": [
        {
            "name": "diagnosis",
            "kind": "categorical",
            "label": "cytological diagnosis",
            "categories": ["malignant", "benign"],
        },
        {
            "name": "grade",
            "kind": "categorical",
            "label": "tumour grade",
            "categories": ["low", "high", "2019-03-14"],
        },
    ],
}


def rows_table(folder: Path, synthesizer: str, grades: list[str]) -> tuple[Path, Path]:
    """A spec and synthetic rows as ``synthesizer``'s fit wrote them (its provenance)."""
    spec_path, rows = folder / "spec.yaml", folder / f"{synthesizer}.parquet"
    folder.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(yaml.safe_dump(SPEC))
    frame = pd.DataFrame(
        {
            "record_id": [f"{synthesizer}-r{i}" for i in range(len(grades))],
            "sample": [0] * len(grades),
            "diagnosis": ["malignant"] * len(grades),
            "grade": grades,
        }
    )
    provenance = {"step": "fit-dp-tabular", "params": {"synthesizer": synthesizer}}
    write_table(frame, load_spec(spec_path), rows, provenance, {"sample": pa.int32()})
    return spec_path, rows


GOOD_REPORT = (
    "Patient [[PATIENT_1]] seen at [[HOSPITAL_1]] on [[DATE_1]]. The cytological diagnosis "
    "is malignant. The tumour grade is low. Signed: [[DOCTOR_1]]"
)


def report_answer(request_json) -> tuple[int, object, dict]:
    user = llm_server.last_user_message(request_json)
    if '{"note"' in user:
        return 200, ok_body(json.dumps({"note": GOOD_REPORT})), {}
    verdicts = {name: {"correct": "yes", "reference": ""} for name in ("diagnosis", "grade")}
    return 200, ok_body(json.dumps(verdicts)), {}


def verbalize_argv(spec: Path, rows: Path, out: Path, settings: dict) -> list[str]:
    return [
        "verbalize-tabular",
        "--subsample",
        str(rows),
        "--spec",
        str(spec),
        "--allowlist",
        str(ALLOWLIST),
        "--prompt",
        str(REPORT_PROMPT),
        "--settings",
        json.dumps(settings),
        "--reports",
        str(out / "reports.parquet"),
        "--pii",
        str(out / "pii.parquet"),
        "--no-pii",
        str(out / "no_pii.parquet"),
        "--removals",
        str(out / "removals.parquet"),
        "--summary",
        str(out / "summary.json"),
        "--no-progress",
    ]


def faithfulness_argv(spec: Path, reports: Path, out: Path, judge: dict, *extra: str) -> list[str]:
    return [
        "check-faithfulness",
        "--reports",
        str(reports),
        "--spec",
        str(spec),
        "--judge-backend",
        json.dumps(judge),
        "--judge-prompt",
        str(JUDGE_PROMPT),
        *extra,
        "--out-dir",
        str(out),
        "--no-progress",
    ]


def this_host_by_name(server: llm_server.ScriptedChatServer) -> str:
    """The server's URL with this machine's host name: not loopback as written, though
    the name reaches the server (skipped where the name does not resolve to 127.0.0.1)."""
    name = socket.gethostname().lower()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        address = None
    if address != "127.0.0.1" or not name.replace("-", "").replace(".", "").isalnum():
        pytest.skip("this machine's host name does not resolve to 127.0.0.1")
    return server.url.replace("127.0.0.1", name)


def backend_at(url: str) -> dict:
    return {"kind": "openai", "base_url": url, "model": "scripted", "max_retries": 0}


def test_verbalize_refuses_an_untrusted_endpoint_before_any_connection(
    tmp_path: Path, chat_server: llm_server.ScriptedChatServer, capsys
) -> None:
    chat_server.handler = report_answer
    spec, rows = rows_table(tmp_path, "mst", ["low", "high"])
    url = this_host_by_name(chat_server)
    settings = {"backend": backend_at(url)}
    status, err = run(verbalize_argv(spec, rows, tmp_path / "out", settings), capsys)
    assert status == 2 and len(err) == 1, err
    assert "trusted_hosts" in err[0] and socket.gethostname().lower() in err[0]
    assert chat_server.count == 0 and not (tmp_path / "out").exists()


def test_verbalize_sends_non_dp_rows_to_this_machine_only_unless_allowed(
    tmp_path: Path, chat_server: llm_server.ScriptedChatServer, capsys
) -> None:
    chat_server.handler = report_answer
    spec, rows = rows_table(tmp_path, "ctgan", ["low", "high"])
    url = this_host_by_name(chat_server)
    host = socket.gethostname().lower()
    trusted = {"backend": backend_at(url), "trusted_hosts": [host]}
    status, err = run(verbalize_argv(spec, rows, tmp_path / "out", trusted), capsys)
    assert status == 2 and len(err) == 1, err
    assert str(rows) in err[0] and "ctgan" in err[0] and "allow_non_dp_rows" in err[0]
    assert chat_server.count == 0 and not (tmp_path / "out").exists()
    # loopback: nothing leaves the machine
    local = {"backend": backend_at(chat_server.url)}
    assert run(verbalize_argv(spec, rows, tmp_path / "local", local), capsys)[0] == 0
    assert chat_server.count == 2
    # the explicit opt-in
    allowed = {**trusted, "allow_non_dp_rows": True}
    assert run(verbalize_argv(spec, rows, tmp_path / "allowed", allowed), capsys)[0] == 0
    assert chat_server.count == 4
    # DP rows may go to a trusted host
    dp_spec, dp_rows = rows_table(tmp_path / "dp", "mst", ["low", "high"])
    assert run(verbalize_argv(dp_spec, dp_rows, tmp_path / "dp_out", trusted), capsys)[0] == 0
    assert chat_server.count == 6


def test_verbalize_guards_its_requests(
    tmp_path: Path, chat_server: llm_server.ScriptedChatServer, capsys
) -> None:
    chat_server.handler = report_answer
    spec, rows = rows_table(tmp_path, "mst", ["low", "2019-03-14"])
    out = tmp_path / "out"
    settings = {"backend": backend_at(chat_server.url)}
    status, err = run(verbalize_argv(spec, rows, out, settings), capsys)
    assert status == 0, err
    assert chat_server.count == 1  # the row with a date-like value was never sent
    assert "2019-03-14" not in json.dumps(chat_server.requests)
    reports = pd.read_parquet(out / "reports.parquet")
    assert sorted(reports["reason"].fillna("")) == ["", "refused_by_guard"]


def test_the_judge_keeps_the_endpoint_policy_and_the_guard(
    tmp_path: Path, chat_server: llm_server.ScriptedChatServer, capsys
) -> None:
    chat_server.handler = report_answer
    spec, rows = rows_table(tmp_path, "ctgan", ["low", "high"])
    out = tmp_path / "verbalized"
    local = {"backend": backend_at(chat_server.url)}
    assert run(verbalize_argv(spec, rows, out, local), capsys)[0] == 0
    reports = out / "reports.parquet"
    sent = chat_server.count
    url = this_host_by_name(chat_server)
    host = socket.gethostname().lower()
    # an untrusted host, then non-DP rows to a trusted one: refused before any connection
    status, err = run(faithfulness_argv(spec, reports, tmp_path / "j1", backend_at(url)), capsys)
    assert status == 2 and len(err) == 1 and "trusted_hosts" in err[0], err
    policy = ["--judge-policy", json.dumps({"trusted_hosts": [host]})]
    status, err = run(
        faithfulness_argv(spec, reports, tmp_path / "j2", backend_at(url), *policy), capsys
    )
    assert status == 2 and len(err) == 1, err
    assert str(reports) in err[0] and "ctgan" in err[0] and "allow_non_dp_rows" in err[0]
    assert chat_server.count == sent
    assert not (tmp_path / "j1").exists() and not (tmp_path / "j2").exists()
    # on this machine: judged; a report holding a date is refused by the guard, not sent
    table = pd.read_parquet(reports)
    table.loc[0, "template"] = table.loc[0, "template"].replace("[[DATE_1]]", "3/14/2019")
    edited = tmp_path / "edited.parquet"
    table.to_parquet(edited)
    judge = backend_at(chat_server.url)
    status, err = run(faithfulness_argv(spec, edited, tmp_path / "j3", judge), capsys)
    assert status == 0, err
    assert chat_server.count == sent + 1
    assert "3/14/2019" not in json.dumps(chat_server.requests)
    summary = json.loads((tmp_path / "j3" / "faithfulness.json").read_text())
    assert summary["judge_failures"] == {"refused_by_guard": 1}


def test_sample_dp_lm_refuses_removed_values_of_another_mask_run(tmp_path: Path, capsys) -> None:
    """The DP model's seed-PHI screen searches the surfaces of its own masked notes only."""
    from test_dplm_cli import ALLOWLIST, POOLS, SAMPLING

    masked_a, _ = mask(seed_notes("Quartermaine"), tmp_path / "a")
    _, removed_b = mask(seed_notes("Abernathy"), tmp_path / "b")
    model = tmp_path / "model"
    model.mkdir()  # refused before the model is read
    out = tmp_path / "out"
    argv = [
        "sample-dp-lm", "--model", str(model), "--masked", str(masked_a),
        "--notes", str(tmp_path / "a" / "notes.parquet"), "--removed", str(removed_b),
        "--allowlist", str(ALLOWLIST), "--settings", json.dumps(SAMPLING),
        "--pool-settings", json.dumps(POOLS), "--name", "dp",
        "--samples", str(out / "samples.parquet"), "--pii", str(out / "pii.parquet"),
        "--no-pii", str(out / "no_pii.parquet"), "--removals", str(out / "removals.parquet"),
        "--summary", str(out / "summary.json"),
    ]  # fmt: skip
    status, err = run(argv, capsys)
    assert status == 2 and len(err) == 1, err
    assert str(removed_b) in err[0] and str(masked_a) in err[0]
    assert "Quartermaine" not in err[0] and "Abernathy" not in err[0]
    assert not out.exists()
