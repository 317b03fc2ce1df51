"""Exit 0 when every pin of a lock file (and each extra NAME==VERSION) is installed.

    python scripts/pins-installed.py LOCK [NAME==VERSION ...]

Used by the setup scripts to skip an install that is already done. A lock line is
``name==version``, optionally followed by pip options (``--hash=...``); ``#`` starts
a comment.
"""

import importlib.metadata as metadata
import sys

pins = {}
with open(sys.argv[1], encoding="utf-8") as lock:
    lines = [*lock, *sys.argv[2:]]
for line in lines:
    line = line.split("#")[0].strip()
    if "==" in line:
        name, _, pinned = line.partition("==")
        pins[name.strip()] = pinned.split()[0]
try:
    ok = all(metadata.version(name) == pinned for name, pinned in pins.items())
except metadata.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
