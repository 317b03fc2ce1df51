"""Length-bucketed batches of token windows, padded only to their own longest window.

Padding is wasted compute, and on a CPU nothing hides it. Inference sorts all
windows by length, so a batch holds windows of nearly equal length. Training
keeps randomness: windows are shuffled, cut into pools of ``pool_factor``
batches, sorted by length inside each pool, batched, and the batches shuffled.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from synthdeid.ner.tagging import IGNORE_INDEX, Window


def sorted_batches(windows: Sequence[Window], batch_size: int) -> list[list[int]]:
    """Window indices in batches of similar length (longest first), for inference."""
    order = sorted(range(len(windows)), key=lambda i: -windows[i].input_ids.shape[0])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def shuffled_bucket_batches(
    windows: Sequence[Window], batch_size: int, rng: np.random.Generator, pool_factor: int = 50
) -> list[list[int]]:
    """Random batches whose windows have similar lengths, for training."""
    order = rng.permutation(len(windows))
    pool = batch_size * pool_factor
    batches: list[list[int]] = []
    for first in range(0, len(order), pool):
        chunk = sorted(order[first : first + pool], key=lambda i: windows[i].input_ids.shape[0])
        batches += [
            [int(i) for i in chunk[j : j + batch_size]] for j in range(0, len(chunk), batch_size)
        ]
    rng.shuffle(batches)
    return batches


def collate(
    windows: Sequence[Window], indices: Sequence[int], pad_id: int, multiple_of: int = 8
) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest window: input_ids, attention_mask, token_type_ids when
    the windows carry casing types, and labels if tagged.

    The padded length is rounded up to ``multiple_of`` tokens: fewer distinct
    tensor shapes keep the CPU kernels' caches and the allocator from growing
    with every new length.
    """
    longest = max(windows[i].input_ids.shape[0] for i in indices)
    longest = -(-longest // multiple_of) * multiple_of
    ids = np.full((len(indices), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(indices), longest), dtype=np.int64)
    tagged = windows[indices[0]].tags is not None
    tags = np.full((len(indices), longest), IGNORE_INDEX, dtype=np.int64) if tagged else None
    typed = windows[indices[0]].type_ids is not None
    types = np.zeros((len(indices), longest), dtype=np.int64) if typed else None
    for row, i in enumerate(indices):
        window = windows[i]
        n = window.input_ids.shape[0]
        ids[row, :n] = window.input_ids
        mask[row, :n] = 1
        if tags is not None and window.tags is not None:
            tags[row, :n] = window.tags
        if types is not None and window.type_ids is not None:
            types[row, :n] = window.type_ids
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    if types is not None:
        batch["token_type_ids"] = torch.from_numpy(types)
    if tags is not None:
        batch["labels"] = torch.from_numpy(tags)
    return batch


def padding_share(windows: Sequence[Window], batches: Sequence[Sequence[int]]) -> float:
    """Share of the batched positions that are padding (0 = no waste)."""
    real = padded = 0
    for batch in batches:
        lengths = [windows[i].input_ids.shape[0] for i in batch]
        real += sum(lengths)
        padded += max(lengths) * len(lengths)
    return 0.0 if padded == 0 else 1.0 - real / padded
