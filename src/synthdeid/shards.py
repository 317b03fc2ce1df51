"""Sharding a per-note step over row ranges of its input, and gathering the shards.

A step run with ``--shard K/N`` reads only its share of its input: rows
``[total * (K-1) // N, total * K // N)`` of the input table (or of the notes
the step selects from it), contiguous and balanced. It writes a
*shard artifact*: the rows it produced, with exactly the provenance the
unsharded step records and, beside it (:data:`SHARD_KEY` in the Parquet
metadata, a ``"shard"`` key in JSON), which shard it is and which input rows
it covered. The rows of a shard artifact are whatever the step writes for
those input rows: none, one or several per input row (a step that keeps some
notes, or writes one row per span), so the tiling checked is that of the input
rows, and the gathered artifact is the shards' rows concatenated.

:func:`gather_parquet` checks that the shards are one complete set (the same
provenance, shards 1..N each once, their row ranges tiling the input) and
streams their rows, in shard order, into the artifact one job would have
written. Rows in the same order through the same fixed-size row groups
(:func:`synthdeid.artifacts.parquet_writer`) give the same bytes, so a
deterministic step's gathered output is byte-equal to its unsharded output.
:func:`gather_json` merges the shards' JSON summaries (:func:`merge_summaries`):
counts add up, derived figures are recomputed by a rule (:data:`MERGE_RULES`).

Shard ``K`` of ``N`` of an artifact ``notes.parquet`` is ``notes.shard-K-of-N.parquet``
beside it (:func:`shard_path`); the workflow's sharded rules write there and
``synthdeid gather-shards --count N OUT`` finds them there.

Memory: one row group at a time; the gather reads each shard once.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import (
    PROVENANCE_KEY,
    iter_row_range,
    open_parquet,
    parquet_writer,
    reading_record,
    write_json_atomic,
)
from synthdeid.errors import ConfigError, InputError

SHARD_KEY = b"synthdeid.shard"
JSON_SHARD_KEY = "shard"
RATE_KEY = "notes_per_second"  # recomputed from the merged notes and seconds
_SHARD_TEXT = re.compile(r"^(?P<index>\d+)(?:/|-of-)(?P<count>\d+)$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``, its bounds on multiples of ``align`` rows.

    A step that works in chunks of rows (``predict-ner`` sorts each chunk's
    notes by length into batches) aligns its shards on its chunk size, so every
    chunk lies whole in one shard and is batched as one job batches it: the
    shards then compute exactly what one job computes, whatever the precision.
    """

    index: int
    count: int
    align: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise ConfigError(f"shard {self.index} of {self.count}: the index must lie in 1..count")
        if self.align < 1:
            raise ConfigError(f"shard alignment {self.align}: must be at least 1 row")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/3"`` or ``"2-of-3"`` (the workflow's wildcard) -> ``Shard(2, 3)``."""
        match = _SHARD_TEXT.match(text.strip())
        if match is None:
            raise ConfigError(f"shard {text!r}: expected K/N or K-of-N, e.g. 2/3")
        return cls(int(match["index"]), int(match["count"]))

    @property
    def label(self) -> str:
        return f"{self.index}-of-{self.count}"

    def rows(self, total: int) -> range:
        """This shard's rows of a table of ``total`` rows: contiguous, balanced in whole
        ``align``-row chunks (the last chunk may be short; a shard may get none)."""
        chunks = -(-total // self.align)
        start = chunks * (self.index - 1) // self.count * self.align
        stop = chunks * self.index // self.count * self.align
        return range(min(start, total), min(stop, total))

    def record(self, total: int) -> dict[str, Any]:
        """What a shard artifact records about itself."""
        rows = self.rows(total)
        return {
            "index": self.index,
            "count": self.count,
            "align": self.align,
            "rows": [rows.start, rows.stop],
            "input_rows": total,
        }

    def metadata(self, total: int) -> dict[bytes, bytes]:
        """The Parquet metadata entry of a shard artifact."""
        return {SHARD_KEY: json.dumps(self.record(total), sort_keys=True).encode()}


SHARD_INFIX = ".shard-"


def shard_path(path: str, label: str) -> str:
    """Where shard ``label`` of the artifact ``path`` lives: ``a/notes.shard-2-of-3.parquet``.

    ``label`` may be the workflow's wildcard ``{shard}``. The infix goes before
    the last suffix (after a file name without one).
    """
    folder, _, name = path.rpartition("/")
    stem, dot, suffix = name.rpartition(".")
    sharded = (
        f"{stem}{SHARD_INFIX}{label}.{suffix}" if dot and stem else f"{name}{SHARD_INFIX}{label}"
    )
    return f"{folder}/{sharded}" if folder else sharded


def shard_paths(path: Path, count: int) -> list[Path]:
    """The paths of the ``count`` shards of the artifact ``path``, in order."""
    return [shard_output(path, Shard(k, count)) for k in range(1, count + 1)]


def shard_argument(text: str) -> Shard:
    """argparse type of ``--shard``."""
    try:
        return Shard.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def shard_output(path: Path, shard: Shard | None) -> Path:
    """Where a step writes its artifact ``path``: there unsharded, else at its shard's path."""
    return path if shard is None else Path(shard_path(str(path), shard.label))


def unsharded_output(path: Path, shard: Shard | None) -> Path:
    """The artifact whose shard ``path`` is (:func:`shard_output` undone); ``path`` itself
    unsharded, or when it is not at a path of ``shard``."""
    if shard is None:
        return path
    infix = f"{SHARD_INFIX}{shard.label}"
    stem, dot, suffix = path.name.rpartition(".")
    if dot and stem.endswith(infix):
        return path.with_name(f"{stem.removesuffix(infix)}.{suffix}")
    return path.with_name(path.name.removesuffix(infix))


def shard_metadata(shard: Shard | None, total: int) -> dict[bytes, bytes]:
    """The Parquet metadata a step adds to its artifact: none unsharded, else its shard's."""
    return {} if shard is None else shard.metadata(total)


def shard_table_rows(shard: Shard | None, total: int) -> range:
    """The rows a step reads: all of them unsharded, else its shard's."""
    return range(total) if shard is None else shard.rows(total)


@dataclass(frozen=True)
class _Piece:
    path: Path
    record: dict[str, Any]
    provenance: Any


def _align(piece: _Piece) -> int:
    """The piece's shard alignment (1 where the record predates alignment)."""
    return int(piece.record.get("align", 1))


def _check_complete(pieces: Sequence[_Piece]) -> list[_Piece]:
    """The pieces in shard order; raise InputError unless they are one complete set."""
    if not pieces:
        raise ConfigError("gather: no shards given")
    first = pieces[0]
    count, total, align = first.record["count"], first.record["input_rows"], _align(first)
    seen: dict[int, Path] = {}
    for piece in pieces:
        index = piece.record["index"]
        if (piece.record["count"], piece.record["input_rows"], _align(piece)) != (
            count,
            total,
            align,
        ):
            raise InputError(
                piece.path,
                None,
                f"shard {index}-of-{piece.record['count']} over {piece.record['input_rows']} "
                f"input rows (aligned on {_align(piece)}) does not belong with {first.path} "
                f"(shard {first.record['index']}-of-{count} over {total} rows, "
                f"aligned on {align})",
            )
        if piece.provenance != first.provenance:
            raise InputError(
                piece.path,
                None,
                f"its provenance differs from that of {first.path}",
                "the shards come from different runs of the step; rerun them all",
            )
        if index in seen:
            raise InputError(
                piece.path, None, f"shard {index}-of-{count} given twice", f"also {seen[index]}"
            )
        seen[index] = piece.path
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        names = ", ".join(f"{i}-of-{count}" for i in missing)
        raise InputError(first.path, None, f"the set of shards lacks {names}")
    ordered = sorted(pieces, key=lambda p: int(p.record["index"]))
    for piece in ordered:  # records written by this module; checked in case of a hand edit
        expected = Shard(piece.record["index"], count, align).rows(total)
        if piece.record["rows"] != [expected.start, expected.stop]:
            raise InputError(
                piece.path,
                None,
                f"covers input rows {piece.record['rows']}, not "
                f"[{expected.start}, {expected.stop}] of shard {piece.record['index']}-of-{count}",
            )
    return ordered


def gather_parquet(shards: Sequence[Path], out: Path) -> int:
    """Write the rows of a complete set of shard artifacts to ``out``; returns the row count."""
    pieces = []
    schema: pa.Schema | None = None
    for path in shards:
        source = open_parquet(path)
        metadata = source.schema_arrow.metadata or {}
        if SHARD_KEY not in metadata:
            raise InputError(path, None, "not a shard artifact (no synthdeid.shard metadata)")
        pieces.append(
            _Piece(Path(path), json.loads(metadata[SHARD_KEY]), metadata.get(PROVENANCE_KEY))
        )
        own = source.schema_arrow.remove_metadata()
        if schema is None:
            schema = source.schema_arrow.with_metadata(
                {k: v for k, v in metadata.items() if k != SHARD_KEY}
            )
        elif not own.equals(schema.remove_metadata()):
            raise InputError(path, None, f"its columns differ from those of {shards[0]}")
    ordered = _check_complete(pieces)
    assert schema is not None  # at least one shard, or _check_complete raised
    with parquet_writer(out, schema) as writer:
        for piece in ordered:
            for _, table in iter_row_range(open_parquet(piece.path)):
                writer.write(table)
    return writer.rows_written


MergeRule = Callable[[Sequence[Any], Mapping[str, Any]], Any]
"""How the value at one key is merged: from the shards' values there and the
object's other keys, already merged (a figure derived from them is recomputed)."""


def _rate(values: Sequence[Any], merged: Mapping[str, Any]) -> float | None:
    """Notes per second of the merged notes and seconds: a shard without notes has none."""
    notes, seconds = merged.get("notes"), merged.get("seconds")
    return round(notes / seconds, 2) if isinstance(notes, int) and seconds else None


def agreed(values: Sequence[Any], merged: Mapping[str, Any]) -> Any:
    """A value every shard writes alike (a setting, a count of the whole input): kept once."""
    if any(value != values[0] for value in values):
        raise ConfigError(f"shard summaries disagree where they must agree: {values!r}")
    return values[0]


MERGE_RULES: Mapping[str, MergeRule] = {RATE_KEY: _rate}


def merge_summaries(
    summaries: Sequence[Any], where: str = "", rules: Mapping[str, MergeRule] = MERGE_RULES
) -> Any:
    """One summary from the shards' summaries, value by value.

    Numbers add up (counts, seconds); objects merge key by key; lists
    concatenate in shard order, an ``examples`` list cut at the object's
    ``max_examples``; other values must be equal. A key of ``rules`` (at any
    depth) is merged by its rule once the object's other keys are: a
    ``notes_per_second`` is recomputed from the object's summed ``notes`` and
    ``seconds``, the throughput of one job, the shards' compute time counted
    once each.
    """
    first = summaries[0]
    if isinstance(first, bool) or first is None or isinstance(first, str):
        if any(s != first for s in summaries):
            raise ConfigError(f"shard summaries disagree at {where or 'the top'}: {summaries!r}")
        return first
    if isinstance(first, int | float):
        return sum(summaries)
    if isinstance(first, list):
        return [item for s in summaries for item in s]
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for s in summaries for k in s))
        merged: dict[str, Any] = {}
        for key in keys:
            values = [s[key] for s in summaries if key in s]
            merged[key] = (
                None  # merged below, from the others; the key keeps its place
                if key in rules
                else merge_summaries(values, f"{where}.{key}" if where else key, rules)
            )
        if isinstance(merged.get("examples"), list) and isinstance(merged.get("max_examples"), int):
            merged["max_examples"] = first["max_examples"]
            merged["examples"] = merged["examples"][: merged["max_examples"]]
        for key in keys:
            if key in rules:
                merged[key] = rules[key]([s[key] for s in summaries if key in s], merged)
        return merged
    raise ConfigError(f"shard summaries hold a value gather cannot merge at {where}: {first!r}")


