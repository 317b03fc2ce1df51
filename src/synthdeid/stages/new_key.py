"""Make a new surrogate key file: 32 random bytes as hex, readable by its owner only.

``synthdeid new-key PATH`` writes a key (:func:`synthdeid.surrogate.keying.new_key_text`)
to ``PATH``, a new file of mode 0600 whatever the umask, written atomically.
An existing file is never overwritten: the surrogates made with a key can be
reproduced only with that key. Name the file in ``surrogate.key_file`` (or
``--key-file``); the log shows the key's fingerprint, never the key.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
from pathlib import Path

from synthdeid.artifacts import atomic_path
from synthdeid.cli_types import output_file
from synthdeid.errors import ConfigError
from synthdeid.surrogate.keying import SurrogateKey, new_key_text

log = logging.getLogger(__name__)

# owner read and write, nothing for group or others
KEY_FILE_MODE = 0o600


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "out", metavar="PATH", type=output_file, help="the key file to create (must not exist)"
    )


def run(args: argparse.Namespace) -> None:
    key = _write_new_key(args.out)
    log.info(
        "wrote a new surrogate key to %s (fingerprint %s); keep it private, and keep it to "
        "reproduce the surrogates made with it",
        args.out,
        key.fingerprint(),
    )


def _write_new_key(path: Path) -> SurrogateKey:
    """Write a new key to ``path`` (mode 0600, atomically); refuse an existing ``path``.

    The mode is checked after the file is written: on a file system that does
    not keep it, the file is removed and the step refused.
    """
    _refuse_existing(path)
    text = new_key_text()
    with atomic_path(path) as tmp:
        tmp.chmod(KEY_FILE_MODE)  # before the key is in it
        tmp.write_text(text + "\n", encoding="ascii")
        _refuse_existing(path)  # made while the key was written
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode != KEY_FILE_MODE:
        path.unlink()
        raise ConfigError(
            f"{path}: the file system gave the key file mode {mode:o}, not "
            f"{KEY_FILE_MODE:o}, so others could read it; the file was removed: make the "
            "key on a file system that keeps file modes"
        )
    return SurrogateKey(text.encode("ascii"))


def _refuse_existing(path: Path) -> None:
    """Refuse ``path`` when anything, a dangling link included, is there."""
    if os.path.lexists(path):
        raise ConfigError(
            f"{path} already exists: a key file is never overwritten (the surrogates made "
            "with a key can be reproduced only with it); choose another path"
        )
