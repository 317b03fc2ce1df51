from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from synthdeid.cli import main
from synthdeid.errors import ConfigError, InputError, StepError
from synthdeid.ner.mixtures import (
    MIXTURE_SCHEMA,
    Mixture,
    MixtureNote,
    MixtureSpec,
    allocate,
    build_mixture,
    mixture_to_table,
    read_mixture,
    read_mixture_summary,
    read_real_parts,
    write_mixture,
)
from synthdeid.notes import Note, Span, read_notes, write_notes


def real_notes(n: int, *, notes_per_patient: int = 1, split: str = "train") -> list[Note]:
    return [
        Note(f"r{i}", f"p{i // notes_per_patient}", "Seen by Dr Ames.", (), "real", split)
        for i in range(n)
    ]


def pool_notes(n: int, *, prefix: str = "s", pii_every: int = 0) -> list[Note]:
    """Tiny pool notes; every ``pii_every``-th note carries a span (0: none)."""
    out = []
    for i in range(n):
        spans = (Span(8, 12, "DOCTOR"),) if pii_every and i % pii_every == 0 else ()
        out.append(Note(f"{prefix}{i}", f"{prefix}p{i}", "Seen by Ames.", spans, "synthetic"))
    return out


def spec(**kwargs: Any) -> MixtureSpec:
    kwargs.setdefault("seed", 1)
    return MixtureSpec(**kwargs)


# ---------------------------------------------------------------- augmentation (Table 2)


@pytest.mark.parametrize(
    ("fraction", "total", "synthetic", "percent"),
    [
        (0.0, 1249, 0, 0.0),
        (0.25, 1665, 416, 25.0),
        (0.5, 2498, 1249, 50.0),
        (0.75, 4996, 3747, 75.0),
        (0.9, 11631, 10382, 89.3),  # capped by the pool
    ],
)
def test_augmentation_reproduces_table_2(
    fraction: float, total: int, synthetic: int, percent: float
) -> None:
    # share_tolerance null: Table 2's 0.9 row is capped at 89.3% by the pool
    mixture = build_mixture(
        real_notes(1249),
        {"synthetic": pool_notes(10382)},
        spec(
            regime="augmentation",
            synthetic_fraction=fraction,
            validation_fraction=0.0,
            share_tolerance=None,
        ),
    )
    s = mixture.summary
    assert (s["n_train_total"], s["n_real"], s["n_synthetic"]) == (total, 1249, synthetic)
    assert s["realized_synthetic_percent"] == percent
    assert s["pools"]["synthetic"]["drawn"] == synthetic
    assert all(m.copies == 1 for m in mixture.train)
    assert len({m.note.note_id for m in mixture.train}) == total


def test_augmentation_without_pools_is_real_only() -> None:
    mixture = build_mixture(real_notes(20), {}, spec(regime="augmentation", synthetic_fraction=0))
    assert {m.pool for m in mixture.train} == {"real"}
    assert mixture.summary["n_synthetic"] == 0


def test_pool_ids_are_prefixed_and_splits_set() -> None:
    mixture = build_mixture(
        real_notes(40),
        {"syn": pool_notes(100)},
        spec(regime="augmentation", synthetic_fraction=0.5),
    )
    for m in mixture.train:
        assert m.note.split == "train"
        assert m.note.note_id.startswith("syn:") == (m.pool == "syn")
    assert {n.split for n in mixture.validation} == {"validation"}


