"""Surrogate replacement: keyed, per-patient consistent, format-preserving (SHIELD, PseudoData)."""
