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
rows, and the gathered artifact is the shards' rows concatenated. A shard
artifact is not a whole table, wherever it lies: every reader refuses one
(:func:`synthdeid.artifacts.open_parquet`) but the gather.

:func:`plan_parquet` and :func:`plan_json` check that the shards of one
artifact are one complete set: each record well formed (:func:`shard_record`),
the same provenance, shards 1..N each once, their row ranges tiling the input,
and no note's rows in two shards (a note is one input row). :func:`check_together`
checks that the artifacts gathered at once come from one run (the same
provenance and shard set: a step's outputs, side outputs included, all record
both), and :func:`write_gathered` writes them all or none. Parquet shards'
rows are streamed, in shard order, into the artifact one job would have
written. Rows in the same order through the same fixed-size row groups
(:func:`synthdeid.artifacts.parquet_writer`) give the same bytes, so a
deterministic step's gathered output is byte-equal to its unsharded output.
JSON summaries are merged (:func:`merge_summaries`): counts add up, derived
figures are recomputed by a rule (:data:`MERGE_RULES`).

Shard ``K`` of ``N`` of an artifact ``notes.parquet`` is ``notes.shard-K-of-N.parquet``
beside it (:func:`shard_path`); the workflow's sharded rules write there and
``synthdeid gather-shards --count N OUT`` finds them there. A step's default
side outputs (a summary, a local-only table) are named from its unsharded
output and then put at their own shard path (:func:`side_output`), so the
gather of each side output finds them too. At most :data:`MAX_SHARDS` shards.

Memory: one row group at a time per artifact written, one shard's
``note_id`` column while its ids are checked, and the ids seen
(:class:`~synthdeid.notes.NoteIds`, about 16 bytes an id); the gather reads
each Parquet shard twice (its note ids, then its rows).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from synthdeid.artifacts import (
    PROVENANCE_KEY,
    SHARD_KEY,
    atomic_text,
    iter_row_range,
    open_parquet,
    parquet_writer,
    reading_record,
    write_json,
)
from synthdeid.errors import ConfigError, InputError, listed, read_error_detail
from synthdeid.local_only import local_path
from synthdeid.notes import NoteIds
from synthdeid.readers.jsonl import json_kind

JSON_SHARD_KEY = "shard"
MAX_SHARDS = 4096  # shards of one artifact, at most: more is a typo, not a cluster
MAX_LISTED_SHARDS = 5  # missing shards named in an error, at most
NOTE_ID = "note_id"
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
        if self.count > MAX_SHARDS:
            raise ConfigError(f"shard count {self.count}: at most {MAX_SHARDS} shards")
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


class ShardCount(argparse.Action):
    """The action of gather-shards' ``--count`` (typed ``positive_int``): a count above
    :data:`MAX_SHARDS` is a usage error, before any path is looked at."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if values > MAX_SHARDS:
            raise argparse.ArgumentError(self, f"must be at most {MAX_SHARDS} shards, got {values}")
        setattr(namespace, self.dest, values)


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


def side_output(output: Path, suffix: str, shard: Shard | None, *, local: bool = False) -> Path:
    """The default path of a side output of ``output``: its summary, a local-only table.

    ``notes.summary.json`` beside ``notes.parquet`` (``suffix`` ``.summary.json``),
    or with ``local`` in its ``local/`` folder (:func:`~synthdeid.local_only.local_path`).
    For a shard, the name comes from the unsharded output and the side output
    goes to its own shard path: ``notes.summary.shard-2-of-3.json`` for
    ``notes.shard-2-of-3.parquet``, where gather-shards looks for the shards
    of ``notes.summary.json``.
    """
    whole = unsharded_output(output, shard)
    if local:
        side = local_path(whole, suffix)
    else:
        side = whole.with_name(f"{whole.with_suffix('').name}{suffix}")
    return shard_output(side, shard)


def shard_metadata(shard: Shard | None, total: int) -> dict[bytes, bytes]:
    """The Parquet metadata a step adds to its artifact: none unsharded, else its shard's."""
    return {} if shard is None else shard.metadata(total)


