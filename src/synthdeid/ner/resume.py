"""Resuming a stopped training run at the last finished epoch.

A long run (thousands of notes on a CPU, or a SLURM job past its time limit)
can be stopped before it ends. With a resume folder, :func:`synthdeid.ner.training.train`
saves its whole state after every epoch: the weights, optimizer, schedule and
grad scaler, the random states (batch order and dropout), the epoch history
and the best epoch's weights. Run again with the same inputs, settings and
code, it loads that state and goes on from the next epoch, and ends with the
model an uninterrupted run would have written (``tests/test_ner_resume.py``
compares them weight by weight).

The state is keyed by a fingerprint of everything that decides the run (the
caller's inputs, the training settings, the code): a state with another
fingerprint is never resumed; the run starts again from epoch 1 and replaces
it. The folder holds weights trained on the training notes, so it is as
private as they are: keep it beside the model (``train_ner`` puts it in
``results/train_ner/{corpus}/{run}/resume``), never with releasable
artifacts. It is removed when the model is saved.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from synthdeid.artifacts import atomic_path

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
STATE_VERSION = 1


def resume_fingerprint(parts: Mapping[str, Any]) -> str:
    """SHA-256 of ``parts`` as canonical JSON: what must match for a state to be resumed."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ResumeFolder:
    """Where one run keeps its per-epoch state, and the fingerprint that state must carry."""

    folder: Path
    fingerprint: str

    @property
    def path(self) -> Path:
        return self.folder / STATE_FILE

    def save(self, state: Mapping[str, Any]) -> None:
        """Write ``state`` (tensors, numbers, strings, lists and dicts of them) atomically."""
        payload = {"version": STATE_VERSION, "fingerprint": self.fingerprint, "state": dict(state)}
        with atomic_path(self.path) as tmp:
            torch.save(payload, tmp)

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None (with a log line saying why) when there is none to resume."""
        if not self.path.exists():
            return None
        try:
            # tensors and plain values only: no pickled code runs
            payload = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a truncated or foreign file: start again, say so
            log.warning(
                "%s: not a readable training state (%s); training starts from epoch 1",
                self.path,
                type(exc).__name__,
            )
            return None
        if not isinstance(payload, dict) or payload.get("version") != STATE_VERSION:
            log.warning("%s: another state format; training starts from epoch 1", self.path)
            return None
        if payload.get("fingerprint") != self.fingerprint:
            log.info(
                "%s: saved for other inputs, settings or code; training starts from epoch 1",
                self.path,
            )
            return None
        state: dict[str, Any] = payload["state"]
        return state

    def clear(self) -> None:
        """Remove the folder (the run's model is saved; nothing is left to resume)."""
        shutil.rmtree(self.folder, ignore_errors=True)
