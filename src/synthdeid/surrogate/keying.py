"""The secret key every surrogate derives from, and the derivations.

All randomness of surrogate replacement comes from HMAC-SHA256 under one
secret, so a rerun with the same key gives identical output and a different key
gives unrelated surrogates. The key comes from the ``SYNTHDEID_SECRET``
environment variable or a key file; it is never written anywhere. Artifacts
record only :meth:`SurrogateKey.fingerprint`, which identifies the key
without revealing it.

:func:`load_key` refuses a secret too weak to key a release
(:func:`estimated_bits`), and a key file that disagrees with
``$SYNTHDEID_SECRET``. The public demo key (:data:`DEMO_KEY_FILE`, recognised
by :data:`DEMO_KEY_FINGERPRINT`) is for the synthetic demo corpus only:
:func:`refuse_demo_key` stops any step that would apply it to other notes.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import random
import re
import string
import zlib
from collections.abc import Iterable
from pathlib import Path

from synthdeid.errors import ConfigError

SECRET_VARIABLE = "SYNTHDEID_SECRET"
_SEPARATOR = b"\x1f"

# 32 bytes: what `openssl rand -hex 32` or `openssl rand -base64 32` gives
MIN_SECRET_BITS = 256
# the public demo key, kept in the repository for the synthetic demo corpus
DEMO_KEY_FILE = "resources/demo/demo-surrogate.key"
DEMO_KEY_FINGERPRINT = "cbdd71b2445fbc1b"
# the ``source`` of the synthetic demo corpus's notes (config.yaml corpus.source)
DEMO_SOURCE = "demo-synthetic"
# the embedded demo corpus file (config.yaml corpus.path), relative to the workflow
DEMO_CORPUS_FILE = "resources/demo/notes.jsonl"

HOW_TO_SET = (
    f"set the environment variable {SECRET_VARIABLE} (e.g. "
    f"`export {SECRET_VARIABLE}=$(openssl rand -hex 32)`) or name a key file in "
    "surrogate.key_file; keep the same key to reproduce a release"
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


# ------------------------------------------------------------ secret strength

_HEX = re.compile(r"[0-9A-Fa-f]+")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]+|[A-Za-z0-9_-]+)={0,2}")
_CLASSES = (
    (frozenset(string.ascii_lowercase), 26),
    (frozenset(string.ascii_uppercase), 26),
    (frozenset(string.digits), 10),
    (frozenset(string.punctuation + " "), 33),
)
NON_ASCII_CLASS = 128


def estimated_bits(secret: str) -> float:
    """A conservative estimate of the entropy of ``secret``, in bits.

    The rule, on the secret with surrounding whitespace removed:

    1. Alphabet. Any text: log2 of the size of the character classes it
       uses, per character (26 lower-case letters, 26 upper-case, 10 digits,
       33 other printable ASCII characters and space, 128 for anything else),
       except: hex digits only count at most 4 bits per character; base64
       with both letter cases (standard ``A-Za-z0-9+/`` or URL-safe
       ``A-Za-z0-9-_``; ``=`` padding at the end counts nothing) counts 6.
    2. Diversity. The alphabet counted is at most four times the number of
       distinct characters used, so a low-diversity string counts as little
       (``abab...``: 3 bits per character; ``aaaa...``: 2).
    3. Repetition. The total is at most 8 bits per byte of the secret
       compressed by raw DEFLATE (zlib level 9), so repeated or patterned text
       counts what it compresses to (64 ``a``: 48 bits).

    ``openssl rand -hex 32`` (64 hex digits) counts 256 bits and ``openssl
    rand -base64 32`` (43 characters and ``=``) 258: random hex or base64 of
    those lengths passes rules 2 and 3 with a wide margin (they need 4
    distinct hex digits or 16 base64 characters and 32 compressed bytes; in
    100,000 draws each the fewest were 12 and 22 distinct characters and 42
    compressed bytes). Raw binary keys are better written as hex.
    """
    text = secret.strip()
    counted = text.rstrip("=") if _BASE64.fullmatch(text) else text
    if not counted:
        return 0.0
    per_char = math.log2(_class_alphabet(counted))
    if _HEX.fullmatch(counted):
        per_char = min(per_char, 4.0)
    elif _BASE64.fullmatch(text) and counted.lower() != counted != counted.upper():
        per_char = 6.0
    per_char = min(per_char, math.log2(4 * len(set(counted))))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = compressor.compress(text.encode("utf-8", "surrogateescape")) + compressor.flush()
    return min(per_char * len(counted), 8.0 * len(packed))


def _class_alphabet(text: str) -> int:
    """The total size of the character classes ``text`` uses (rule 1 of :func:`estimated_bits`)."""
    used = set(text)
    size = sum(count for members, count in _CLASSES if used & members)
    if any(not any(char in members for members, _ in _CLASSES) for char in used):
        size += NON_ASCII_CLASS
    return size


def check_strength(secret: str, where: str) -> None:
    """Refuse a secret under :data:`MIN_SECRET_BITS` estimated bits (never showing it)."""
    bits = estimated_bits(secret)
    if bits < MIN_SECRET_BITS:
        raise ConfigError(
            f"the surrogate secret in {where} is too weak: about {bits:.0f} bits of entropy "
            f"estimated, {MIN_SECRET_BITS} needed (32 random bytes); make one with "
            "`openssl rand -hex 32`"
        )


# ------------------------------------------------------------ loading


def read_key_file(key_file: str | Path) -> bytes:
    """The secret in ``key_file``: its lines without ``#`` comment lines, stripped.

    Any problem reading it (missing, a directory, unreadable, empty) is a
    one-line :class:`ConfigError` naming the file; the strength is not checked.
    """
    path = Path(key_file)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"surrogate key file {path} does not exist: {HOW_TO_SET}") from None
    except IsADirectoryError:
        raise ConfigError(f"surrogate key file {path} is a directory: {HOW_TO_SET}") from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"surrogate key file {path} cannot be read ({reason})") from None
    secret = b"\n".join(x for x in lines if not x.lstrip().startswith(b"#")).strip()
    if not secret:
        raise ConfigError(f"surrogate key file {path} is empty: {HOW_TO_SET}")
    return secret


def load_key(key_file: str | Path | None = None) -> SurrogateKey:
    """The key from ``key_file`` if given, else from ``$SYNTHDEID_SECRET``.

    A key file holds the secret; lines starting with ``#`` are comments.

    Refused with a one-line :class:`ConfigError` that says what to do and never
    shows a secret: no key at all; a key file that cannot be read; a key file
    and ``$SYNTHDEID_SECRET`` both set to different secrets (an explicit
    secret is never silently overridden); a secret estimated under
    :data:`MIN_SECRET_BITS` (:func:`estimated_bits`). Callers load the key
    before doing any work, so nothing is written without it.
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
        check_strength(secret.decode("utf-8", "surrogateescape"), f"key file {key_file}")
        return SurrogateKey(secret)
    if not value:
        raise ConfigError(f"no surrogate key: {HOW_TO_SET}")
    check_strength(value, f"${SECRET_VARIABLE}")
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
