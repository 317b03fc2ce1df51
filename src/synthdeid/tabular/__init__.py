"""Synthetic tabular data: evaluation of synthesizers on discretized categorical tables."""