def test_several_pools_share_in_proportion_to_size() -> None:
    assert allocate(10, {"a": 300, "b": 100}) == {"a": 8, "b": 2}  # 7.5 / 2.5: tie to "a"
    assert allocate(3, {"a": 1, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 1}
    pools = {"big": pool_notes(300, prefix="b"), "small": pool_notes(100, prefix="m")}
    mixture = build_mixture(
        real_notes(100),
        pools,
        spec(regime="augmentation", synthetic_fraction=0.5, validation_fraction=0.0),
    )
    drawn = {name: p["drawn"] for name, p in mixture.summary["pools"].items()}
    assert drawn == {"big": 75, "small": 25}


# ---------------------------------------------------------------- fixed_n


def test_fixed_n_counts() -> None:
    mixture = build_mixture(
        real_notes(100),
        {"syn": pool_notes(500)},
        spec(regime="fixed_n", total_notes=200, real_fraction=0.3, validation_fraction=0.1),
    )
    s = mixture.summary
    assert (s["n_train_total"], s["n_real"], s["n_synthetic"]) == (200, 60, 140)
    assert s["target_synthetic_fraction"] == pytest.approx(0.7)
    assert s["realized_synthetic_percent"] == 70.0


def test_fixed_n_refuses_too_few_real_notes() -> None:
    with pytest.raises(ConfigError, match=r"needs 100 real notes .* has 90 .*short by 10"):
        build_mixture(
            real_notes(100),
            {"syn": pool_notes(500)},
            spec(regime="fixed_n", total_notes=200, real_fraction=0.5, validation_fraction=0.1),
        )


def test_fixed_n_refuses_too_few_synthetic_notes() -> None:
    with pytest.raises(ConfigError, match=r"needs 140 synthetic notes .* hold 100 \(short by 40\)"):
        build_mixture(
            real_notes(100),
            {"syn": pool_notes(100)},
            spec(regime="fixed_n", total_notes=200, real_fraction=0.3, validation_fraction=0.1),
        )


# ---------------------------------------------------------------- compute_matched


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.9])
def test_compute_matched_budget_is_steps_times_batch(fraction: float) -> None:
    mixture = build_mixture(
        real_notes(50),
        {"syn": pool_notes(80)},
        spec(regime="compute_matched", synthetic_fraction=fraction, steps=30, batch_size=16),
    )
    s = mixture.summary
    assert s["n_train_total"] == sum(m.copies for m in mixture.train) == 480
    assert s["n_synthetic"] == round(fraction * 480)
    assert s["max_steps"] == 30 and s["batch_size"] == 16
    ids = [m.note.note_id for m in mixture.train]
    assert len(ids) == len(set(ids))  # repeats are copies, never duplicate rows
    assert all(m.copies >= 1 for m in mixture.train)


def test_compute_matched_real_only_oversamples_with_replacement() -> None:
    mixture = build_mixture(
        real_notes(20),
        {},
        spec(regime="compute_matched", synthetic_fraction=0.0, steps=10, batch_size=8),
    )
    assert {m.pool for m in mixture.train} == {"real"}
    assert sum(m.copies for m in mixture.train) == 80
    assert max(m.copies for m in mixture.train) > 1
    assert mixture.summary["n_real_unique"] <= mixture.summary["n_real_available"]


def test_compute_matched_needs_a_pool_for_synthetic_draws() -> None:
    with pytest.raises(ConfigError, match="pools hold 0"):
        build_mixture(
            real_notes(20),
            {},
            spec(regime="compute_matched", synthetic_fraction=0.5, steps=10, batch_size=8),
        )


def test_max_steps_only_for_compute_matched() -> None:
    mixture = build_mixture(real_notes(20), {}, spec(regime="augmentation"))
    assert mixture.summary["max_steps"] is None


# ---------------------------------------------------------------- pii_fraction


def test_pii_fraction_stratifies_the_synthetic_part() -> None:
    pool = pool_notes(1000, pii_every=4)  # 250 with spans, 750 without
    mixture = build_mixture(
        real_notes(100),
        {"syn": pool},
        spec(
            regime="augmentation",
            synthetic_fraction=0.75,
            pii_fraction=0.5,
            validation_fraction=0.0,
        ),
    )
    s = mixture.summary
    assert s["n_synthetic"] == 300
    assert (s["n_synthetic_with_pii"], s["n_synthetic_without_pii"]) == (150, 150)
    drawn_with = sum(1 for m in mixture.train if m.pool == "syn" and m.note.spans)
    assert drawn_with == 150


