"""Surrogate operators, registered by name."""

from synthdeid.surrogate.operators.base import (
    OPERATORS,
    Mention,
    SurrogateOperator,
    build_operator,
    normalize,
)

__all__ = ["OPERATORS", "Mention", "SurrogateOperator", "build_operator", "normalize"]
