"""A token-classification de-identification model and what travels with it.

The model directory is a plain Hugging Face directory (``save_pretrained`` for
weights, config and tokenizer) plus ``synthdeid_ner.json``: the labels, the
window settings, the operating point (the ``O`` threshold picked on
validation) and the regex-detector setting. :class:`DeidTagger` loads it and
turns notes into per-token tag probabilities, window by window, in
length-sorted batches; :mod:`synthdeid.ner.decoding` makes spans of them.
:class:`SpanTagger` is what every tagger offers (an ensemble of models,
:mod:`synthdeid.ner.ensemble`, is one too).
"""

from __future__ import annotations

import json
import logging
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tqdm.auto import tqdm

from synthdeid.errors import ConfigError, InputError, read_error_detail
from synthdeid.ner.batching import collate, sorted_batches
from synthdeid.ner.casing import check_case_types
from synthdeid.ner.decoding import attach_initials, decode_spans, merge_windows
from synthdeid.ner.tagging import EncodedNote, encode_notes, make_windows, tag_names
from synthdeid.notes import Note, Span
from synthdeid.runtime import pick_device, resolve_precision, warn_if_bf16_emulated

log = logging.getLogger(__name__)

NER_CONFIG_FILE = "synthdeid_ner.json"
# inference number formats: bf16 halves the weights and, on CPUs with AVX512-BF16 or
# AMX, runs the matrix products about twice as fast; int8 is dynamic quantization;
# auto is bf16 where the GPU or CPU has it natively, fp32 otherwise (resolve_precision)
INFERENCE_PRECISIONS = ("auto", "fp32", "bf16", "int8")


