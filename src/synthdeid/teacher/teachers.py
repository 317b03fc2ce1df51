"""The teachers behind one interface: ``llm``, ``model`` and ``rules``.

A :class:`Teacher` labels notes as if they had no gold (their spans are never
read) and returns one :class:`~synthdeid.teacher.silver.NoteLabels` per note.
``ensemble`` combines the outputs of other teachers and lives in
:mod:`synthdeid.teacher.ensemble`.

``llm``
    An LLM backend (OpenAI-compatible HTTP or local transformers) answers the
    extraction prompt (``resources/prompts/teacher_extraction.yaml``, SHIELD
    appendix D) with JSON by entity type; :mod:`~synthdeid.teacher.extraction`
    parses it, :mod:`~synthdeid.teacher.alignment` finds every occurrence of
    each string in the note, then thresholds and the overlap policy apply. A
    request that fails (``request_failed``) or an answer that is not a JSON
    object (``invalid_json``) gives the note no labels and keeps it out of the
    silver pool. The HTTP endpoint must be on ``trusted_hosts``, checked before
    the backend exists (:mod:`~synthdeid.llm.trusted_hosts`); proxies from
    the environment are not used and redirects are not followed.
``model``
    A trained token-classification model (``train_ner`` output or any model
    directory with ``synthdeid_ner.json``) applied with the inference code;
    a span's confidence is the mean over its tokens of ``1 - P(O)``. The
    model's regex detectors are unioned in (confidence none), as ``predict-ner`` does.
    Its provenance names the directory and the digest of every file the tagger
    loads (:func:`~synthdeid.ner.loading.model_digest`); an ``llm`` teacher's
    names the model and the endpoint (or the local model's fingerprint).
``rules``
    The high-recall regex detectors and optional dictionaries (a text file of
    terms per label, one per line, ``#`` comments): dictionary terms are found
    whole-word, in any case and spacing (:class:`~synthdeid.mentions.SurfaceIndex`).
"""

from __future__ import annotations

import logging
import string
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthdeid.detectors import DETECTORS, detect, union_spans
from synthdeid.errors import ConfigError, read_error_detail
from synthdeid.labels import CANONICAL_LABELS
from synthdeid.llm.base import ChatBackend, ChatFailure, ChatRequest
from synthdeid.llm.trusted_hosts import LOOPBACK, check_trusted_endpoint
from synthdeid.mentions import SurfaceIndex
from synthdeid.notes import Note
from synthdeid.prompt_file import TEMPLATE, PromptFile, load_prompt_file
from synthdeid.teacher.alignment import align_entities
from synthdeid.teacher.extraction import (
    DEFAULT_TYPES,
    ExtractionError,
    check_types,
    parse_extraction,
)
from synthdeid.teacher.silver import (
    DROP_COUNTS,
    NO_USABLE_ENTITIES,
    NoteLabels,
    ScoredSpan,
    Thresholds,
    apply_thresholds,
    resolve_overlaps,
)

if TYPE_CHECKING:
    import numpy as np

    from synthdeid.ner.model import SpanTagger

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = ("llm", "model", "rules", "ensemble")
PROMPT_FIELDS = {"clinical_text"}
DEFAULT_PROMPT = "resources/prompts/teacher_extraction.yaml"
REQUEST_FAILED = "request_failed"
INVALID_JSON = "invalid_json"
# settings each kind accepts (the workflow passes these; `name` and `student` stay there)
KEYS: dict[str, tuple[str, ...]] = {
    "llm": (
        "backend",
        "trusted_hosts",
        "allow_wide_networks",
        "prompt",
        "types",
        "thresholds",
        "generation",
        "pricing",
        "projection",
        "chars_per_token",
    ),
    "model": ("model", "o_threshold", "regex", "thresholds", "batch_size"),
    "rules": ("detectors", "dictionaries", "min_term_chars"),
    "ensemble": ("members", "policy"),
}
GENERATION_DEFAULTS: dict[str, Any] = {
    "temperature": 0.0,
    "top_p": 1.0,
    "max_tokens": 2048,
    "seed": 0,
}