def shard_table_rows(shard: Shard | None, total: int) -> range:
    """The rows a step reads: all of them unsharded, else its shard's."""
    return range(total) if shard is None else shard.rows(total)


def shard_record(path: Path, record: Any, where: str) -> tuple[Shard, int]:
    """The shard a shard artifact says it is, and its input's row count, checked.

    ``record`` (from the file at ``path``, at ``where``) must be an object
    with integer ``index``, ``count``, ``input_rows`` and ``align`` (1 where
    absent: records made before alignment) naming a possible shard, and
    ``rows`` equal to that shard's ``[start, stop]``. InputError otherwise,
    naming the file, the record and the field; no value but integers is quoted.
    """
    if not isinstance(record, dict):
        raise InputError(path, where, f"a JSON {json_kind(record)}, not an object")
    numbers = {}
    for key in ("index", "count", "align", "input_rows"):
        if key not in record and key != "align":
            raise InputError(path, where, f"lacks {key}")
        value = record.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(path, where, f"{key} is a JSON {json_kind(value)}, not an integer")
        numbers[key] = value
    try:
        shard = Shard(numbers["index"], numbers["count"], numbers["align"])
    except ConfigError as exc:
        raise InputError(path, where, str(exc)) from None
    total = numbers["input_rows"]
    if total < 0:
        raise InputError(path, where, f"input_rows {total}: must not be negative")
    rows = record.get("rows")
    pair = (
        isinstance(rows, list)
        and len(rows) == 2
        and all(isinstance(r, int) and not isinstance(r, bool) for r in rows)
    )
    if not pair:
        raise InputError(path, where, "rows must be a pair [start, stop] of integers")
    expected = shard.rows(total)
    if rows != [expected.start, expected.stop]:
        raise InputError(
            path,
            where,
            f"covers input rows {rows}, not [{expected.start}, {expected.stop}] "
            f"of shard {shard.label} over {total} rows",
        )
    return shard, total


@dataclass(frozen=True)
class _Piece:
    """One shard artifact: its path, the shard it is and the provenance it records."""

    path: Path
    shard: Shard
    total: int  # rows of the step's input
    provenance: Any

    @property
    def shard_set(self) -> tuple[int, int, int]:
        """What every shard of one set shares: count, input rows, alignment."""
        return self.shard.count, self.total, self.shard.align

    def describe_set(self) -> str:
        """The shard and its set, as an error names them."""
        return (
            f"shard {self.shard.label} over {self.total} input rows (aligned on {self.shard.align})"
        )


