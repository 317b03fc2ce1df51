"""Training mixtures: the real train part plus notes drawn from labelled pools.

A de-identification model trains on the real train part of the split notes
table (``split == "train"``) mixed with notes from any number of labelled
pools (synthetic, surrogate, silver). ``real_parts`` widens the real part to
the gold notes of several split parts (``[seed, train]``: the model a user
deploys, which needs every gold note but the holdout; the synthetic-data study
keeps the seed part for synthesis). The holdout part is never trained on.
Three regimes (VetSynth, section 2.5):

``augmentation``
    Keep every real note and add ``S = min(pool size, round(f / (1 - f) * R))``
    synthetic notes, so the realized synthetic share is ``f`` until the pools
    run out (Table 2: f = 0.25 with R = 1249 gives S = 416; f = 0.9 capped by a
    pool of 10,382 gives 89.3%). More synthetic means more notes in total.
``fixed_n``
    A fixed total ``N``: ``round(r * N)`` real notes and ``N - round(r * N)``
    synthetic ones, both drawn without replacement; too few notes is an error.
``compute_matched``
    A fixed budget of ``steps * batch_size`` examples: ``round(f * budget)``
    drawn with replacement from the pools, the rest with replacement from the
    real notes (so real-only training is real notes oversampled). Repeats are a
    ``copies`` count per unique note, never duplicate rows; the summary's
    ``max_steps`` tells the trainer to run exactly ``steps`` optimizer steps.

Rules where a choice had to be made (every "round" here rounds halves up):

* Validation is carved out first: ``validation_fraction`` of the real train
  patients (those of every part in ``real_parts``) (rounded half up; at least one, and at least one left for training,
  when the fraction is positive and there are two or more patients) become
  real-only validation, never mixed. Pool notes whose ``patient_id`` is a
  validation patient (for example surrogate versions of its notes) are dropped
  from the pools, so nothing derived from a validation patient is trained on.
  A pool note of a holdout patient (``split == "holdout"`` in the real table)
  stops the build with a :class:`StepError`: it would leak the test set.
* Every output note gets ``split`` ``"train"`` or ``"validation"``; the
  ``pool`` column says where it came from (``"real"`` or the pool name).
* Pool note ids are always prefixed ``"<pool>:"`` (patient ids are kept), so
  ids stay unique across pools and the original id stays readable.
* Several pools share a draw in proportion to their available sizes, by
  largest-remainder rounding (ties go to the pool name first in sort order).
  With ``pii_fraction`` set, ``round(p * S)`` notes with at least one span and
  ``S - round(p * S)`` without are drawn (each capped by what the pools hold,
  except in ``fixed_n``, where a shortfall is an error); each stratum is split
  across pools in proportion to the pools' notes in that stratum.
* A mixture must realize the share it names: when the pools cannot fill the
  target (``augmentation`` capped by a small pool, a ``pii_fraction`` stratum
  that runs out), a realized synthetic share (or share of notes with PHI in
  the synthetic part) more than ``share_tolerance`` (default 0.02) from the
  target is a :class:`ConfigError` that names the realized share, before
  anything is written; ``share_tolerance: null`` accepts the capped share.
* Draws without replacement take the first notes in the order of a SHA-256 of
  ``<seed>:<purpose>:<note_id>``; draws with replacement use a
  :class:`random.Random` seeded by a string over notes sorted by id. Both depend
  only on the seed and the note ids, not on the order of the input.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import (
    read_parquet_with_provenance,
    reading_record,
    require_columns,
    write_parquet_atomic,
)
from synthdeid.errors import ConfigError, InputError, StepError
from synthdeid.notes import NOTES_SCHEMA, Note, iter_notes, notes_to_table, table_to_notes
from synthdeid.runtime import check_seed
from synthdeid.split import PARTS as SPLIT_PARTS

log = logging.getLogger(__name__)
# build-mixture's provenance names each pool file it read ``pool:<pool name>``
POOL_INPUT_PREFIX = "pool:"

REGIMES: tuple[str, ...] = ("augmentation", "fixed_n", "compute_matched")
DEFAULT_SHARE_TOLERANCE = 0.02
"""How far a mixture's realized synthetic (and PHI) share may be from the one it names."""
MAX_COMPUTE_BUDGET = 10**8
"""The most examples (steps x batch_size) a compute_matched mixture draws: about four
months of CPU training at ten examples a second, refused when the config is read."""
DRAW_CHUNK = 1 << 20  # draws with replacement are counted this many at a time
REAL_POOL = "real"
TRAIN_SPLIT = "train"
VALIDATION_SPLIT = "validation"
HOLDOUT_SPLIT = "holdout"