def check_settings(settings: Mapping[str, Any], where: str) -> str:
    """The teacher's kind; ConfigError for an unknown kind or a key of another kind."""
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{where} must be a mapping with a 'kind' key")
    kind = settings.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind must be one of {list(KINDS)}, not {kind!r}")
    unknown = sorted(set(settings) - {"kind", *KEYS[kind]})
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} for kind {kind!r}; allowed: {['kind', *KEYS[kind]]}"
        )
    return str(kind)


class Teacher(ABC):
    """Labels notes without looking at their spans."""

    kind: str

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def label(self, notes: Sequence[Note], *, progress: bool = True) -> list[NoteLabels]:
        """One :class:`NoteLabels` per note, in note order."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Provenance: kind and settings, never a secret."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release a backend or a model."""


def _finish(labels: NoteLabels, spans: list[ScoredSpan], thresholds: Thresholds) -> NoteLabels:
    """Thresholds, then the overlap policy; the drops are counted on ``labels``.

    A note whose teacher named entities and kept none is ``no_usable_entities``
    (see :mod:`synthdeid.teacher.silver`): it keeps no labels and stays out of
    the pool, so the student never reads a dropped answer as a note without PHI.
    """
    kept, below = apply_thresholds(spans, thresholds)
    resolved, dropped = resolve_overlaps(kept)
    labels.count("below_threshold", below)
    labels.count("overlap_dropped", dropped)
    labels.spans = resolved
    named = labels.counts.get("entities", 0)
    if named and not resolved:
        why = ", ".join(
            f"{name} {labels.counts[name]}" for name in DROP_COUNTS if labels.counts.get(name, 0)
        )
        labels.status = NO_USABLE_ENTITIES
        labels.detail = f"the teacher named {named} entities and none was kept ({why})"
    return labels


# ---------------------------------------------------------------- llm


class LlmTeacher(Teacher):
    """An LLM answering the extraction prompt; answers aligned back to offsets."""

    kind = "llm"

    def __init__(
        self,
        name: str,
        backend: ChatBackend,
        prompt: PromptFile,
        *,
        types: Mapping[str, str | None],
        thresholds: Thresholds,
        generation: Mapping[str, Any],
    ) -> None:
        super().__init__(name)
        self.backend = backend
        self.prompt = prompt
        self.types = dict(types)
        self.thresholds = thresholds
        self.generation = {**GENERATION_DEFAULTS, **generation}
        self._template = string.Template(prompt.user)

    def request(self, note: Note) -> ChatRequest:
        user = self._template.substitute(clinical_text=note.text)
        return ChatRequest.of(self.prompt.system, user, json_mode=True, **self.generation)

    def label(self, notes: Sequence[Note], *, progress: bool = True) -> list[NoteLabels]:
        requests = [self.request(note) for note in notes]
        answers = self.backend.complete_many(requests, progress=progress)
        labelled = []
        for note, answer in zip(notes, answers, strict=True):
            if isinstance(answer, ChatFailure):
                labelled.append(NoteLabels(note.note_id, [], REQUEST_FAILED, answer.reason))
                continue
            labels = NoteLabels(
                note.note_id,
                [],
                input_tokens=answer.input_tokens,
                output_tokens=answer.output_tokens,
            )
            try:
                entities, parse_counts = parse_extraction(answer.text, self.types)
            except ExtractionError as error:
                labels.status, labels.detail = INVALID_JSON, str(error)
                labelled.append(labels)
                continue
            spans, align_counts = align_entities(note.text, entities)
            for counts in (parse_counts, align_counts):
                for key, value in counts.items():
                    labels.count(key, value)
            labelled.append(_finish(labels, spans, self.thresholds))
        return labelled

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "backend": self.backend.describe(),
            "prompt": self.prompt.provenance(),
            "types": self.types,
            "thresholds": self.thresholds.as_dict(),
            "generation": self.generation,
        }

    def close(self) -> None:
        self.backend.close()


