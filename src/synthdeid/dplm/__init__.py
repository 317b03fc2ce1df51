"""Differentially private causal language model: training, sampling, audit (seed 004)."""
