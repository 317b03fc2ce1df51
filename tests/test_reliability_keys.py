"""Surrogate keys from a hostile user: public files and famous phrases as keys, and
``synthdeid new-key``, the one safe origin of a key.

A key is one line of hex (64 digits or more) or base64 (standard or URL-safe)
of at least 32 random bytes; anything else is refused before any work, with
one line naming where the key came from (never its content) and the command
that makes one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import stat
from pathlib import Path

import pytest

from synthdeid.cli import main
from synthdeid.errors import ConfigError
from synthdeid.notes import Note, Span, write_notes
from synthdeid.surrogate.keying import (
    DEMO_CORPUS_FILE,
    DEMO_KEY_FILE,
    DEMO_KEY_FINGERPRINT,
    SECRET_VARIABLE,
    SurrogateKey,
    load_key,
)

NEW_KEY_HINT = "synthdeid new-key PATH"
FAMOUS = {
    "correct-horse": "correct horse battery staple " * 3,
    "quick-brown-fox": "the quick brown fox jumps over the lazy dog " * 4,
}
# key-alphabet strings that are no random bytes: each must be refused
NOT_RANDOM = {
    "zeros-hex": "0" * 64,
    "one-letter-hex": "a" * 64,
    "two-digits-hex": "ab" * 32,
    "pattern-hex": "0123456789abcdef" * 4,
    "deadbeef-hex": "deadbeef" * 8,
    "one-letter-base64": "Z" * 64,
    "zero-bytes-base64": base64.b64encode(bytes(32)).decode(),
    "phrase-in-base64-alphabet": "correcthorsebatterystaple" * 3,
    "text-as-hex": b"correct horse battery staple, the quick brown fox".hex(),
    "text-as-base64": base64.b64encode(b"the quick brown fox jumps over the lazy dog").decode(),
    "short-hex": secrets.token_hex(31),
    "short-base64": base64.b64encode(secrets.token_bytes(31)).decode(),
    "two-lines-of-hex": secrets.token_hex(32) + "\n" + secrets.token_hex(32),
}


def notes_table(path: Path) -> Path:
    notes = [
        Note(f"n{i}", "p1", "Seen by Dr. Ames on 3/14.", (Span(12, 16, "DOCTOR"),), "test", "seed")
        for i in range(3)
    ]
    write_notes(notes, path)
    return path


def files_and_bytes(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def assert_refused_naming(error: pytest.ExceptionInfo[ConfigError], where: str, text: str) -> None:
    """One line naming ``where`` and the command that makes a key; no line of ``text``."""
    message = str(error.value)
    assert "\n" not in message and where in message and NEW_KEY_HINT in message
    for line in text.splitlines():
        if len(line.strip()) >= 8:
            assert line.strip() not in message


# ------------------------------------------------------------ public files as key files


def corpus_like(tmp_path: Path) -> Path:
    lines = [
        {"note_id": f"n{i}", "patient_id": "p1", "text": f"Seen by Dr. Ames on 3/{i}.", "spans": []}
        for i in range(1, 20)
    ]
    path = tmp_path / "notes.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    "which", ["README.md", "pyproject.toml", "/etc/os-release", "demo corpus", "corpus-like jsonl"]
)
def test_a_public_file_as_key_file_is_refused(
    which: str, repo: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    path = {
        "README.md": repo / "README.md",
        "pyproject.toml": repo / "pyproject.toml",
        "/etc/os-release": Path("/etc/os-release"),
        "demo corpus": repo / DEMO_CORPUS_FILE,
        "corpus-like jsonl": corpus_like(tmp_path),
    }[which]
    if not path.is_file():
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(ConfigError) as error:
        load_key(path)
    assert_refused_naming(error, str(path), path.read_text(encoding="utf-8", errors="replace"))


def test_cli_refuses_a_public_file_as_key_file_cleanly(
    repo: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    notes_table(tmp_path / "in.parquet")
    before = files_and_bytes(tmp_path)
    out = tmp_path / "out" / "notes.parquet"
    key_file = repo / "pyproject.toml"
    argv = ["replace-surrogates", str(tmp_path / "in.parquet"), str(out), "--key-file"]
    assert main([*argv, str(key_file)]) == 2
    err = capsys.readouterr().err
    [line] = err.strip().splitlines()
    assert str(key_file) in line and NEW_KEY_HINT in line and "[project]" not in line
    assert not out.parent.exists() and files_and_bytes(tmp_path) == before


# ------------------------------------------------------------ famous phrases


@pytest.mark.parametrize("phrase", FAMOUS.values(), ids=FAMOUS.keys())
def test_a_famous_phrase_in_the_environment_is_refused(phrase: str, monkeypatch) -> None:
    monkeypatch.setenv(SECRET_VARIABLE, phrase)
    with pytest.raises(ConfigError) as error:
        load_key()
    assert_refused_naming(error, f"${SECRET_VARIABLE}", phrase.strip()[:20])


def test_cli_refuses_a_famous_phrase_cleanly(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(SECRET_VARIABLE, FAMOUS["quick-brown-fox"])
    notes_table(tmp_path / "in.parquet")
    before = files_and_bytes(tmp_path)
    out = tmp_path / "out" / "notes.parquet"
    assert main(["replace-surrogates", str(tmp_path / "in.parquet"), str(out)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"${SECRET_VARIABLE}" in line and NEW_KEY_HINT in line and "quick" not in line
    assert not out.parent.exists() and files_and_bytes(tmp_path) == before


@pytest.mark.parametrize("text", NOT_RANDOM.values(), ids=NOT_RANDOM.keys())
def test_key_shaped_text_that_is_no_random_key_is_refused(
    text: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    key_file = tmp_path / "k.key"
    key_file.write_text(f"# a key file\n{text}\n")
    with pytest.raises(ConfigError) as error:
        load_key(key_file)
    assert_refused_naming(error, str(key_file), "")
    assert text[:16] not in str(error.value)
    monkeypatch.setenv(SECRET_VARIABLE, text)
    with pytest.raises(ConfigError) as error:
        load_key()
    assert_refused_naming(error, f"${SECRET_VARIABLE}", "")


def test_a_key_file_that_never_ends_is_refused(monkeypatch) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match="/dev/zero"):
        load_key("/dev/zero")


# ------------------------------------------------------------ keys that pass


def test_hex_and_base64_of_random_bytes_pass_every_time(tmp_path: Path, monkeypatch) -> None:
    """What `openssl rand -hex 32` / `-base64 32` print passes, in every form."""
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    key_file = tmp_path / "k.key"
    for i in range(3000):
        raw = secrets.token_bytes(32 + i % 3)
        forms = [
            raw.hex(),
            raw.hex().upper(),
            base64.b64encode(raw).decode(),
            base64.urlsafe_b64encode(raw).decode(),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
        ]
        for text in forms:
            key_file.write_text(f"# comment\n  {text}  \n")
            assert load_key(key_file).fingerprint() == SurrogateKey(text.encode()).fingerprint()
    monkeypatch.setenv(SECRET_VARIABLE, secrets.token_hex(32) + "\n")
    assert load_key().fingerprint()


def test_the_public_demo_key_still_keys_the_demo_corpus(repo: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    assert load_key(repo / DEMO_KEY_FILE).fingerprint() == DEMO_KEY_FINGERPRINT


# ------------------------------------------------------------ synthdeid new-key


def test_new_key_writes_a_private_key_that_load_key_accepts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    first, second = tmp_path / "keys" / "a.key", tmp_path / "keys" / "b.key"
    old_umask = os.umask(0)  # the widest umask: the key must still be 0600
    try:
        assert main(["new-key", str(first)]) == 0
        assert main(["new-key", str(second)]) == 0
    finally:
        os.umask(old_umask)
    for path in (first, second):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        text = path.read_text(encoding="ascii")
        assert len(text) == 65 and text.endswith("\n")
        assert len(bytes.fromhex(text.strip())) == 32
        assert load_key(path).fingerprint() == SurrogateKey(text.strip().encode()).fingerprint()
    assert first.read_bytes() != second.read_bytes()
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["a.key", "b.key"]


def test_new_key_never_overwrites_a_file(tmp_path: Path, capsys) -> None:
    existing = tmp_path / "k.key"
    existing.write_text("an existing file\n")
    existing.chmod(0o644)
    digest = hashlib.sha256(existing.read_bytes()).hexdigest()
    assert main(["new-key", str(existing)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(existing) in line and "exists" in line
    assert hashlib.sha256(existing.read_bytes()).hexdigest() == digest
    assert stat.S_IMODE(existing.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["k.key"]
    # a folder: refused before anything is written
    assert main(["new-key", str(tmp_path)]) == 2


def test_new_key_logs_the_fingerprint_never_the_key(tmp_path: Path, capsys) -> None:
    path = tmp_path / "k.key"
    assert main(["new-key", str(path)]) == 0
    captured = capsys.readouterr()
    key = path.read_text().strip()
    assert key not in captured.out + captured.err
    assert SurrogateKey(key.encode()).fingerprint() in captured.err
