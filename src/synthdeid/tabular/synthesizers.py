"""The tabular synthesizers compared in Lorenzo et al. 2026 (section 2.2), behind one interface.

DP (SmartNoise): ``mst``, ``aim``, ``pate_ctgan``, ``dp_ctgan``; non-DP
baselines (SDV): ``gaussian_copula``, ``ctgan``. :func:`fit_synthesizer`
fits one on the discretized training rows and returns a
:class:`FittedSynthesizer` whose :meth:`~FittedSynthesizer.sample` draws
independent samples (seeded), and whose ``privacy`` records the spent epsilon
(:mod:`synthdeid.tabular.budget`).

SmartNoise gets a table transformer fitted on the spec's domain (public), so
the synthesizer knows every category, including ones absent from the data,
and spends nothing on learning them. Its GAN synthesizers are the ``dpgan``
environment family: DP-CTGAN needs opacus 0.14 (``PrivacyEngine(batch_size=)``),
which cannot share an environment with the DP language model's opacus 1.6
(envs/README.md); :func:`check_environment` says so before any fitting.

Every table of synthetic rows records its synthesizer in its provenance
(``params.synthesizer``: the samples, the subsample, the verbalized reports);
:func:`rows_synthesizer` reads it, so a step that sends rows off the machine
knows whether they are differentially private.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from synthdeid.errors import ConfigError, StepError
from synthdeid.runtime import set_seed
from synthdeid.tabular.budget import EpsilonBudget, EpsilonRecord, plan_budget, settle
from synthdeid.tabular.spec import TableSpec

log = logging.getLogger(__name__)

MAIN_ENV = "main"
DPGAN_ENV = "dpgan"  # opacus 0.14 overlay: envs/requirements-dpgan-overlay.lock
# opacus 0.14 warns on every engine built from a batch size and a row count that "the returned
# privacy budget will be incorrect": its accountant then takes the sampling rate batch / rows and
# analyses the shuffled fixed-size batches as Poisson subsampling at that rate (the standard
# DP-SGD approximation). The fit logs this once with the accounted epsilon instead.
OPACUS_SAMPLE_RATE = "The sample rate will be defined from"


@dataclass(frozen=True)
class SynthesizerInfo:
    """A synthesizer as the config names it, and where it comes from."""

    name: str
    library: str  # smartnoise | sdv
    library_name: str
    dp: bool
    env: str = MAIN_ENV
    gan: bool = False


SYNTHESIZERS: dict[str, SynthesizerInfo] = {
    info.name: info
    for info in (
        SynthesizerInfo("mst", "smartnoise", "mst", dp=True),
        SynthesizerInfo("aim", "smartnoise", "aim", dp=True),
        SynthesizerInfo("pate_ctgan", "smartnoise", "patectgan", dp=True, env=DPGAN_ENV, gan=True),
        SynthesizerInfo("dp_ctgan", "smartnoise", "dpctgan", dp=True, env=DPGAN_ENV, gan=True),
        SynthesizerInfo("gaussian_copula", "sdv", "GaussianCopulaSynthesizer", dp=False),
        SynthesizerInfo("ctgan", "sdv", "CTGANSynthesizer", dp=False, gan=True),
    )
}


def synthesizer_info(name: str) -> SynthesizerInfo:
    try:
        return SYNTHESIZERS[name]
    except KeyError:
        raise ConfigError(
            f"unknown tabular synthesizer {name!r}; known: {sorted(SYNTHESIZERS)}"
        ) from None


def rows_synthesizer(provenance: Mapping[str, Any]) -> SynthesizerInfo | None:
    """The synthesizer a table's rows come from, as its provenance records it
    (``params.synthesizer``); None when it records none or one not in :data:`SYNTHESIZERS`."""
    params = provenance.get("params")
    name = params.get("synthesizer") if isinstance(params, Mapping) else None
    return SYNTHESIZERS.get(name) if isinstance(name, str) else None


def check_environment(info: SynthesizerInfo) -> None:
    """Refuse to start a dpgan-family fit under an opacus it cannot use."""
    if info.env != DPGAN_ENV:
        return
    import opacus

    if not opacus.__version__.startswith("0.14"):
        raise ConfigError(
            f"{info.name} needs opacus 0.14 (smartnoise's GAN path), this environment has "
            f"opacus {opacus.__version__}: run it in the dpgan environment (envs/README.md), e.g. "
            "PYTHONPATH=.venv/opt/dpgan-overlay synthdeid fit-dp-tabular ..."
        )


def domain_frame(spec: TableSpec) -> pd.DataFrame:
    """A frame holding every category of every variable (shorter domains repeat)."""
    domains = spec.domains()
    length = max(len(values) for values in domains.values())
    return pd.DataFrame(
        {name: [values[i % len(values)] for i in range(length)] for name, values in domains.items()}
    )


@dataclass
class FittedSynthesizer:
    """A fitted synthesizer, its fit time and (DP) what it spent."""

    info: SynthesizerInfo
    model: Any
    columns: list[str]
    fit_seconds: float
    privacy: EpsilonRecord | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def sample(self, rows: int, seed: int) -> pd.DataFrame:
        """``rows`` synthetic rows (variables only), seeded; values as category strings."""
        set_seed(seed)
        if self.info.library == "sdv":
            # SDV keeps its own random state (a fixed seed on first use): set it per sample
            self.model._set_random_state(seed)
            frame = self.model.sample(num_rows=rows)
        else:
            frame = self.model.sample(rows)
        if not isinstance(frame, pd.DataFrame):
            frame = pd.DataFrame(frame, columns=self.columns)
        return frame[self.columns].astype(str).reset_index(drop=True)


def fit_synthesizer(
    info: SynthesizerInfo,
    train: pd.DataFrame,
    spec: TableSpec,
    *,
    budget: EpsilonBudget | None,
    options: Mapping[str, Any],
    seed: int,
) -> FittedSynthesizer:
    """Fit ``info`` on the discretized training rows (DP synthesizers need a ``budget``)."""
    if info.dp and budget is None:
        raise ConfigError(f"{info.name} is differentially private: it needs an epsilon")
    if not info.dp and budget is not None:
        raise ConfigError(f"{info.name} is not differentially private: it takes no epsilon")
    check_environment(info)
    frame = train[spec.names].astype(str).reset_index(drop=True)
    set_seed(seed)
    start = time.perf_counter()
    if info.library == "sdv":
        fitted = _fit_sdv(info, frame, options)
    else:
        assert budget is not None
        fitted = _fit_smartnoise(info, frame, spec, budget, options)
    fitted.fit_seconds = time.perf_counter() - start
    log.info("%s fitted on %d rows in %.1f s", info.name, len(frame), fitted.fit_seconds)
    return fitted


def _construct(cls: Any, info: SynthesizerInfo, *args: Any, **kwargs: Any) -> Any:
    try:
        return cls(*args, **kwargs)
    except TypeError as error:
        raise ConfigError(f"synth.tabular.options.{info.name}: {error}") from None


def _fit_sdv(
    info: SynthesizerInfo, frame: pd.DataFrame, options: Mapping[str, Any]
) -> FittedSynthesizer:
    from sdv import single_table
    from sdv.metadata import Metadata

    metadata = Metadata.load_from_dict(
        {
            "tables": {
                "table": {"columns": {name: {"sdtype": "categorical"} for name in frame.columns}}
            }
        }
    )
    model = _construct(getattr(single_table, info.library_name), info, metadata, **options)
    model.fit(frame)
    return FittedSynthesizer(info, model, list(frame.columns), 0.0)


def _fit_smartnoise(
    info: SynthesizerInfo,
    frame: pd.DataFrame,
    spec: TableSpec,
    budget: EpsilonBudget,
    options: Mapping[str, Any],
) -> FittedSynthesizer:
    from snsynth.transform.table import TableTransformer

    domain = domain_frame(spec)
    transformer = TableTransformer.create(
        domain, style="gan" if info.gan else "cube", categorical_columns=list(domain.columns)
    )
    transformer.fit(domain, epsilon=0.0)  # the public domain: no data, no budget
    return fit_smartnoise(info, frame, budget, transformer, options)


def fit_smartnoise(
    info: SynthesizerInfo,
    frame: pd.DataFrame,
    budget: EpsilonBudget,
    transformer: Any,
    options: Mapping[str, Any],
    *,
    categorical_columns: list[str] | None = None,
    continuous_columns: list[str] | None = None,
) -> FittedSynthesizer:
    """Fit a SmartNoise synthesizer with explicit epsilon bookkeeping.

    ``transformer``: a snsynth ``TableTransformer``. Fitted already (the
    spec's domain), it spends nothing; unfitted and in need of bounds, it
    spends up to ``budget.preprocessor`` and SmartNoise takes that from the
    synthesizer's share. Either way the record is settled against the plan.
    """
    from snsynth import Synthesizer

    plan_budget(budget.total, budget.preprocessor, bool(transformer.needs_epsilon))
    prefitted = bool(transformer.fit_complete)
    model = _construct(
        Synthesizer.create,
        info,
        info.library_name,
        epsilon=budget.synthesizer if prefitted else budget.total,
        **options,
    )
    try:
        with warnings.catch_warnings():
            # explained once below (OPACUS_SAMPLE_RATE), not repeated on every fit
            warnings.filterwarnings("ignore", message=OPACUS_SAMPLE_RATE)
            model.fit(
                frame,
                transformer=transformer,
                categorical_columns=categorical_columns or [],
                continuous_columns=continuous_columns or [],
                preprocessor_eps=0.0 if prefitted else budget.preprocessor,
            )
    except ValueError as error:
        raise StepError(f"{info.name}: {error}") from None
    spent_by_preprocessor = float(transformer.odometer.spent[0]) if not prefitted else 0.0
    reported = _reported_epsilon(info, model)
    record = settle(
        budget,
        preprocessor_spent=spent_by_preprocessor,
        synthesizer_epsilon=float(model.epsilon),
        delta=_delta(model),
        library_reported=reported,
        what=info.name,
    )
    if reported is not None:
        log.info(
            "%s: accounted epsilon %.4g of its budget %.4g (opacus RDP accountant at sampling "
            "rate batch / rows; it treats the shuffled fixed-size batches as Poisson "
            "subsampling at that rate, the approximation its warning 'the returned privacy "
            "budget will be incorrect' refers to)",
            info.name,
            record.epsilon_accounted,
            budget.total,
        )
    return FittedSynthesizer(info, model, list(frame.columns), 0.0, privacy=record)


def _reported_epsilon(info: SynthesizerInfo, model: Any) -> float | None:
    """DP-CTGAN's own accountant (RDP, opacus) after its last epoch; None where there is none.

    SmartNoise checks DP-CTGAN's budget at the start of an epoch, after the
    epoch that crossed it has already run: the last figure can exceed the
    target. That is refused by :func:`settle`, with the epoch count that fits.
    """
    spent = list(getattr(model, "epsilon_list", None) or [])
    if info.name != "dp_ctgan" or not spent:
        return None
    target = float(model.epsilon)
    if spent[-1] > target:
        fitting = sum(1 for value in spent if value <= target)
        raise StepError(
            f"dp_ctgan: its accountant reports epsilon {spent[-1]:.4g} > {target:.4g} after "
            f"{len(spent)} epochs (SmartNoise checks after the epoch that crosses the budget); "
            f"set synth.tabular.options.dp_ctgan.epochs <= {max(fitting - 1, 1)}"
        )
    return float(spent[-1])


def _delta(model: Any) -> float | None:
    delta = getattr(model, "delta", None)
    return float(delta) if delta is not None else None
