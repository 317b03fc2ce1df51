"""The torch device a step runs on."""

from __future__ import annotations

import pytest
import torch

from synthdeid.devices import pick_device
from synthdeid.errors import ConfigError


def test_auto_is_the_gpu_when_one_is_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == torch.device("cpu")


def test_a_named_device_is_taken_as_given() -> None:
    assert pick_device("cpu") == torch.device("cpu")


def test_cuda_without_a_visible_gpu_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="'cuda:1' requested but no CUDA device is visible"):
        pick_device("cuda:1")
