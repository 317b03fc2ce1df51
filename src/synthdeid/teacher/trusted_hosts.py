"""The trusted-host allowlist of the LLM teacher: raw notes go to listed hosts only.

Unlike the template regime, whose requests carry masked text checked by the
request guard, a teacher must read the raw note, real PHI included. So the
endpoint itself is the safeguard: ``base_url``'s host must be on the
configured allowlist, checked when the teacher is built, before any request
exists. An entry is

* a host name (``localhost``, ``gpu-node-07``), matched case-insensitively;
* an IP address (``127.0.0.1``, ``::1``), matched as an address (so
  ``::0001`` is ``::1``);
* an IP network in CIDR notation (``10.20.0.0/16``: a cluster subnet);
* ``*.`` and a domain (``*.hpc.example.org``): any host under that domain,
  not the domain itself.

Names are compared as written, never resolved: a DNS answer can change
between the check and the request, and a name that happens to resolve to a
trusted address is not thereby trusted. A bare ``*`` would trust every host
and is refused, as is an empty allowlist (nothing could be sent). Nothing
here sends a request.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from synthdeid.errors import ConfigError

LOOPBACK: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
_HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _as_network(entry: str) -> IpNetwork | None:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None


def check_allowlist(entries: Sequence[str], where: str) -> list[str]:
    """The allowlist entries, normalized (lower case, stripped); ConfigError for a bad one."""
    if isinstance(entries, str) or not isinstance(entries, Sequence):
        raise ConfigError(f"{where} must be a list of host names, addresses or networks")
    if not entries:
        raise ConfigError(
            f"{where} is empty, so no endpoint may receive raw notes; list the trusted hosts "
            f"(for a server on this machine: {list(LOOPBACK)})"
        )
    normalized: list[str] = []
    for raw in entries:
        if not isinstance(raw, str) or not raw.strip():
            raise ConfigError(f"{where}: entry {raw!r} is not a host name")
        entry = raw.strip().lower()
        if entry in ("*", "*.", "0.0.0.0/0", "::/0"):
            raise ConfigError(f"{where}: {raw!r} would trust every host; list the hosts")
        name = entry[2:] if entry.startswith("*.") else entry
        if _as_network(entry) is None and not _HOST_NAME.match(name):
            raise ConfigError(
                f"{where}: {raw!r} is neither a host name, an IP address, a CIDR network "
                "nor '*.domain'"
            )
        normalized.append(entry)
    return normalized


def host_is_trusted(host: str, allowlist: Sequence[str]) -> bool:
    """Whether ``host`` (a URL's host name, lower case) matches an allowlist entry."""
    host = host.strip().lower().strip("[]")
    address = _as_network(host) if host else None
    for entry in allowlist:
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
            continue
        network = _as_network(entry)
        if network is not None:
            single = address is not None and address.num_addresses == 1
            if single and address.version == network.version and address[0] in network:
                return True
            continue
        if host == entry:
            return True
    return False


def check_trusted_endpoint(base_url: object, allowlist: Sequence[str], where: str) -> str:
    """``base_url`` unchanged when its host is trusted; otherwise a ConfigError saying why."""
    entries = check_allowlist(allowlist, f"{where}.trusted_hosts")
    if not isinstance(base_url, str):
        raise ConfigError(f"{where}.backend.base_url must be a URL string, not {base_url!r}")
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(
            f"{where}.backend.base_url must be an http(s) URL such as "
            f"http://127.0.0.1:8000/v1, not {base_url!r}"
        )
    if not host_is_trusted(host, entries):
        raise ConfigError(
            f"{where}: refusing endpoint host {host!r}: the teacher sends raw notes (real PHI) "
            f"and {host!r} is not in {where}.trusted_hosts {entries}; run the model on a host "
            "your data governance allows and list it there"
        )
    return base_url
