"""What made each final artifact: its step, the code that step ran, its parameters.

Every artifact records its provenance (:func:`synthdeid.artifacts.make_provenance`):
the step, its parameters, the package version, the digest of the code the step
ran (:mod:`synthdeid.code_identity`) and the digest of each input. A Parquet
artifact keeps it in its key-value metadata, a JSON artifact under the
top-level key ``provenance`` (or ``summary.provenance``). This module reads it
back for a list of artifacts and lays it out as one table, so a reviewer sees
in the report which code made which result; it never reads an artifact's rows.
An artifact without provenance is listed with n/a, not left out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from synthdeid.artifacts import PROVENANCE_KEY
from synthdeid.errors import InputError
from synthdeid.reporting import NOT_AVAILABLE, markdown_table

SHORT = 12  # hex digits of a digest shown in the table


@dataclass(frozen=True)
class ProvenanceRow:
    """One artifact and what made it (None where it records nothing)."""

    artifact: str
    step: str | None
    code_version: str | None
    code_digest: str | None
    params_digest: str | None
    inputs: int | None


def read_provenance(path: str | Path) -> dict[str, Any] | None:
    """The provenance record of a Parquet or JSON artifact; None when it has none."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            metadata = pq.read_schema(path).metadata or {}
        except (OSError, ValueError) as error:
            raise InputError(
                path, None, f"not a readable Parquet file ({type(error).__name__})"
            ) from None
        raw = metadata.get(PROVENANCE_KEY)
        return dict(json.loads(raw)) if raw else None
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            raise InputError(path, None, "not a readable JSON file") from None
        if not isinstance(data, Mapping):
            return None
        for found in (data.get("provenance"), (data.get("summary") or {}).get("provenance")):
            if isinstance(found, Mapping) and "step" in found:
                return dict(found)
        return None
    return None


def params_digest(params: Any) -> str:
    """SHA-256 of the canonical JSON of a step's parameters."""
    canonical = json.dumps(params, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def provenance_rows(artifacts: Sequence[str | Path]) -> list[ProvenanceRow]:
    """One row per artifact, in the order given."""
    rows = []
    for artifact in artifacts:
        record = read_provenance(artifact)
        if record is None:
            rows.append(ProvenanceRow(str(artifact), None, None, None, None, None))
            continue
        inputs = record.get("inputs")
        rows.append(
            ProvenanceRow(
                artifact=str(artifact),
                step=str(record.get("step")),
                code_version=record.get("code_version"),
                code_digest=record.get("code_digest"),
                params_digest=params_digest(record.get("params", {})),
                inputs=len(inputs) if isinstance(inputs, Mapping) else None,
            )
        )
    return rows


def _short(digest: str | None) -> str:
    if not digest:
        return NOT_AVAILABLE
    return f"`{digest.split(':', 1)[-1][:SHORT]}`"


def provenance_markdown(rows: Sequence[ProvenanceRow]) -> str:
    """The table: artifact, step, package version, code and parameter digests, inputs."""
    recorded = sum(r.step is not None for r in rows)
    versions = sorted({r.code_version for r in rows if r.code_version})
    lines = [
        f"{len(rows)} final artifacts; {recorded} record their provenance"
        f" (package version {', '.join(versions) or NOT_AVAILABLE}). The code digest covers"
        " the modules the step's stage imports; a step whose code or parameters change"
        " reruns, with everything downstream of it.",
        "",
        *markdown_table(
            ["artifact", "step", "code digest", "parameters digest", "inputs"],
            [
                [
                    f"`{r.artifact}`",
                    r.step or NOT_AVAILABLE,
                    _short(r.code_digest),
                    _short(r.params_digest),
                    NOT_AVAILABLE if r.inputs is None else str(r.inputs),
                ]
                for r in rows
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def provenance_records(rows: Sequence[ProvenanceRow]) -> list[dict[str, Any]]:
    """The rows as JSON records (full digests)."""
    return [asdict(r) for r in rows]