def _check_complete(pieces: Sequence[_Piece]) -> list[_Piece]:
    """The pieces in shard order; raise InputError unless they are one complete set."""
    if not pieces:
        raise ConfigError("gather: no shards given")
    first = pieces[0]
    count = first.shard.count
    seen: dict[int, Path] = {}
    for piece in pieces:
        index = piece.shard.index
        if piece.shard_set != first.shard_set:
            raise InputError(
                piece.path,
                None,
                f"{piece.describe_set()} does not belong with {first.path} "
                f"({first.describe_set()})",
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
    missing = [f"{i}-of-{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise InputError(
            first.path, None, f"the set of shards lacks {listed(missing, MAX_LISTED_SHARDS)}"
        )
    return sorted(pieces, key=lambda p: p.shard.index)


def _check_notes_apart(pieces: Sequence[_Piece]) -> None:
    """Refuse a set of Parquet shards in which one note has rows in two shards.

    A shard holds the rows made from its own input rows, and a note is one
    input row, so each note's rows lie in one shard: a shard copied over
    another (its record edited to match) would otherwise gather into a table
    with every note twice. Reads the ``note_id`` column alone (a table
    without one: nothing to check); memory: one shard's column and the ids seen.
    """
    ids = NoteIds()
    for piece in pieces:
        source = open_parquet(piece.path, shard_artifact=True)
        if NOTE_ID not in source.schema_arrow.names:
            return
        tables = [table for _, table in iter_row_range(source, columns=[NOTE_ID])]
        if not tables:  # a shard without rows
            continue
        for note_id in pa.concat_tables(tables).column(NOTE_ID).unique().to_pylist():
            if not isinstance(note_id, str) or not note_id.strip():
                continue  # not this check's concern: the table's own readers refuse it
            try:
                ids.add(note_id, path=piece.path, record=None)
            except InputError:
                raise InputError(
                    piece.path,
                    f"note {note_id!r}",
                    "its rows also lie in an earlier shard of the set (a note's rows lie "
                    "in one shard)",
                    "the shards were copied or edited; rerun them",
                ) from None


@dataclass(frozen=True)
class Gather:
    """A complete, checked set of shards of one artifact, ready to be written to ``out``."""

    out: Path
    pieces: tuple[_Piece, ...]  # in shard order
    schema: pa.Schema | None = None  # a Parquet artifact's, without the shard record
    merged: Any = None  # a JSON summary, merged
    rows: int = 0  # a Parquet artifact's rows

    def write(self, stack: ExitStack) -> None:
        """Write ``out`` through a temporary that takes its place when ``stack`` closes
        without an error (and is removed if it closes with one)."""
        if self.schema is None:
            write_json(self.merged, stack.enter_context(atomic_text(self.out)))
            return
        writer = stack.enter_context(parquet_writer(self.out, self.schema))
        for piece in self.pieces:
            for _, table in iter_row_range(open_parquet(piece.path, shard_artifact=True)):
                writer.write(table)


def _provenance(path: Path, raw: bytes | None) -> Any:
    """A Parquet artifact's provenance record (None: it has none)."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        where = PROVENANCE_KEY.decode()
        raise InputError(path, where, f"not JSON: {read_error_detail(exc)}") from None


def plan_parquet(shards: Sequence[Path], out: Path) -> Gather:
    """Check a complete set of Parquet shard artifacts (:mod:`synthdeid.shards`) for ``out``."""
    pieces = []
    schema: pa.Schema | None = None
    rows = 0
    for path in map(Path, shards):
        source = open_parquet(path, shard_artifact=True)
        metadata = source.schema_arrow.metadata or {}
        if SHARD_KEY not in metadata:
            raise InputError(path, None, "not a shard artifact (no synthdeid.shard metadata)")
        where = SHARD_KEY.decode()
        try:
            record = json.loads(metadata[SHARD_KEY])
        except ValueError as exc:
            raise InputError(path, where, f"not JSON: {read_error_detail(exc)}") from None
        shard, total = shard_record(path, record, where)
        pieces.append(_Piece(path, shard, total, _provenance(path, metadata.get(PROVENANCE_KEY))))
        rows += source.metadata.num_rows
        own = source.schema_arrow.remove_metadata()
        if schema is None:
            schema = source.schema_arrow.with_metadata(
                {k: v for k, v in metadata.items() if k != SHARD_KEY}
            )
        elif not own.equals(schema.remove_metadata()):
            raise InputError(path, None, f"its columns differ from those of {shards[0]}")
    ordered = _check_complete(pieces)
    _check_notes_apart(ordered)
    assert schema is not None  # at least one shard, or _check_complete raised
    return Gather(Path(out), tuple(ordered), schema=schema, rows=rows)


def check_together(gathers: Sequence[Gather]) -> None:
    """Refuse artifacts of different runs gathered in one call.

    The outputs of one run of a step (side outputs included) record the same
    provenance and the same shard set; offsets made with one key do not join
    notes made with another.
    """
    if not gathers:
        return
    first = gathers[0].pieces[0]
    for gather in gathers[1:]:
        piece = gather.pieces[0]
        if piece.provenance != first.provenance or piece.shard_set != first.shard_set:
            raise InputError(
                piece.path,
                None,
                f"its shards come from another run than those of {first.path} "
                "(their provenance or shard sets differ)",
                "gather the outputs of one run of a step in one call",
            )


def write_gathered(gathers: Sequence[Gather]) -> None:
    """Write every gathered artifact, each to a temporary file; they take their
    places only once all are written, so a failure while writing leaves none of
    them (nor a temporary file)."""
    with ExitStack() as stack:
        for gather in gathers:
            gather.write(stack)


def gather_parquet(shards: Sequence[Path], out: Path) -> int:
    """Write the rows of a complete set of shard artifacts to ``out``; returns the row count."""
    gather = plan_parquet(shards, out)
    write_gathered([gather])
    return gather.rows


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
        raise ConfigError("every shard must write it alike")
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
    once each. A ConfigError names where the summaries disagree, never the
    values (a summary may hold PHI: leftovers, examples).
    """
    first = summaries[0]
    if isinstance(first, bool) or first is None or isinstance(first, str):
        if any(s != first for s in summaries):
            raise ConfigError(f"shard summaries disagree at {where or 'the top'}")
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
                try:
                    merged[key] = rules[key]([s[key] for s in summaries if key in s], merged)
                except ConfigError as exc:
                    at = f"{where}.{key}" if where else key
                    raise ConfigError(f"shard summaries disagree at {at}: {exc}") from None
        return merged
    raise ConfigError(
        f"shard summaries hold a value gather cannot merge at {where or 'the top'} "
        f"(a JSON {json_kind(first)})"
    )


def plan_json(
    shards: Sequence[Path], out: Path, rules: Mapping[str, MergeRule] = MERGE_RULES
) -> Gather:
    """Check and merge a complete set of shard summaries (JSON objects with a ``"shard"``
    record) for ``out`` (:func:`merge_summaries` with ``rules``; the provenance, equal
    in every shard, kept once)."""
    pieces, bodies = [], []
    for path in map(Path, shards):
        with reading_record(path, "shard summary"):
            body = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(body, dict) or JSON_SHARD_KEY not in body:
            raise InputError(path, None, 'not a shard summary (no "shard" record)')
        shard, total = shard_record(path, body.pop(JSON_SHARD_KEY), f'"{JSON_SHARD_KEY}" record')
        pieces.append(_Piece(path, shard, total, body.get("provenance")))
        bodies.append(body)
    ordered = _check_complete(pieces)
    by_path = {piece.path: body for piece, body in zip(pieces, bodies, strict=True)}
    summaries = [{k: v for k, v in by_path[p.path].items() if k != "provenance"} for p in ordered]
    try:
        merged = merge_summaries(summaries, rules=rules)
    except ConfigError as exc:
        raise InputError(_disagreeing(ordered, summaries, rules), None, str(exc)) from None
    if "provenance" in bodies[0]:
        merged["provenance"] = bodies[0]["provenance"]
    return Gather(Path(out), tuple(ordered), merged=merged)


def _disagreeing(
    ordered: Sequence[_Piece], summaries: Sequence[Any], rules: Mapping[str, MergeRule]
) -> Path:
    """The first shard whose summary does not merge with the first shard's."""
    for piece, summary in zip(ordered[1:], summaries[1:], strict=True):
        try:
            merge_summaries([summaries[0], summary], rules=rules)
        except ConfigError:
            return piece.path
    return ordered[0].path


def gather_json(
    shards: Sequence[Path], out: Path, rules: Mapping[str, MergeRule] = MERGE_RULES
) -> None:
    """Merge a complete set of shard summaries into ``out`` (:func:`plan_json`)."""
    write_gathered([plan_json(shards, out, rules)])


def with_shard(body: dict[str, Any], shard: Shard | None, total: int) -> dict[str, Any]:
    """A JSON summary as written: unsharded as is, a shard's with its ``"shard"`` record."""
    return body if shard is None else {**body, JSON_SHARD_KEY: shard.record(total)}
