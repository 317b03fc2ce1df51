"""The secret key every surrogate derives from, and the derivations.

All randomness of surrogate replacement comes from HMAC-SHA256 under one
secret, so a rerun with the same key gives identical output and a different key
gives unrelated surrogates. The key comes from the ``SYNTHDEID_SECRET``
environment variable or a key file; it is never written anywhere. Artifacts
record only :meth:`SurrogateKey.fingerprint`, which identifies the key
without revealing it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
from pathlib import Path

from synthdeid.errors import ConfigError

SECRET_VARIABLE = "SYNTHDEID_SECRET"
_SEPARATOR = b"\x1f"


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


def load_key(key_file: str | Path | None = None) -> SurrogateKey:
    """The key from ``key_file`` if given, else from ``$SYNTHDEID_SECRET``.

    A key file holds the secret; lines starting with ``#`` are comments.

    A missing or empty key is a :class:`ConfigError` saying how to provide one;
    callers load the key before doing any work, so nothing is written without it.
    """
    how = (
        f"set the environment variable {SECRET_VARIABLE} (e.g. "
        f"`export {SECRET_VARIABLE}=$(openssl rand -hex 32)`) or name a key file in "
        "surrogate.key_file; keep the same key to reproduce a release"
    )
    if key_file:
        path = Path(key_file)
        try:
            # lines starting with "#" are comments, the rest is the secret
            lines = path.read_bytes().splitlines()
            secret = b"\n".join(x for x in lines if not x.lstrip().startswith(b"#")).strip()
        except FileNotFoundError:
            raise ConfigError(f"surrogate key file {path} does not exist: {how}") from None
        if not secret:
            raise ConfigError(f"surrogate key file {path} is empty: {how}")
        return SurrogateKey(secret)
    value = os.environ.get(SECRET_VARIABLE, "")
    if not value.strip():
        raise ConfigError(f"no surrogate key: {how}")
    return SurrogateKey(value.strip().encode("utf-8"))
