"""What a run trains from besides the real notes: labelled pools and adapted encoders.

Paths are patterns with ``{corpus}`` (and ``{run}`` for a run's own encoder).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from synthdeid.workflow.arguments import flags


@dataclass(frozen=True)
class Pool:
    """A labelled pool a mixture can draw from: its artifact, the split parts it takes, and,
    for a pool released under keyed ids, the local map back to the original ids."""

    path: str
    parts: tuple[str, ...]
    ids: str | None = None


def pool_table(
    table: str, silver: Mapping[str, str], teacher_parts: Sequence[str]
) -> dict[str, Pool]:
    """Every pool by name; ``silver`` gives each teacher's silver labels (``silver_<teacher>``)."""
    synthetic = ("synthetic",)
    pools = {
        "surrogates": Pool(
            "results/replace_surrogates/{corpus}/notes.parquet",
            ("seed",),
            ids="results/replace_surrogates/{corpus}/local/offsets.parquet",
        ),
        "template_pii": Pool("results/fill_templates/{corpus}/pii.parquet", synthetic),
        "template_no_pii": Pool("results/fill_templates/{corpus}/no_pii.parquet", synthetic),
        # the control of the template pool: backend none on the same seeds
        "template_none": Pool("results/fill_control_templates/{corpus}/pii.parquet", synthetic),
        "dplm_pii": Pool("results/sample_dp_lm/{corpus}/dp/pii.parquet", synthetic),
        "dplm_no_pii": Pool("results/sample_dp_lm/{corpus}/dp/no_pii.parquet", synthetic),
        "tabular_reports": Pool(f"results/verbalize_tabular/{table}/pii.parquet", synthetic),
    }
    for teacher, path in silver.items():
        pools[f"silver_{teacher}"] = Pool(path, tuple(teacher_parts))
    return pools


def pool_files(pools: Mapping[str, Pool], names: Sequence[str], corpus: str) -> dict[str, str]:
    """The pools of one run, as named inputs of build_mixture."""
    return {name: pools[name].path.format(corpus=corpus) for name in names}


def pool_id_files(pools: Mapping[str, Pool], names: Sequence[str], corpus: str) -> dict[str, str]:
    """The local id maps of a run's pools that have one, as named inputs (``ids_<pool>``)."""
    return {
        f"ids_{name}": ids.format(corpus=corpus)
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
TAPT_MODELS = {
    "dplm": "results/tapt_encoder/{corpus}/dplm/model",
    "own": "results/tapt_encoder_own/{corpus}/{run}/model",
    "seeds_masked": "results/tapt_encoder_seeds/{corpus}/masked/model",
    "seeds_surrogates": "results/tapt_encoder_seeds/{corpus}/surrogates/model",
}
# the seed notes tapt_encoder_seeds reads: masked (mask_seeds) or with surrogates
SEED_TEXT_NOTES = {
    "masked": "results/mask_seeds/{corpus}/masked.parquet",
    "surrogates": "results/replace_surrogates/{corpus}/notes.parquet",
}


def tapt_model(tapt: str | None, corpus: str, run: str) -> str | None:
    """The adapted encoder a run with ``tapt`` starts from, or None for a run without TAPT."""
    if not tapt:
        return None
    return TAPT_MODELS[tapt].format(corpus=corpus, run=run)