# the canonical notes table plus where each note came from and how often it is repeated
MIXTURE_SCHEMA = pa.schema(
    [
        *NOTES_SCHEMA,
        pa.field("pool", pa.string(), nullable=False),
        pa.field("copies", pa.int32(), nullable=False),
    ]
)

_POOL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# keys that belong to one regime only: giving them to another regime is an error
_REGIME_KEYS: dict[str, tuple[str, ...]] = {
    "augmentation": (),
    "fixed_n": ("total_notes", "real_fraction"),
    "compute_matched": ("steps", "batch_size"),
}


def round_half_up(value: float) -> int:
    """Round to the nearest integer, halves up (Python's ``round`` rounds to even)."""
    return math.floor(value + 0.5)


def _check_fraction(key: str, value: object, *, upper_inclusive: bool) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"mixture.{key} must be a number, got {value!r}")
    high_ok = value <= 1 if upper_inclusive else value < 1
    if not (value >= 0 and high_ok):
        interval = "[0, 1]" if upper_inclusive else "[0, 1)"
        raise ConfigError(f"mixture.{key} must lie in {interval}, got {value!r}")


def _check_positive_int(key: str, value: object) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        raise ConfigError(f"mixture.{key} must be a positive integer, got {value!r}")


def _check_real_parts(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ConfigError(f"mixture.real_parts must be a non-empty list of parts, got {value!r}")
    parts = list(value)
    unknown = sorted(str(p) for p in parts if p not in SPLIT_PARTS)
    if unknown:
        raise ConfigError(f"mixture.real_parts has unknown parts {unknown}; parts: {SPLIT_PARTS}")
    if HOLDOUT_SPLIT in parts:
        raise ConfigError(
            "mixture.real_parts includes 'holdout': the holdout notes score every run "
            "and are never trained on"
        )
    if len(set(parts)) != len(parts):
        raise ConfigError(f"mixture.real_parts lists a part twice: {parts}")
    return tuple(sorted(parts))


@dataclass(frozen=True, kw_only=True)
class MixtureSpec:
    """How to build one training mixture (validated on construction).

    ``synthetic_fraction`` is the target synthetic share (augmentation and
    compute_matched; fixed_n takes its share from ``real_fraction`` and accepts
    ``synthetic_fraction`` only as 0 or ``1 - real_fraction``).
    ``pii_fraction`` is the share of the synthetic part that carries at least
    one span (None: as drawn). ``share_tolerance`` is how far the realized
    shares may fall from these targets (None: accept what the pools give).
    ``validation_fraction`` is the share of real
    train patients held out as validation. ``real_parts`` are the split parts
    whose gold notes are the real data (default the train part; never holdout).
    """

    regime: str
    seed: int
    synthetic_fraction: float = 0.0
    total_notes: int | None = None
    real_fraction: float | None = None
    steps: int | None = None
    batch_size: int | None = None
    pii_fraction: float | None = None
    validation_fraction: float = 0.15
    real_parts: tuple[str, ...] = (TRAIN_SPLIT,)
    share_tolerance: float | None = DEFAULT_SHARE_TOLERANCE

    def __post_init__(self) -> None:
        # a config list arrives as a list: keep the spec hashable and its parts sorted
        object.__setattr__(self, "real_parts", _check_real_parts(self.real_parts))
        if self.regime not in REGIMES:
            raise ConfigError(f"mixture.regime must be one of {REGIMES}, got {self.regime!r}")
        check_seed(self.seed, "mixture.seed")
        _check_fraction("synthetic_fraction", self.synthetic_fraction, upper_inclusive=False)
        _check_fraction("validation_fraction", self.validation_fraction, upper_inclusive=False)
        if self.pii_fraction is not None:
            _check_fraction("pii_fraction", self.pii_fraction, upper_inclusive=True)
        if self.share_tolerance is not None:
            _check_fraction("share_tolerance", self.share_tolerance, upper_inclusive=False)
        for regime, keys in _REGIME_KEYS.items():
            for key in keys:
                value = getattr(self, key)
                if regime == self.regime and value is None:
                    raise ConfigError(f"mixture.{key} is required for regime {regime!r}")
                if regime != self.regime and value is not None:
                    raise ConfigError(
                        f"mixture.{key} applies to regime {regime!r} only, "
                        f"not {self.regime!r}; remove it"
                    )
        if self.regime == "fixed_n":
            _check_positive_int("total_notes", self.total_notes)
            _check_fraction("real_fraction", self.real_fraction, upper_inclusive=True)
            assert self.real_fraction is not None
            if self.synthetic_fraction and not math.isclose(
                self.synthetic_fraction, 1 - self.real_fraction
            ):
                raise ConfigError(
                    f"mixture.synthetic_fraction {self.synthetic_fraction} contradicts "
                    f"mixture.real_fraction {self.real_fraction} in regime 'fixed_n'; "
                    "give real_fraction only"
                )
        if self.regime == "compute_matched":
            _check_positive_int("steps", self.steps)
            _check_positive_int("batch_size", self.batch_size)
            budget = compute_budget(self)
            if budget > MAX_COMPUTE_BUDGET:
                raise ConfigError(
                    f"mixture (compute_matched): steps x batch_size = {budget:,} examples, more "
                    f"than the {MAX_COMPUTE_BUDGET:,} a mixture may draw; lower steps or batch_size"
                )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> MixtureSpec:
        """Build a spec from a config mapping; unknown or missing keys are errors."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"mixture spec must be a mapping, got {type(mapping).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ConfigError(f"mixture has unknown keys {unknown}; known keys: {sorted(known)}")
        for key in ("regime", "seed"):
            if key not in mapping:
                raise ConfigError(f"mixture.{key} is required")
        return cls(**dict(mapping))

    @property
    def target_synthetic_fraction(self) -> float:
        if self.regime == "fixed_n":
            assert self.real_fraction is not None
            return 1.0 - self.real_fraction
        return float(self.synthetic_fraction)


@dataclass(frozen=True)
class MixtureNote:
    """One unique training note: the note, the pool it came from, how often it is seen."""

    note: Note
    pool: str
    copies: int = 1


@dataclass(frozen=True)
class Mixture:
    """A built mixture: train notes (with pool and copies), real validation notes, summary."""

    train: tuple[MixtureNote, ...]
    validation: tuple[Note, ...]
    summary: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- drawing


def _hash_key(seed: int, purpose: str, note_id: str) -> str:
    return hashlib.sha256(f"{seed}:{purpose}:{note_id}".encode()).hexdigest()


def hash_order(notes: Sequence[Note], seed: int, purpose: str) -> list[Note]:
    """The notes in a seed-determined order that ignores their input order."""
    return sorted(notes, key=lambda n: (_hash_key(seed, purpose, n.note_id), n.note_id))


def draw_without_replacement(
    notes: Sequence[Note], k: int, seed: int, purpose: str
) -> dict[str, int]:
    """Note id -> 1 for the first ``k`` notes in hash order."""
    return {n.note_id: 1 for n in hash_order(notes, seed, purpose)[:k]}


def draw_with_replacement(notes: Sequence[Note], k: int, seed: int, purpose: str) -> dict[str, int]:
    """Note id -> copies for ``k`` uniform draws with replacement."""
    if k == 0:
        return {}
    population = sorted(n.note_id for n in notes)
    rng = random.Random(f"{seed}:{purpose}")
    counts: Counter[str] = Counter()
    for start in range(0, k, DRAW_CHUNK):  # the same draws as one call, in bounded memory
        counts.update(rng.choices(population, k=min(DRAW_CHUNK, k - start)))
    return dict(counts)


def allocate(total: int, sizes: Mapping[str, int]) -> dict[str, int]:
    """Split ``total`` across keys in proportion to ``sizes``, largest remainder.

    Ties go to the key first in sort order. When ``total <= sum(sizes)`` no
    key gets more than its size.
    """
    keys = sorted(sizes)
    available = sum(sizes.values())
    if total == 0 or available == 0:
        return dict.fromkeys(keys, 0)
    wanted = {k: total * sizes[k] / available for k in keys}
    shares = {k: math.floor(wanted[k]) for k in keys}
    by_remainder = sorted(keys, key=lambda k: (-(wanted[k] - shares[k]), keys.index(k)))
    for key in by_remainder[: total - sum(shares.values())]:
        shares[key] += 1
    return shares


# ---------------------------------------------------------------- parts


def validation_patient_count(n_patients: int, fraction: float) -> int:
    """Patients held out: ``fraction`` of them, rounded half up, at least 1 and at most n-1."""
    if fraction <= 0 or n_patients < 2:
        return 0
    return min(max(round_half_up(fraction * n_patients), 1), n_patients - 1)


def carve_validation(
    real_train: Sequence[Note], fraction: float, seed: int
) -> tuple[list[Note], list[Note]]:
    """Split real train notes by patient into (train remainder, validation)."""
    patients = sorted({n.patient_id for n in real_train})
    n_validation = validation_patient_count(len(patients), fraction)
    if fraction > 0 and n_validation == 0:
        log.warning(
            "validation_fraction %s asked for, but %d real train patient(s) are too few to "
            "hold any out: no validation part",
            fraction,
            len(patients),
        )
    ordered = sorted(patients, key=lambda p: (_hash_key(seed, "validation", p), p))
    held_out = set(ordered[:n_validation])
    train = [n.with_split(TRAIN_SPLIT) for n in real_train if n.patient_id not in held_out]
    validation = [n.with_split(VALIDATION_SPLIT) for n in real_train if n.patient_id in held_out]
    return train, validation


def prepare_pools(
    pools: Mapping[str, Sequence[Note]],
    real_ids: set[str],
    validation_patients: set[str],
    holdout_patients: Set[str] | None = None,
) -> tuple[dict[str, list[Note]], dict[str, int]]:
    """Prefix pool note ids, set ``split`` to train, drop notes of validation patients.

    Returns the usable pool notes and, per pool, how many notes were dropped.
    A pool note of a holdout patient (say a surrogate of a test note) would
    leak the test set into training: that is a :class:`StepError`.
    """
    prepared: dict[str, list[Note]] = {}
    dropped: dict[str, int] = {}
    for name in sorted(pools):
        check_pool_name(name)
        leaking = sum(1 for note in pools[name] if note.patient_id in (holdout_patients or ()))
        if leaking:
            raise StepError(
                f"pool {name!r} holds {leaking} notes of holdout patients, which would leak the "
                "test set into training; draw the pool from other split parts (--pool-parts)"
            )
        kept: list[Note] = []
        for note in pools[name]:
            if note.patient_id in validation_patients:
                continue
            new_id = f"{name}:{note.note_id}"
            if new_id in real_ids:
                raise ConfigError(
                    f"pool {name!r} note {note.note_id!r} becomes {new_id!r}, which is also a "
                    "real note id; rename the pool"
                )
            kept.append(replace(note, note_id=new_id, split=TRAIN_SPLIT))
        prepared[name] = kept
        dropped[name] = len(pools[name]) - len(kept)
        if dropped[name]:
            log.warning("pool %r: dropped %d notes of validation patients", name, dropped[name])
    return prepared, dropped


def check_pool_name(name: str) -> None:
    if not name or name == REAL_POOL or not set(name) <= _POOL_NAME_CHARS:
        raise ConfigError(
            f"pool name {name!r} is not usable: use letters, digits, '_', '.', '-' "
            f"and not {REAL_POOL!r}"
        )


# ---------------------------------------------------------------- synthetic draws

Drawer = Callable[[Sequence[Note], int, int, str], dict[str, int]]


def _strata(
    pools: Mapping[str, Sequence[Note]], pii_fraction: float | None
) -> dict[str, dict[str, list[Note]]]:
    """Stratum -> pool -> notes: one stratum ``all``, or ``pii`` / ``no_pii``."""
    if pii_fraction is None:
        return {"all": {name: list(notes) for name, notes in pools.items()}}
    return {
        "pii": {name: [n for n in notes if n.spans] for name, notes in pools.items()},
        "no_pii": {name: [n for n in notes if not n.spans] for name, notes in pools.items()},
    }


def _stratum_targets(total: int, pii_fraction: float | None) -> dict[str, int]:
    if pii_fraction is None:
        return {"all": total}
    with_pii = round_half_up(pii_fraction * total)
    return {"pii": with_pii, "no_pii": total - with_pii}


def draw_synthetic(
    pools: Mapping[str, Sequence[Note]],
    total: int,
    spec: MixtureSpec,
    *,
    with_replacement: bool,
    strict: bool,
) -> dict[str, dict[str, int]]:
    """Pool -> note id -> copies for ``total`` synthetic draws.

    Without replacement each stratum is capped by what the pools hold, unless
    ``strict``, where a shortfall is a :class:`ConfigError`. With replacement
    only an empty stratum that is needed is an error.
    """
    drawer: Drawer = draw_with_replacement if with_replacement else draw_without_replacement
    drawn: dict[str, dict[str, int]] = {name: {} for name in pools}
    strata = _strata(pools, spec.pii_fraction)
    for stratum, wanted in _stratum_targets(total, spec.pii_fraction).items():
        sizes = {name: len(notes) for name, notes in strata[stratum].items()}
        available = sum(sizes.values())
        what = "synthetic notes" if stratum == "all" else f"synthetic notes ({stratum})"
        if wanted and (available == 0 or (strict and available < wanted)):
            raise ConfigError(
                f"mixture needs {wanted} {what} but the pools hold {available} "
                f"(short by {wanted - available}); add pool notes or lower the target"
            )
        if not with_replacement and available < wanted:
            log.warning("only %d of %d %s available: drawing all", available, wanted, what)
            wanted = available
        for name, count in allocate(wanted, sizes).items():
            purpose = f"pool:{name}:{stratum}"
            drawn[name].update(drawer(strata[stratum][name], count, spec.seed, purpose))
    return drawn


# ---------------------------------------------------------------- regimes


def _real_draws(real: Sequence[Note], spec: MixtureSpec) -> dict[str, int]:
    """Real note id -> copies under the spec's regime."""
    if spec.regime == "augmentation":
        return {n.note_id: 1 for n in real}
    if spec.regime == "fixed_n":
        assert spec.total_notes is not None and spec.real_fraction is not None
        wanted = round_half_up(spec.real_fraction * spec.total_notes)
        if wanted > len(real):
            raise ConfigError(
                f"mixture (fixed_n) needs {wanted} real notes but the real train part has "
                f"{len(real)} after validation (short by {wanted - len(real)}); lower "
                "total_notes or real_fraction"
            )
        return draw_without_replacement(real, wanted, spec.seed, "real")
    budget = compute_budget(spec)
    wanted = budget - round_half_up(spec.synthetic_fraction * budget)
    if wanted and not real:
        raise ConfigError("mixture (compute_matched) needs real notes but the train part is empty")
    return draw_with_replacement(real, wanted, spec.seed, "real")


def compute_budget(spec: MixtureSpec) -> int:
    assert spec.steps is not None and spec.batch_size is not None
    return spec.steps * spec.batch_size


def synthetic_target(spec: MixtureSpec, n_real: int, pool_total: int) -> int:
    """Synthetic notes (draws) the regime asks for, before stratification."""
    if spec.regime == "augmentation":
        f = spec.synthetic_fraction
        return min(pool_total, round_half_up(f / (1 - f) * n_real))
    if spec.regime == "fixed_n":
        assert spec.total_notes is not None
        return spec.total_notes - n_real
    return round_half_up(spec.synthetic_fraction * compute_budget(spec))


def read_real_parts(path: Path, real_parts: Sequence[str]) -> tuple[list[Note], set[str]]:
    """The notes of ``real_parts`` in a split notes table, and the holdout's patients.

    Streams the table a row group at a time: memory holds the notes of those
    parts (the mixture's real notes, which training holds anyway) and the
    patient ids of the holdout, not the whole corpus.
    """
    notes: list[Note] = []
    holdout_patients: set[str] = set()
    for batch in iter_notes(path):
        notes.extend(n for n in batch if n.split in real_parts)
        holdout_patients.update(n.patient_id for n in batch if n.split == HOLDOUT_SPLIT)
    return notes, holdout_patients


def build_mixture(
    real_notes: Sequence[Note],
    pools: Mapping[str, Sequence[Note]],
    spec: MixtureSpec,
    *,
    holdout_patients: Set[str] | None = None,
) -> Mixture:
    """Build the mixture: validation carved from the real train part, then the regime's draw.

    ``real_notes`` is the split notes table, or only its notes of
    ``spec.real_parts`` with ``holdout_patients`` the patients of its holdout
    (:func:`read_real_parts`); only notes whose ``split`` is one of
    ``spec.real_parts`` are used (they all become ``train`` or
    ``validation``), and no pool note of a holdout patient. ``pools`` maps pool
    names to their notes (any split).
    """
    real_train = [n for n in real_notes if n.split in spec.real_parts]
    if not real_train:
        raise ConfigError(
            f"the real notes hold no note of the parts {list(spec.real_parts)}; "
            "pass the split notes table"
        )
    real, validation = carve_validation(real_train, spec.validation_fraction, spec.seed)
    validation_patients = {n.patient_id for n in validation}
    if holdout_patients is None:
        holdout_patients = {n.patient_id for n in real_notes if n.split == HOLDOUT_SPLIT}
    usable, dropped = prepare_pools(
        pools, {n.note_id for n in real}, validation_patients, holdout_patients
    )
    pool_total = sum(len(notes) for notes in usable.values())

    real_copies = _real_draws(real, spec)
    n_real = sum(real_copies.values())
    wanted = synthetic_target(spec, n_real, pool_total)
    pool_copies = draw_synthetic(
        usable,
        wanted,
        spec,
        with_replacement=spec.regime == "compute_matched",
        strict=spec.regime == "fixed_n",
    )
    train = [
        MixtureNote(n, REAL_POOL, real_copies[n.note_id]) for n in real if n.note_id in real_copies
    ]
    for name in sorted(usable):
        copies = pool_copies[name]
        train.extend(
            MixtureNote(n, name, copies[n.note_id]) for n in usable[name] if n.note_id in copies
        )
    summary = summarize(spec, train, validation, usable, dropped, len(real))
    check_realized_shares(spec, summary)
    return Mixture(tuple(train), tuple(validation), summary)


def check_realized_shares(spec: MixtureSpec, summary: Mapping[str, Any]) -> None:
    """ConfigError when the built mixture misses the synthetic share it names, or the share
    of synthetic notes with PHI (``pii_fraction``), by more than ``spec.share_tolerance``."""
    if spec.share_tolerance is None:
        return
    n_total, n_synthetic = summary["n_train_total"], summary["n_synthetic"]
    checks = [
        (
            "synthetic share",
            spec.target_synthetic_fraction,
            summary["realized_synthetic_fraction"],
            f"{n_synthetic} of {n_total} training notes",
        )
    ]
    if spec.pii_fraction is not None and n_synthetic:
        with_pii = summary["n_synthetic_with_pii"]
        checks.append(
            (
                "share of synthetic notes with PHI",
                spec.pii_fraction,
                with_pii / n_synthetic,
                f"{with_pii} of {n_synthetic} synthetic notes",
            )
        )
    for what, target, realized, counts in checks:
        if abs(realized - target) > spec.share_tolerance + 1e-12:
            raise ConfigError(
                f"mixture ({spec.regime}) realizes a {what} of {realized:.3f} ({counts}), not "
                f"the {target:.3f} it names (tolerance {spec.share_tolerance}); its pools hold "
                f"{summary['n_synthetic_available']} usable notes. Add pool notes, name the "
                "share the pools can fill, or set share_tolerance: null to accept it"
            )


def mixture_digest(train: Sequence[MixtureNote], validation: Sequence[Note]) -> str:
    """SHA-256 of what a model trains on: each train note's pool, id and copies in order,
    and the validation note ids. Two runs with equal digests and equal training settings
    train the same model (:mod:`synthdeid.ner.duplicates`)."""
    digest = hashlib.sha256()
    for m in train:
        digest.update(f"train\t{m.pool}\t{m.note.note_id}\t{m.copies}\n".encode())
    for note in validation:
        digest.update(f"validation\t{note.note_id}\n".encode())
    return f"sha256:{digest.hexdigest()}"


def summarize(
    spec: MixtureSpec,
    train: Sequence[MixtureNote],
    validation: Sequence[Note],
    pools: Mapping[str, Sequence[Note]],
    dropped: Mapping[str, int],
    n_real_available: int,
) -> dict[str, Any]:
    """A VetSynth-Table-2 style record of what was built (counts include copies)."""
    real = [m for m in train if m.pool == REAL_POOL]
    synthetic = [m for m in train if m.pool != REAL_POOL]
    n_real = sum(m.copies for m in real)
    n_synthetic = sum(m.copies for m in synthetic)
    n_total = n_real + n_synthetic
    realized = n_synthetic / n_total if n_total else 0.0
    return {
        "regime": spec.regime,
        "seed": spec.seed,
        "digest": mixture_digest(train, validation),
        "real_parts": list(spec.real_parts),
        "target_synthetic_fraction": spec.target_synthetic_fraction,
        "n_train_total": n_total,
        "n_train_unique": len(train),
        "n_real": n_real,
        "n_real_unique": len(real),
        "n_real_available": n_real_available,
        "n_real_train_patients": len({m.note.patient_id for m in real}),
        "n_synthetic": n_synthetic,
        "n_synthetic_unique": len(synthetic),
        "n_synthetic_available": sum(len(notes) for notes in pools.values()),
        "realized_synthetic_fraction": realized,
        "realized_synthetic_percent": round(100 * realized, 1),
        "pools": {
            name: {
                "available": len(pools[name]),
                "dropped_validation_patients": dropped.get(name, 0),
                "drawn": sum(m.copies for m in synthetic if m.pool == name),
                "unique": sum(1 for m in synthetic if m.pool == name),
            }
            for name in sorted(pools)
        },
        "target_pii_fraction": spec.pii_fraction,
        "n_synthetic_with_pii": sum(m.copies for m in synthetic if m.note.spans),
        "n_synthetic_without_pii": sum(m.copies for m in synthetic if not m.note.spans),
        "n_validation_notes": len(validation),
        "n_validation_patients": len({n.patient_id for n in validation}),
        "max_steps": spec.steps if spec.regime == "compute_matched" else None,
        "batch_size": spec.batch_size if spec.regime == "compute_matched" else None,
    }


# ---------------------------------------------------------------- Parquet


def mixture_to_table(train: Sequence[MixtureNote]) -> pa.Table:
    table = notes_to_table(m.note for m in train)
    table = table.append_column(
        MIXTURE_SCHEMA.field("pool"), pa.array([m.pool for m in train], pa.string())
    )
    return table.append_column(
        MIXTURE_SCHEMA.field("copies"), pa.array([m.copies for m in train], pa.int32())
    )


def write_mixture(
    train: Sequence[MixtureNote], path: str | Path, provenance: Mapping[str, Any] | None = None
) -> pa.Table:
    """Write the train part atomically with :data:`MIXTURE_SCHEMA` and provenance."""
    table = mixture_to_table(train)
    write_parquet_atomic(table, path, provenance)
    return table


def read_mixture(path: str | Path) -> list[MixtureNote]:
    """Read a train mixture, checking the schema, every note and every pool/copies value."""
    table, _ = read_parquet_with_provenance(path)
    require_columns(path, table.column_names, MIXTURE_SCHEMA.names, "a mixture table")
    for expected in MIXTURE_SCHEMA:
        actual = table.schema.field(expected.name).type
        if actual != expected.type:
            raise InputError(
                path, None, f"column {expected.name!r} has type {actual}, expected {expected.type}"
            )
    notes = table_to_notes(table, path=path)
    pools = table.column("pool").to_pylist()
    copies = table.column("copies").to_pylist()
    out: list[MixtureNote] = []
    for note, pool, count in zip(notes, pools, copies, strict=True):
        record = f"note {note.note_id!r}"
        if not pool:
            raise InputError(path, record, "pool is missing or empty")
        if count is None or count < 1:
            raise InputError(path, record, f"copies must be at least 1, got {count!r}")
        out.append(MixtureNote(note, pool, count))
    return out


def read_mixture_summary(path: Path) -> dict[str, Any]:
    """The sizes of a mixture, from the summary.json build-mixture writes (its ``summary``).

    It also holds ``pool_digests``: the SHA-256 of each pool file the mixture drew from,
    by pool name, as build-mixture's provenance records them ({} for a mixture of real
    notes alone, or a summary written without provenance). Two mixtures with equal pool
    digests drew from byte-identical pools, wherever each was built.
    """
    with reading_record(path, "mixture summary"):
        data = json.loads(path.read_text(encoding="utf-8"))
    summary = data.get("summary", data) if isinstance(data, dict) else data
    if not isinstance(summary, dict):
        raise InputError(path, None, "mixture summary is not a JSON object")
    provenance = data.get("provenance") or {}
    inputs = (provenance.get("inputs") or {}) if isinstance(provenance, dict) else None
    if not isinstance(inputs, dict):
        raise InputError(path, None, "the summary's provenance inputs are not a JSON object")
    digests: dict[str, str] = {}
    for name, entry in inputs.items():
        if not name.startswith(POOL_INPUT_PREFIX):
            continue
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if not isinstance(digest, str):
            raise InputError(path, f"input {name!r}", "the pool's provenance has no digest")
        digests[name.removeprefix(POOL_INPUT_PREFIX)] = digest
    return {**summary, "pool_digests": dict(sorted(digests.items()))}
