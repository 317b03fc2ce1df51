"""Causal-LM fine-tuning with DP-SGD (Opacus) or without: one loop, one switch.

DP and non-DP runs share everything but the privacy wrapper: the same
examples, the same sampler (Poisson: every note joins each logical batch
independently with probability ``q = 1 / steps_per_epoch``, from Opacus'
``UniformWithReplacementSampler`` with a seeded generator), the same number
of steps, the same physical batches, the same per-note loss (mean token
cross-entropy of the note) and the same gradient scale (the sum over the
logical batch divided by the expected batch size ``int(N q)``, which is what
Opacus does with ``loss_reduction="mean"``). With DP the optimizer clips each
note's gradient to ``max_grad_norm`` and adds Gaussian noise; without DP it
does neither. So DP with zero noise and an unreachable clipping norm takes
the same steps as non-DP.

Logical batches larger than ``physical_batch_size`` are processed in chunks;
with DP the intermediate chunks are accumulated by the Opacus optimizer
(``signal_skip_step``), as its ``BatchMemoryManager`` does. An empty Poisson
batch is not skipped silently: with DP it is a noise-only step that the
accountant records (skipping it would reveal that nobody was sampled);
without DP it is a step with no update.

With LoRA (``lora``, :mod:`synthdeid.dplm.adapters`) both runs train the
same adapters and added-token rows, the pretrained weights frozen; the
trained model comes back merged into a standard Hugging Face model.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from synthdeid.dplm.adapters import LoraSettings, apply_lora, merge_adapters, trained_parameters
from synthdeid.dplm.corpus import LmExample, control_token
from synthdeid.dplm.model import OpacusPreparation, accepts_position_ids, prepare_for_opacus
from synthdeid.dplm.privacy import (
    PrivacyConfig,
    PrivacyPlan,
    check_spent,
    plan_privacy,
    privacy_record,
)
from synthdeid.errors import ConfigError, InputError, read_error_detail
from synthdeid.settings import settings_from_mapping

log = logging.getLogger(__name__)

IGNORE = -100
# a trained model directory holds these beside the checkpoint
LM_SETTINGS_FILE = "synthdeid_lm.json"
PRIVACY_FILE = "privacy.json"


@dataclass(frozen=True)
class LmTrainingConfig:
    epochs: int = 1
    max_steps: int | None = None  # overrides epochs when set
    learning_rate: float = 5e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    logical_batch_size: int = 16
    physical_batch_size: int = 8
    max_length: int = 256
    seed: int = 0
    log_every: int = 10

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LmTrainingConfig:
        config = settings_from_mapping(cls, data, "synth.dplm.training")
        for name in ("epochs", "logical_batch_size", "physical_batch_size", "log_every"):
            if getattr(config, name) < 1:
                raise ConfigError(f"synth.dplm.training.{name} must be >= 1")
        if config.max_steps is not None and config.max_steps < 1:
            raise ConfigError("synth.dplm.training.max_steps must be >= 1 (or null)")
        if config.max_length < 8:
            raise ConfigError("synth.dplm.training.max_length must be >= 8 tokens")
        return config

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SamplingPlan:
    """How many notes, how often each is drawn, and for how many steps."""

    n: int
    steps_per_epoch: int
    sample_rate: float
    steps: int
    expected_batch_size: int


def sampling_plan(n: int, config: LmTrainingConfig) -> SamplingPlan:
    if n < 2:
        raise ConfigError(f"the language model needs at least 2 training notes, got {n}")
    steps_per_epoch = max(1, round(n / config.logical_batch_size))
    sample_rate = 1.0 / steps_per_epoch
    steps = config.max_steps or config.epochs * steps_per_epoch
    return SamplingPlan(n, steps_per_epoch, sample_rate, steps, int(n * sample_rate))


def encode_examples(
    examples: Sequence[LmExample], tokenizer: Any, max_length: int
) -> tuple[list[list[int]], int]:
    """Token ids ``bos, control, text..., eos`` per note, truncated; and how many were cut."""
    encoded, truncated = [], 0
    for example in examples:
        body = tokenizer.encode(
            control_token(example.code) + example.text, add_special_tokens=False
        )
        if len(body) > max_length - 2:
            body = body[: max_length - 2]
            truncated += 1
        encoded.append([tokenizer.bos_token_id, *body, tokenizer.eos_token_id])
    return encoded, truncated


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """Right-padded ids, attention mask and explicit position ids (Opacus needs them for GPT-2)."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    positions = torch.arange(longest, dtype=torch.long).expand(len(sequences), longest).clone()
    return {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": positions.to(device),
    }


def shifted_targets(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Next-token targets, padding ignored."""
    targets = batch["input_ids"][:, 1:].clone()
    targets[batch["attention_mask"][:, 1:] == 0] = IGNORE
    return targets


def forward_logits(
    model: nn.Module, batch: Mapping[str, torch.Tensor], positions: bool
) -> torch.Tensor:
    inputs = dict(batch) if positions else {k: v for k, v in batch.items() if k != "position_ids"}
    logits: torch.Tensor = model(**inputs).logits
    return logits[:, :-1]


def per_note_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of each note (shape: batch)."""
    tokens = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE,
        reduction="none",
    ).view(targets.shape)
    valid = (targets != IGNORE).sum(dim=1).clamp(min=1)
    return tokens.sum(dim=1) / valid


