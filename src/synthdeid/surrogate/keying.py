"""The secret key every surrogate derives from, and the derivations.

All randomness of surrogate replacement comes from HMAC-SHA256 under one
secret, so a rerun with the same key gives identical output and a different key
gives unrelated surrogates. The key comes from the ``SYNTHDEID_SECRET``
environment variable or a key file, which ``synthdeid new-key`` makes
(:func:`new_key_text`, file mode 0600); no step writes it anywhere else.
Artifacts record only :meth:`SurrogateKey.fingerprint`, which identifies the
key without revealing it.

:func:`load_key` refuses a secret that is no key (:func:`key_problem`: a
key is one line of hex or base64 of at least 32 random bytes, so a public
file or a phrase is refused), and a key file that disagrees with
``$SYNTHDEID_SECRET``. The public demo key (:data:`DEMO_KEY_FILE`, recognised
by :data:`DEMO_KEY_FINGERPRINT`) is for the synthetic demo corpus only:
:func:`refuse_demo_key` stops any step that would apply it to other notes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import random
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

from synthdeid.errors import ConfigError

SECRET_VARIABLE = "SYNTHDEID_SECRET"
_SEPARATOR = b"\x1f"

# a key holds at least 32 random bytes (256 bits), as `synthdeid new-key` writes
KEY_BYTES = 32
# HMAC-SHA256 gains nothing from a key over 64 bytes; this bounds the checks of one
MAX_KEY_BYTES = 1024
# a key file, comments included, is never larger: a bigger one is not read to its end
MAX_KEY_FILE_BYTES = 64 * 1024
# a run of this many bits that recurs in a key marks a pattern (key_problem)
REPEAT_BITS = 64
NEW_KEY_COMMAND = "synthdeid new-key PATH"
# the public demo key, kept in the repository for the synthetic demo corpus
DEMO_KEY_FILE = "resources/demo/demo-surrogate.key"
DEMO_KEY_FINGERPRINT = "cbdd71b2445fbc1b"
# the ``source`` of the synthetic demo corpus's notes (config.yaml corpus.source)
DEMO_SOURCE = "demo-synthetic"
# the embedded demo corpus file (config.yaml corpus.path), relative to the workflow
DEMO_CORPUS_FILE = "resources/demo/notes.jsonl"

HOW_TO_SET = (
    f"make a key file with `{NEW_KEY_COMMAND}` and name it in surrogate.key_file "
    f"(--key-file), or set the environment variable {SECRET_VARIABLE} (e.g. "
    f"`export {SECRET_VARIABLE}=$(openssl rand -hex 32)`); keep the same key to "
    "reproduce a release"
)


class SurrogateKey:
    """An HMAC-SHA256 key; ``repr`` and ``str`` never show it."""

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        if not secret.strip():
            raise ConfigError("the surrogate secret is empty")
        self._secret = secret

    def __repr__(self) -> str:
        return f"SurrogateKey(fingerprint={self.fingerprint()})"

    __str__ = __repr__

    def digest(self, *parts: str) -> bytes:
        """HMAC-SHA256 of the parts, unambiguously joined."""
        message = _SEPARATOR.join(part.encode("utf-8") for part in parts)
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def integer(self, *parts: str) -> int:
        return int.from_bytes(self.digest(*parts), "big")

    def rng(self, *parts: str) -> random.Random:
        """A random generator seeded by the HMAC of the parts."""
        return random.Random(self.integer(*parts))

    def fingerprint(self) -> str:
        """16 hex characters that identify the key (HMAC of a fixed label)."""
        return self.digest("synthdeid key fingerprint").hex()[:16]


# ------------------------------------------------------------ what a key looks like

_HEX = re.compile(r"[0-9A-Fa-f]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_BASE64_URLSAFE = re.compile(r"[A-Za-z0-9_-]+={0,2}")


def key_bytes(secret: bytes) -> bytes | None:
    """The bytes ``secret`` writes, or None when it is not one line of hex or base64.

    Surrounding whitespace is ignored. A text of hex digits only is hex (an
    even number of them); any other is standard (``A-Za-z0-9+/``) or URL-safe
    (``A-Za-z0-9-_``) base64, its ``=`` padding optional.
    """
    try:
        text = secret.strip().decode("ascii")
    except UnicodeDecodeError:
        return None
    if _HEX.fullmatch(text):
        return bytes.fromhex(text) if len(text) % 2 == 0 else None
    if _BASE64.fullmatch(text):
        altchars = None
    elif _BASE64_URLSAFE.fullmatch(text):
        altchars = b"-_"
    else:
        return None
    body = text.rstrip("=")
    if len(body) % 4 == 1 or (body != text and len(text) % 4):
        return None
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars, validate=True)
    except binascii.Error:
        return None


def key_problem(secret: bytes) -> str | None:
    """Why ``secret`` is no key (a few words, never its content); None when it is one.

    A key is one line of hex or base64 (:func:`key_bytes`) of
    :data:`KEY_BYTES` to :data:`MAX_KEY_BYTES` bytes that look random: not
    all printable ASCII (text written as hex or base64), at least half as
    many distinct byte values as bytes (64 suffice), and no run of
    :data:`REPEAT_BITS` bits that recurs at any bit offset (a pattern or a
    repeated phrase, in any encoding). Random bytes seldom fail them: all
    printable, (95/256)**32 < 2e-14 for 32 bytes; too few values, 3e-17; a
    recurring run, about 1e-15 for 32 bytes and 2e-12 for 1,024. No check
    can tell a key derived from a guessable text (the hash of a password)
    from a random one: these stop mistakes, and :func:`new_key_text` gives a
    key that needs none of them.
    """
    raw = key_bytes(secret)
    if raw is None:
        return "it is not one line of hex or base64"
    if len(raw) < KEY_BYTES:
        return f"it holds {len(raw)} bytes, {KEY_BYTES} needed"
    if len(raw) > MAX_KEY_BYTES:
        return f"it holds {len(raw)} bytes, more than the {MAX_KEY_BYTES} a key may have"
    if all(0x20 <= byte < 0x7F for byte in raw):
        return "its bytes are printable text, not random bytes"
    if len(set(raw)) < min(len(raw) // 2, 64):
        return f"its bytes take only {len(set(raw))} distinct values"
    if _recurring_run(raw):
        return "its bits repeat a run, as a pattern or a repeated phrase does"
    return None


def _recurring_run(raw: bytes) -> bool:
    """Whether some run of :data:`REPEAT_BITS` bits of ``raw`` occurs twice, at any offsets."""
    value = int.from_bytes(raw, "big")
    mask = (1 << REPEAT_BITS) - 1
    seen: set[int] = set()
    for offset in range(8 * len(raw) - REPEAT_BITS + 1):
        run = (value >> offset) & mask
        if run in seen:
            return True
        seen.add(run)
    return False


def check_key(secret: bytes, where: str) -> None:
    """Refuse ``secret``, read from ``where``, unless it is a key (:func:`key_problem`).

    The public demo key, recognised by its fingerprint, is accepted as it is:
    it is no secret, and :func:`refuse_demo_key` keeps it to the demo corpus.
    """
    problem = key_problem(secret)
    if problem is not None and not is_demo_key(SurrogateKey(secret)):
        raise ConfigError(
            f"the surrogate secret in {where} is too weak: {problem}; a key is "
            f"{KEY_BYTES} or more random bytes written as hex or base64: {HOW_TO_SET}"
        )


def new_key_text() -> str:
    """A new key: :data:`KEY_BYTES` bytes of :func:`secrets.token_bytes`, as hex."""
    return secrets.token_bytes(KEY_BYTES).hex()


# ------------------------------------------------------------ loading


def read_key_file(key_file: str | Path) -> bytes:
    """The secret in ``key_file``: its lines without ``#`` comment lines, stripped.

    Any problem reading it (missing, a directory, unreadable, empty, larger
    than :data:`MAX_KEY_FILE_BYTES`) is a one-line :class:`ConfigError`
    naming the file; whether the secret is a key is not checked.
    """
    path = Path(key_file)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"surrogate key file {path} does not exist: {HOW_TO_SET}") from None
    except IsADirectoryError:
        raise ConfigError(f"surrogate key file {path} is a directory: {HOW_TO_SET}") from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"surrogate key file {path} cannot be read ({reason})") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ConfigError(
            f"surrogate key file {path} is larger than {MAX_KEY_FILE_BYTES} bytes, so no "
            f"key file: {HOW_TO_SET}"
        )
    lines = data.splitlines()
    secret = b"\n".join(x for x in lines if not x.lstrip().startswith(b"#")).strip()
    if not secret:
        raise ConfigError(f"surrogate key file {path} is empty: {HOW_TO_SET}")
    return secret


def load_key(key_file: str | Path | None = None) -> SurrogateKey:
    """The key from ``key_file`` if given, else from ``$SYNTHDEID_SECRET``.

    A key file holds the key; lines starting with ``#`` are comments. The
    HMAC key is the key's text as written (not the bytes it encodes), so its
    fingerprint is the same in a file and in the variable.

    Refused with a one-line :class:`ConfigError` that says what to do and never
    shows a secret: no key at all; a key file that cannot be read; a key file
    and ``$SYNTHDEID_SECRET`` both set to different secrets (an explicit
    secret is never silently overridden); a secret that is no key
    (:func:`check_key`). Callers load the key before doing any work, so
    nothing is written without it.
    """
    value = os.environ.get(SECRET_VARIABLE, "").strip()
    if key_file:
        secret = read_key_file(key_file)
        if value and value.encode("utf-8") != secret:
            raise ConfigError(
                f"two different surrogate secrets are set: ${SECRET_VARIABLE} and the key "
                f"file {key_file} (surrogate.key_file, --key-file); use one: unset "
                f"{SECRET_VARIABLE} to use the key file, or set surrogate.key_file: null "
                f"(no --key-file) to use ${SECRET_VARIABLE}"
            )
        check_key(secret, f"key file {key_file}")
        return SurrogateKey(secret)
    if not value:
        raise ConfigError(f"no surrogate key: {HOW_TO_SET}")
    check_key(value.encode("utf-8"), f"${SECRET_VARIABLE}")
    return SurrogateKey(value.encode("utf-8"))


# ------------------------------------------------------------ the public demo key


def is_demo_key(key: SurrogateKey) -> bool:
    """Whether ``key`` is the public demo key (recognised by its fingerprint)."""
    return key.fingerprint() == DEMO_KEY_FINGERPRINT


def demo_key_refusal(where: str, what: str) -> str:
    """The message refusing the demo key for ``what`` (not the synthetic demo corpus)."""
    return (
        f"{where}: the public demo key ({DEMO_KEY_FILE}) is for the synthetic demo corpus "
        f"only, not for {what}: anyone can link its surrogates back to the originals. "
        f"Set surrogate.key_file: null (no --key-file) and put a secret of your own in "
        f"${SECRET_VARIABLE} (`export {SECRET_VARIABLE}=$(openssl rand -hex 32)`)"
    )


def refuse_demo_key(key: SurrogateKey, sources: Iterable[str], where: str) -> None:
    """Stop when the public demo key would key notes other than the synthetic demo corpus.

    ``sources`` are the ``source`` values of the notes to replace; any value
    but :data:`DEMO_SOURCE` (the demo corpus's) is refused with a
    :class:`ConfigError` naming the fix.
    """
    if not is_demo_key(key):
        return
    others = sorted(set(sources) - {DEMO_SOURCE})
    if others:
        shown = ", ".join(repr(s) for s in others[:3]) + (", ..." if len(others) > 3 else "")
        raise ConfigError(demo_key_refusal(where, f"notes of source {shown}"))