@dataclass
class NerSettings:
    """What a trained model needs besides its weights (``synthdeid_ner.json``)."""

    labels: list[str]
    max_length: int
    stride: int
    o_threshold: float = 0.5
    regex_detectors: list[str] = field(default_factory=list)
    base_model: str = ""
    operating_point: dict[str, Any] = field(default_factory=dict)
    # word casing as token types (synthdeid.ner.casing); initials before names (decoding)
    case_feature: bool = False
    initials: str = "off"
    # the number format the model was trained in: {requested, resolved, reason}
    # (synthdeid.runtime.ResolvedPrecision.record; empty for models saved before it)
    training_precision: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> list[str]:
        return tag_names(self.labels)

    def save(self, directory: Path) -> None:
        (directory / NER_CONFIG_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> NerSettings:
        path = directory / NER_CONFIG_FILE
        if not path.is_file():
            raise InputError(
                directory, None, f"not a synthdeid model directory: {NER_CONFIG_FILE} missing"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (ValueError, TypeError) as exc:  # undecodable bytes and bad JSON: ValueErrors
            detail = read_error_detail(exc)
            raise InputError(path, None, f"unreadable model settings: {detail}") from None


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantization of the Linear layers (CPU inference only).

    Weights are quantized per output channel: per-tensor scales cost this
    task several points of recall (bench/deid_throughput.py shows both).
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        # eager-mode quantization is deprecated in favour of torchao, which is not
        # in the pinned stack; the kernels are still the fbgemm/x86 ones
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized = quantize_dynamic(
            model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
    return cast(torch.nn.Module, quantized)


class SpanTagger(ABC):
    """Notes in, spans out: encoding, per-token probabilities, then BIO decoding.

    ``settings`` carries the labels, the ``O`` threshold, the regex detectors
    and the initials rule that decoding and callers read.
    """

    settings: NerSettings

    @abstractmethod
    def encode(self, notes: Sequence[Note]) -> Sequence[Any]:
        """One encoding per note; each has the token ``offsets`` decoding needs."""

    @abstractmethod
    def token_probabilities(
        self,
        encoded: Sequence[Any],
        *,
        batch_size: int = 32,
        progress: bool = False,
        length_sorted: bool = True,
    ) -> list[np.ndarray]:
        """Per note, (n_tokens, n_tags) tag probabilities.

        ``length_sorted=False`` batches windows in note order (the padding-heavy
        baseline the throughput benchmark compares against).
        """

    def predict_spans(
        self,
        notes: Sequence[Note],
        *,
        o_threshold: float | None = None,
        batch_size: int = 32,
        progress: bool = False,
    ) -> list[list[Span]]:
        """Predicted spans per note (model only; regex detectors are added by the caller)."""
        encoded = self.encode(notes)
        probabilities = self.token_probabilities(encoded, batch_size=batch_size, progress=progress)
        return [
            self.decode(probs, enc, note.text, o_threshold=o_threshold)
            for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
        ]

    def decode(
        self,
        probs: np.ndarray,
        encoded: Any,
        text: str,
        *,
        o_threshold: float | None = None,
    ) -> list[Span]:
        """One note's spans: BIO decoding at the threshold, then the initials setting."""
        threshold = self.settings.o_threshold if o_threshold is None else o_threshold
        spans = decode_spans(
            probs, encoded.offsets, text, self.settings.labels, o_threshold=threshold
        )
        return attach_initials(spans, text, self.settings.initials)


class DeidTagger(SpanTagger):
    """A tokenizer and a token-classification model, applied window by window."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        settings: NerSettings,
        device: torch.device,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.device = device

    @classmethod
    def load(
        cls, directory: str | Path, *, device: str = "auto", precision: str = "fp32"
    ) -> DeidTagger:
        """A saved model directory, on ``device``, in an inference ``precision``.

        ``auto`` is resolved by :func:`synthdeid.runtime.resolve_precision`
        (bf16 where the hardware has it natively, else fp32).
        """
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        if precision not in INFERENCE_PRECISIONS:
            raise ConfigError(
                f"inference precision {precision!r} is not one of {INFERENCE_PRECISIONS}"
            )
        torch_device = pick_device(device)
        if precision == "int8" and torch_device.type != "cpu":
            raise ConfigError("int8 dynamic quantization runs on CPU only (device=cpu)")
        directory = Path(directory)
        settings = NerSettings.load(directory)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForTokenClassification.from_pretrained(directory)
        if settings.case_feature:
            check_case_types(model)
        if precision == "int8":
            model = quantize_int8(model)
        elif resolve_precision(precision, torch_device, allow_fp16=False).name == "bf16":
            warn_if_bf16_emulated(torch_device, "bf16 inference")
            model = model.to(dtype=torch.bfloat16)
        model.to(torch_device).eval()
        return cls(model, tokenizer, settings, torch_device)

    def encode(self, notes: Sequence[Note], with_tags: bool = False) -> list[EncodedNote]:
        tag_index = {tag: i for i, tag in enumerate(self.settings.tags)} if with_tags else None
        return encode_notes(self.tokenizer, notes, tag_index, case_types=self.settings.case_feature)

    @torch.inference_mode()
    def token_probabilities(
        self,
        encoded: Sequence[EncodedNote],
        *,
        batch_size: int = 32,
        progress: bool = False,
        length_sorted: bool = True,
    ) -> list[np.ndarray]:
        """Per note, (n_tokens, n_tags) probabilities merged over its windows."""
        windows = make_windows(
            encoded,
            max_length=self.settings.max_length,
            stride=self.settings.stride,
            cls_id=self.tokenizer.cls_token_id,
            sep_id=self.tokenizer.sep_token_id,
        )
        was_training = self.model.training
        self.model.eval()
        window_probs: list[np.ndarray | None] = [None] * len(windows)
        if length_sorted:
            batches = sorted_batches(windows, batch_size)
        else:
            batches = [
                list(range(i, min(i + batch_size, len(windows))))
                for i in range(0, len(windows), batch_size)
            ]
        for batch in tqdm(batches, desc="tagging", unit="batch", disable=not progress):
            inputs = collate(windows, batch, self.tokenizer.pad_token_id)
            inputs = {k: v.to(self.device) for k, v in inputs.items()}
            logits = self.model(**inputs).logits.float()
            probs = torch.softmax(logits, dim=-1).cpu().numpy()
            for row, index in enumerate(batch):
                n = windows[index].n_content
                window_probs[index] = probs[row, 1 : n + 1]
        if was_training:
            self.model.train()
        per_note: list[tuple[list[int], list[np.ndarray]]] = [([], []) for _ in encoded]
        for window, probs_ in zip(windows, window_probs, strict=True):
            assert probs_ is not None
            per_note[window.note_index][0].append(window.token_start)
            per_note[window.note_index][1].append(probs_)
        n_tags = len(self.settings.tags)
        return [
            merge_windows(note.n_tokens, starts, probs_list, n_tags)
            for note, (starts, probs_list) in zip(encoded, per_note, strict=True)
        ]
