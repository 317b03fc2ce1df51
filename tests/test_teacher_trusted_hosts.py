"""The LLM teacher's trusted-host allowlist and the silver overlap policy."""

from __future__ import annotations

import re

import pytest

from synthdeid.errors import ConfigError
from synthdeid.teacher.silver import (
    ScoredSpan,
    Thresholds,
    apply_thresholds,
    resolve_overlaps,
)
from synthdeid.teacher.trusted_hosts import (
    LOOPBACK,
    check_allowlist,
    check_trusted_endpoint,
    host_is_trusted,
)


@pytest.mark.parametrize(
    ("host", "allowlist", "trusted"),
    [
        ("127.0.0.1", LOOPBACK, True),
        ("localhost", LOOPBACK, True),
        ("::1", LOOPBACK, True),
        ("0:0:0:0:0:0:0:1", ["::1"], True),  # the same address written out
        ("LOCALHOST", ["localhost"], True),
        ("127.0.0.2", ["127.0.0.1"], False),
        ("10.20.3.4", ["10.20.0.0/16"], True),
        ("10.21.3.4", ["10.20.0.0/16"], False),
        ("gpu-node-07", ["gpu-node-07"], True),
        ("gpu-node-08", ["gpu-node-07"], False),
        ("n1.hpc.example.org", ["*.hpc.example.org"], True),
        ("hpc.example.org", ["*.hpc.example.org"], False),  # the domain itself is not under it
        ("evilhpc.example.org", ["*.hpc.example.org"], False),
        ("hpc.example.org.evil.com", ["*.hpc.example.org"], False),
        ("api.openai.com", LOOPBACK, False),
        ("127.0.0.1", ["::1"], False),  # an IPv4 address is not in an IPv6 network
        ("localhost", ["127.0.0.1"], False),  # names are never resolved
    ],
)
def test_host_matching(host: str, allowlist: list[str], trusted: bool) -> None:
    assert host_is_trusted(host, check_allowlist(list(allowlist), "t")) is trusted


@pytest.mark.parametrize("entries", [[], ["*"], ["0.0.0.0/0"], ["::/0"], ["bad host"], [""], "x"])
def test_unusable_allowlists_are_refused(entries: object) -> None:
    with pytest.raises(ConfigError):
        check_allowlist(entries, "teacher.trusted_hosts")  # type: ignore[arg-type]


def test_endpoint_check_names_the_host_and_the_list() -> None:
    url = "http://127.0.0.1:8000/v1"
    assert check_trusted_endpoint(url, ["127.0.0.1"], "teacher") == url
    assert check_trusted_endpoint("http://[::1]:8000/v1", ["::1"], "teacher")
    with pytest.raises(ConfigError, match=re.escape("refusing endpoint host 'api.example.com'")):
        check_trusted_endpoint("https://api.example.com/v1", ["127.0.0.1"], "teacher")
    # credentials in the URL do not change the host that is checked
    with pytest.raises(ConfigError, match=re.escape("'evil.com'")):
        check_trusted_endpoint("http://127.0.0.1@evil.com/v1", ["127.0.0.1"], "teacher")
    with pytest.raises(ConfigError, match="http\\(s\\) URL"):
        check_trusted_endpoint("ftp://127.0.0.1/v1", ["127.0.0.1"], "teacher")


def test_overlap_policy() -> None:
    spans = [
        ScoredSpan(0, 5, "PATIENT", 0.6),
        ScoredSpan(0, 5, "PATIENT", 0.9),  # identical: one span, highest confidence
        ScoredSpan(3, 9, "DOCTOR", 0.8),  # overlaps the patient, lower confidence: dropped
        ScoredSpan(10, 14, "DATE", None),  # no confidence counts as 1.0
        ScoredSpan(12, 20, "ID", 0.99),  # loses to the date
        ScoredSpan(30, 35, "DATE", 0.5),
        ScoredSpan(30, 38, "HOSPITAL", 0.5),  # same confidence: the longer wins
    ]
    kept, dropped = resolve_overlaps(spans)
    assert kept == [
        ScoredSpan(0, 5, "PATIENT", 0.9),
        ScoredSpan(10, 14, "DATE", None),
        ScoredSpan(30, 38, "HOSPITAL", 0.5),
    ]
    assert dropped == 3


def test_thresholds_per_label() -> None:
    thresholds = Thresholds.from_mapping({"default": 0.5, "DATE": 0.9})
    spans = [
        ScoredSpan(0, 1, "DATE", 0.8),
        ScoredSpan(2, 3, "NAME", 0.6),
        ScoredSpan(4, 5, "ID", None),
        ScoredSpan(6, 7, "ID", 0.4),
    ]
    kept, below = apply_thresholds(spans, thresholds)
    assert kept == [ScoredSpan(2, 3, "NAME", 0.6), ScoredSpan(4, 5, "ID", None)]
    assert below == 2
    with pytest.raises(ConfigError):
        Thresholds.from_mapping({"DATE": 1.5})
