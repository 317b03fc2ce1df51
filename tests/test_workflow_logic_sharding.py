"""The sharded rules' paths, flags and config check (synthdeid.workflow.sharding)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from synthdeid.errors import ConfigError
from synthdeid.local_only import is_local_path
from synthdeid.shards import Shard, shard_paths
from synthdeid.synthesis.template_generation import sent_requests_path
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
    assert shard_counts(config({"predict_ner": 4})) == {
        "replace_surrogates": 1,
        "predict_ner": 4,
        "label_teacher": 1,
        "generate_templates": 1,
    }


def test_a_sharded_teacher_writes_and_gathers_the_shards_of_its_folder() -> None:
    """label_teacher's shards lie in the teacher folder, where gather-shards looks for them."""
    assert shard_counts(config({"label_teacher": 3}))["label_teacher"] == 3
    folder = "results/label_teacher/{corpus}/{teacher}/{subset}"
    assert sharded(f"{folder}/span_scores.parquet", 3) == (
        f"{folder}/span_scores.shard-{{shard}}.parquet"
    )
    ledger = shard_inputs(f"{folder}/ledger.json", 2)
    assert ledger == [f"{folder}/ledger.shard-1-of-2.json", f"{folder}/ledger.shard-2-of-2.json"]
    assert [str(p) for p in shard_paths(Path(f"{folder}/ledger.json"), 2)] == ledger


def test_sharded_templates_keep_the_sent_requests_local_where_the_gather_looks() -> None:
    """generate_templates' shards of the local-only sent requests lie in local/, where
    gather-shards (and generate-templates' default path for a shard) finds them."""
    assert shard_counts(config({"generate_templates": 3}))["generate_templates"] == 3
    sent = "results/generate_templates/{corpus}/local/templates.sent_requests.parquet"
    assert sharded(sent, 3) == (
        "results/generate_templates/{corpus}/local/templates.sent_requests.shard-{shard}.parquet"
    )
    shards = shard_inputs(sent, 3)
    assert all(is_local_path(path) for path in shards)
    assert [str(p) for p in shard_paths(Path(sent), 3)] == shards
    templates = Path(shard_inputs("results/generate_templates/demo/templates.parquet", 3)[1])
    default = sent_requests_path(templates, Shard(2, 3))
    assert str(default) == shard_inputs(sent, 3)[1].replace("{corpus}", "demo")


def test_predict_ner_in_surrogate_mode_is_not_sharded() -> None:
    assert shard_counts(config({"replace_surrogates": 3}, mode="surrogate"))["predict_ner"] == 1
    with pytest.raises(
        ConfigError, match=r"shards\.predict_ner is 2 with ner\.deid\.mode surrogate"
    ):
        shard_counts(config({"predict_ner": 2}, mode="surrogate"))
