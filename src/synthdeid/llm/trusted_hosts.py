"""The trusted-host allowlist of LLM endpoints: data leaves only for listed hosts.

Unlike the template regime, whose requests carry masked text checked by the
request guard, a teacher must read the raw note, real PHI included; the
tabular verbalizer and judge send a synthesizer's rows, which a non-DP
synthesizer may have copied from real records (:mod:`synthdeid.tabular.endpoint`).
So the endpoint itself is the safeguard: ``base_url``'s host must be on the
configured allowlist, checked when the backend is built, before any request
exists. An entry is

* a host name (``localhost``, ``gpu-node-07``), matched case-insensitively;
* an IP address (``127.0.0.1``, ``::1``), matched as an address (so
  ``::0001`` is ``::1``, and ``::ffff:127.0.0.1`` is ``127.0.0.1``);
* an IP network (``10.20.0.0/16``: a cluster subnet), with a prefix length
  or a netmask (``10.20.0.0/255.255.0.0``);
* ``*.`` and a domain of at least two labels (``*.hpc.example.org``): any
  host under that domain, not the domain itself.

Every spelling of a network is parsed before it is judged (netmasks,
leading zeros as in ``/08``, IPv6 zero forms as in ``0::/0``, IPv4-mapped
IPv6 networks as their IPv4 network), so no spelling slips past the
checks. A network wider than /8 (IPv4) or /32 (IPv6) is refused unless the
settings set ``allow_wide_networks: true``; a network of every address
(``/0``), a bare ``*`` and a ``*.`` pattern over a single label (``*.com``)
trust the internet and are always refused, as is an empty allowlist
(nothing could be sent).

Names are compared as written, never resolved: a DNS answer can change
between the check and the request, and a name that happens to resolve to a
trusted address is not thereby trusted. For the same reason an endpoint is
on this machine (:func:`is_loopback_host`) only when its host is written as
``localhost`` or a loopback address. A name whose last label is all digits
(``010.0.0.1``) is taken for a mistyped address and refused; an IP address
never matches a ``*.`` pattern. Nothing here sends a request.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from synthdeid.errors import ConfigError

LOOPBACK: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
# the widest network accepted without allow_wide_networks, by IP version
MIN_PREFIX: dict[int, int] = {4: 8, 6: 32}
# a *. pattern needs a domain of at least this many labels (*.example.org, not *.org)
MIN_WILDCARD_LABELS = 2
_HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def as_network(entry: str) -> IpNetwork | None:
    """The IP network (or single address) ``entry`` spells, normalised; None if it is none.

    Prefix lengths with leading zeros, netmasks and host masks, and every
    IPv6 zero form are read by :mod:`ipaddress`; an IPv4-mapped IPv6 network
    (``::ffff:10.0.0.0/104``) becomes the IPv4 network it maps
    (``10.0.0.0/8``), the addresses it reaches.
    """
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_IPV4_MAPPED):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None
        return ipaddress.IPv4Network(f"{mapped}/{network.prefixlen - 96}", strict=False)
    return network


def _spelled(network: IpNetwork) -> str:
    """A network's normal spelling: a single address bare, a wider network with its prefix."""
    if network.num_addresses == 1:
        return str(network.network_address)
    return str(network)


def check_allowlist(
    entries: Sequence[str], where: str, *, allow_wide_networks: bool = False
) -> list[str]:
    """The allowlist entries, normalized; ConfigError for a bad or too wide one.

    Host names and ``*.`` patterns come back lower case, addresses and
    networks in their normal spelling (``0::1`` is ``::1``,
    ``10.0.0.0/255.0.0.0`` is ``10.0.0.0/8``).
    """
    if isinstance(entries, str) or not isinstance(entries, Sequence):
        raise ConfigError(f"{where} must be a list of host names, addresses or networks")
    if not entries:
        raise ConfigError(
            f"{where} is empty, so no endpoint may receive raw notes; list the trusted hosts "
            f"(for a server on this machine: {list(LOOPBACK)})"
        )
    return [_checked_entry(raw, where, allow_wide_networks) for raw in entries]


