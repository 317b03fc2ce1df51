"""De-identify plain notes into a folder with a trained model: what ``synthdeid deid`` does.

The notes are read a chunk at a time (:class:`~synthdeid.readers.plain.PlainNotes`),
tagged exactly as ``predict-ner`` tags a notes table
(:class:`~synthdeid.ner.inference.Tagging`: the model's ``O`` threshold from
its validation unless overridden, its regex detectors, the Safe Harbor age
rule), and written out (:mod:`synthdeid.ner.deid_outputs`):

- ``redact``: each predicted span becomes ``[LABEL]``; one pass;
- ``surrogate``: each predicted span becomes a keyed surrogate, as
  ``predict-ner --mode surrogate`` makes them
  (:func:`~synthdeid.ner.inference.surrogate_batches`). A surrogate must
  differ from every predicted original of its scope, so every note is
  predicted first (kept on disk in the staging folder, not in memory), then
  replaced. Each note is its own patient: ``consistency="corpus"`` gives one
  original one surrogate over all the notes.

Memory holds one chunk of notes and its predictions, plus the note ids read
and (surrogate mode) hashes of the predicted originals.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from synthdeid.artifacts import files_digest, make_provenance
from synthdeid.errors import ConfigError
from synthdeid.ner.deid_outputs import PredictedSpill, deid_folder
from synthdeid.ner.inference import Tagging, redact, surrogate_batches
from synthdeid.readers.plain import PlainInputs, PlainNotes
from synthdeid.shards import merge_summaries
from synthdeid.surrogate.keying import SurrogateKey

log = logging.getLogger(__name__)

MODES = ("redact", "surrogate")
T = TypeVar("T")


@dataclass(frozen=True)
class DeidSettings:
    """How the predicted spans are replaced, and how the run is cut and shown.

    ``key`` is needed (and only used) in ``surrogate`` mode; ``chunk_notes``
    notes are read, predicted and written at a time.
    """

    mode: str = "redact"
    key: SurrogateKey | None = None
    consistency: str = "patient"
    chunk_notes: int = 512
    progress: bool = True


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def deid_provenance(
    inputs: PlainInputs, model: Path, tagging: Tagging, settings: DeidSettings
) -> dict[str, Any]:
    """The provenance of an output folder: inputs and model by digest, settings, key fingerprint.

    A folder input is recorded by one digest of its ``.txt`` files (names and
    contents); the model by the digest of every file the tagger loads.
    """
    from synthdeid.ner.loading import model_digest

    params = {
        **tagging.params(),
        "mode": settings.mode,
        "consistency": settings.consistency if settings.mode == "surrogate" else None,
        "input_kind": inputs.kind,
        "table_options": {
            name: value for name, value in vars(inputs.options).items() if value is not None
        },
        # only the key's fingerprint, as predict-ner and replace-surrogates record it
        "key_fingerprint": None if settings.key is None else settings.key.fingerprint(),
    }
    named = {f"input_{i}": path for i, path in enumerate(inputs.given, start=1)}
    provenance = make_provenance("deid", params, {**named, "model": model})
    for name, path in named.items():
        if path.is_dir():
            files = [f.path for f in inputs.text_files if path in f.path.parents]
            provenance["inputs"][name]["digest"] = files_digest(files, path)
    provenance["inputs"]["model"]["digest"] = model_digest(model)
    return provenance


def deidentify(
    inputs: PlainInputs,
    out: Path,
    tagging: Tagging,
    settings: DeidSettings,
    provenance: dict[str, Any],
) -> dict[str, Any]:
    """De-identify every note of ``inputs`` into the folder ``out``; returns the summary.

    Bad input (:class:`~synthdeid.errors.InputError`) or any failure leaves
    ``out`` as it was: the folder appears there only when complete.
    """
    reader = PlainNotes(inputs)
    chunk_stats: list[dict[str, Any]] = []
    key = settings.key if settings.mode == "surrogate" else None
    if settings.mode == "surrogate" and key is None:
        raise ConfigError("surrogate mode needs a key")
    with deid_folder(out, inputs, provenance) as folder:
        spill = PredictedSpill(folder.staging, settings.chunk_notes)
        try:
            with (
                spill.writing() if key is not None else nullcontext(),
                tqdm(
                    total=inputs.known_count,
                    unit="note",
                    desc="de-identifying",
                    disable=not settings.progress,
                ) as bar,
            ):
                for chunk in chunks(reader, settings.chunk_notes):
                    records = [plain.record for plain in chunk]
                    notes = [plain.note for plain in chunk]
                    predicted, stats = tagging.predict(notes, progress=False)
                    folder.write_spans(predicted)
                    if key is not None:
                        spill.write(records, predicted)
                    else:
                        folder.write_notes(records, [redact(note) for note in predicted])
                    chunk_stats.append(stats)
                    bar.update(len(chunk))
            reader.finish()
            if key is not None:
                replaced = surrogate_batches(spill.notes, key, settings.consistency)
                for notes, records in zip(replaced, spill.records(), strict=True):
                    folder.write_notes(records, notes)
        finally:
            spill.remove()
        summary = {
            **merge_summaries(chunk_stats),
            "mode": settings.mode,
            "input_kind": inputs.kind,
            "notes_written": folder.notes_written,
            "spans_written": folder.spans_written,
        }
        body = {"summary": summary, "outputs": folder.outputs(), "provenance": provenance}
        folder.write_summary(body)
    log.info(
        "de-identified %d notes (%s): %d spans (%d from regex, %d young ages dropped) "
        "at %s notes/s -> %s",
        summary["notes"],
        settings.mode,
        summary["predicted_spans"],
        summary["regex_spans_added"],
        summary["young_ages_dropped"],
        summary["notes_per_second"],
        out,
    )
    return summary
