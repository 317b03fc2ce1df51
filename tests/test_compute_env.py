"""The machine a model trained on, as its training history records it."""

from __future__ import annotations

import platform

import pytest
import torch

from synthdeid.compute_env import cpu_identity, describe_machine

TWO_PROCESSORS = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu avx2 avx512f

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel Xeon
"""


def test_cpu_identity_names_the_first_processor_with_family_and_model() -> None:
    assert cpu_identity(TWO_PROCESSORS) == "AMD EPYC (family 25, model 17)"


def test_cpu_identity_without_family_is_the_model_name() -> None:
    assert cpu_identity("processor\t: 0\nmodel name\t: Some CPU\n") == "Some CPU"


@pytest.mark.parametrize(("processor", "expected"), [("aarch64", "aarch64"), ("", None)])
def test_cpu_identity_falls_back_when_linux_names_no_model(
    monkeypatch: pytest.MonkeyPatch, processor: str, expected: str | None
) -> None:
    # an ARM /proc/cpuinfo has no "model name": the platform's answer, or None (never "")
    monkeypatch.setattr(platform, "processor", lambda: processor)
    assert cpu_identity("processor\t: 0\nBogoMIPS\t: 50.00\n") == expected


def test_describe_machine_records_the_code_cpu_and_device_without_the_host() -> None:
    machine = describe_machine(torch.device("cpu"))
    assert set(machine) == {
        "code_version",
        "code_digest",
        "python",
        "torch",
        "cpu",
        "cpu_capability",
        "cpu_native_bf16",
        "cpu_count",
        "threads",
        "device",
        "device_name",
    }
    assert machine["device"] == "cpu" and machine["device_name"] is None
    assert machine["torch"] == torch.__version__
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(machine["cpu_native_bf16"], bool)
    assert machine["code_version"].startswith("0.")
    assert machine["code_digest"] is None  # outside a CLI stage
