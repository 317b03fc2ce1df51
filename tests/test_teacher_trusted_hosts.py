"""The LLM teacher's trusted-host allowlist and the silver overlap policy."""

from __future__ import annotations

import re

import pytest

from synthdeid.errors import ConfigError
from synthdeid.llm.trusted_hosts import (
    LOOPBACK,
    check_allowlist,
    check_trusted_endpoint,
    host_is_trusted,
)
from synthdeid.teacher.silver import (
    ScoredSpan,
    Thresholds,
    apply_thresholds,
    resolve_overlaps,
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


@pytest.mark.parametrize(
    "entry",
    [
        "0.0.0.0/0",
        "0.0.0.0/0.0.0.0",  # a netmask of nothing
        "0.0.0.0/00",  # a prefix with a leading zero
        "0.0.0.0/000",
        "::/0",
        "::0/0",
        "0::/0",
        "0:0:0:0:0:0:0:0/0",
        "::/00",
        "::ffff:0.0.0.0/96",  # every IPv4 address, mapped into IPv6
    ],
)
def test_every_spelling_of_all_addresses_is_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="would trust every host"):
        check_allowlist([entry], "teacher.trusted_hosts")
    with pytest.raises(ConfigError, match="would trust every host"):  # even with the opt-in
        check_allowlist([entry], "teacher.trusted_hosts", allow_wide_networks=True)


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("10.0.0.0/7", "10.0.0.0/7"),
        ("10.0.0.0/07", "10.0.0.0/7"),
        ("1.0.0.0/1", "0.0.0.0/1"),
        ("128.0.0.0/128.0.0.0", "128.0.0.0/1"),  # netmask spelling
        ("10.0.0.0/254.0.0.0", "10.0.0.0/7"),
        ("2000::/3", "2000::/3"),
        ("2001:db8::/31", "2001:db8::/31"),
        ("2001:0db8:0000::/031", "2001:db8::/31"),
        ("::/1", "::/1"),
        ("::ffff:10.0.0.0/103", "10.0.0.0/7"),  # IPv4-mapped: judged as the IPv4 network
    ],
)
def test_wide_networks_need_the_opt_in(entry: str, normalized: str) -> None:
    with pytest.raises(ConfigError, match="allow_wide_networks"):
        check_allowlist([entry], "teacher.trusted_hosts")
    assert check_allowlist([entry], "t", allow_wide_networks=True) == [normalized]


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.0.0.0/08", "10.0.0.0/8"),
        ("10.0.0.0/255.0.0.0", "10.0.0.0/8"),
        ("10.0.0.0/0.255.255.255", "10.0.0.0/8"),  # a host mask
        ("10.20.0.0/255.255.0.0", "10.20.0.0/16"),
        ("2001:db8::/32", "2001:db8::/32"),
        ("2001:DB8:0::/032", "2001:db8::/32"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("*.hpc.example.org", "*.hpc.example.org"),
        ("*.Example.ORG", "*.example.org"),
    ],
)
def test_narrow_entries_are_normalized(entry: str, normalized: str) -> None:
    assert check_allowlist([entry], "t") == [normalized]


@pytest.mark.parametrize("entry", ["*.com", "*.org", "*.COM", "*.localhost", "*.1.2.3"])
def test_wildcards_over_one_label_are_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"top-level domain|last label"):
        check_allowlist([entry], "teacher.trusted_hosts", allow_wide_networks=True)


@pytest.mark.parametrize("entry", ["010.0.0.1", "127.1", "10.0.0.256", "1.2.3.4.5"])
def test_mistyped_addresses_are_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="not a valid IP address"):
        check_allowlist([entry], "teacher.trusted_hosts")


@pytest.mark.parametrize(
    ("host", "allowlist", "trusted"),
    [
        ("::ffff:127.0.0.1", ["127.0.0.1"], True),  # the same IPv4 address, mapped
        ("::ffff:10.20.3.4", ["10.20.0.0/16"], True),
        ("::ffff:8.8.8.8", ["::/32"], False),  # an IPv6 network reaches no IPv4 host
        ("::ffff:8.8.8.8", ["10.0.0.0/8"], False),
        ("10.1.2.3", ["10.0.0.0/255.0.0.0"], True),
        ("11.1.2.3", ["10.0.0.0/255.0.0.0"], False),
        ("4.1.2.3", ["*.example.org"], False),
        ("10.1.2.3", ["*.hpc.example.org"], False),  # an address never matches a name
    ],
)
def test_hosts_match_normalized_entries(host: str, allowlist: list[str], trusted: bool) -> None:
    entries = check_allowlist(allowlist, "t", allow_wide_networks=True)
    assert host_is_trusted(host, entries) is trusted


def test_the_teacher_opts_in_to_wide_networks() -> None:
    from synthdeid.teacher.teachers import build_llm_teacher

    settings = {
        "backend": {"kind": "openai", "base_url": "http://10.1.2.3:8000/v1", "model": "m"},
        "trusted_hosts": ["10.0.0.0/07"],
    }
    with pytest.raises(ConfigError, match="allow_wide_networks"):
        build_llm_teacher("llm", settings, cache_dir=None, where="teacher.teachers[llm]")
    teacher = build_llm_teacher(
        "llm", {**settings, "allow_wide_networks": True}, cache_dir=None, where="t"
    )
    assert teacher.backend.describe()["base_url"] == "http://10.1.2.3:8000/v1"
    with pytest.raises(ConfigError, match="true or false"):
        build_llm_teacher(
            "llm", {**settings, "allow_wide_networks": "yes"}, cache_dir=None, where="t"
        )


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