def test_pii_fraction_is_capped_by_availability() -> None:
    pool = pool_notes(1000, pii_every=10)  # 100 with spans
    mixture = build_mixture(
        real_notes(100),
        {"syn": pool},
        spec(
            regime="augmentation",
            synthetic_fraction=0.75,
            pii_fraction=1.0,
            validation_fraction=0,
            share_tolerance=None,
        ),
    )
    s = mixture.summary
    assert (s["n_synthetic_with_pii"], s["n_synthetic_without_pii"]) == (100, 0)
    assert s["realized_synthetic_percent"] == 50.0


# ---------------------------------------------------------------- realized shares


def test_a_share_the_pools_cannot_fill_stops_the_build_with_the_realized_share() -> None:
    # 589 real notes and a 20-note pool: 0.5 asked, 20 / 609 = 0.033 realized
    with pytest.raises(ConfigError, match=r"synthetic share of 0\.033 \(20 of 609 .*0\.500"):
        build_mixture(
            real_notes(589),
            {"syn": pool_notes(20)},
            spec(regime="augmentation", synthetic_fraction=0.5, validation_fraction=0.0),
        )


def test_a_share_within_the_tolerance_builds() -> None:
    # 0.5 of 100 real asks 100 synthetic; a 94-note pool realizes 94 / 194 = 0.485
    mixture = build_mixture(
        real_notes(100),
        {"syn": pool_notes(94)},
        spec(regime="augmentation", synthetic_fraction=0.5, validation_fraction=0.0),
    )
    assert mixture.summary["realized_synthetic_fraction"] == pytest.approx(94 / 194)
    with pytest.raises(ConfigError, match=r"tolerance 0\.01"):
        build_mixture(
            real_notes(100),
            {"syn": pool_notes(94)},
            spec(
                regime="augmentation",
                synthetic_fraction=0.5,
                validation_fraction=0.0,
                share_tolerance=0.01,
            ),
        )


def test_a_phi_share_the_pools_cannot_fill_stops_the_build() -> None:
    # 1000 synthetic notes, half with PHI: the pool has 460 with PHI, so 460 / 960 = 0.479
    # (the synthetic share, 960 / 1960 = 0.490, is within the tolerance)
    with pytest.raises(ConfigError, match=r"share of synthetic notes with PHI of 0\.479"):
        build_mixture(
            real_notes(1000),
            {"syn": pool_notes(4600, pii_every=10)},
            spec(
                regime="augmentation",
                synthetic_fraction=0.5,
                pii_fraction=0.5,
                validation_fraction=0,
            ),
        )


def test_share_tolerance_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"share_tolerance must lie in \[0, 1\)"):
        spec(regime="augmentation", share_tolerance=1.5)


def test_pii_fraction_shortfall_is_an_error_for_fixed_n() -> None:
    with pytest.raises(ConfigError, match=r"synthetic notes \(no_pii\)"):
        build_mixture(
            real_notes(100),
            {"syn": pool_notes(200, pii_every=1)},
            spec(regime="fixed_n", total_notes=100, real_fraction=0.5, pii_fraction=0.5),
        )


# ---------------------------------------------------------------- validation


def test_validation_is_real_and_patient_disjoint() -> None:
    real = real_notes(200, notes_per_patient=4)  # 50 patients
    # a surrogate-like pool that reuses the real patient ids
    surrogate = [Note(f"x{n.note_id}", n.patient_id, n.text, (), "surrogate") for n in real]
    mixture = build_mixture(
        real,
        {"surrogate": surrogate},
        spec(regime="augmentation", synthetic_fraction=0.5, validation_fraction=0.2),
    )
    validation_patients = {n.patient_id for n in mixture.validation}
    train_patients = {m.note.patient_id for m in mixture.train}
    assert len(validation_patients) == 10
    assert validation_patients.isdisjoint(train_patients)
    assert {n.source for n in mixture.validation} == {"real"}
    assert mixture.summary["n_validation_notes"] == 40
    assert mixture.summary["pools"]["surrogate"]["dropped_validation_patients"] == 40


