"""The sharded rules' paths, flags and config check (synthdeid.workflow.sharding)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from synthdeid.errors import ConfigError
from synthdeid.workflow.sharding import (
    shard_counts,
    shard_flag,
    shard_inputs,
    sharded,
)


def config(shards: dict[str, int], mode: str = "redact") -> dict[str, Any]:
    return {"shards": shards, "ner": {"deid": {"mode": mode}}}


def test_one_shard_keeps_the_unsharded_paths() -> None:
    path = "results/predict_ner/{corpus}/{run}/predictions.parquet"
    assert sharded(path, 1) == path
    assert (
        sharded(path, 3) == "results/predict_ner/{corpus}/{run}/predictions.shard-{shard}.parquet"
    )


def test_the_gather_inputs_are_every_shard_in_order() -> None:
    assert shard_inputs("logs/x/{corpus}.log", 3) == [
        "logs/x/{corpus}.shard-1-of-3.log",
        "logs/x/{corpus}.shard-2-of-3.log",
        "logs/x/{corpus}.shard-3-of-3.log",
    ]


def test_the_shard_flag_is_empty_for_an_unsharded_job() -> None:
    assert shard_flag(SimpleNamespace(corpus="demo")) == ""
    assert shard_flag(SimpleNamespace(corpus="demo", shard="2-of-3")) == "--shard 2-of-3"


def test_counts_default_to_one_shard() -> None:
    assert shard_counts(config({"predict_ner": 4})) == {"replace_surrogates": 1, "predict_ner": 4}


def test_predict_ner_in_surrogate_mode_is_not_sharded() -> None:
    assert shard_counts(config({"replace_surrogates": 3}, mode="surrogate"))["predict_ner"] == 1
    with pytest.raises(
        ConfigError, match=r"shards\.predict_ner is 2 with ner\.deid\.mode surrogate"
    ):
        shard_counts(config({"predict_ner": 2}, mode="surrogate"))
