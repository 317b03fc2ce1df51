"""Applying a trained tagger to notes, as ``predict-ner`` and ``deid`` both do.

One home for what the two commands share, so that they give the same spans
for the same notes:

- the command-line options of tagging (:func:`add_tagging_arguments`: the
  ``O`` threshold override, the regex detectors, Safe Harbor ages, the number
  format, the batch size);
- loading the model with them (:meth:`Tagging.load`): the number format
  ``--precision`` comes to on the device, the regex detectors (the model's
  unless overridden);
- predicting (:func:`predict_notes`): the model's spans at the ``O``
  threshold (the one the model chose on validation notes, from
  ``synthdeid_ner.json``, unless overridden), then the regex detectors'
  union, then the Safe Harbor age rule;
- de-identifying the predicted spans: :func:`redact` (``[LABEL]``) or
  :func:`surrogate_batches` (keyed surrogates, :mod:`synthdeid.surrogate`).

Nothing heavy is imported at module level: the stages' argument parsers use
this module, and torch loads with the model.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthdeid.cli_types import positive_int
from synthdeid.detectors import DETECTORS, add_regex_spans
from synthdeid.errors import ConfigError, InputError, read_error_detail
from synthdeid.ner.ages import drop_young_age_spans
from synthdeid.notes import Note, splice

if TYPE_CHECKING:
    from synthdeid.ner.model import SpanTagger
    from synthdeid.surrogate.keying import SurrogateKey

log = logging.getLogger(__name__)

# synthdeid.ner.model.INFERENCE_PRECISIONS, repeated so that the CLI starts without torch
PRECISIONS = ("auto", "fp32", "bf16", "int8")


def add_tagging_arguments(parser: argparse.ArgumentParser) -> None:
    """``--o-threshold``, ``--regex``, ``--safe-harbor-ages``, ``--precision`` (and
    ``--quantize``) and ``--batch-size``: how a command applies a trained model."""
    parser.add_argument(
        "--o-threshold",
        type=float,
        default=None,
        help="override the O threshold the model chose on validation notes",
    )
    parser.add_argument(
        "--regex",
        default=None,
        help="comma-separated regex detector labels to union (default: the model's; 'none' = off)",
    )
    parser.add_argument(
        "--safe-harbor-ages",
        action="store_true",
        help="drop predicted ages of 89 or under ('79 yo'): not identifiers under Safe Harbor",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="inference number format (auto: bf16 where the GPU or CPU has it natively, else fp32)",
    )
    parser.add_argument(
        "--quantize",
        dest="precision",
        action="store_const",
        const="int8",
        help="same as --precision int8: dynamic int8 inference on CPU",
    )
    parser.add_argument("--batch-size", type=positive_int, default=16, help="windows per batch")


def regex_labels_from(argument: str | None, model_default: Sequence[str]) -> list[str]:
    """The regex detectors ``--regex`` names: the model's (None), none (``none``), or a list."""
    if argument is None:
        labels = list(model_default)
    elif argument.strip().lower() in ("", "none"):
        labels = []
    else:
        labels = [label.strip() for label in argument.split(",") if label.strip()]
    unknown = set(labels) - set(DETECTORS)
    if unknown:
        raise ConfigError(f"regex detectors {sorted(unknown)} unknown; known: {sorted(DETECTORS)}")
    return labels


def resolved_precision(precision: str, device: str) -> dict[str, str]:
    """What ``--precision`` comes to on ``--device``: {requested, resolved, reason}.

    ``int8`` is a format of its own (CPU only, checked when the model loads);
    the others go through :func:`synthdeid.runtime.resolve_precision`.
    """
    from synthdeid.runtime import pick_device, resolve_precision

    if precision == "int8":
        return {"requested": "int8", "resolved": "int8", "reason": "set explicitly"}
    resolved = resolve_precision(
        precision, pick_device(device), allow_fp16=False, setting="--precision"
    )
    return resolved.record()


def redact(note: Note) -> Note:
    """Each span replaced by ``[LABEL]``; the new spans cover the inserted tags."""
    text, spans = splice(note.text, note.spans, [f"[{span.label}]" for span in note.spans])
    return note.with_text(text, spans)


def predict_notes(
    tagger: SpanTagger,
    notes: Sequence[Note],
    *,
    o_threshold: float | None = None,
    regex_labels: Sequence[str] = (),
    safe_harbor_ages: bool = False,
    batch_size: int = 32,
    progress: bool = True,
) -> tuple[list[Note], dict[str, Any]]:
    """Notes carrying predicted spans (text unchanged) and throughput figures.

    Spans are the model's at ``o_threshold`` (None: the model's own, chosen on
    validation notes), then the regex detectors' union, then (with
    ``safe_harbor_ages``) without the ages of 89 or under.
    """
    started = time.perf_counter()
    predicted = tagger.predict_spans(
        notes, o_threshold=o_threshold, batch_size=batch_size, progress=progress
    )
    regex_added = 0
    if regex_labels:
        predicted, regex_added = add_regex_spans(notes, predicted, regex_labels)
    young_ages = 0
    if safe_harbor_ages:
        predicted, young_ages = drop_young_age_spans(notes, predicted)
    seconds = time.perf_counter() - started
    output = [
        note.with_text(note.text, spans) for note, spans in zip(notes, predicted, strict=True)
    ]
    stats = {
        "notes": len(notes),
        "predicted_spans": sum(len(s) for s in predicted),
        "predicted_by_label": dict(sorted(Counter(s.label for p in predicted for s in p).items())),
        "regex_spans_added": regex_added,
        "young_ages_dropped": young_ages,
        "seconds": round(seconds, 3),
        "notes_per_second": round(len(notes) / seconds, 2) if seconds > 0 else None,
    }
    return output, stats


