"""Differentially private causal language model: training, sampling, audit (Zecevic et al.)."""
