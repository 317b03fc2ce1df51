"""Surrogate operators, registered by name (importing this package registers them all)."""

from synthdeid.surrogate.operators import dates, formats, names, places, simple
from synthdeid.surrogate.operators.base import (
    OPERATORS,
    Mention,
    SurrogateOperator,
    build_operator,
    normalize,
)

__all__ = [
    "OPERATORS",
    "Mention",
    "SurrogateOperator",
    "build_operator",
    "dates",
    "formats",
    "names",
    "normalize",
    "places",
    "simple",
]
