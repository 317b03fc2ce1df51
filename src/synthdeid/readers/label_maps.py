"""Label maps shipped with the project, by name: ``resources/label_maps/<name>.yaml``.

Each file is a config fragment, ``labels: {mapping: {...}}``, so that passed as
one more ``--configfile`` it sets ``labels.mapping`` (Snakemake merges config
files key by key) and existing configs are untouched. :func:`shipped_label_map`
reads one by name for code and tests, checked as the config's mapping is
(:class:`~synthdeid.labels.LabelMap`). Shipped: ``i2b2_2014``, the i2b2/UTHealth
2014 de-identification track's subtypes (:mod:`synthdeid.readers.i2b2`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from synthdeid.errors import ConfigError
from synthdeid.labels import LabelMap

# relative to the working directory (the repository root), as the prompt files are
LABEL_MAP_DIR = Path("resources/label_maps")


def load_label_map(path: Path) -> LabelMap:
    """The mapping of a config fragment holding only ``labels.mapping``."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: label map file not found") from None
    labels = data.get("labels") if isinstance(data, dict) else None
    mapping = labels.get("mapping") if isinstance(labels, dict) else None
    if (
        set(data or {}) != {"labels"}
        or set(labels or {}) != {"mapping"}
        or not isinstance(mapping, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())
    ):
        raise ConfigError(
            f"{path}: a label map file holds labels.mapping only, a map of strings to strings"
        )
    try:
        return LabelMap(mapping)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def shipped_label_map(name: str, folder: Path = LABEL_MAP_DIR) -> LabelMap:
    """The shipped label map ``name`` (``i2b2_2014``); an unknown name lists the shipped ones."""
    path = folder / f"{name}.yaml"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) or "none"
        raise ConfigError(f"no shipped label map {name!r} in {folder} (shipped: {shipped})")
    return load_label_map(path)
