"""What a run trains from besides the real notes: labelled pools and adapted encoders.

Each is a rule's :class:`~synthdeid.workflow.outputs.Output`; its path is the rule's own
declaration, filled with the corpus (and the run, for a run's own encoder).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from synthdeid.workflow.arguments import flags
from synthdeid.workflow.outputs import Output, RuleOutputs
from synthdeid.workflow.synthesis import DP


@dataclass(frozen=True)
class Pool:
    """A labelled pool a mixture can draw from: the output that holds it, the split parts it
    takes, for a pool released under keyed ids the output mapping them back to the original
    ids, and whether its notes passed through the DP language model (a run drawing on it
    inherits that model's privacy record)."""

    file: Output
    parts: tuple[str, ...]
    ids: Output | None = None
    from_dp_language_model: bool = False


_SYNTHETIC = ("synthetic",)
# the pools every config has, by the name ner.runs[].pools gives (the schema's enum lists
# exactly these). replace_surrogates' joined outputs are gather_replace_surrogates'
# declaration of the same files (one job or N shards, the same path).
POOLS: dict[str, Pool] = {
    "surrogates": Pool(
        Output("gather_replace_surrogates", "notes"),
        ("seed",),
        ids=Output("gather_replace_surrogates", "offsets"),
    ),
    "template_pii": Pool(Output("fill_templates", "pii"), _SYNTHETIC),
    "template_no_pii": Pool(Output("fill_templates", "no_pii"), _SYNTHETIC),
    # the control of the template pool: backend none on the same seeds
    "template_none": Pool(Output("fill_control_templates", "pii"), _SYNTHETIC),
    "dplm_pii": Pool(
        Output("sample_dp_lm", "pii", {"privacy": DP}), _SYNTHETIC, from_dp_language_model=True
    ),
    "dplm_no_pii": Pool(
        Output("sample_dp_lm", "no_pii", {"privacy": DP}),
        _SYNTHETIC,
        from_dp_language_model=True,
    ),
    "tabular_reports": Pool(Output("verbalize_tabular", "pii"), _SYNTHETIC),
}
# a teacher's silver pool is named silver_<teacher>
SILVER_PREFIX = "silver_"


def pool_table(
    table: str, silver: Mapping[str, Output], teacher_parts: Sequence[str]
) -> dict[str, Pool]:
    """Every pool by name, its ``{table}`` fixed; ``silver`` gives each teacher's silver labels
    (pool ``silver_<teacher>``)."""
    pools = {
        name: replace(pool, file=pool.file.fixing(table=table)) for name, pool in POOLS.items()
    }
    for teacher, output in silver.items():
        pools[silver_pool(teacher)] = Pool(output, tuple(teacher_parts))
    return pools


def silver_pool(teacher: str) -> str:
    """The name of a teacher's silver pool."""
    return f"{SILVER_PREFIX}{teacher}"


def silver_teacher(pool: str) -> str | None:
    """The teacher whose silver pool ``pool`` is, or None for any other pool."""
    return pool.removeprefix(SILVER_PREFIX) if pool.startswith(SILVER_PREFIX) else None


def from_dp_language_model(name: str) -> bool:
    """Whether the pool ``name`` holds the DP language model's samples."""
    pool = POOLS.get(name)
    return pool is not None and pool.from_dp_language_model


def pool_files(
    pools: Mapping[str, Pool], names: Sequence[str], corpus: str, outputs: RuleOutputs
) -> dict[str, str]:
    """The pools of one run, as named inputs of build_mixture."""
    return {name: outputs.path(pools[name].file, corpus=corpus) for name in names}


def pool_id_files(
    pools: Mapping[str, Pool], names: Sequence[str], corpus: str, outputs: RuleOutputs
) -> dict[str, str]:
    """The local id maps of a run's pools that have one, as named inputs (``ids_<pool>``)."""
    return {
        f"ids_{name}": outputs.path(ids, corpus=corpus)
        for name in names
        if (ids := pools[name].ids) is not None
    }


def pool_id_arguments(names: Sequence[str], inputs: Mapping[str, str]) -> str:
    """--pool-ids NAME=PATH for each of a run's pools with an id map (from the rule's inputs,
    named as :func:`pool_id_files` names them)."""
    given = set(inputs.keys())
    return flags(
        "--pool-ids", ((name, inputs[f"ids_{name}"]) for name in names if f"ids_{name}" in given)
    )


def pool_parts(pools: Mapping[str, Pool], names: Sequence[str]) -> list[str]:
    """The split parts taken from a run's pools (never the train or holdout notes)."""
    return sorted({part for name in names for part in pools[name].parts}) or ["seed"]


def pool_arguments(names: Sequence[str], inputs: Mapping[str, str]) -> str:
    """--pool NAME=PATH for each pool (paths come from the rule's own inputs)."""
    return flags("--pool", ((name, inputs[name]) for name in names))


# encoders after task-adaptive pretraining, by the name a run gives in `tapt`
TAPT_MODELS: dict[str, Output] = {
    "dplm": Output("tapt_encoder", "model"),
    "own": Output("tapt_encoder_own", "model"),
    "seeds_masked": Output("tapt_encoder_seeds", "model", {"text": "masked"}),
    "seeds_surrogates": Output("tapt_encoder_seeds", "model", {"text": "surrogates"}),
}
# the seed notes tapt_encoder_seeds reads: masked (mask_seeds) or with surrogates
SEED_TEXT_NOTES: dict[str, Output] = {
    "masked": Output("mask_seeds", "masked"),
    "surrogates": POOLS["surrogates"].file,
}


def tapt_model(tapt: str | None, corpus: str, run: str, outputs: RuleOutputs) -> str | None:
    """The adapted encoder a run with ``tapt`` starts from, or None for a run without TAPT."""
    if not tapt:
        return None
    return outputs.path(TAPT_MODELS[tapt], corpus=corpus, run=run)
