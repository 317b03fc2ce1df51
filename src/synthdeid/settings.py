"""Typed settings from config mappings: unknown keys are an error naming the section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from synthdeid.errors import ConfigError

T = TypeVar("T")


def settings_from_mapping(cls: type[T], data: Mapping[str, Any], section: str) -> T:
    """``cls(**data)`` for a dataclass, refusing keys it does not have (a typo is not ignored);
    a value the dataclass refuses (a ValueError of its checks) is a ConfigError naming the
    section."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{section} must be a mapping, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{section}: unknown keys {unknown}; known: {sorted(known)}")
    try:
        return cls(**data)
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(f"{section}: {error}") from None
