"""Label taxonomy: source categories -> canonical labels -> the coarse 5-label view.

The canonical set is the one every stage speaks. Each corpus brings its own
categories (PhysioNet ``HCPName``, i2b2 ``DOCTOR``, BRAT entity types, ...);
a :class:`LabelMap` from the config maps them onto the canonical set, and an
unknown category is an error rather than a silent drop. The coarse view
(PER / ORG / LOC / TIME / MISC, VetSynth) is a second mapping applied on
demand, for example when masking or scoring at that granularity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from synthdeid.errors import ConfigError, InputError

CANONICAL_LABELS: tuple[str, ...] = (
    "DOCTOR",
    "PATIENT",
    "DATE",
    "LOCATION",
    "PHONE",
    "AGE",
    "ID",
    "HOSPITAL",
    "OTHER",
)

COARSE_LABELS: tuple[str, ...] = ("PER", "ORG", "LOC", "TIME", "MISC")

DEFAULT_COARSE_VIEW: dict[str, str] = {
    "DOCTOR": "PER",
    "PATIENT": "PER",
    "HOSPITAL": "ORG",
    "LOCATION": "LOC",
    "DATE": "TIME",
    "AGE": "MISC",
    "PHONE": "MISC",
    "ID": "MISC",
    "OTHER": "MISC",
}


@dataclass(frozen=True)
class LabelMap:
    """Maps a corpus's own categories onto canonical labels."""

    mapping: Mapping[str, str]

    def __post_init__(self) -> None:
        bad = {src: dst for src, dst in self.mapping.items() if dst not in CANONICAL_LABELS}
        if bad:
            raise ConfigError(
                f"labels.mapping maps onto non-canonical labels {bad}; "
                f"canonical labels are {', '.join(CANONICAL_LABELS)}"
            )

    @classmethod
    def identity(cls) -> LabelMap:
        return cls({label: label for label in CANONICAL_LABELS})

    def to_canonical(self, label: str, *, path: str | Path, record: str) -> str:
        try:
            return self.mapping[label]
        except KeyError:
            raise InputError(
                path,
                record,
                f"unknown label {label!r}",
                "add it to labels.mapping in the config "
                f"(known: {', '.join(sorted(self.mapping))})",
            ) from None


def coarse_view(view: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return a complete canonical -> coarse mapping, checked."""
    resolved = dict(DEFAULT_COARSE_VIEW if view is None else view)
    missing = [label for label in CANONICAL_LABELS if label not in resolved]
    if missing:
        raise ConfigError(f"labels.coarse_view lacks canonical labels {missing}")
    unknown = {k: v for k, v in resolved.items() if v not in COARSE_LABELS}
    if unknown:
        raise ConfigError(
            f"labels.coarse_view maps onto unknown coarse labels {unknown}; "
            f"coarse labels are {', '.join(COARSE_LABELS)}"
        )
    return resolved
