"""The ``synthdeid`` command: lazy stage loading, path roles, collisions, one-line errors."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from synthdeid.cli import STAGES, build_parser, main
from synthdeid.cli_types import (
    InputPath,
    OutputPath,
    PathArgument,
    PathCollision,
    PathValue,
    input_dir,
    input_file,
    named_input_dir,
    non_negative_int,
    output_dir,
    output_file,
    positive_int,
    refuse_colliding_paths,
)
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.notes import Note, Span, write_notes
from synthdeid.surrogate.keying import SECRET_VARIABLE

SRC = Path(__file__).resolve().parents[1] / "src"
STRONG_SECRET = "5f0c7a3e9b21d4486ac0e3f1b7d29c54a8e6f03b1c2d7e9a4b5c6d7e8f90a1b2"

# arguments every stage writes when it has them
OUTPUT_DESTS = {
    "out",
    "output",
    "out_dir",
    "out_train",
    "out_validation",
    "out_deidentified",
    "summary",
    "leftovers",
    "offsets",
    "figure",
    "table",
    "stats",
    "privacy_json",
    "pii",
    "no_pii",
    "removals",
}
# names that are outputs in one stage and inputs in another
STAGE_OUTPUTS = {
    ("mask-seeds", "removed"),
    ("sample-dp-lm", "samples"),
    ("verbalize-tabular", "reports"),
}
# counts and sizes: never 0 or negative (0 allowed where it means "the default")
COUNT_DESTS = {
    "batch_rows",
    "batch_size",
    "threads",
    "resamples",
    "count",
    "size",
    "n_notes",
    "max_length",
    "rows",
}


def stage_actions(name: str) -> list[argparse.Action]:
    stage_parser = build_parser().stage_parsers[name]
    stage_parser.load()
    return [a for a in stage_parser._actions if not isinstance(a, argparse._HelpAction)]


def notes_table(path: Path, n: int = 3) -> Path:
    notes = [
        Note(f"n{i}", "p1", "Seen by Dr. Ames on 3/14.", (Span(12, 16, "DOCTOR"),), "test", "seed")
        for i in range(n)
    ]
    write_notes(notes, path)
    return path


def digests(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# --- the stage table and lazy loading


@pytest.mark.parametrize("name", sorted(STAGES))
def test_each_stage_help_line_is_its_module_docstring_first_line(name: str) -> None:
    stage = STAGES[name]
    source = SRC / Path(*stage.module.split(".")).with_suffix(".py")
    doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8")))
    assert doc, f"{stage.module} has no docstring"
    assert stage.summary == doc.strip().splitlines()[0]


def test_top_level_help_lists_every_stage_without_importing_any() -> None:
    probe = (
        "import sys\n"
        "from synthdeid.cli import main, STAGES\n"
        "main(['--help'])\n"
        "print('\\n' + repr(sorted(s.module for s in STAGES.values() if s.module in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    *help_lines, imported = done.stdout.rstrip("\n").split("\n")
    assert imported == "[]"
    text = "".join("".join(help_lines).split())  # help wraps lines, also at hyphens
    for name, stage in STAGES.items():
        assert name in text
        assert "".join(stage.summary.split()) in text


def test_a_stage_help_imports_only_that_stage_and_nothing_heavy() -> None:
    probe = (
        "import sys\n"
        "from synthdeid.cli import main, STAGES\n"
        "main(['replace-surrogates', '--help'])\n"
        "heavy = ('torch', 'transformers', 'pandas', 'sklearn', 'matplotlib', 'opacus')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "print(sorted(s.module for s in STAGES.values() if s.module in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    heavy, stages = done.stdout.strip().splitlines()[-2:]
    assert heavy == "[]"
    assert stages == "['synthdeid.stages.replace_surrogates']"
    assert "--batch-rows" in done.stdout  # the stage's own arguments are in its help


def test_stage_help_shows_its_docstring_and_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mask-seeds", "--help"]) == 0
    out = "".join(capsys.readouterr().out.split())
    assert "".join(STAGES["mask-seeds"].summary.split()) in out and "--removed" in out


# --- every stage marks its path arguments


@pytest.mark.parametrize("name", sorted(STAGES))
def test_each_stage_marks_its_outputs_and_types_every_path(name: str) -> None:
    actions = stage_actions(name)
    for action in actions:
        where = f"{name} {action.dest}"
        assert action.type is not Path, f"{where}: a plain Path has no role; use cli_types"
        if action.dest in OUTPUT_DESTS or (name, action.dest) in STAGE_OUTPUTS:
            assert isinstance(action.type, PathArgument), f"{where}: not a path type"
            assert action.type.role == "output", f"{where}: an output marked as input"
        if action.dest.endswith(("_file", "_dir")):
            assert action.type is not None, f"{where}: a path given as a plain string"
        if action.dest in COUNT_DESTS:
            assert action.type in (positive_int, non_negative_int), f"{where}: {action.type}"


@pytest.mark.parametrize("name", sorted(STAGES))
def test_each_stage_writes_something(name: str) -> None:
    roles = [a.type.role for a in stage_actions(name) if isinstance(a.type, PathArgument)]
    assert "output" in roles


# --- colliding paths: the four cases and the rule


def test_mask_removed_equal_to_notes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = notes_table(tmp_path / "in.parquet")
    before = digests(tmp_path)
    argv = ["mask-seeds", "--notes", str(notes), "--out", str(tmp_path / "m.parquet")]
    argv += ["--removed", str(notes), "--summary", str(tmp_path / "s.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--notes and --removed name the same file" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert digests(tmp_path) == before


def test_surrogate_output_equal_to_key_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = notes_table(tmp_path / "in.parquet")
    key = tmp_path / "k2"
    key.write_text(STRONG_SECRET + "\n")
    before = digests(tmp_path)
    assert main(["replace-surrogates", str(notes), str(key), "--key-file", str(key)]) == 2
    err = capsys.readouterr().err
    assert "output and --key-file name the same file" in err
    assert digests(tmp_path) == before


def test_surrogate_output_equal_to_input_is_refused_also_spelled_differently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notes_table(tmp_path / "io.parquet")
    (tmp_path / "link.parquet").symlink_to(tmp_path / "io.parquet")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SECRET_VARIABLE, STRONG_SECRET)
    before = digests(tmp_path)
    for output in ("io.parquet", "./io.parquet", str(tmp_path / "io.parquet"), "link.parquet"):
        assert main(["replace-surrogates", "io.parquet", output]) == 2
        assert "input and output name the same file" in capsys.readouterr().err
    assert digests(tmp_path) == before


def test_surrogate_summary_equal_to_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = notes_table(tmp_path / "in.parquet")
    monkeypatch.setenv(SECRET_VARIABLE, STRONG_SECRET)
    out = tmp_path / "out" / "s.parquet"
    assert main(["replace-surrogates", str(notes), str(out), "--summary", str(out)]) == 2
    err = capsys.readouterr().err
    assert "output and --summary name the same file" in err
    assert "overwrite the other output" in err
    assert not (tmp_path / "out").exists()


def test_log_file_equal_to_an_input_is_refused_before_it_is_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = notes_table(tmp_path / "in.parquet")
    before = digests(tmp_path)
    argv = ["--log", str(notes), "split-notes", "--notes", str(notes), "--seed", "1"]
    argv += ["--seed-fraction", "0.3", "--train-fraction", "0.4", "--holdout-fraction", "0.3"]
    argv += ["--out", str(tmp_path / "o.parquet"), "--summary", str(tmp_path / "s.json")]
    assert main(argv) == 2
    assert "--log and --notes name the same file" in capsys.readouterr().err
    assert digests(tmp_path) == before


def test_two_equal_inputs_are_allowed_an_output_meeting_them_is_not(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    refuse_colliding_paths([PathValue("--x", "input", a), PathValue("--y", "input", a)])
    refuse_colliding_paths([PathValue("--x", "input", a), PathValue("--out", "output", b)])
    with pytest.raises(PathCollision) as exc:
        refuse_colliding_paths(
            [
                PathValue("--x", "input", a),
                PathValue("--y", "input", a),
                PathValue("--out", "output", tmp_path / "." / "a"),
            ]
        )
    assert exc.value.arguments == ("--x", "--out")


def test_paths_inside_name_path_values_count(tmp_path: Path) -> None:
    """A NAME=DIR run given as the output folder is refused (compare-ner)."""
    run = tmp_path / "run"
    run.mkdir()
    argv = ["compare-ner", "--run", f"a={run}", "--out-dir", str(run)]
    assert main(argv) == 2


# --- argument types: counts, files and folders


@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_batch_rows_that_is_not_positive_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    notes = notes_table(tmp_path / "in.parquet")
    argv = ["replace-surrogates", str(notes), str(tmp_path / "o.parquet"), "--batch-rows", value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "argument --batch-rows:" in err and "Traceback" not in err


def test_count_types() -> None:
    assert positive_int("3") == 3 and non_negative_int("0") == 0
    for bad, parse in (("0", positive_int), ("-1", non_negative_int), ("1.5", positive_int)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def test_path_types_check_files_folders_and_parents(tmp_path: Path) -> None:
    folder, file = tmp_path / "d", tmp_path / "f"
    folder.mkdir()
    file.write_text("x")
    assert isinstance(input_file(str(file)), InputPath)
    assert isinstance(output_file(str(tmp_path / "new" / "o.parquet")), OutputPath)
    assert isinstance(output_dir(str(tmp_path / "new")), OutputPath)
    assert input_file(str(tmp_path / "missing")) == tmp_path / "missing"  # the stage says so
    bad = [
        (input_file, folder, "is a folder"),
        (input_dir, file, "is a file"),
        (output_file, folder, "is a folder"),
        (output_dir, file, "is a file"),
        (output_file, file / "o.parquet", "is a file, not a folder"),
        (output_dir, file / "a" / "b", "is a file, not a folder"),
    ]
    for path_type, value, message in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            path_type(str(value))
    with pytest.raises(argparse.ArgumentTypeError):
        input_file("")
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=DIR"):
        named_input_dir("no-equals-sign")


SPLIT_ARGS = ["--seed", "1", "--seed-fraction", "0.3", "--train-fraction", "0.4"]
SPLIT_ARGS += ["--holdout-fraction", "0.3", "--out", "{t}/o.parquet", "--summary", "{t}/s.json"]
EVALUATE_ARGS = ["evaluate-ner", "--gold", "{t}/in.parquet", "--predictions", "{t}/in.parquet"]
EVALUATE_ARGS += ["--run", "r"]


@pytest.mark.parametrize(
    "argv",
    [
        ["split-notes", "--notes", "{t}/d", *SPLIT_ARGS],
        ["replace-surrogates", "{t}/in.parquet", "{t}/d"],
        ["replace-surrogates", "{t}/in.parquet", "{t}/f/o.parquet"],
        [
            "ensemble-ner",
            "--member",
            "a={t}/f",
            "--validation",
            "{t}/in.parquet",
            "--out-dir",
            "{t}/e",
        ],
        [*EVALUATE_ARGS, "--out-dir", "{t}/f"],
    ],
    ids=[
        "input-is-folder",
        "output-is-folder",
        "output-under-file",
        "dir-is-file",
        "out-dir-is-file",
    ],
)
def test_file_for_folder_and_the_reverse_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    notes_table(tmp_path / "in.parquet")
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    before = digests(tmp_path)
    assert main([a.replace("{t}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err
    assert digests(tmp_path) == before


def test_an_os_error_in_a_stage_is_one_line_naming_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's default path is a folder: the write fails with IsADirectoryError."""
    notes = notes_table(tmp_path / "in.parquet")
    monkeypatch.setenv(SECRET_VARIABLE, STRONG_SECRET)
    (tmp_path / "o.summary.json").mkdir()
    assert main(["replace-surrogates", str(notes), str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "ERROR" in line]
    assert len(lines) == 1 and "Traceback" not in err
    assert str(tmp_path / "o.summary.json") in lines[0]
    assert not list(tmp_path.glob(".o.summary.json.*"))


def test_ingest_runs_through_the_lazy_parser(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"note_id": "a", "patient_id": "p", "text": "Dr. Ames", "spans": []}) + "\n"
    )
    label_map = json.dumps({label: label for label in CANONICAL_LABELS})
    argv = ["ingest-corpus", "--corpus", str(corpus), "--format", "jsonl", "--label-map", label_map]
    argv += ["--source", "t", "--out", str(tmp_path / "n.parquet")]
    argv += ["--summary", str(tmp_path / "s.json")]
    assert main(argv) == 0
    assert (tmp_path / "n.parquet").is_file()


def test_a_json_mapping_flag_refuses_anything_else_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(
            [
                "ingest-corpus",
                "--corpus",
                "x",
                "--format",
                "jsonl",
                "--label-map",
                "[1, 2]",
                "--source",
                "s",
                "--out",
                "o.parquet",
                "--summary",
                "s.json",
            ]
        )
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "--label-map" in error and "must be a JSON object, got list" in error
