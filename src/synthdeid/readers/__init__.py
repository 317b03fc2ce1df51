"""Corpus readers, registered by format name (``corpus.format`` in the config)."""

from synthdeid.readers import brat, i2b2, jsonl, label_maps, physionet
from synthdeid.readers.base import READERS, CorpusReader, ReaderOptions, get_reader

__all__ = [
    "READERS",
    "CorpusReader",
    "ReaderOptions",
    "brat",
    "get_reader",
    "i2b2",
    "jsonl",
    "label_maps",
    "physionet",
]
