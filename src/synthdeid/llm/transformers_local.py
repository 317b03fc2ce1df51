"""A local causal language model (``transformers``) as a chat backend.

The model runs in this process, on the GPU when there is one (bfloat16 where
supported) and on the CPU otherwise (float32), so nothing leaves the
machine. ``model`` is any form :func:`synthdeid.llm.models.resolve_model`
accepts (``bundled:smollm2``, a GGUF file, a model directory, a hub id),
resolved when the backend is built. The model is loaded on first use (or by
:meth:`TransformersBackend.load`) with ``from_pretrained``; a GGUF file
(which needs the ``gguf`` package) is loaded, tokenizer included, with
``from_pretrained(folder, gguf_file=name)`` and dequantized, once: the result
is kept as a plain transformers folder under ``$SYNTHDEID_MODEL_CACHE``
(default ``~/.cache/synthdeid/models``), which later loads read. transformers
honours ``HF_HUB_OFFLINE`` itself, so an offline run needs a local model or
one already in the Hugging Face cache.

Prompts are the tokenizer's chat template applied to the messages with a
generation prompt, or, for tokenizers without one, ``role: content`` lines
followed by ``assistant:``. Requests are grouped by sampling settings, sorted
by prompt length and generated ``batch_size`` at a time with left padding;
only the new tokens are decoded. ``temperature`` 0 means greedy decoding.
``fold_system``: "auto" folds system messages into the first user turn when
the chat template drops them (rendered with a probe system message that does
not come out), true or false forces it.

Reproducibility: a batch whose requests carry seeds is sampled from a torch
generator seeded from those seeds (the global RNG is left as it was), so the
same requests with the same ``batch_size`` give the same answers. A request's
answer may depend on its batch mates (padding, shared random stream).
A request with a :class:`~synthdeid.llm.constraints.NoteShape` is decoded
under it (:mod:`synthdeid.llm.shape_decoding`); ``json_mode`` alone is not
enforced.
A generation error fails its batch with the exception's class as the reason
(its message may quote the prompt, so it goes neither there nor into a log).

The cache key of a local model includes a fingerprint of its files (names,
sizes, first and last MiB), so a retrained model in the same place does not
reuse the old model's answers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
from tqdm import tqdm

from synthdeid.errors import ConfigError
from synthdeid.llm.base import CachedChatBackend, ChatFailure, ChatRequest, ChatResponse, ChatResult
from synthdeid.llm.cache import ResponseCache
from synthdeid.llm.conversion import load_advice, pretrained_location
from synthdeid.llm.models import ModelRef, resolve_model
from synthdeid.runtime import pick_device

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class _Item:
    """A request to generate: its position in the batch of requests and its prompt ids."""

    index: int
    request: ChatRequest
    ids: list[int]


class TransformersBackend(CachedChatBackend):
    """Chat completions from a local causal LM: see the module docstring.

    ``device``: "auto" (cuda when available, else cpu), "cpu", "cuda" or
    "cuda:N". ``dtype``: "auto" (bfloat16 on a GPU that supports it, float32
    on the CPU) or one of :data:`DTYPES`. ``max_new_tokens`` caps every
    request's ``max_tokens`` when set.
    """

    name = "transformers"

    def __init__(
        self,
        model: str | Mapping[str, Any],
        device: str = "auto",
        batch_size: int = 8,
        max_new_tokens: int | None = None,
        dtype: str = "auto",
        cache: ResponseCache | None = None,
        fold_system: bool | str = "auto",
    ) -> None:
        super().__init__(cache)
        if fold_system not in (True, False, "auto"):
            raise ConfigError(f"fold_system must be auto, true or false, not {fold_system!r}")
        self.fold_system = fold_system
        self.ref: ModelRef = resolve_model(model)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, not {batch_size!r}")
        if max_new_tokens is not None and (
            not isinstance(max_new_tokens, int) or max_new_tokens < 1
        ):
            raise ConfigError(f"max_new_tokens must be a positive integer, not {max_new_tokens!r}")
        self.model = self.ref.name
        self.device = pick_device(device)
        self.dtype = _resolve_dtype(dtype, self.device)
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._lm: Any = None
        self._token_table: Any = None
        self._folds: bool | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "model_ref": self.ref.describe(),
            "model_fingerprint": self.fingerprint(),
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "batch_size": self.batch_size,
            "max_new_tokens": self.max_new_tokens,
            "fold_system": self.fold_system,
        }

    def cache_extra(self) -> Mapping[str, Any]:
        extra: dict[str, Any] = {"model_fingerprint": self.fingerprint()}
        if self.fold_system is not False:
            extra["fold_system"] = self.fold_system
        return extra

    def fingerprint(self) -> str | None:
        """Digest of the local model's files; None for a hub id."""
        return self.ref.fingerprint

    def load(self) -> None:
        """Load the tokenizer and model now (otherwise done on the first uncached request)."""
        with self._lock:
            if self._lm is None:
                self._tokenizer, self._lm = _load(self.ref, self.device, self.dtype)

    def close(self) -> None:
        with self._lock:
            self._tokenizer = self._lm = self._token_table = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def prompt(self, request: ChatRequest) -> str:
        """The text the model continues for ``request``."""
        self.load()
        if self.folds_system():
            request = request.with_system_folded()
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        if getattr(self._tokenizer, "chat_template", None):
            text = self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return cast(str, text)
        lines = [f"{m['role']}: {m['content']}" for m in messages]
        return "\n".join([*lines, "assistant:"])

    def folds_system(self) -> bool:
        """Whether system messages are folded into the first user turn (see the module)."""
        if self.fold_system != "auto":
            return bool(self.fold_system)
        if self._folds is None:
            self.load()
            self._folds = _template_drops_system(self._tokenizer)
            if self._folds:
                log.info("%s: the chat template drops system messages; folding them", self.model)
        return self._folds

    def token_table(self) -> Any:
        """The vocabulary's token texts for shaped decoding, built on first use."""
        from synthdeid.llm.shape_decoding import TokenTable

        self.load()
        if self._token_table is None:
            vocab = self._lm.get_output_embeddings().weight.shape[0]
            self._token_table = TokenTable(self._tokenizer, vocab)
        return self._token_table

    # -- generation ----------------------------------------------------------

    def _complete_uncached(
        self,
        requests: Sequence[ChatRequest],
        *,
        progress: bool,
        on_result: Callable[[int, ChatResult], None],
    ) -> list[ChatResult]:
        self.load()
        results: list[ChatResult] = [ChatFailure("not generated")] * len(requests)
        items = []
        for i, request in enumerate(requests):
            ids = self._encode(request)
            if len(ids) >= self._max_positions():
                results[i] = ChatFailure(
                    f"prompt too long: {len(ids)} tokens, the model takes {self._max_positions()}"
                )
                on_result(i, results[i])
            else:
                items.append(_Item(i, request, ids))
        with tqdm(total=len(items), desc=f"{self.name}", disable=not progress) as bar:
            for batch in self._batches(items):
                for item, result in zip(batch, self._generate(batch), strict=True):
                    results[item.index] = result
                    on_result(item.index, result)
                bar.update(len(batch))
        return results

    def _encode(self, request: ChatRequest) -> list[int]:
        templated = bool(getattr(self._tokenizer, "chat_template", None))
        encoded = self._tokenizer(self.prompt(request), add_special_tokens=not templated)
        return list(encoded["input_ids"])

    def _max_positions(self) -> int:
        config = self._lm.config
        for attribute in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, attribute, None)
            if isinstance(value, int) and value > 0:
                return value
        return 1 << 30

    def _batches(self, items: Sequence[_Item]) -> Iterator[list[_Item]]:
        """Items grouped by sampling settings, sorted by prompt length, ``batch_size`` at a time."""
        groups: dict[tuple[float, float, int], list[_Item]] = {}
        for item in items:
            r = item.request
            groups.setdefault((r.temperature, r.top_p, r.max_tokens), []).append(item)
        for group in groups.values():
            group.sort(key=lambda item: len(item.ids))
            for start in range(0, len(group), self.batch_size):
                yield group[start : start + self.batch_size]

    def _generate(self, batch: list[_Item]) -> list[ChatResult]:
        """Answers for one batch; on running out of GPU memory, halves the batch."""
        try:
            return self._generate_batch(batch)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if len(batch) == 1:
                return [ChatFailure("generation failed: out of GPU memory")]
            half = len(batch) // 2
            log.warning("%s: out of GPU memory; batch of %d split", self.name, len(batch))
            return self._generate(batch[:half]) + self._generate(batch[half:])
        except (RuntimeError, ValueError) as error:
            # the exception's class only: its message may quote the prompt or the output
            reason = f"generation failed: {type(error).__name__}"
            log.warning("%s: %s (batch of %d)", self.name, reason, len(batch))
            return [ChatFailure(reason) for _ in batch]

    def _generate_batch(self, batch: list[_Item]) -> list[ChatResult]:
        request = batch[0].request
        width = max(len(item.ids) for item in batch)
        pad = self._tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(i.ids)) + i.ids for i in batch])
        mask = torch.tensor([[0] * (width - len(i.ids)) + [1] * len(i.ids) for i in batch])
        limit = min(request.max_tokens, self.max_new_tokens or request.max_tokens)
        new_tokens = min(limit, self._max_positions() - width)
        sampling: dict[str, Any] = {"do_sample": False}
        if request.temperature > 0:
            sampling = {
                "do_sample": True,
                "temperature": request.temperature,
                "top_p": request.top_p,
            }
        if any(item.request.shape is not None for item in batch):
            from transformers import LogitsProcessorList

            from synthdeid.llm.shape_decoding import ShapeLogitsProcessor

            shaped = ShapeLogitsProcessor(
                self.token_table(), [i.request.shape for i in batch], width, self._eos_ids()
            )
            sampling["logits_processor"] = LogitsProcessorList([shaped])
        with torch.inference_mode(), _seeded(_batch_seed(batch), self.device):
            output = self._lm.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=new_tokens,
                pad_token_id=pad,
                eos_token_id=self._eos_ids(),
                **sampling,
            )
        return [
            self._response(row[width:].tolist(), len(item.ids))
            for item, row in zip(batch, output, strict=True)
        ]

    def _response(self, new_ids: list[int], prompt_tokens: int) -> ChatResponse:
        eos = set(self._eos_ids())
        end = next((i + 1 for i, token in enumerate(new_ids) if token in eos), len(new_ids))
        text = self._tokenizer.decode(new_ids[:end], skip_special_tokens=True)
        return ChatResponse(
            text=text, model=self.model, input_tokens=prompt_tokens, output_tokens=end
        )

    def _eos_ids(self) -> list[int]:
        configured = getattr(self._lm.generation_config, "eos_token_id", None)
        if configured is None:
            configured = self._tokenizer.eos_token_id
        ids = configured if isinstance(configured, list) else [configured]
        return [i for i in ids if i is not None]


