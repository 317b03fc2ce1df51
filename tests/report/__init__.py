"""Helpers for the test that opens the Snakemake report in a headless Chromium."""
