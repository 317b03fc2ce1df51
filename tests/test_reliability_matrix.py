"""The hostile-user matrix: bad input, colliding paths, weak keys, against the CLI.

One row per try: what is given to ``synthdeid`` and what must happen. Every
row expects exit status 2 (argparse usage errors included), a one-line error
matching ``message`` on stderr with no traceback, and nothing written: the
paths in ``absent`` do not exist afterwards and every input file keeps its
bytes. Tries that need a process of their own (signals), a server (LLM
failure bodies), the workflow (config checks) or a clock (adversarial sizes)
have their own tests; docs/reliability.md lists them all.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.notes import Note, Span, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE

STRONG = secrets.token_hex(32)
DEMO_KEY = Path(__file__).resolve().parents[1] / "resources" / "demo" / "demo-surrogate.key"


def _notes(n: int = 3, *, source: str = "test", ids: list[str] | None = None) -> list[Note]:
    ids = ids or [f"n{i}" for i in range(n)]
    return [
        Note(i, "p1", "Seen by Dr. Ames on 3/14.", (Span(12, 16, "DOCTOR"),), source, "seed")
        for i in ids
    ]


def _jsonl(lines: list[object]) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)


def _write(tmp: Path, files: dict[str, str | bytes | list[Note] | None]) -> None:
    """Create the try's input files: text, bytes, a notes table, or a folder (None)."""
    for name, content in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
        elif isinstance(content, list):
            write_notes(content, path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


NOTE = {"note_id": "a", "patient_id": "p", "text": "Dr. Ames", "spans": []}
INGEST = ["ingest-corpus", "--format", "jsonl", "--label-map", "{}", "--source", "t"]
INGEST_OUT = ["--out", "{tmp}/out/notes.parquet", "--summary", "{tmp}/out/summary.json"]
MASK_OUT = ["--out", "{tmp}/out/m.parquet", "--removed", "{tmp}/out/local/r.parquet"]


@dataclass(frozen=True)
class Try:
    id: str
    argv: list[str]
    message: str
    files: dict[str, str | bytes | list[Note] | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=lambda: {SECRET_VARIABLE: STRONG})
    absent: tuple[str, ...] = ("out",)


TRIES: list[Try] = [
    # --- ingest: the corpus itself
    Try("ingest-missing-corpus", [*INGEST, "--corpus", "{tmp}/no.jsonl", *INGEST_OUT], "no.jsonl"),
    Try(
        "ingest-invalid-json-line",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl: line 2: invalid JSON",
        {"c.jsonl": _jsonl([NOTE, "{not json"])},
    ),
    Try(
        "ingest-span-out-of-range",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl: line 1",
        {"c.jsonl": _jsonl([{**NOTE, "spans": [{"start": 4, "end": 40, "label": "DOCTOR"}]}])},
    ),
    Try(
        "ingest-span-surface-mismatch",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl: line 1",
        {
            "c.jsonl": _jsonl(
                [{**NOTE, "spans": [{"start": 4, "end": 8, "label": "DOCTOR", "text": "Bmes"}]}]
            )
        },
    ),
    Try(
        "ingest-overlapping-spans",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl: line 1",
        {
            "c.jsonl": _jsonl(
                [
                    {
                        **NOTE,
                        "spans": [
                            {"start": 0, "end": 8, "label": "DOCTOR"},
                            {"start": 4, "end": 8, "label": "PATIENT"},
                        ],
                    }
                ]
            )
        },
    ),
    Try(
        "ingest-unknown-label",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        "NAME",
        {"c.jsonl": _jsonl([{**NOTE, "spans": [{"start": 4, "end": 8, "label": "NAME"}]}])},
    ),
    Try(
        "ingest-label-map-not-json",
        [
            "ingest-corpus",
            "--source",
            "t",
            "--format",
            "jsonl",
            "--label-map",
            "{",
            "--corpus",
            "{tmp}/c.jsonl",
            *INGEST_OUT,
        ],
        "label-map",
        {"c.jsonl": _jsonl([NOTE])},
    ),
    Try(
        "ingest-unknown-format",
        [
            "ingest-corpus",
            "--source",
            "t",
            "--format",
            "xlsx",
            "--label-map",
            "{}",
            "--corpus",
            "{tmp}/c.jsonl",
            *INGEST_OUT,
        ],
        "xlsx",
        {"c.jsonl": _jsonl([NOTE])},
    ),
    Try(
        "ingest-duplicate-note-id",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl: line 2.*duplicate|c\.jsonl: line 2.*'a'",
        {"c.jsonl": _jsonl([NOTE, NOTE])},
    ),
    Try(
        "ingest-empty-corpus",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl.*(no notes|empty)",
        {"c.jsonl": "\n\n"},
    ),
    Try(
        "ingest-blank-note-id",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", *INGEST_OUT],
        r"c\.jsonl: line 1",
        {"c.jsonl": _jsonl([{**NOTE, "note_id": "  "}])},
    ),
    Try(
        "ingest-brat-t-line-without-surface",
        [
            "ingest-corpus",
            "--source",
            "t",
            "--format",
            "brat",
            "--label-map",
            '{"PATIENT": "PATIENT"}',
            "--corpus",
            "{tmp}/brat",
            *INGEST_OUT,
        ],
        r"a\.ann: line 1",
        {"brat/a.txt": "John Smith was seen.", "brat/a.ann": "T1\tPATIENT 1 11\n"},
    ),
    Try(
        "ingest-brat-ann-without-txt",
        [
            "ingest-corpus",
            "--source",
            "t",
            "--format",
            "brat",
            "--label-map",
            '{"PATIENT": "PATIENT"}',
            "--corpus",
            "{tmp}/brat",
            *INGEST_OUT,
        ],
        r"b\.ann",
        {
            "brat/a.txt": "John Smith was seen.",
            "brat/a.ann": "T1\tPATIENT 0 10\tJohn Smith\n",
            "brat/b.ann": "T1\tPATIENT 0 4\tJane\n",
        },
    ),
    Try(
        "ingest-brat-corpus-is-a-file",
        [
            "ingest-corpus",
            "--source",
            "t",
            "--format",
            "brat",
            "--label-map",
            "{}",
            "--corpus",
            "{tmp}/c.jsonl",
            *INGEST_OUT,
        ],
        r"c\.jsonl",
        {"c.jsonl": _jsonl([NOTE])},
    ),
    Try(
        "ingest-summary-equals-out",
        [*INGEST, "--corpus", "{tmp}/c.jsonl", "--out", "{tmp}/out/x", "--summary", "{tmp}/out/x"],
        r"--out.*--summary|--summary.*--out",
        {"c.jsonl": _jsonl([NOTE])},
    ),
    Try(
        "ingest-out-is-a-folder",
        [
            *INGEST,
            "--corpus",
            "{tmp}/c.jsonl",
            "--out",
            "{tmp}/dir",
            "--summary",
            "{tmp}/out/s.json",
        ],
        r"dir",
        {"c.jsonl": _jsonl([NOTE]), "dir": None},
    ),
    # --- split
    Try(
        "split-notes-missing",
        [
            "split-notes",
            "--notes",
            "{tmp}/no.parquet",
            "--seed",
            "1",
            "--seed-fraction",
            "0.3",
            "--train-fraction",
            "0.4",
            "--holdout-fraction",
            "0.3",
            *INGEST_OUT,
        ],
        r"no\.parquet",
    ),
    Try(
        "split-notes-not-parquet",
        [
            "split-notes",
            "--notes",
            "{tmp}/n.parquet",
            "--seed",
            "1",
            "--seed-fraction",
            "0.3",
            "--train-fraction",
            "0.4",
            "--holdout-fraction",
            "0.3",
            *INGEST_OUT,
        ],
        r"n\.parquet.*Parquet",
        {"n.parquet": "not parquet"},
    ),
    Try(
        "split-notes-is-a-folder",
        [
            "split-notes",
            "--notes",
            "{tmp}/dir",
            "--seed",
            "1",
            "--seed-fraction",
            "0.3",
            "--train-fraction",
            "0.4",
            "--holdout-fraction",
            "0.3",
            *INGEST_OUT,
        ],
        r"dir",
        {"dir": None},
    ),
    Try(
        "split-fractions-do-not-sum-to-one",
        [
            "split-notes",
            "--notes",
            "{tmp}/n.parquet",
            "--seed",
            "1",
            "--seed-fraction",
            "0.5",
            "--train-fraction",
            "0.4",
            "--holdout-fraction",
            "0.3",
            *INGEST_OUT,
        ],
        r"fraction",
        {"n.parquet": _notes()},
    ),
    Try(
        "split-empty-notes-table",
        [
            "split-notes",
            "--notes",
            "{tmp}/n.parquet",
            "--seed",
            "1",
            "--seed-fraction",
            "0.3",
            "--train-fraction",
            "0.4",
            "--holdout-fraction",
            "0.3",
            *INGEST_OUT,
        ],
        r"n\.parquet.*(no notes|empty)",
        {"n.parquet": []},
    ),
    # --- mask
    Try(
        "mask-removed-equals-notes",
        [
            "mask-seeds",
            "--notes",
            "{tmp}/n.parquet",
            "--out",
            "{tmp}/out/m.parquet",
            "--removed",
            "{tmp}/n.parquet",
            "--summary",
            "{tmp}/out/s.json",
        ],
        r"--removed.*--notes|--notes.*--removed",
        {"n.parquet": _notes()},
    ),
    Try(
        "mask-summary-equals-out",
        ["mask-seeds", "--notes", "{tmp}/n.parquet", *MASK_OUT, "--summary", "{tmp}/out/m.parquet"],
        r"--out.*--summary|--summary.*--out",
        {"n.parquet": _notes()},
    ),
    Try(
        "mask-no-notes-in-parts",
        [
            "mask-seeds",
            "--notes",
            "{tmp}/n.parquet",
            "--parts",
            "train",
            *MASK_OUT,
            "--summary",
            "{tmp}/out/s.json",
        ],
        r"no notes in parts",
        {"n.parquet": _notes()},
    ),
    Try(
        "mask-coarse-view-not-json",
        [
            "mask-seeds",
            "--notes",
            "{tmp}/n.parquet",
            "--coarse-view",
            "[",
            *MASK_OUT,
            "--summary",
            "{tmp}/out/s.json",
        ],
        r"coarse-view",
        {"n.parquet": _notes()},
    ),
    Try(
        "mask-duplicate-note-ids",
        ["mask-seeds", "--notes", "{tmp}/n.parquet", *MASK_OUT, "--summary", "{tmp}/out/s.json"],
        r"n\.parquet.*n0",
        {"n.parquet": _notes(ids=["n0", "n1", "n0"])},
    ),
    # --- surrogate: keys
    Try(
        "surrogate-no-key",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet"],
        SECRET_VARIABLE,
        {"n.parquet": _notes()},
        env={SECRET_VARIABLE: None},
    ),
    Try(
        "surrogate-one-character-secret",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet"],
        r"(?i)entropy|too short|weak",
        {"n.parquet": _notes()},
        env={SECRET_VARIABLE: "a"},
    ),
    Try(
        "surrogate-repeated-character-secret",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet"],
        r"(?i)entropy|too short|weak",
        {"n.parquet": _notes()},
        env={SECRET_VARIABLE: "a" * 64},
    ),
    Try(
        "surrogate-key-file-and-other-env-secret",
        [
            "replace-surrogates",
            "{tmp}/n.parquet",
            "{tmp}/out/s.parquet",
            "--key-file",
            "{tmp}/k.key",
        ],
        SECRET_VARIABLE,
        {"n.parquet": _notes(), "k.key": secrets.token_hex(32) + "\n"},
    ),
    Try(
        "surrogate-demo-key-on-other-corpus",
        [
            "replace-surrogates",
            "{tmp}/n.parquet",
            "{tmp}/out/s.parquet",
            "--key-file",
            str(DEMO_KEY),
        ],
        r"(?i)demo",
        {"n.parquet": _notes(source="physionet")},
        env={SECRET_VARIABLE: None},
    ),
    Try(
        "surrogate-key-file-is-a-folder",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet", "--key-file", "{tmp}/dir"],
        r"dir",
        {"n.parquet": _notes(), "dir": None},
        env={SECRET_VARIABLE: None},
    ),
    Try(
        "surrogate-key-file-missing",
        [
            "replace-surrogates",
            "{tmp}/n.parquet",
            "{tmp}/out/s.parquet",
            "--key-file",
            "{tmp}/no.key",
        ],
        r"no\.key",
        {"n.parquet": _notes()},
        env={SECRET_VARIABLE: None},
    ),
    # --- surrogate: paths and input
    Try(
        "surrogate-output-is-the-key-file",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/k.key", "--key-file", "{tmp}/k.key"],
        r"key-file",
        {"n.parquet": _notes(), "k.key": STRONG + "\n"},
        env={SECRET_VARIABLE: None},
        absent=(),
    ),
    Try(
        "surrogate-output-is-the-input",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/./n.parquet"],
        r"input|output",
        {"n.parquet": _notes()},
        absent=(),
    ),
    Try(
        "surrogate-summary-equals-output",
        [
            "replace-surrogates",
            "{tmp}/n.parquet",
            "{tmp}/out/s.parquet",
            "--summary",
            "{tmp}/out/s.parquet",
        ],
        r"--summary",
        {"n.parquet": _notes()},
    ),
    Try(
        "surrogate-batch-rows-zero",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet", "--batch-rows", "0"],
        r"batch-rows",
        {"n.parquet": _notes()},
    ),
    Try(
        "surrogate-duplicate-ids-across-batches",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet", "--batch-rows", "1"],
        r"n\.parquet.*n0",
        {"n.parquet": _notes(ids=["n0", "n1", "n0"])},
    ),
    Try(
        "surrogate-policies-not-an-object",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet", "--policies", "[1]"],
        r"policies",
        {"n.parquet": _notes()},
    ),
    Try(
        "surrogate-unknown-operator",
        [
            "replace-surrogates",
            "{tmp}/n.parquet",
            "{tmp}/out/s.parquet",
            "--policies",
            '{"DOCTOR": {"operator": "nope"}}',
        ],
        r"nope",
        {"n.parquet": _notes()},
    ),
    Try(
        "surrogate-not-a-notes-table",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet"],
        r"n\.parquet.*Parquet",
        {"n.parquet": b"PAR1garbage"},
    ),
    Try(
        "surrogate-output-parent-is-a-file",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/n.parquet/s.parquet"],
        r"n\.parquet",
        {"n.parquet": _notes()},
        absent=(),
    ),
    Try(
        "surrogate-unknown-consistency",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet", "--consistency", "global"],
        r"consistency",
        {"n.parquet": _notes()},
    ),
    Try(
        "surrogate-unknown-label",
        ["replace-surrogates", "{tmp}/n.parquet", "{tmp}/out/s.parquet", "--labels", "NAME"],
        r"NAME",
        {"n.parquet": _notes()},
    ),
    Try(
        "mask-unknown-label-view",
        [
            "mask-seeds",
            "--notes",
            "{tmp}/n.parquet",
            "--label-view",
            "fine",
            *MASK_OUT,
            "--summary",
            "{tmp}/out/s.json",
        ],
        r"label-view",
        {"n.parquet": _notes()},
    ),
    Try(
        "mask-notes-table-without-note-columns",
        ["mask-seeds", "--notes", "{tmp}/n.parquet", *MASK_OUT, "--summary", "{tmp}/out/s.json"],
        r"n\.parquet",
        {"n.parquet": b""},
    ),
    Try(
        "evaluate-predictions-missing",
        [
            "evaluate-ner",
            "--gold",
            "{tmp}/n.parquet",
            "--predictions",
            "{tmp}/no.parquet",
            "--run",
            "r",
            "--out-dir",
            "{tmp}/out",
            "--parts",
            "seed",
        ],
        r"no\.parquet",
        {"n.parquet": _notes()},
    ),
    Try(
        "build-mixture-spec-not-an-object",
        [
            "build-mixture",
            "--notes",
            "{tmp}/n.parquet",
            "--spec",
            "[]",
            "--out-train",
            "{tmp}/out/t.parquet",
            "--out-validation",
            "{tmp}/out/v.parquet",
            "--summary",
            "{tmp}/out/s.json",
        ],
        r"spec",
        {"n.parquet": _notes()},
    ),
]


def _digests(tmp: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", TRIES, ids=[t.id for t in TRIES])
def test_hostile_try_is_refused_cleanly(case: Try, tmp_path, monkeypatch, capsys) -> None:
    _write(tmp_path, case.files)
    for name, value in case.env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    before = _digests(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse usage errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    assert re.search(case.message, err), err
    for name in case.absent:
        assert not (tmp_path / name).exists(), f"{name} was written"
    after = _digests(tmp_path)
    assert after == before, "an input changed or a file was left behind"


def test_the_matrix_ids_are_unique() -> None:
    assert len({t.id for t in TRIES}) == len(TRIES)
