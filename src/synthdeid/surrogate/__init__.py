"""Surrogate replacement: keyed, per-patient consistent, format-preserving (seed 003, 001)."""
