"""Which data fitted the running statistics, measured by content rather than by tags set inside the loop.

The author names the splits (``{"retain": retain_set, "forget": forget_set}``: torch ``Dataset``s, ``datasets``
splits in torch format, lists of tensors); :class:`SplitIndex` digests each record's input tensor once, and the
recorder digests every row of every batch the recorded model is called with. A batch that writes the buffers is
matched row by row, and :class:`ShareTracker` follows each split's weight in the running statistics exactly as the
layers weight the batches: an ``ema`` write with momentum m keeps (1 - m) of everything before it and gives m to the
batch (each split its fraction of the batch's rows); a cumulative write (momentum ``None``) gives the batch 1/n.
What the buffers held before the run keeps the rest (``initial_share``).

Rows match when the tensor the model receives is the tensor the dataset returns (same dtype, shape and bytes): a
deterministic transform, the records cached as tensors. Random augmentation, a cast or a move to another device
before the forward makes rows unmatched; they are counted and their share said, never guessed.

>>> tracker = ShareTracker(["retain", "forget"])
>>> tracker.update([3, 1, 0], momentum=0.5)          # 3 retain rows, 1 forget row, 0 unmatched
>>> [round(s, 3) for s in tracker.shares], round(tracker.initial, 3)
([0.375, 0.125, 0.0], 0.5)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bnconvention.errors import UsageError
from bnconvention.standard.models import SplitMatching, SplitShare

__all__ = ["INPUT_KEYS", "MIXED_SHARE_FLOOR", "ShareTracker", "SplitIndex", "row_digests"]

# Keys tried, in order, for the model input of a record that is a mapping (``datasets``, transformers collators).
INPUT_KEYS = ("pixel_values", "x", "input", "inputs", "image", "img", "input_ids")
# A split holding at least this share of the running statistics is named as one they mix (1 %: below it a split's
# contribution is smaller than one batch of a thousand-step EMA run's last hundred writes).
MIXED_SHARE_FLOOR = 0.01


def _digest(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().to("cpu").contiguous()
    head = f"{flat.dtype}|{tuple(flat.shape)}|".encode()
    if flat.dtype == torch.bfloat16:  # numpy has no bfloat16: its bytes as int16
        flat = flat.view(torch.int16)
    return hashlib.blake2b(head + flat.numpy().tobytes(), digest_size=16).digest()


def row_digests(batch: torch.Tensor) -> list[bytes]:
    """The content digest of each row (record) of a batch: the same as the record's own tensor gives."""
    return [_digest(row) for row in batch]


def _input_of(item: Any, input_key: str | None, *, split: str, index: int) -> torch.Tensor:
    if isinstance(item, torch.Tensor):
        return item
    if isinstance(item, Mapping):
        keys = [input_key] if input_key else [k for k in INPUT_KEYS if k in item]
        if keys and keys[0] in item and isinstance(item[keys[0]], torch.Tensor):
            return item[keys[0]]
        raise UsageError(f"split {split!r}, record {index}: no tensor under {input_key or ' / '.join(INPUT_KEYS)!r} "
                         "(name the input with input_key=, or give the dataset in torch format)")
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], torch.Tensor):
        return item[0]
    raise UsageError(f"split {split!r}, record {index}: a {type(item).__name__}, not a tensor, a (input, target) "
                     "pair or a mapping holding the input tensor")


class SplitIndex:
    """Content digests of every record of the named splits (built once, before the run)."""

    def __init__(self, splits: Mapping[str, Any], *, input_key: str | None = None) -> None:
        if not splits:
            raise UsageError("splits= names at least one split, e.g. {'retain': retain_set, 'forget': forget_set}")
        self.names = list(splits)
        self.sizes: list[int] = []
        self.shared = 0  # records found in more than one split: counted for the first
        self._where: dict[bytes, int] = {}
        for position, (name, dataset) in enumerate(splits.items()):
            if not isinstance(name, str) or not name.strip():
                raise UsageError(f"a split's name is a non-empty string, got {name!r}")
            try:
                size = len(dataset)
            except TypeError as exc:
                raise UsageError(f"split {name!r}: a {type(dataset).__name__} has no length; give a map-style "
                                 "dataset or a list of records") from exc
            for index in range(size):
                digest = _digest(_input_of(dataset[index], input_key, split=name, index=index))
                if self._where.setdefault(digest, position) != position:
                    self.shared += 1
            self.sizes.append(size)

    def counts(self, batch: torch.Tensor) -> list[int]:
        """Rows of ``batch`` per named split, then the unmatched rows."""
        found = [0] * (len(self.names) + 1)
        for digest in row_digests(batch):
            found[self._where.get(digest, len(self.names))] += 1
        return found


class ShareTracker:
    """Each named split's weight in the running statistics, updated write by write like the statistics."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.shares = [0.0] * (len(self.names) + 1)  # named splits, then unmatched
        self.records = [0] * (len(self.names) + 1)
        self.initial = 1.0

    def update(self, counts: Sequence[int], *, momentum: float | None, batches_tracked: int = 0) -> None:
        """One buffer write of a batch with ``counts`` rows per split (then unmatched); ``batches_tracked`` is the
        layer's count before the write (a cumulative write gives the batch 1 / (count + 1))."""
        total = sum(counts)
        if total == 0:
            return
        factor = momentum if momentum is not None else 1.0 / (batches_tracked + 1)
        keep = 1.0 - factor
        self.shares = [keep * share + factor * count / total for share, count in zip(self.shares, counts,
                                                                                        strict=True)]
        self.initial *= keep
        self.records = [seen + count for seen, count in zip(self.records, counts, strict=True)]

    def matching(self) -> SplitMatching:
        *named, unmatched = self.shares
        return SplitMatching(
            splits=[SplitShare(split=name, records=records, share=min(1.0, max(0.0, share)))
                    for name, records, share in zip(self.names, self.records[:-1], named, strict=True)],
            unmatched_records=self.records[-1], unmatched_share=min(1.0, max(0.0, unmatched)),
            initial_share=min(1.0, max(0.0, self.initial)))
