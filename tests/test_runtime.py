"""Runtime setup: the shared --threads/--device/--no-progress arguments, threads, device, seeds."""

from __future__ import annotations

import argparse
import random

import numpy as np
import pytest
import torch

from synthdeid import runtime
from synthdeid.errors import ConfigError
from synthdeid.runtime import add_runtime_arguments, pick_device, set_seed, set_threads


def parser_with(**options: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_runtime_arguments(parser, **options)  # type: ignore[arg-type]
    return parser


def test_all_three_arguments_by_default() -> None:
    args = parser_with().parse_args([])
    assert (args.threads, args.device, args.no_progress) == (None, "auto", False)
    args = parser_with().parse_args(["--threads", "2", "--device", "cpu", "--no-progress"])
    assert (args.threads, args.device, args.no_progress) == (2, "cpu", True)


def test_arguments_left_out_are_not_accepted() -> None:
    parser = parser_with(threads=False, device=False)
    assert vars(parser.parse_args([])) == {"no_progress": False}
    with pytest.raises(SystemExit):
        parser.parse_args(["--threads", "2"])
    assert "device" not in vars(parser_with(device=False).parse_args([]))
    assert "no_progress" not in vars(parser_with(progress=False).parse_args([]))


def test_stage_defaults_and_help() -> None:
    parser = parser_with(device_default="cpu", device_help="where", threads_help="how many")
    assert parser.parse_args([]).device == "cpu"
    actions = {a.dest: a for a in parser._actions}
    assert (actions["device"].help, actions["threads"].help) == ("where", "how many")


def test_threads_must_be_positive_unless_zero_means_default() -> None:
    with pytest.raises(SystemExit):
        parser_with().parse_args(["--threads", "0"])
    zero = parser_with(zero_threads=True)
    assert zero.parse_args([]).threads == 0
    assert zero.parse_args(["--threads", "0"]).threads == 0
    with pytest.raises(SystemExit):
        zero.parse_args(["--threads", "-1"])


@pytest.mark.usefixtures("one_torch_thread")
def test_set_threads_none_and_zero_keep_the_setting() -> None:
    set_threads(None)
    set_threads(0)
    assert torch.get_num_threads() == 1
    set_threads(2)
    assert torch.get_num_threads() == 2


def test_pick_device() -> None:
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("meta") == torch.device("meta")  # any device torch knows
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device("auto").type == expected
    assert pick_device().type == expected


@pytest.mark.parametrize("name", ["tpu", "", "cuda:x", "gpu0"])
def test_pick_device_refuses_names_torch_does_not_know(name: str) -> None:
    with pytest.raises(ConfigError, match="device must be auto or a torch device"):
        pick_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_pick_device_refuses_cuda_without_a_gpu() -> None:
    with pytest.raises(ConfigError, match="no CUDA device is visible"):
        pick_device("cuda:0")


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.random()), float(torch.rand(1))


def test_set_seed_makes_every_generator_repeat() -> None:
    set_seed(7)
    first = draws()
    set_seed(7)
    assert draws() == first
    set_seed(8)
    assert draws() != first


def test_set_seed_takes_seeds_beyond_numpy_range() -> None:
    set_seed(2**32 + 5)
    high = draws()
    set_seed(5)
    assert draws()[1] == high[1]  # numpy's seed is taken modulo 2**32


def test_auto_is_the_gpu_when_one_is_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == torch.device("cpu")


@pytest.mark.parametrize(("native", "warned"), [(False, True), (True, False)])
def test_bf16_on_a_cpu_that_emulates_it_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, native: bool, warned: bool
) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: native)
    with caplog.at_level("WARNING", logger="synthdeid.runtime"):
        assert runtime.warn_if_bf16_emulated(torch.device("cpu"), "train-ner") is warned
    messages = [r.getMessage() for r in caplog.records]
    if warned:
        assert messages == [
            "train-ner: bf16 asked for, but this CPU has no native bf16 (AVX512-BF16 or AMX); "
            "it is emulated and many times slower than fp32 here: use fp32 on this machine"
        ]
    else:
        assert messages == []


def test_bf16_on_a_gpu_is_never_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "native_cpu_bf16", lambda: False)
    assert runtime.warn_if_bf16_emulated(torch.device("cuda"), "tapt") is False


def test_the_native_bf16_probe_answers_on_this_cpu() -> None:
    assert runtime.native_cpu_bf16() in (True, False)