def test_pool_notes_of_holdout_patients_are_refused() -> None:
    real = [*real_notes(10), Note("h1", "ph", "t", (), "real", "holdout")]
    leaking = [Note("x1", "ph", "t", (), "surrogate", "holdout")]
    with pytest.raises(StepError, match=r"pool 'surrogate' holds 1 notes of holdout patients"):
        build_mixture(real, {"surrogate": leaking}, spec(regime="augmentation"))


def test_validation_takes_at_least_one_patient_and_leaves_one() -> None:
    mixture = build_mixture(
        real_notes(3), {}, spec(regime="augmentation", validation_fraction=0.01)
    )
    assert mixture.summary["n_validation_patients"] == 1
    mixture = build_mixture(real_notes(2), {}, spec(regime="augmentation", validation_fraction=0.9))
    assert mixture.summary["n_validation_patients"] == 1
    mixture = build_mixture(real_notes(1), {}, spec(regime="augmentation", validation_fraction=0.5))
    assert mixture.summary["n_validation_patients"] == 0


def test_only_train_split_is_real() -> None:
    notes = [*real_notes(10), Note("h1", "ph", "t", (), "real", "holdout")]
    mixture = build_mixture(notes, {}, spec(regime="augmentation", validation_fraction=0))
    assert "h1" not in {m.note.note_id for m in mixture.train}
    with pytest.raises(ConfigError, match=r"no note of the parts \['train'\]"):
        build_mixture(real_notes(5, split="holdout"), {}, spec(regime="augmentation"))


def _three_parts() -> list[Note]:
    """10 patients per part, 2 notes each: seed p0..p9, train p10..p19, holdout p20..p29."""
    notes = []
    for i, part in enumerate(["seed"] * 20 + ["train"] * 20 + ["holdout"] * 20):
        notes.append(Note(f"{part}{i}", f"p{i // 2}", "Seen by Dr Ames.", (), "real", part))
    return notes


def test_real_parts_train_on_seed_and_train_never_holdout() -> None:
    notes = _three_parts()
    mixture = build_mixture(
        notes,
        {},
        spec(regime="augmentation", real_parts=["train", "seed"], validation_fraction=0.1),
    )
    used = {m.note.note_id for m in mixture.train} | {n.note_id for n in mixture.validation}
    holdout = {n.note_id for n in notes if n.split == "holdout"}
    assert used == {n.note_id for n in notes} - holdout
    # validation: 10% of the 20 seed + train patients, carved before anything is drawn
    assert mixture.summary["n_validation_patients"] == 2
    assert {m.note.split for m in mixture.train} == {"train"}
    assert mixture.summary["real_parts"] == ["seed", "train"]
    assert mixture.summary["n_real"] + mixture.summary["n_validation_notes"] == 40