@dataclass(frozen=True)
class Tagging:
    """A loaded tagger and how it is applied (the options of :func:`add_tagging_arguments`).

    ``o_threshold`` is the override (None: the model's, from its
    ``synthdeid_ner.json``); ``precision`` what ``--precision`` came to
    (:func:`resolved_precision`).
    """

    tagger: SpanTagger
    precision: dict[str, str]
    regex_labels: tuple[str, ...]
    o_threshold: float | None = None
    safe_harbor_ages: bool = False
    batch_size: int = 16

    @classmethod
    def load(
        cls,
        model: str | Path,
        *,
        device: str = "auto",
        precision: str = "auto",
        regex: str | None = None,
        o_threshold: float | None = None,
        safe_harbor_ages: bool = False,
        batch_size: int = 16,
    ) -> Tagging:
        """Load a trained model, ensemble or lexicon-stacker directory in ``precision``.

        A folder that is no model, or whose files do not load, is refused with
        an :class:`~synthdeid.errors.InputError` naming it.
        """
        from synthdeid.ner.loading import load_tagger

        record = resolved_precision(precision, device)
        log.info(
            "precision %s -> %s (%s)", record["requested"], record["resolved"], record["reason"]
        )
        try:
            tagger = load_tagger(model, device=device, precision=record["resolved"])
        except (InputError, ConfigError):
            raise
        except OSError as exc:
            if exc.filename is not None:  # the command names the path and the problem
                raise
            raise InputError(model, None, f"the model does not load: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            detail = read_error_detail(exc)
            raise InputError(model, None, f"the model does not load: {detail}") from None
        return cls(
            tagger=tagger,
            precision=record,
            regex_labels=tuple(regex_labels_from(regex, tagger.settings.regex_detectors)),
            o_threshold=o_threshold,
            safe_harbor_ages=safe_harbor_ages,
            batch_size=batch_size,
        )

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> Tagging:
        """:meth:`load` with the options :func:`add_tagging_arguments` and ``--model``,
        ``--device`` registered."""
        return cls.load(
            args.model,
            device=args.device,
            precision=args.precision,
            regex=args.regex,
            o_threshold=args.o_threshold,
            safe_harbor_ages=args.safe_harbor_ages,
            batch_size=args.batch_size,
        )

    @property
    def effective_o_threshold(self) -> float:
        """The ``O`` threshold decoding applies: the override, else the model's."""
        return self.tagger.settings.o_threshold if self.o_threshold is None else self.o_threshold

    def params(self) -> dict[str, Any]:
        """The provenance parameters of the tagging (the override recorded as given)."""
        return {
            "o_threshold": self.effective_o_threshold,
            "regex_detectors": list(self.regex_labels),
            "safe_harbor_ages": self.safe_harbor_ages,
            "precision": self.precision["requested"],
            "precision_resolved": self.precision["resolved"],
            "precision_reason": self.precision["reason"],
        }

    def predict(
        self, notes: Sequence[Note], *, progress: bool = True
    ) -> tuple[list[Note], dict[str, Any]]:
        """:func:`predict_notes` with these settings."""
        return predict_notes(
            self.tagger,
            notes,
            o_threshold=self.o_threshold,
            regex_labels=self.regex_labels,
            safe_harbor_ages=self.safe_harbor_ages,
            batch_size=self.batch_size,
            progress=progress,
        )


def surrogate_batches(
    read: Callable[[], Iterable[Sequence[Note]]], key: SurrogateKey, consistency: str
) -> Iterator[list[Note]]:
    """Each batch of predicted notes with its spans replaced by keyed surrogates.

    ``read()`` gives every predicted note, batch by batch, the same ones each
    call; it is called three or four times: for the predicted labels, for
    every predicted original (a surrogate never equals another original of its
    patient; a second time when the date shift asks,
    :meth:`~synthdeid.surrogate.replace.SurrogateReplacer.collect_batches`),
    and to replace. The batches come out as the last call gives them.
    """
    from synthdeid.surrogate.replace import SurrogateReplacer

    labels = {span.label for batch in read() for note in batch for span in note.spans}
    replacer = SurrogateReplacer(key, labels=sorted(labels), consistency=consistency)
    replacer.collect_batches(read)
    for batch in read():
        yield [replacer.replace_note(note).note for note in batch]