def gather_json(
    shards: Sequence[Path], out: Path, rules: Mapping[str, MergeRule] = MERGE_RULES
) -> None:
    """Merge a complete set of shard summaries (JSON objects with a ``"shard"`` record)
    into ``out`` (:func:`merge_summaries` with ``rules``)."""
    pieces, bodies = [], []
    for path in shards:
        with reading_record(Path(path), "a shard summary"):
            body = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(body, dict) or JSON_SHARD_KEY not in body:
            raise InputError(path, None, 'not a shard summary (no "shard" record)')
        record = body.pop(JSON_SHARD_KEY)
        pieces.append(_Piece(Path(path), record, body.get("provenance")))
        bodies.append(body)
    ordered = _check_complete(pieces)  # equal provenance: kept once, not merged
    by_path = {piece.path: body for piece, body in zip(pieces, bodies, strict=True)}
    merged = merge_summaries(
        [{k: v for k, v in by_path[p.path].items() if k != "provenance"} for p in ordered],
        rules=rules,
    )
    if "provenance" in bodies[0]:
        merged["provenance"] = bodies[0]["provenance"]
    write_json_atomic(merged, out)


def with_shard(body: dict[str, Any], shard: Shard | None, total: int) -> dict[str, Any]:
    """A JSON summary as written: unsharded as is, a shard's with its ``"shard"`` record."""
    return body if shard is None else {**body, JSON_SHARD_KEY: shard.record(total)}