def test_real_parts_default_is_the_train_part() -> None:
    mixture = build_mixture(_three_parts(), {}, spec(regime="augmentation", validation_fraction=0))
    assert {m.note.note_id[:5] for m in mixture.train} == {"train"}


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (["seed", "holdout"], "never trained on"),
        (["holdout"], "never trained on"),
        ([], "non-empty list"),
        ("train", "non-empty list"),
        (["train", "train"], "twice"),
        (["dev"], "unknown parts"),
    ],
)
def test_bad_real_parts_are_config_errors(parts: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MixtureSpec.from_mapping({"regime": "augmentation", "seed": 1, "real_parts": parts})


def test_no_holdout_note_enters_through_real_parts_or_pools() -> None:
    notes = _three_parts()
    # a pool derived from holdout notes still stops the build, whatever the real parts
    leaking = [Note("x1", "p25", "t", (), "surrogate", "holdout")]
    with pytest.raises(StepError, match="holdout patients"):
        build_mixture(
            notes, {"surrogate": leaking}, spec(regime="augmentation", real_parts=["seed", "train"])
        )


def test_the_real_parts_read_streamed_build_the_mixture_of_the_whole_table(
    tmp_path: Path,
) -> None:
    notes = _three_parts()
    path = tmp_path / "split.parquet"
    write_notes(notes, path, {})
    parts = ["seed", "train"]
    real, holdout_patients = read_real_parts(path, parts)
    assert [n.note_id for n in real] == [n.note_id for n in notes if n.split in parts]
    assert holdout_patients == {f"p{i}" for i in range(20, 30)}
    pool = {"surrogate": [Note("x1", "p3", "t", (), "surrogate", "seed")]}
    # the one pool note may belong to a validation patient: accept whatever share results
    mixture_spec = spec(
        regime="augmentation", real_parts=parts, synthetic_fraction=0.5, share_tolerance=None
    )
    streamed = build_mixture(real, pool, mixture_spec, holdout_patients=holdout_patients)
    assert _signature(streamed) == _signature(build_mixture(notes, pool, mixture_spec))
    assert streamed.summary == build_mixture(notes, pool, mixture_spec).summary
    leaking = {"surrogate": [Note("x1", "p25", "t", (), "surrogate", "holdout")]}
    with pytest.raises(StepError, match="holdout patients"):
        build_mixture(real, leaking, mixture_spec, holdout_patients=holdout_patients)


# ---------------------------------------------------------------- determinism


def _signature(mixture: Mixture) -> tuple[Any, ...]:
    train = sorted((m.note.note_id, m.copies) for m in mixture.train)
    return tuple(train), tuple(sorted(n.note_id for n in mixture.validation))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"regime": "augmentation", "synthetic_fraction": 0.25},
        {"regime": "fixed_n", "total_notes": 60, "real_fraction": 0.5},
        {"regime": "compute_matched", "synthetic_fraction": 0.5, "steps": 5, "batch_size": 8},
    ],
)
def test_deterministic_for_a_seed_and_different_across_seeds(kwargs: dict[str, Any]) -> None:
    real, pools = real_notes(100), {"syn": pool_notes(300)}
    first = build_mixture(real, pools, spec(seed=3, **kwargs))
    again = build_mixture(list(reversed(real)), {"syn": pools["syn"][::-1]}, spec(seed=3, **kwargs))
    other = build_mixture(real, pools, spec(seed=4, **kwargs))
    assert _signature(first) == _signature(again)
    # the same notes; the digest also covers their order, which training follows
    assert {**first.summary, "digest": None} == {**again.summary, "digest": None}
    assert _signature(first) != _signature(other)