def build_llm_teacher(
    name: str, settings: Mapping[str, Any], *, cache_dir: str | Path | None, where: str
) -> LlmTeacher:
    """The LLM teacher; a non-trusted endpoint is refused before any backend exists."""
    from synthdeid.llm.factory import build_backend

    backend_settings = settings.get("backend") or {"kind": "none"}
    kind = backend_settings.get("kind", "none") if isinstance(backend_settings, Mapping) else None
    if kind == "none":
        raise ConfigError(f"{where}: an llm teacher needs a backend (openai or transformers)")
    if kind == "openai":
        trusted = settings.get("trusted_hosts", LOOPBACK)
        wide = settings.get("allow_wide_networks", False)
        if not isinstance(wide, bool):
            raise ConfigError(f"{where}.allow_wide_networks must be true or false, not {wide!r}")
        check_trusted_endpoint(
            backend_settings.get("base_url"), trusted, where, allow_wide_networks=wide
        )
    prompt = load_prompt_file(settings.get("prompt", DEFAULT_PROMPT), PROMPT_FIELDS, TEMPLATE)
    overrides = settings.get("types") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{where}.types must map answer types to labels, not {overrides!r}")
    types = check_types(
        {**DEFAULT_TYPES, **{str(k).strip().upper(): v for k, v in overrides.items()}}
    )
    thresholds = Thresholds.from_mapping(settings.get("thresholds"))
    generation = dict(settings.get("generation") or {})
    unknown = sorted(set(generation) - set(GENERATION_DEFAULTS))
    if unknown:
        raise ConfigError(
            f"{where}.generation: unknown key(s) {unknown}; allowed: {sorted(GENERATION_DEFAULTS)}"
        )
    backend = build_backend(backend_settings, cache_dir=cache_dir, where=f"{where}.backend")
    assert backend is not None
    if hasattr(backend, "use_env_proxies"):
        backend.use_env_proxies = False
    return LlmTeacher(
        name, backend, prompt, types=types, thresholds=thresholds, generation=generation
    )


# ---------------------------------------------------------------- model


def span_confidence(probs: np.ndarray, offsets: np.ndarray, start: int, end: int) -> float | None:
    """Mean ``1 - P(O)`` over the tokens inside ``[start, end)`` (None: no token there)."""
    inside = (offsets[:, 0] < end) & (offsets[:, 1] > start)
    if not inside.any():
        return None
    return float(round(1.0 - probs[inside, 0].mean(), 6))


class ModelTeacher(Teacher):
    """A trained de-identification model, with its regex detectors, run in fp32 (the spans
    ``predict-ner --precision fp32`` gives)."""

    kind = "model"

    def __init__(
        self,
        name: str,
        tagger: SpanTagger,
        *,
        o_threshold: float | None,
        regex: Sequence[str] | None,
        thresholds: Thresholds,
        batch_size: int,
        model: str = "",
        model_digest: str | None = None,
    ) -> None:
        super().__init__(name)
        self.tagger = tagger
        # the model's directory and the digest of what the tagger loads from it
        # (synthdeid.ner.loading.model_digest): two models never share a provenance
        self.model = model
        self.model_digest = model_digest
        self.o_threshold = tagger.settings.o_threshold if o_threshold is None else o_threshold
        self.regex = list(tagger.settings.regex_detectors if regex is None else regex)
        unknown = sorted(set(self.regex) - set(DETECTORS))
        if unknown:
            raise ConfigError(f"unknown regex detectors {unknown}; known: {sorted(DETECTORS)}")
        self.thresholds = thresholds
        self.batch_size = batch_size

    def label(self, notes: Sequence[Note], *, progress: bool = True) -> list[NoteLabels]:
        encoded = self.tagger.encode(notes)
        probabilities = self.tagger.token_probabilities(
            encoded, batch_size=self.batch_size, progress=progress
        )
        labelled = []
        for note, enc, probs in zip(notes, encoded, probabilities, strict=True):
            model_spans = self.tagger.decode(probs, enc, note.text, o_threshold=self.o_threshold)
            spans = union_spans(model_spans, detect(note.text, self.regex) if self.regex else [])
            model_set = set(model_spans)
            scored = [
                ScoredSpan(
                    s.start,
                    s.end,
                    s.label,
                    span_confidence(probs, enc.offsets, s.start, s.end) if s in model_set else None,
                )
                for s in spans
            ]
            labels = NoteLabels(note.note_id, [])
            labels.count("entities", len(scored))
            labels.count("occurrences", len(scored))
            labelled.append(_finish(labels, scored, self.thresholds))
        return labelled

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "model_digest": self.model_digest,
            "labels": list(self.tagger.settings.labels),
            "base_model": self.tagger.settings.base_model,
            "o_threshold": self.o_threshold,
            "regex_detectors": self.regex,
            "thresholds": self.thresholds.as_dict(),
        }