def _load(ref: ModelRef, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if ref.gguf_file is not None and importlib.util.find_spec("gguf") is None:
        raise ConfigError(
            f"loading the GGUF model {ref.name!r} needs the gguf package (pip install gguf==0.19.0)"
        )
    location, options = pretrained_location(ref)
    log.info("loading %s (%s) on %s (%s)", ref.name, ref.kind, device, dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **options)
        lm = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, **options)
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"cannot load causal LM {ref.name!r}: {load_advice(ref, error)}"
        ) from error
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    # functools.wraps types transformers' .to as unbound (self first)
    return tokenizer, lm.to(device).eval()  # type: ignore[arg-type]


def _template_drops_system(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template leaves a system message out (or refuses it)."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    probe = "synthdeid-system-probe-7f3a"
    messages = [{"role": "system", "content": probe}, {"role": "user", "content": "hello"}]
    try:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # a template that raises on a system role drops it
        return True
    return probe not in rendered


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be auto or one of {sorted(DTYPES)}, not {dtype!r}")
    return DTYPES[dtype]


def _batch_seed(batch: Sequence[_Item]) -> int | None:
    seeds = [item.request.seed for item in batch]
    if all(seed is None for seed in seeds):
        return None
    digest = hashlib.sha256(json.dumps(seeds).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG for one generation, restoring the previous state afterwards."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield
