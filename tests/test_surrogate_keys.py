"""The surrogate key: its shape, conflicting sources, unreadable files, the public demo key.

Public files, phrases and ``synthdeid new-key`` are in ``test_reliability_keys.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from synthdeid.cli import main
from synthdeid.errors import ConfigError
from synthdeid.notes import Note, Span, write_notes
from synthdeid.surrogate.keying import (
    DEMO_CORPUS_FILE,
    DEMO_KEY_FILE,
    DEMO_KEY_FINGERPRINT,
    DEMO_SOURCE,
    KEY_BYTES,
    SECRET_VARIABLE,
    SurrogateKey,
    is_demo_key,
    key_bytes,
    key_problem,
    load_key,
    read_key_file,
)

STRONG = hashlib.sha256(b"surrogate key tests").hexdigest()


def notes_table(path: Path, source: str) -> Path:
    notes = [
        Note(f"n{i}", "p1", "Seen by Dr. Ames on 3/14.", (Span(12, 16, "DOCTOR"),), source, "seed")
        for i in range(3)
    ]
    write_notes(notes, path)
    return path


# ------------------------------------------------------------ shape


@pytest.mark.parametrize(
    "weak",
    ["a", "a" * 64, "ab" * 32, "s3cret", "physionet-integration-test-secret", "0123" * 16],
)
def test_weak_secrets_are_refused_without_showing_them(weak: str, monkeypatch) -> None:
    assert key_problem(weak.encode()) is not None
    monkeypatch.setenv(SECRET_VARIABLE, weak)
    with pytest.raises(ConfigError, match="too weak") as error:
        load_key()
    assert len(weak) < 3 or weak not in str(error.value)


def test_generated_secrets_pass(monkeypatch) -> None:
    """What `openssl rand -hex 32` / `-base64 32` print passes, every time."""
    for _ in range(2000):
        assert key_problem(secrets.token_hex(32).encode()) is None
        assert key_problem(base64.b64encode(secrets.token_bytes(32))) is None
        assert key_problem(secrets.token_urlsafe(32).encode()) is None
    if shutil.which("openssl"):
        for encoding in ("-hex", "-base64"):
            printed = subprocess.run(
                ["openssl", "rand", encoding, "32"], capture_output=True, text=True, check=True
            ).stdout
            monkeypatch.setenv(SECRET_VARIABLE, printed)
            assert load_key().fingerprint() == SurrogateKey(printed.strip().encode()).fingerprint()


def test_the_shape_rule_does_what_the_docstring_says() -> None:
    raw = secrets.token_bytes(KEY_BYTES)
    assert key_bytes(b"  " + raw.hex().encode() + b"\n") == raw
    assert key_bytes(raw.hex().upper().encode()) == raw
    assert key_bytes(raw.hex()[1:].encode()) is None  # an odd number of hex digits
    assert key_bytes(base64.urlsafe_b64encode(raw).rstrip(b"=")) == raw
    assert key_bytes(base64.b64encode(raw) + b"=") is None  # bad padding
    assert key_bytes(b"a+b-" * 11) is None  # the two base64 alphabets mixed
    assert key_bytes("é".encode() * 64) is None
    short = key_problem(raw[:-1].hex().encode())
    assert short == f"it holds {KEY_BYTES - 1} bytes, {KEY_BYTES} needed"
    assert key_problem(secrets.token_bytes(1025).hex().encode()) is not None
    assert "printable" in str(key_problem(b"an English sentence, ASCII only!".hex().encode()))
    assert "distinct" in str(key_problem(bytes([0, 1] * 32).hex().encode()))
    assert "repeat" in str(key_problem((raw + raw[:12]).hex().encode()))


def test_the_demo_key_and_the_test_keys_pass(repo: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    demo = read_key_file(repo / DEMO_KEY_FILE)
    assert is_demo_key(SurrogateKey(demo)) and SurrogateKey(demo).fingerprint() == (
        DEMO_KEY_FINGERPRINT
    )
    # the demo key predates the shape rule: it is accepted as the public demo key
    assert key_problem(demo) is not None
    assert load_key(repo / DEMO_KEY_FILE).fingerprint() == DEMO_KEY_FINGERPRINT
    # the demo config names that key for that corpus, as the constants say
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    assert config["surrogate"]["key_file"] == DEMO_KEY_FILE
    assert config["corpus"]["source"] == DEMO_SOURCE
    assert config["corpus"]["path"] == DEMO_CORPUS_FILE
    assert key_problem(STRONG.encode()) is None


# ------------------------------------------------------------ sources


def test_a_key_file_and_a_different_env_secret_conflict(tmp_path: Path, monkeypatch) -> None:
    other = secrets.token_hex(32)
    key_file = tmp_path / "k.key"
    key_file.write_text(f"# comment\n{STRONG}\n")
    monkeypatch.setenv(SECRET_VARIABLE, other)
    with pytest.raises(ConfigError) as error:
        load_key(key_file)
    message = str(error.value)
    assert SECRET_VARIABLE in message and str(key_file) in message
    assert "surrogate.key_file: null" in message and f"unset {SECRET_VARIABLE}" in message
    assert STRONG not in message and other not in message
    # the same secret in both places is no conflict
    monkeypatch.setenv(SECRET_VARIABLE, STRONG)
    assert load_key(key_file).fingerprint() == SurrogateKey(STRONG.encode()).fingerprint()
    monkeypatch.delenv(SECRET_VARIABLE)
    assert load_key(key_file).fingerprint() == SurrogateKey(STRONG.encode()).fingerprint()


def test_unreadable_key_files_are_one_line_errors(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load_key(folder)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    with pytest.raises(ConfigError, match=r"cannot be read \(Not a directory\)"):
        load_key(plain / "k.key")


def test_cli_key_file_naming_a_directory_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    notes = notes_table(tmp_path / "in.parquet", "t")
    (tmp_path / "keys").mkdir()
    out = tmp_path / "out" / "notes.parquet"
    code = main(["replace-surrogates", str(notes), str(out), "--key-file", str(tmp_path / "keys")])
    assert code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert str(tmp_path / "keys") in last and ("folder" in last or "directory" in last)
    assert "Traceback" not in err and not out.exists()


# ------------------------------------------------------------ the demo key in the CLI


def test_cli_refuses_the_demo_key_on_other_notes(repo: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    notes = notes_table(tmp_path / "in.parquet", "physionet-deid")
    out = tmp_path / "out" / "notes.parquet"
    code = main(
        ["replace-surrogates", str(notes), str(out), "--key-file", str(repo / DEMO_KEY_FILE)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "public demo key" in err and "'physionet-deid'" in err
    assert "surrogate.key_file: null" in err and f"${SECRET_VARIABLE}" in err
    assert not out.exists() and not (out.parent / "local").exists()
    # a copy of the demo key elsewhere is recognised too
    copy = tmp_path / "copied.key"
    copy.write_bytes((repo / DEMO_KEY_FILE).read_bytes())
    assert main(["replace-surrogates", str(notes), str(out), "--key-file", str(copy)]) == 2
    assert not out.exists()


def test_cli_accepts_the_demo_key_on_the_demo_corpus(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    notes = notes_table(tmp_path / "in.parquet", DEMO_SOURCE)
    out = tmp_path / "out" / "notes.parquet"
    assert (
        main(["replace-surrogates", str(notes), str(out), "--key-file", str(repo / DEMO_KEY_FILE)])
        == 0
    )
    summary = json.loads((out.parent / "notes.summary.json").read_text())
    assert summary["provenance"]["params"]["key_fingerprint"] == DEMO_KEY_FINGERPRINT


# ------------------------------------------------------------ the workflow (dry runs)


def dry_run(workdir: Path, config: dict, *targets: str, env: dict[str, str | None]):
    from workflow_helpers import snakemake

    path = workdir / "named.yaml"
    path.write_text(yaml.safe_dump(config))
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return snakemake(workdir, *targets, "-n", "-p", "--configfile", str(path), check=False)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def workdir(repo: Path, tmp_path: Path) -> Path:
    from workflow_helpers import copy_workflow

    (tmp_path / "wf").mkdir()
    target = copy_workflow(repo, tmp_path / "wf")
    corpus = target / "data" / "notes.jsonl"
    corpus.parent.mkdir()
    shutil.copy(target / DEMO_CORPUS_FILE, corpus)
    return target


# a named config for another corpus that sets only corpus and labels (as a user
# would): everything else, surrogate.key_file included, comes from config.yaml
OTHER_CORPUS = {
    "corpus": {"name": "other", "format": "jsonl", "path": "data/notes.jsonl", "source": "other"},
    "labels": {"mapping": {}},
}


@pytest.mark.slow
def test_workflow_refuses_the_inherited_demo_key_for_another_corpus(workdir: Path) -> None:
    target = "results/replace_surrogates/other/notes.parquet"
    result = dry_run(workdir, OTHER_CORPUS, target, env={SECRET_VARIABLE: secrets.token_hex(32)})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "public demo key" in output and "corpus 'other'" in output
    assert "surrogate.key_file: null" in output and f"${SECRET_VARIABLE}" in output
    assert "--key-file=resources/demo/demo-surrogate.key" not in output
    # the fix the message names: no key file, the secret from the environment
    fixed = {**OTHER_CORPUS, "surrogate": {"key_file": None}}
    result = dry_run(workdir, fixed, target, env={SECRET_VARIABLE: secrets.token_hex(32)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--key-file= " in result.stdout and "demo-surrogate.key" not in result.stdout


@pytest.mark.slow
def test_workflow_refuses_a_key_file_that_differs_from_the_env_secret(workdir: Path) -> None:
    target = "results/replace_surrogates/demo/notes.parquet"
    result = dry_run(workdir, {}, target, env={SECRET_VARIABLE: secrets.token_hex(32)})
    assert result.returncode != 0
    assert "two different surrogate secrets" in result.stdout + result.stderr
    result = dry_run(workdir, {}, target, env={SECRET_VARIABLE: None})
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
def test_predict_ner_in_surrogate_mode_depends_on_the_key(workdir: Path) -> None:
    """The key's fingerprint is a param of predict_ner: no usable key, no plan."""
    surrogate_mode = {
        "ner": {"deid": {"mode": "surrogate"}},
        "surrogate": {"key_file": None},
    }
    # real_only trains on no surrogate pool: only predict_ner itself needs the key
    target = "results/predict_ner/demo/real_only/deidentified.parquet"
    result = dry_run(workdir, surrogate_mode, target, env={SECRET_VARIABLE: None})
    assert result.returncode != 0
    assert "predict_ner: no surrogate key" in result.stdout + result.stderr
    result = dry_run(workdir, surrogate_mode, target, env={SECRET_VARIABLE: "a" * 64})
    assert "predict_ner: the surrogate secret in $SYNTHDEID_SECRET is too weak" in (
        result.stdout + result.stderr
    )
    result = dry_run(workdir, surrogate_mode, target, env={SECRET_VARIABLE: STRONG})
    assert result.returncode == 0, result.stderr[-2000:]
    # redaction needs no key at all
    result = dry_run(
        workdir, {"surrogate": {"key_file": None}}, target, env={SECRET_VARIABLE: None}
    )
    assert result.returncode == 0, result.stderr[-2000:]