# ---------------------------------------------------------------- spec validation


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"regime": "mix", "seed": 1}, "regime"),
        ({"seed": 1}, "regime"),
        ({"regime": "augmentation"}, "seed"),
        ({"regime": "augmentation", "seed": 1, "synthetic_fraction": 1.0}, "synthetic_fraction"),
        ({"regime": "augmentation", "seed": 1, "synthetic_fraction": "0.5"}, "synthetic_fraction"),
        ({"regime": "augmentation", "seed": True}, "seed"),
        ({"regime": "augmentation", "seed": 1, "pii_fraction": 1.5}, "pii_fraction"),
        ({"regime": "augmentation", "seed": 1, "validation_fraction": -0.1}, "validation_fraction"),
        ({"regime": "augmentation", "seed": 1, "steps": 10}, "steps"),
        ({"regime": "augmentation", "seed": 1, "epochs": 3}, "epochs"),
        ({"regime": "fixed_n", "seed": 1, "real_fraction": 0.5}, "total_notes"),
        ({"regime": "fixed_n", "seed": 1, "total_notes": 0, "real_fraction": 0.5}, "total_notes"),
        ({"regime": "fixed_n", "seed": 1, "total_notes": 10, "real_fraction": 2}, "real_fraction"),
        (
            {
                "regime": "fixed_n",
                "seed": 1,
                "total_notes": 10,
                "real_fraction": 0.5,
                "synthetic_fraction": 0.2,
            },
            "synthetic_fraction",
        ),
        ({"regime": "compute_matched", "seed": 1, "steps": 10}, "batch_size"),
        ({"regime": "compute_matched", "seed": 1, "steps": 1.5, "batch_size": 8}, "steps"),
    ],
)
def test_bad_spec_is_a_config_error_naming_the_key(mapping: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        MixtureSpec.from_mapping(mapping)


def test_good_spec_from_mapping() -> None:
    parsed = MixtureSpec.from_mapping(
        {
            "regime": "compute_matched",
            "seed": 2,
            "synthetic_fraction": 0.5,
            "steps": 100,
            "batch_size": 16,
        }
    )
    assert parsed.steps == 100 and parsed.validation_fraction == 0.15
    fixed = MixtureSpec.from_mapping(
        {"regime": "fixed_n", "seed": 2, "total_notes": 10, "real_fraction": 0.25}
    )
    assert fixed.target_synthetic_fraction == 0.75


def test_bad_pool_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="pool name"):
        build_mixture(real_notes(5), {"real": pool_notes(5)}, spec(regime="augmentation"))


# ---------------------------------------------------------------- Parquet


def test_write_and_read_mixture_round_trip(tmp_path: Path) -> None:
    mixture = build_mixture(
        real_notes(20),
        {"syn": pool_notes(40, pii_every=2)},
        spec(regime="compute_matched", synthetic_fraction=0.5, steps=4, batch_size=8),
    )
    path = tmp_path / "train.parquet"
    write_mixture(mixture.train, path, {"step": "test"})
    assert pq.read_schema(path).remove_metadata() == MIXTURE_SCHEMA
    assert read_mixture(path) == list(mixture.train)


def test_read_mixture_refuses_bad_copies_and_missing_columns(tmp_path: Path) -> None:
    note = real_notes(1)[0].with_split("train")
    table = mixture_to_table([MixtureNote(note, "real", 1)])
    bad = table.set_column(
        table.schema.get_field_index("copies"),
        MIXTURE_SCHEMA.field("copies"),
        pa.array([0], pa.int32()),
    )
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(InputError, match=r"bad.parquet: note 'r0': copies must be at least 1"):
        read_mixture(tmp_path / "bad.parquet")
    pq.write_table(table.drop_columns(["pool"]), tmp_path / "nopool.parquet")
    with pytest.raises(InputError, match=r"not a mixture table: missing columns \['pool'\]"):
        read_mixture(tmp_path / "nopool.parquet")


# ---------------------------------------------------------------- CLI


def _cli_inputs(tmp_path: Path) -> tuple[Path, Path]:
    notes = [*real_notes(60, notes_per_patient=2), Note("h0", "ph", "x", (), "real", "holdout")]
    write_notes(notes, tmp_path / "split.parquet")
    write_notes(pool_notes(100, pii_every=2), tmp_path / "pool.parquet")
    return tmp_path / "split.parquet", tmp_path / "pool.parquet"


