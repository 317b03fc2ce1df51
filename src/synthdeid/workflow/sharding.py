"""Sharded rules: a per-note step as N jobs over row ranges, then one gather job.

With ``shards: {predict_ner: 3}`` the rule ``predict_ner`` writes
``predictions.shard-{shard}.parquet`` (``{shard}`` = ``1-of-3`` ...), one
job per shard (``synthdeid predict-ner --shard 1-of-3``), and the rule
``gather_predict_ner`` joins them into ``predictions.parquet``
(``synthdeid gather-shards``), byte for byte what one job writes. With 1
(the default) the rule writes ``predictions.parquet`` itself, as before, and
the gather rule is never planned (``ruleorder`` prefers the step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from synthdeid.errors import ConfigError
from synthdeid.shards import Shard, shard_path

# the rules that can run sharded, each with a gather rule named gather_<rule>
SHARDED_RULES: tuple[str, ...] = (
    "replace_surrogates",
    "predict_ner",
    "label_teacher",
    "generate_templates",
)
SHARD_WILDCARD = "{shard}"
SHARD_PATTERN = r"[0-9]+-of-[0-9]+"


def shard_counts(config: Mapping[str, Any]) -> dict[str, int]:
    """Each shardable rule's shard count (config ``shards``; schema default 1).

    ConfigError where a step cannot be split: ``predict_ner`` in surrogate mode
    keeps every surrogate apart from every predicted original of its patient
    in the whole table, which one shard does not see.
    """
    counts = {rule: int(config.get("shards", {}).get(rule, 1)) for rule in SHARDED_RULES}
    if counts["predict_ner"] > 1 and config["ner"]["deid"]["mode"] == "surrogate":
        raise ConfigError(
            f"shards.predict_ner is {counts['predict_ner']} with ner.deid.mode surrogate: "
            "surrogates are drawn against every predicted original of the whole table; "
            "use ner.deid.mode redact, or shards.predict_ner 1"
        )
    return counts


def sharded(path: str, count: int) -> str:
    """A rule's output (or log) path: ``path`` itself unsharded, else its shard pattern."""
    return path if count == 1 else shard_path(path, SHARD_WILDCARD)


def shard_inputs(path: str, count: int) -> list[str]:
    """The gather rule's inputs: the ``count`` shards of ``path`` (wildcards kept)."""
    return [shard_path(path, Shard(k, count).label) for k in range(1, count + 1)]


def shard_flag(wildcards: Any) -> str:
    """The step's ``--shard`` argument: empty for an unsharded job."""
    shard = getattr(wildcards, "shard", None)
    return "" if shard is None else f"--shard {shard}"