class _Indices(torch.utils.data.Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def _as_list(batch: list[int]) -> list[int]:
    return list(batch)


def build_loader(
    plan: SamplingPlan, config: LmTrainingConfig, poisson: bool
) -> torch.utils.data.DataLoader[int]:
    """Logical batches of note indices; Poisson sampled unless ``poisson`` is off."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    generator = torch.Generator().manual_seed(config.seed)
    sampler: Any
    if poisson:
        sampler = UniformWithReplacementSampler(
            num_samples=plan.n, sample_rate=plan.sample_rate, generator=generator
        )
    else:
        sampler = torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(range(plan.n), generator=generator),
            batch_size=config.logical_batch_size,
            drop_last=False,
        )
    return torch.utils.data.DataLoader(_Indices(plan.n), batch_sampler=sampler, collate_fn=_as_list)


@dataclass
class LmTrainingResult:
    model: Any
    privacy: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    truncated: int = 0
    preparation: OpacusPreparation | None = None
    trained: dict[str, Any] = field(default_factory=dict)  # trained_parameters()


class _Privatized:
    """The Opacus side of the loop: model, optimizer and criterion wrapped by PrivacyEngine."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loader: torch.utils.data.DataLoader[int],
        config: PrivacyConfig,
        plan: PrivacyPlan,
    ) -> None:
        from opacus import PrivacyEngine

        self.engine = PrivacyEngine(accountant=config.accountant, secure_mode=config.secure_mode)
        self.ghost = config.clipping == "ghost"
        made = self.engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            criterion=nn.CrossEntropyLoss(ignore_index=IGNORE),
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=config.max_grad_norm,
            poisson_sampling=False,  # the loader already samples (the same way without DP)
            grad_sample_mode="ghost" if self.ghost else "hooks",
            loss_reduction="mean",
        )
        if self.ghost:
            self.model, self.optimizer, self.criterion, self.loader = made
        else:
            self.model, self.optimizer, self.loader = made
            self.criterion = None
        self.sample_rate = 1.0 / len(self.loader)
        if not math.isclose(self.sample_rate, plan.sample_rate, rel_tol=1e-9):
            raise AssertionError(
                f"Opacus sample rate {self.sample_rate} != planned {plan.sample_rate}"
            )

    def noise_only_step(self) -> None:
        """An empty Poisson batch: the update is noise alone, and the accountant counts it."""
        from opacus.optimizers.optimizer import _generate_noise

        opt = self.optimizer
        std = opt.noise_multiplier * opt.max_grad_norm
        for p in opt.params:
            noise = _generate_noise(
                std=std, reference=p, generator=opt.generator, secure_mode=opt.secure_mode
            )
            p.grad = noise / opt.expected_batch_size
        opt.original_optimizer.step()
        opt.original_optimizer.zero_grad(set_to_none=True)
        self.engine.accountant.step(
            noise_multiplier=opt.noise_multiplier, sample_rate=self.sample_rate
        )

    def epsilon(self, delta: float) -> float:
        return float(self.engine.accountant.get_epsilon(delta=delta))

    def steps_recorded(self) -> int:
        return sum(steps for _, _, steps in self.engine.accountant.history)


