"""Where the tabular verbalizer and judge may send synthetic rows, and what passes.

``verbalize-tabular`` sends a synthesizer's rows to an LLM backend, and
``check-faithfulness`` sends the reports with the rows they state. Rows of a
non-DP synthesizer (``ctgan``, ``gaussian_copula``) may reproduce real
records, so both follow the teacher's endpoint policy
(:mod:`synthdeid.llm.trusted_hosts`) and the template regime's request
guard (:mod:`synthdeid.llm.guard`):

* an HTTP endpoint's host must be on ``trusted_hosts`` (default: this
  machine only; networks wider than /8 or /32 need ``allow_wide_networks``),
  checked before the backend exists; proxies from the environment are not
  used;
* rows go to an endpoint that is not this machine (a host not written as
  ``localhost`` or a loopback address) only when the rows' provenance records
  a differentially private synthesizer
  (:func:`~synthdeid.tabular.synthesizers.rows_synthesizer`), unless
  ``allow_non_dp_rows: true`` says non-DP (or unrecorded) rows may go;
* every request passes the request guard first: one holding an
  identifier-like string (a date, phone number, record number, e-mail
  address, URL or name) is refused and never sent.

Every refusal of the endpoint comes before any connection.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from synthdeid.errors import ConfigError, InputError
from synthdeid.identifiers import IdentifierScanner
from synthdeid.llm.base import ChatBackend
from synthdeid.llm.factory import build_backend
from synthdeid.llm.guard import GuardedBackend, RequestGuard
from synthdeid.llm.trusted_hosts import LOOPBACK, check_trusted_endpoint, is_loopback_host
from synthdeid.settings import settings_from_mapping
from synthdeid.tabular.synthesizers import rows_synthesizer

log = logging.getLogger(__name__)

ALLOW_NON_DP_ROWS = "allow_non_dp_rows"


@dataclass(frozen=True)
class EndpointPolicy:
    """Where rows may go: the trusted hosts, and the two explicit opt-ins."""

    trusted_hosts: list[str] = field(default_factory=lambda: list(LOOPBACK))
    allow_wide_networks: bool = False
    allow_non_dp_rows: bool = False


POLICY_KEYS: tuple[str, ...] = tuple(f.name for f in fields(EndpointPolicy))


def endpoint_policy(settings: Mapping[str, Any], where: str) -> EndpointPolicy:
    """The :class:`EndpointPolicy` of ``settings`` (only its keys; ConfigError for a bad one)."""
    policy = settings_from_mapping(EndpointPolicy, settings, where)
    for name in ("allow_wide_networks", ALLOW_NON_DP_ROWS):
        value = getattr(policy, name)
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{name} must be true or false, not {value!r}")
    return policy


def split_policy(settings: Mapping[str, Any], where: str) -> tuple[EndpointPolicy, dict[str, Any]]:
    """A stage's settings cut in two: the endpoint policy, and every other key."""
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(settings).__name__}")
    policy = endpoint_policy({k: v for k, v in settings.items() if k in POLICY_KEYS}, where)
    return policy, {k: v for k, v in settings.items() if k not in POLICY_KEYS}


def check_endpoint(
    backend: Mapping[str, Any],
    policy: EndpointPolicy,
    rows: Path,
    provenance: Mapping[str, Any],
    where: str,
    backend_key: str = "backend",
) -> None:
    """Refuse an HTTP ``backend`` the rows of ``rows`` (with ``provenance``) may not reach.

    ``where`` names the settings section, ``backend_key`` the backend's key in
    it. Other backends (``none``, local ``transformers``) keep everything on
    this machine and pass. Raises ConfigError for an untrusted host, InputError
    naming ``rows`` for non-DP rows bound off the machine.
    """
    if not isinstance(backend, Mapping) or backend.get("kind") != "openai":
        return
    base_url = check_trusted_endpoint(
        backend.get("base_url"),
        policy.trusted_hosts,
        where,
        allow_wide_networks=policy.allow_wide_networks,
        sends=f"{where} sends synthetic rows",
        backend_key=backend_key,
    )
    host = urlsplit(base_url).hostname or ""
    if is_loopback_host(host):
        return
    synthesizer = rows_synthesizer(provenance)
    if synthesizer is not None and synthesizer.dp:
        return
    what = (
        "records no known synthesizer"
        if synthesizer is None
        else f"holds rows of {synthesizer.name}, which is not differentially private"
    )
    if policy.allow_non_dp_rows:
        log.warning("%s %s; sent to %s as %s.%s allows", rows, what, host, where, ALLOW_NON_DP_ROWS)
        return
    raise InputError(
        rows,
        None,
        f"{what}, and {where} would send them to {host!r}, which is not this machine",
        f"use a DP synthesizer's rows, a server on this machine, or set "
        f"{where}.{ALLOW_NON_DP_ROWS}: true",
    )


def guarded_backend(
    backend: Mapping[str, Any],
    policy: EndpointPolicy,
    rows: Path,
    provenance: Mapping[str, Any],
    *,
    placeholders: Collection[str],
    cache_dir: str | Path | None,
    where: str,
    backend_key: str = "backend",
) -> ChatBackend | None:
    """The backend ``backend`` describes (None for ``none``) once :func:`check_endpoint`
    passes, without proxies from the environment, behind the request guard
    (identifier-like strings; the ``placeholders`` blanked)."""
    check_endpoint(backend, policy, rows, provenance, where, backend_key)
    built = build_backend(backend, cache_dir=cache_dir, where=f"{where}.{backend_key}")
    if built is None:
        return None
    if hasattr(built, "use_env_proxies"):
        built.use_env_proxies = False
    guard = RequestGuard([], IdentifierScanner(), placeholders=placeholders)
    return GuardedBackend(built, guard)
