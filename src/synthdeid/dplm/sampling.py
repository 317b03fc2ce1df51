"""Sampling the trained language model by control code, and scoring held-out notes.

Generation follows Zecevic et al. (sec. 4.5.1): the prompt is ``<bos> <|ctl:CODE|>``,
sampling at temperature 0.9 with nucleus ``top_p`` and
``no_repeat_ngram_size`` 4, up to ``max_new_tokens``; ``per_code`` samples
for every control code, seeded so the same model and settings give the same
samples. A sample is the decoded text up to the end-of-note token, with
control tokens removed; placeholders come out whole because they are added
tokens.

Placeholders under a constraint (``placeholders: constrained``): a model
fine-tuned with DP-SGD learns the rows of the added placeholder tokens from
noisy gradients and may give them almost no probability, so its ``pii``
samples carry no placeholder and the PII pool stays empty. The constraint
works on the logits at each step (:class:`PlaceholderConstraint`): a sample
of a code that says ``pii`` cannot end (its end-of-note token is masked)
before it has written a placeholder, a ``no_pii`` sample never writes one,
and ``placeholder_bias`` adds to every placeholder token's logit. It is
post-processing of the trained model, so the privacy guarantee is unchanged.

Samples then go through the template validator (allowlisted, well-formed
placeholders only; nothing identifier-like) before the local fill turns
them into labelled notes (:mod:`synthdeid.synthesis.pools`).

Perplexity: the exponentiated mean token cross-entropy of held-out notes
(masked the way the training notes were, each with its control code), over
all their tokens; also per note.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tqdm import tqdm
from transformers import LogitsProcessor, LogitsProcessorList

from synthdeid.dplm.corpus import control_token, strip_control_tokens
from synthdeid.dplm.model import accepts_position_ids
from synthdeid.dplm.training import forward_logits, pad_batch, per_note_loss, shifted_targets
from synthdeid.errors import ConfigError
from synthdeid.mask import PLACEHOLDER_RE
from synthdeid.settings import settings_from_mapping
from synthdeid.synthesis.prompts import Variant
from synthdeid.synthesis.validator import TemplateValidator, Verdict, reject

log = logging.getLogger(__name__)


PLACEHOLDER_MODES = ("free", "constrained")
MAX_PLACEHOLDER_BIAS = 20.0


@dataclass(frozen=True)
class SamplingConfig:
    per_code: int = 10
    temperature: float = 0.9
    top_p: float = 0.95
    no_repeat_ngram_size: int = 4
    max_new_tokens: int = 256
    batch_size: int = 16
    seed: int = 0
    min_words: int = 5
    placeholders: str = "free"  # or "constrained" (PlaceholderConstraint)
    placeholder_bias: float = 0.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SamplingConfig:
        config = settings_from_mapping(cls, data, "synth.dplm.sampling")
        if config.per_code < 1 or config.max_new_tokens < 1 or config.batch_size < 1:
            raise ConfigError(
                "synth.dplm.sampling: per_code, max_new_tokens, batch_size must be >= 1"
            )
        if config.temperature <= 0 or not 0 < config.top_p <= 1:
            raise ConfigError("synth.dplm.sampling: temperature > 0 and 0 < top_p <= 1 required")
        if config.placeholders not in PLACEHOLDER_MODES:
            raise ConfigError(
                f"synth.dplm.sampling.placeholders: {config.placeholders!r} is not one of "
                f"{PLACEHOLDER_MODES}"
            )
        if not 0 <= config.placeholder_bias <= MAX_PLACEHOLDER_BIAS:
            raise ConfigError(
                f"synth.dplm.sampling.placeholder_bias must lie in 0..{MAX_PLACEHOLDER_BIAS}"
            )
        if config.placeholder_bias and config.placeholders != "constrained":
            raise ConfigError(
                "synth.dplm.sampling.placeholder_bias applies with placeholders: constrained"
            )
        return config

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Sample:
    sample_id: str
    code: str
    text: str
    tokens: int
    finished: bool  # ended with the end-of-note token (not cut at max_new_tokens)


def placeholder_token_ids(tokenizer: Any) -> list[int]:
    """The ids of the tokenizer's added placeholder tokens (``[[DATE_1]]`` ...)."""
    return sorted(
        token_id
        for token, token_id in tokenizer.get_added_vocab().items()
        if PLACEHOLDER_RE.fullmatch(token)
    )


def has_placeholder(text: str) -> bool:
    """Whether a sample's text holds a placeholder."""
    return PLACEHOLDER_RE.search(text) is not None


class PlaceholderConstraint(LogitsProcessor):
    """Placeholders by code, on the logits of each step (see the module docstring).

    ``require``: the end-of-note token is masked in every row that has written
    no placeholder since ``prompt_length``; placeholder tokens get ``bias``.
    Otherwise placeholder tokens are masked.
    """

    def __init__(
        self, placeholder_ids: Sequence[int], eos_id: int, prompt_length: int, *, require: bool,
        bias: float = 0.0,
    ) -> None:  # fmt: skip
        self.ids = torch.tensor(list(placeholder_ids), dtype=torch.long)
        self.eos_id = eos_id
        self.prompt_length = prompt_length
        self.require = require
        self.bias = bias

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        ids = self.ids.to(scores.device)
        if not len(ids):
            return scores
        scores = scores.clone()
        if not self.require:
            scores[:, ids] = -math.inf
            return scores
        scores[:, ids] += self.bias
        written = torch.isin(input_ids[:, self.prompt_length :], ids).any(dim=1)
        scores[~written, self.eos_id] = -math.inf
        return scores