def train_lm(
    examples: Sequence[LmExample],
    model: Any,
    tokenizer: Any,
    config: LmTrainingConfig,
    privacy: PrivacyConfig | None,
    *,
    device: torch.device,
    progress: bool = True,
    lora: LoraSettings | None = None,
    base_vocabulary: int | None = None,
) -> LmTrainingResult:
    """Train ``model`` on ``examples``; ``privacy=None`` is the non-DP baseline (same loop).

    ``lora``: train adapters and the rows of the tokens after ``base_vocabulary``
    (the model must not have been resized for them) instead of every weight.
    """
    from transformers import get_linear_schedule_with_warmup

    torch.manual_seed(config.seed)
    encoded, truncated = encode_examples(examples, tokenizer, config.max_length)
    plan = sampling_plan(len(encoded), config)
    poisson = privacy.poisson if privacy is not None else True
    loader = build_loader(plan, config, poisson)
    # a privacy target that cannot be met is refused before the model is touched
    noise_plan: PrivacyPlan | None = None
    if privacy is not None:
        noise_plan = plan_privacy(privacy, n=plan.n, sample_rate=plan.sample_rate, steps=plan.steps)
    model.to(device)
    model.train()
    # the same preparation with and without DP (Linear instead of Conv1D: same function)
    adapt = None
    if lora is not None:
        vocabulary = len(tokenizer)
        start = vocabulary if base_vocabulary is None else base_vocabulary

        def adapt(module: nn.Module) -> nn.Module:
            peft_model = apply_lora(module, lora, base_vocabulary=start, vocabulary=vocabulary)
            return cast(nn.Module, peft_model)

    model, preparation = prepare_for_opacus(
        model,
        untie=privacy is not None and privacy.clipping == "ghost" and lora is None,
        adapt=adapt,
    )
    trained = trained_parameters(model, "full" if lora is None else "lora")
    log.info(
        "training %s of %s parameters (%s)",
        f"{trained['trained']:,}",
        f"{trained['total']:,}",
        trained["mode"],
    )
    positions = accepts_position_ids(model)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.learning_rate,
        weight_decay=config.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )
    private: _Privatized | None = None
    if privacy is not None:
        assert noise_plan is not None
        log.info(
            "DP-SGD: noise multiplier %.4f, clip %.3g, delta %.3g, q %.4f, %d steps (planned epsilon %.3f)",
            noise_plan.noise_multiplier,
            privacy.max_grad_norm,
            noise_plan.delta,
            plan.sample_rate,
            plan.steps,
            noise_plan.epsilon(),
        )
        private = _Privatized(model, optimizer, loader, privacy, noise_plan)
        model, optimizer, loader = private.model, private.optimizer, private.loader
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=min(config.warmup_steps, plan.steps - 1),
        num_training_steps=plan.steps,
    )
    history: list[dict[str, Any]] = []
    empty = 0
    step = 0
    started = time.perf_counter()
    bar = tqdm(total=plan.steps, desc="DP-SGD" if private else "training", disable=not progress)
    while step < plan.steps:
        for indices in loader:
            if step >= plan.steps:
                break
            if not indices:
                empty += 1
                if private is not None:
                    private.noise_only_step()
                loss = math.nan
            else:
                loss = _logical_step(
                    model,
                    optimizer,
                    private,
                    [encoded[i] for i in indices],
                    config,
                    plan,
                    tokenizer,
                    device,
                    positions,
                )
            scheduler.step()
            step += 1
            bar.update(1)
            history.append({"step": step, "batch": len(indices), "loss": loss})
            if step % config.log_every == 0 or step == plan.steps:
                recent = [
                    h["loss"] for h in history[-config.log_every :] if not math.isnan(h["loss"])
                ]
                mean = sum(recent) / len(recent) if recent else math.nan
                bar.set_postfix(loss=f"{mean:.3f}")
                log.info("step %d/%d: loss %.4f", step, plan.steps, mean)
    bar.close()
    elapsed = time.perf_counter() - started
    epsilon = None
    if private is not None:
        assert noise_plan is not None and privacy is not None
        if private.steps_recorded() != plan.steps:
            raise AssertionError(
                f"the accountant recorded {private.steps_recorded()} steps, expected {plan.steps}"
            )
        epsilon = private.epsilon(noise_plan.delta)
        check_spent(noise_plan, epsilon)
        model = private.model._module
    if lora is not None:
        model = merge_adapters(model)
    model.eval()
    record = privacy_record(
        enabled=private is not None,
        config=privacy,
        plan=noise_plan,
        epsilon=epsilon,
        steps=plan.steps,
        sample_rate=plan.sample_rate,
        n=plan.n,
        expected_batch_size=plan.expected_batch_size,
        empty_batches=empty,
    )
    timing = {"seconds": elapsed, "steps_per_second": plan.steps / elapsed if elapsed else math.nan}
    return LmTrainingResult(model, record, history, timing, truncated, preparation, trained)


def _logical_step(
    model: nn.Module,
    optimizer: Any,
    private: _Privatized | None,
    sequences: list[list[int]],
    config: LmTrainingConfig,
    plan: SamplingPlan,
    tokenizer: Any,
    device: torch.device,
    positions: bool,
) -> float:
    """One optimizer step over a logical batch, in physical chunks; returns the mean note loss."""
    chunks = [
        sequences[i : i + config.physical_batch_size]
        for i in range(0, len(sequences), config.physical_batch_size)
    ]
    total = 0.0
    for number, chunk in enumerate(chunks):
        last = number == len(chunks) - 1
        batch = pad_batch(chunk, tokenizer.pad_token_id, device)
        logits = forward_logits(model, batch, positions)
        targets = shifted_targets(batch)
        if private is not None and private.criterion is not None:  # ghost clipping
            loss = private.criterion(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), shape=logits.shape
            )
            with torch.no_grad():
                total += float(per_note_loss(logits.detach(), targets).sum())
            loss.backward()
        else:
            notes = per_note_loss(logits, targets)
            total += float(notes.detach().sum())
            # DP: Opacus rescales the mean to per-note gradients and divides by the expected
            # batch size itself; non-DP: the same scale, done here
            loss = notes.mean() if private is not None else notes.sum() / plan.expected_batch_size
            loss.backward()
        if private is not None:
            if not last:
                optimizer.signal_skip_step(do_skip=True)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    if private is None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return total / len(sequences)


def read_lm_settings(directory: Path) -> dict[str, Any]:
    path = directory / LM_SETTINGS_FILE
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # undecodable bytes and bad JSON are ValueErrors
        detail = read_error_detail(exc)
        raise InputError(path, None, f"not a train-dp-lm model directory: {detail}") from None
    if not isinstance(settings, dict):
        raise InputError(path, None, "not a train-dp-lm model directory: not a JSON object")
    return settings
