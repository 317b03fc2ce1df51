"""The torch device a step runs on, from its ``--device`` setting."""

from __future__ import annotations

import torch

from synthdeid.errors import ConfigError


def pick_device(requested: str = "auto") -> torch.device:
    """``auto``: the GPU when one is visible, else the CPU; any other name as given
    (a ``cuda`` device without a visible GPU is a ConfigError)."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {requested!r} requested but no CUDA device is visible")
    return torch.device(requested)