def _checked_entry(raw: object, where: str, allow_wide_networks: bool) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{where}: entry {raw!r} is not a host name")
    entry = raw.strip().lower()
    network = as_network(entry)
    if network is not None:
        return _checked_network(network, raw, where, allow_wide_networks)
    if entry in ("*", "*."):
        raise ConfigError(f"{where}: {raw!r} would trust every host; list the hosts")
    wildcard = entry.startswith("*.")
    name = entry[2:] if wildcard else entry
    if not _HOST_NAME.match(name):
        raise ConfigError(
            f"{where}: {raw!r} is neither a host name, an IP address, a CIDR network nor '*.domain'"
        )
    if name.rsplit(".", 1)[-1].isdigit():
        raise ConfigError(
            f"{where}: {raw!r} is not a valid IP address, and a host name's last label "
            "is never all digits; write the address in its usual form (127.0.0.1)"
        )
    if wildcard and len(name.split(".")) < MIN_WILDCARD_LABELS:
        raise ConfigError(
            f"{where}: {raw!r} would trust every host under a top-level domain; "
            "name a domain of at least two labels (*.hpc.example.org)"
        )
    return entry


def _checked_network(network: IpNetwork, raw: str, where: str, allow_wide_networks: bool) -> str:
    minimum = MIN_PREFIX[network.version]
    if network.prefixlen == 0:
        raise ConfigError(
            f"{where}: {raw!r} is every IPv{network.version} address (/0) and would trust "
            "every host; list the hosts or networks"
        )
    if network.prefixlen < minimum and not allow_wide_networks:
        raise ConfigError(
            f"{where}: {raw!r} is the network {network}, wider than "
            f"/{minimum} for IPv{network.version}, so it would trust hosts far beyond a "
            "cluster; list a narrower network, or set allow_wide_networks: true beside "
            "trusted_hosts if this range really is trusted"
        )
    return _spelled(network)


def host_is_trusted(host: str, allowlist: Sequence[str]) -> bool:
    """Whether ``host`` (a URL's host name) matches an entry of a checked allowlist."""
    host = host.strip().lower().strip("[]")
    network = as_network(host) if host else None
    address = network[0] if network is not None and network.num_addresses == 1 else None
    for entry in allowlist:
        if entry.startswith("*."):
            # an address never matches a name pattern, however it is written
            if address is None and host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
            continue
        trusted = as_network(entry)
        if trusted is not None:
            if address is not None and address.version == trusted.version and address in trusted:
                return True
            continue
        if address is None and host == entry:
            return True
    return False


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's host name) is this machine as written: ``localhost`` or a
    loopback address (127.0.0.0/8, ``::1``, their IPv4-mapped forms); never resolved."""
    host = host.strip().lower().strip("[]")
    if host == "localhost":
        return True
    network = as_network(host) if host else None
    return network is not None and network.num_addresses == 1 and network[0].is_loopback


def check_trusted_endpoint(
    base_url: object,
    allowlist: Sequence[str],
    where: str,
    *,
    allow_wide_networks: bool = False,
    sends: str = "the teacher sends raw notes (real PHI)",
    backend_key: str = "backend",
) -> str:
    """``base_url`` unchanged when its host is trusted; otherwise a ConfigError saying why.

    ``sends`` says in the refusal what would have gone there; ``backend_key``
    names the backend's key under ``where``.
    """
    entries = check_allowlist(
        allowlist, f"{where}.trusted_hosts", allow_wide_networks=allow_wide_networks
    )
    if not isinstance(base_url, str):
        raise ConfigError(f"{where}.{backend_key}.base_url must be a URL string, not {base_url!r}")
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(
            f"{where}.{backend_key}.base_url must be an http(s) URL such as "
            f"http://127.0.0.1:8000/v1, not {base_url!r}"
        )
    if not host_is_trusted(host, entries):
        raise ConfigError(
            f"{where}: refusing endpoint host {host!r}: {sends} "
            f"and {host!r} is not in {where}.trusted_hosts {entries}; run the model on a host "
            "your data governance allows and list it there"
        )
    return base_url
