"""Test helpers: pip distributions installed by hand into a folder on ``sys.path``.

:func:`install_distribution` writes a package's files and the
``<name>-<version>.dist-info`` folder pip would write (METADATA and a RECORD
with each file's SHA-256 and size), so :mod:`importlib.metadata` finds the
distribution and lists its files; nothing is imported.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from pathlib import Path


def record_hash(data: bytes) -> str:
    """A file's SHA-256 as a RECORD line gives it (urlsafe base64, unpadded)."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install_distribution(site: Path, name: str, version: str, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` (paths relative to ``site``) and their distribution's dist-info
    folder, which is returned."""
    record = []
    for relative, data in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
        record.append(f"{relative},sha256={record_hash(data)},{len(data)}")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    (info / "METADATA").write_text(metadata)
    record.append(f"{info.name}/METADATA,sha256={record_hash(metadata.encode())},{len(metadata)}")
    record.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return info
