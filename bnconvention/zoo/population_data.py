"""The population's task: the bundled digits made hard enough that no accuracy cell saturates ("noisy digits").

Built from :func:`bnconvention.data.digits.digits_arrays` (16×16 grey, values in [0, 1], the zoo's hash-defined test
split and record ids) by a fixed corruption that is part of the task's definition, not of any build seed: each
record gets, from one numpy ``PCG64`` stream seeded by :data:`TASK_SEED` and drawn in record-id order,

1. a random contrast in [0.5, 1.0] (the stroke intensity is scaled by it),
2. an occluding square of side 6 at a uniform position, filled with 0.5 grey,
3. additive Gaussian noise of standard deviation :data:`NOISE_STD`, then clipped to [0, 1].

The task is written once per population as ``task.npz`` (arrays ``x``, ``y``, ``ids``, ``is_test``) with fixed zip
timestamps, so the same numpy gives the same bytes; an audit spec reads it as ``dataset: {kind: npz}``.

Removal sets (:func:`forget_ids`): instance-wise, the train records ranked by ``sha256("population-forget:<id>")``
and the first ``round(ratio × train)`` taken, so the sets are nested (2 % ⊂ 5 % ⊂ 10 %) and stable across library
versions; or a whole class (the train records of class 3).

>>> task = noisy_digits()
>>> task.x.shape, int(task.is_test.sum()), float(task.x.min()) >= 0.0
((1797, 1, 16, 16), 463, True)
>>> len(forget_ids(task, ratio=0.05)), set(forget_ids(task, ratio=0.02)) <= set(forget_ids(task, ratio=0.05))
(67, True)
"""

from __future__ import annotations

import functools
import hashlib
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bnconvention.data.digits import digits_arrays
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes

TASK_ID = "bnconvention/noisy-digits"
TASK_SEED = 20_260_113
NOISE_STD = 0.2
OCCLUSION = 5
TASK_FILE = "task.npz"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)

__all__ = ["TASK_FILE", "TASK_ID", "NoisyDigits", "forget_ids", "noisy_digits", "task_npz_bytes", "write_task"]


@dataclass(frozen=True)
class NoisyDigits:
    """The task's records: images ``x`` (float32 N×1×16×16), labels ``y``, ``ids`` (the digits' ids), test mask."""

    x: np.ndarray
    y: np.ndarray
    ids: np.ndarray
    is_test: np.ndarray

    @property
    def train_ids(self) -> np.ndarray:
        return self.ids[~self.is_test]


def _corrupt(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n, _, height, width = x.shape
    contrast = np.asarray(rng.uniform(0.5, 1.0, size=n))
    corners = rng.integers(0, np.array([height - OCCLUSION + 1, width - OCCLUSION + 1]), size=(n, 2))
    noise = rng.normal(0.0, NOISE_STD, size=x.shape)
    out = x.astype(np.float64) * contrast[:, None, None, None]
    for i, (top, left) in enumerate(corners):
        out[i, :, top:top + OCCLUSION, left:left + OCCLUSION] = 0.5
    return np.clip(out + noise, 0.0, 1.0).astype(np.float32)


@functools.lru_cache(maxsize=1)
def noisy_digits() -> NoisyDigits:
    """The task (computed once per process; read-only arrays)."""
    digits = digits_arrays()
    x = _corrupt(np.asarray(digits.x), np.random.Generator(np.random.PCG64(TASK_SEED)))
    arrays = (x, np.array(digits.y), np.array(digits.ids), np.array(digits.is_test))
    for array in arrays:
        array.setflags(write=False)
    return NoisyDigits(*arrays)


def forget_ids(task: NoisyDigits, *, ratio: float | None = None, forget_class: int | None = None) -> list[int]:
    """Sorted record ids of a removal: a ``ratio`` of the train split (hash-ranked, nested) or a ``forget_class``."""
    if (ratio is None) == (forget_class is None):
        raise UsageError("a removal is either a ratio of the train split or a class, not both or neither")
    train = task.train_ids
    if forget_class is not None:
        labels = task.y[~task.is_test]
        return sorted(int(i) for i in train[labels == forget_class])
    if ratio is None or not 0.0 < ratio < 1.0:
        raise UsageError(f"a removal ratio is a fraction in (0, 1), got {ratio!r}")
    ranked = sorted((hashlib.sha256(f"population-forget:{int(i)}".encode("ascii")).hexdigest(), int(i))
                    for i in train)
    return sorted(record for _, record in ranked[:round(ratio * len(train))])


def task_npz_bytes(task: NoisyDigits) -> bytes:
    """The task as ``.npz`` bytes with fixed member order and timestamps (``numpy.savez`` stamps the time)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in (("x", task.x), ("y", task.y), ("ids", task.ids), ("is_test", task.is_test)):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def write_task(folder: Path, task: NoisyDigits | None = None) -> Path:
    """Write ``task.npz`` into ``folder`` atomically; returns its path."""
    path = folder / TASK_FILE
    atomic_write_bytes(path, task_npz_bytes(task or noisy_digits()))
    return path


def split_indices(task: NoisyDigits, forget: Sequence[int]) -> dict[str, np.ndarray]:
    """Row indices of the train, retain, forget and test splits (row order = record-id order)."""
    removed = np.isin(task.ids, np.asarray(list(forget), dtype=task.ids.dtype))
    train = ~task.is_test
    return {"train": np.flatnonzero(train), "retain": np.flatnonzero(train & ~removed),
            "forget": np.flatnonzero(train & removed), "test": np.flatnonzero(task.is_test)}