def test_cli_build_mixture_end_to_end(tmp_path: Path) -> None:
    notes, pool = _cli_inputs(tmp_path)
    out = tmp_path / "out"
    mixture_spec = {"regime": "augmentation", "seed": 5, "synthetic_fraction": 0.5}
    argv = [
        "build-mixture",
        "--notes",
        str(notes),
        "--pool",
        f"syn={pool}",
        "--spec",
        json.dumps(mixture_spec),
        "--out-train",
        str(out / "train.parquet"),
        "--out-validation",
        str(out / "validation.parquet"),
        "--summary",
        str(out / "summary.json"),
    ]
    assert main(argv) == 0
    train = read_mixture(out / "train.parquet")
    validation = read_notes(out / "validation.parquet")
    summary = json.loads((out / "summary.json").read_text())
    # 30 real train patients, 0.15 of them (4.5, rounded half up) held out
    assert Counter(m.pool for m in train) == {"real": 50, "syn": 50}
    assert len(validation) == 10 and {n.split for n in validation} == {"validation"}
    assert summary["summary"]["realized_synthetic_percent"] == 50.0
    assert summary["provenance"]["step"] == "build-mixture"
    assert summary["provenance"]["params"]["spec"]["seed"] == 5
    assert set(summary["provenance"]["inputs"]) == {"notes", "pool:syn"}
    # read back: the sizes, and each pool's version (the digest of the file drawn from)
    pool_sha = "sha256:" + hashlib.sha256(pool.read_bytes()).hexdigest()
    read = read_mixture_summary(out / "summary.json")
    assert read["n_synthetic"] == 50 and read["pool_digests"] == {"syn": pool_sha}
    bad = json.loads((out / "summary.json").read_text())
    bad["provenance"]["inputs"]["pool:syn"] = {"path": str(pool)}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"input 'pool:syn'.*no digest"):
        read_mixture_summary(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text(json.dumps({**bad, "provenance": "x"}))
    with pytest.raises(InputError, match="provenance inputs are not a JSON object"):
        read_mixture_summary(tmp_path / "bad.json")


def test_cli_pool_parts_keep_only_those_parts(tmp_path: Path) -> None:
    split = [
        Note(f"n{i}", f"p{i}", "Seen by Ames.", (), "real", part)
        for i, part in enumerate(["seed"] * 20 + ["train"] * 20 + ["holdout"] * 10)
    ]
    write_notes(split, tmp_path / "split.parquet")
    surrogates = [Note(n.note_id, n.patient_id, n.text, (), "surrogate", n.split) for n in split]
    write_notes(surrogates, tmp_path / "surrogates.parquet")
    out = tmp_path / "out"
    argv = [
        "build-mixture",
        "--notes",
        str(tmp_path / "split.parquet"),
        "--pool",
        f"surrogates={tmp_path / 'surrogates.parquet'}",
        "--spec",
        '{"regime": "augmentation", "seed": 1, "synthetic_fraction": 0.5}',
        "--out-train",
        str(out / "train.parquet"),
        "--out-validation",
        str(out / "validation.parquet"),
        "--summary",
        str(out / "summary.json"),
    ]
    assert main(argv) == 2  # the pool holds surrogates of holdout notes
    assert not out.exists()
    assert main([*argv, "--pool-parts", "seed"]) == 0
    train = read_mixture(out / "train.parquet")
    pooled = {m.note.patient_id for m in train if m.pool == "surrogates"}
    assert len(pooled) == 17 and pooled <= {f"p{i}" for i in range(20)}  # 17 real: 20 - 3


@pytest.mark.parametrize(
    ("pool_arg", "spec_text"),
    [
        ("syn={missing}", '{"regime": "augmentation", "seed": 1}'),
        ("syn", '{"regime": "augmentation", "seed": 1}'),
        ("syn={pool}", '{"regime": "augmentation"'),
        ("syn={pool}", '{"regime": "augmentation", "seed": 1, "bogus": 1}'),
    ],
)
def test_cli_bad_input_returns_2_and_writes_nothing(
    tmp_path: Path, pool_arg: str, spec_text: str
) -> None:
    notes, pool = _cli_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    pool_value = pool_arg.format(missing=tmp_path / "missing.parquet", pool=pool)
    argv = [
        "build-mixture",
        "--notes",
        str(notes),
        "--pool",
        pool_value,
        "--spec",
        spec_text,
        "--out-train",
        str(out / "train.parquet"),
        "--out-validation",
        str(out / "validation.parquet"),
        "--summary",
        str(out / "summary.json"),
    ]
    assert main(argv) == 2
    assert list(out.iterdir()) == []