def build_model_teacher(
    name: str,
    settings: Mapping[str, Any],
    *,
    model_dir: str | Path | None,
    device: str = "auto",
) -> ModelTeacher:
    from synthdeid.ner.loading import load_tagger, model_digest

    directory = model_dir or settings.get("model")
    if not directory:
        raise ConfigError(f"teacher {name!r} (model) needs a model directory")
    tagger = load_tagger(directory, device=device)
    return ModelTeacher(
        name,
        tagger,
        o_threshold=settings.get("o_threshold"),
        regex=settings.get("regex"),
        thresholds=Thresholds.from_mapping(settings.get("thresholds")),
        batch_size=int(settings.get("batch_size") or 32),
        model=str(directory),
        model_digest=model_digest(directory),
    )


# ---------------------------------------------------------------- rules


def read_dictionary(path: str | Path) -> list[str]:
    """Terms of a dictionary file: one per line, blank lines and ``#`` comments skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        detail = read_error_detail(error)
        raise ConfigError(f"cannot read teacher dictionary {path}: {detail}") from None
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


class RulesTeacher(Teacher):
    """Regex detectors plus whole-word dictionary lookups."""

    kind = "rules"

    def __init__(
        self,
        name: str,
        detectors: Sequence[str],
        dictionaries: Mapping[str, Sequence[str]],
        *,
        min_term_chars: int = 3,
    ) -> None:
        super().__init__(name)
        unknown = sorted(set(detectors) - set(DETECTORS))
        if unknown:
            raise ConfigError(f"unknown regex detectors {unknown}; known: {sorted(DETECTORS)}")
        bad = sorted(set(dictionaries) - set(CANONICAL_LABELS))
        if bad:
            raise ConfigError(
                f"dictionary labels {bad} are not canonical labels {list(CANONICAL_LABELS)}"
            )
        self.detectors = list(detectors)
        self.indexes = {
            label: SurfaceIndex(terms, min_chars=min_term_chars)
            for label, terms in dictionaries.items()
        }
        self.min_term_chars = min_term_chars

    def label(self, notes: Sequence[Note], *, progress: bool = True) -> list[NoteLabels]:
        labelled = []
        for note in notes:
            spans = [ScoredSpan(s.start, s.end, s.label) for s in detect(note.text, self.detectors)]
            for label, index in self.indexes.items():
                spans += [ScoredSpan(a, b, label) for a, b in index.find(note.text)]
            labels = NoteLabels(note.note_id, [])
            labels.count("entities", len(spans))
            labels.count("occurrences", len(spans))
            labelled.append(_finish(labels, spans, Thresholds()))
        return labelled

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "detectors": self.detectors,
            "dictionary_terms": {label: len(index) for label, index in self.indexes.items()},
            "min_term_chars": self.min_term_chars,
        }


def build_rules_teacher(name: str, settings: Mapping[str, Any]) -> RulesTeacher:
    detectors = settings.get("detectors")
    dictionaries = {
        label: read_dictionary(path) for label, path in (settings.get("dictionaries") or {}).items()
    }
    return RulesTeacher(
        name,
        list(DETECTORS) if detectors is None else detectors,
        dictionaries,
        min_term_chars=int(settings.get("min_term_chars", 3)),
    )


def build_teacher(
    name: str,
    settings: Mapping[str, Any],
    *,
    model_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    device: str = "auto",
    where: str | None = None,
) -> Teacher:
    """The teacher ``settings`` describe (an ensemble is combined by its own stage)."""
    where = where or f"teacher {name!r}"
    kind = check_settings(settings, where)
    if kind == "llm":
        return build_llm_teacher(name, settings, cache_dir=cache_dir, where=where)
    if kind == "model":
        return build_model_teacher(name, settings, model_dir=model_dir, device=device)
    if kind == "rules":
        return build_rules_teacher(name, settings)
    raise ConfigError(f"{where}: an ensemble combines labelled outputs: use combine-teachers")
