"""How a stage runs: CPU threads, the torch device, number format, random seeds, progress bars.

The stages that take them declare ``--threads``, ``--device`` and
``--no-progress`` with :func:`add_runtime_arguments`, so the three mean the
same everywhere; a stage's own defaults and help texts are its parameters.
:func:`set_threads`, :func:`pick_device` and :func:`set_seed` apply them.
:func:`resolve_precision` turns a ``precision`` setting (``auto``, ``fp32``,
``bf16``, ``fp16``) into the number format a device computes in: training,
TAPT and inference all choose it there.

Nothing heavy is imported at module level (every stage's argument parser uses
this module, and ``synthdeid --help`` must stay fast): the functions that need
torch import it when called.
"""

from __future__ import annotations

import argparse
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from synthdeid.cli_types import non_negative_int, positive_int
from synthdeid.errors import ConfigError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def add_runtime_arguments(
    parser: argparse.ArgumentParser,
    *,
    threads: bool = True,
    device: bool = True,
    progress: bool = True,
    threads_help: str | None = None,
    zero_threads: bool = False,
    device_default: str = "auto",
    device_help: str | None = None,
) -> None:
    """Add ``--threads``, ``--device`` and ``--no-progress`` (those asked for) to ``parser``.

    ``--threads`` is a positive count defaulting to None (torch's own choice);
    with ``zero_threads`` it is a count defaulting to 0, which means the same.
    ``--device`` is ``auto`` or a torch device such as ``cpu`` or ``cuda:N``
    (see :func:`pick_device`), ``device_default`` unless given.
    """
    if threads:
        parser.add_argument(
            "--threads",
            type=non_negative_int if zero_threads else positive_int,
            default=0 if zero_threads else None,
            help=threads_help,
        )
    if device:
        parser.add_argument("--device", default=device_default, help=device_help)
    if progress:
        parser.add_argument("--no-progress", action="store_true")


def set_threads(threads: int | None) -> None:
    """Let torch use ``threads`` CPU threads; None or 0 keeps torch's default."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def pick_device(requested: str = "auto") -> torch.device:
    """The torch device ``requested``: ``auto`` (CUDA when visible, else CPU), ``cpu``, ``cuda:N``...

    A name torch does not know, or CUDA where none is visible, is a :class:`ConfigError`.
    """
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(
            f"device must be auto or a torch device (cpu, cuda, cuda:N), not {requested!r}"
        ) from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {requested!r} requested but no CUDA device is visible")
    return device


def native_cpu_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX), as oneDNN reports it."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def warn_if_bf16_emulated(device: torch.device, what: str) -> bool:
    """Log a warning when bf16 is asked for on a CPU that only emulates it; True if so.

    Without AVX512-BF16 or AMX, oneDNN converts every bf16 product through fp32:
    a MiniLM training step (8 x 512 tokens, 2 threads) took 4.2 s in fp32 and
    over a minute in bf16 autocast on an AVX2-only CPU, against 2.8 s (bf16) and
    4.2 s (fp32) on one with AVX512-BF16 (docs/benchmarks.md).
    """
    if device.type != "cpu" or native_cpu_bf16():
        return False
    log.warning(
        "%s: bf16 asked for, but this CPU has no native bf16 (AVX512-BF16 or AMX); it is "
        "emulated and many times slower than fp32 here: use fp32 on this machine",
        what,
    )
    return True


# precision settings: "auto" (resolve_precision picks one of the others) or a number format
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
NUMBER_FORMATS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class ResolvedPrecision:
    """What a ``precision`` setting comes to on one device, and why (:func:`resolve_precision`)."""

    requested: str  # the setting: auto, fp32, bf16 or fp16
    name: str  # the number format used: fp32, bf16 or fp16
    reason: str  # e.g. "native bf16 on this CPU", "set explicitly"

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of the number format (``torch.float32`` for fp32)."""
        import torch

        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self.name]

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype for ``torch.autocast``; None for fp32 (autocast off)."""
        return None if self.name == "fp32" else self.dtype

    def describe(self) -> str:
        """``auto -> bf16 (native bf16 on this CPU)``; ``fp32 (set explicitly)``."""
        if self.requested == self.name:
            return f"{self.name} ({self.reason})"
        return f"{self.requested} -> {self.name} ({self.reason})"

    def record(self) -> dict[str, str]:
        """The JSON record model directories and summaries keep."""
        return {"requested": self.requested, "resolved": self.name, "reason": self.reason}


def resolve_precision(
    requested: str,
    device: torch.device,
    *,
    allow_fp16: bool = True,
    setting: str = "precision",
) -> ResolvedPrecision:
    """The number format of the ``requested`` precision setting on ``device``.

    ``auto`` is bf16 where the hardware computes it natively (a CUDA device
    with bf16, a CPU with AVX512-BF16 or AMX: :func:`native_cpu_bf16`) and
    fp32 otherwise; on a CUDA device without bf16 it is fp16, or fp32 when
    ``allow_fp16`` is False (inference casts the weights, and offers no
    fp16). ``fp32``, ``bf16`` and ``fp16`` mean themselves; bf16 on a CPU
    that only emulates it is kept (the caller warns:
    :func:`warn_if_bf16_emulated`), fp16 off CUDA is a :class:`ConfigError`.
    ``setting`` names the option in error messages.
    """
    formats = NUMBER_FORMATS if allow_fp16 else tuple(f for f in NUMBER_FORMATS if f != "fp16")
    if requested != "auto" and requested not in formats:
        raise ConfigError(f"{setting}: {requested!r} is not one of {('auto', *formats)}")
    if requested == "fp16" and device.type != "cuda":
        raise ConfigError(f"{setting} fp16 needs a CUDA device (use auto or bf16 on CPU)")
    if requested != "auto":
        reason = "set explicitly"
        if requested == "bf16" and device.type == "cpu" and not native_cpu_bf16():
            reason += "; emulated on this CPU without native bf16"
        return ResolvedPrecision(requested, requested, reason)
    if device.type == "cuda":
        import torch

        if torch.cuda.is_bf16_supported():
            return ResolvedPrecision(requested, "bf16", "GPU with bf16")
        return ResolvedPrecision(requested, "fp16" if allow_fp16 else "fp32", "GPU without bf16")
    if device.type == "cpu":
        if native_cpu_bf16():
            return ResolvedPrecision(requested, "bf16", "native bf16 on this CPU")
        return ResolvedPrecision(requested, "fp32", "CPU without native bf16")
    return ResolvedPrecision(requested, "fp32", f"no bf16 rule for {device.type} devices")


SEED_MAX = 2**32 - 1
"""The largest seed: every generator a stage seeds (NumPy's legacy one included) takes 0..2^32-1."""


def check_seed(seed: object, where: str) -> int:
    """``seed`` if it is an integer in 0..:data:`SEED_MAX`, else a ConfigError naming ``where``
    (the config schema's ``seed`` bounds every seed key the same way)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"{where}: a seed must be an integer from 0 to {SEED_MAX}, got {seed!r}")
    return seed


def set_seed(seed: int) -> None:
    """Seed every random number generator a stage draws from: Python's, NumPy's and torch's."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