def placeholder_shares(samples: Sequence[Sample]) -> dict[str, dict[str, Any]]:
    """Per control code: samples, those holding at least one placeholder, and their share
    (None with no sample), before any validation."""
    shares: dict[str, dict[str, Any]] = {}
    for code in dict.fromkeys(s.code for s in samples):
        of_code = [s for s in samples if s.code == code]
        holding = sum(has_placeholder(s.text) for s in of_code)
        shares[code] = {
            "samples": len(of_code),
            "with_placeholder": holding,
            "share": holding / len(of_code) if of_code else None,
        }
    return shares


def requires_placeholder(code: str) -> bool:
    """Whether a control code says its note has PHI (its ``pii`` part)."""
    return "pii" in code.split("-")


def decode_sample(tokenizer: Any, ids: Sequence[int]) -> tuple[str, int, bool]:
    """Text up to the end-of-note token (exclusive), control and padding tokens removed."""
    ids = list(ids)
    finished = tokenizer.eos_token_id in ids
    if finished:
        ids = ids[: ids.index(tokenizer.eos_token_id)]
    drop = {tokenizer.pad_token_id, tokenizer.bos_token_id}
    kept = [i for i in ids if i not in drop]
    text = tokenizer.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return strip_control_tokens(text).strip(), len(kept), finished


def generate_samples(
    model: Any,
    tokenizer: Any,
    codes: Sequence[str],
    config: SamplingConfig,
    *,
    device: torch.device,
    progress: bool = True,
) -> list[Sample]:
    """``per_code`` samples for every control code, in code order; deterministic for a seed."""
    positions_limit = getattr(model.config, "n_positions", None) or getattr(
        model.config, "max_position_embeddings", None
    )
    samples: list[Sample] = []
    total = len(codes) * config.per_code
    bar = tqdm(total=total, desc="sampling", disable=not progress)
    for code_number, code in enumerate(codes):
        prompt = [
            tokenizer.bos_token_id,
            *tokenizer.encode(control_token(code), add_special_tokens=False),
        ]
        max_new = config.max_new_tokens
        if positions_limit:
            max_new = min(max_new, positions_limit - len(prompt))
        made = 0
        while made < config.per_code:
            count = min(config.batch_size, config.per_code - made)
            torch.manual_seed(config.seed * 1_000_003 + code_number * 10_007 + made)
            inputs = torch.tensor([prompt] * count, dtype=torch.long, device=device)
            processors = LogitsProcessorList()
            if config.placeholders == "constrained":
                processors.append(
                    PlaceholderConstraint(
                        placeholder_token_ids(tokenizer),
                        tokenizer.eos_token_id,
                        len(prompt),
                        require=requires_placeholder(code),
                        bias=config.placeholder_bias,
                    )
                )
            with torch.no_grad():
                out = model.generate(
                    input_ids=inputs,
                    logits_processor=processors,
                    attention_mask=torch.ones_like(inputs),
                    do_sample=True,
                    temperature=config.temperature,
                    top_p=config.top_p,
                    top_k=0,
                    no_repeat_ngram_size=config.no_repeat_ngram_size,
                    max_new_tokens=max_new,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for row in out[:, len(prompt) :].tolist():
                text, n_tokens, finished = decode_sample(tokenizer, row)
                samples.append(Sample(f"{code}:{made:05d}", code, text, n_tokens, finished))
                made += 1
            bar.update(count)
    bar.close()
    return samples


def validate_sample(
    sample: Sample, validator: TemplateValidator, variant: Variant, min_words: int
) -> Verdict:
    """The template checks a sample must pass before it is filled."""
    if len(sample.text.split()) < min_words:
        return reject("too_short", f"{len(sample.text.split())} words, at least {min_words}")
    checks: tuple[Callable[[], Verdict | None], ...] = (
        lambda: validator.check_placeholders(sample.text, variant),
        lambda: validator.check_identifiers(sample.text),
    )
    for check in checks:
        verdict = check()
        if verdict is not None:
            return verdict
    return Verdict(sample.text)


@dataclass(frozen=True)
class Perplexity:
    perplexity: float
    mean_nll: float
    tokens: int
    notes: int
    per_note: list[float]

    def to_json(self) -> dict[str, Any]:
        return {
            "perplexity": self.perplexity,
            "mean_token_nll": self.mean_nll,
            "tokens": self.tokens,
            "notes": self.notes,
        }


def perplexity(
    model: Any,
    tokenizer: Any,
    coded_texts: Sequence[tuple[str, str]],
    *,
    max_length: int,
    batch_size: int = 8,
    device: torch.device,
) -> Perplexity:
    """Perplexity of ``(code, text)`` notes, truncated to ``max_length`` tokens as in training."""
    if not coded_texts:
        raise ConfigError("perplexity needs at least one held-out note")
    encoded = []
    for code, text in coded_texts:
        body = tokenizer.encode(control_token(code) + text, add_special_tokens=False)
        encoded.append([tokenizer.bos_token_id, *body[: max_length - 2], tokenizer.eos_token_id])
    positions = accepts_position_ids(model)
    total_nll, total_tokens = 0.0, 0
    per_note: list[float] = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(encoded), batch_size):
            batch = pad_batch(encoded[start : start + batch_size], tokenizer.pad_token_id, device)
            targets = shifted_targets(batch)
            # the control token is given, not predicted: its target is dropped
            targets[:, 0] = -100
            logits = forward_logits(model, batch, positions)
            losses = per_note_loss(logits, targets)
            counts = (targets != -100).sum(dim=1)
            total_nll += float((losses * counts).sum())
            total_tokens += int(counts.sum())
            per_note.extend(math.exp(v) for v in losses.tolist())
    mean = total_nll / max(total_tokens, 1)
    return Perplexity(math.exp(mean), mean, total_tokens, len(encoded), per_note)
