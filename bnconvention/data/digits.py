"""The digits data of the zoo, prepared deterministically, and its train and eval transforms.

Preparation (fixed; it is part of the dataset definition, not of any seed):

1. ``sklearn.datasets.load_digits()`` (bundled with scikit-learn, no download): 1797 grey 8×8 images, values 0..16.
2. Scale to [0, 1] and upsample to 16×16 with bilinear interpolation (``align_corners=False`` semantics, the same
   as ``torch.nn.functional.interpolate``), computed in float64 with a fixed interpolation matrix, stored as float32.
3. Record id = the image's index in ``load_digits()`` order (0..1796): stable integers, so
   :func:`bnconvention.standard.naming.record_ids_sha256` fingerprints any split.
4. Test split: a record is in the test split when the first 8 hex digits of ``sha256("sklearn/digits:<id>")`` are
   divisible by 4 (about a quarter of the records). A hash instead of a random permutation keeps the split stable
   across numpy and scikit-learn versions.

Transforms act on batches of prepared images (``N×1×16×16`` tensors in [0, 1]):

* :data:`DIGITS_TRAIN_TRANSFORM`: each image shifted by a random offset in {-1, 0, 1} pixels on each axis (zero
  fill), drawn from the generator the caller passes, so a seeded generator gives the same batch every time.
* :data:`DIGITS_EVAL_TRANSFORM`: the identity.

>>> arrays = digits_arrays()
>>> arrays.x.shape, arrays.y.shape, int(arrays.is_test.sum())
((1797, 1, 16, 16), (1797,), 463)
>>> DIGITS_EVAL_TRANSFORM.standard().description.augmentations
[]
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from bnconvention.authoring.declaration import make_transform
from bnconvention.data.source import DIGITS_DATASET_ID
from bnconvention.standard.models import Transform, TransformDescription, TransformMode

# scikit-learn is imported inside digits_arrays, the one function that reads it: its import takes seconds, and the pools
# import this module whatever the dataset.
DIGITS_IMAGE_SIZE = 16
DIGITS_NUM_CLASSES = 10
DIGITS_RESIZE = "8x8 to 16x16 bilinear (align_corners=False), values scaled to [0, 1]"
DIGITS_SHIFT = "random shift by -1, 0 or +1 pixels on each axis, zero fill"


@dataclass(frozen=True)
class DigitsArrays:
    """The prepared digits: images ``x`` (float32, N×1×16×16), labels ``y`` (int64), ``ids`` (int64), test mask."""

    x: np.ndarray
    y: np.ndarray
    ids: np.ndarray
    is_test: np.ndarray


def _bilinear_matrix(src: int, dst: int) -> np.ndarray:
    """``dst×src`` matrix ``W`` with ``W @ column`` = bilinear resize of a column (PyTorch ``align_corners=False``)."""
    matrix = np.zeros((dst, src), dtype=np.float64)
    scale = src / dst
    for i in range(dst):
        position = max((i + 0.5) * scale - 0.5, 0.0)
        low = min(int(np.floor(position)), src - 1)
        high = min(low + 1, src - 1)
        weight = position - low
        matrix[i, low] += 1.0 - weight
        matrix[i, high] += weight
    return matrix


def is_test_id(record_id: int) -> bool:
    """Whether digits record ``record_id`` belongs to the test split (see the module docstring)."""
    digest = hashlib.sha256(f"{DIGITS_DATASET_ID}:{record_id}".encode("ascii")).hexdigest()
    return int(digest[:8], 16) % 4 == 0


@functools.lru_cache(maxsize=1)
def _digits_arrays_cached() -> DigitsArrays:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float64) / 16.0  # (N, 8, 8)
    matrix = _bilinear_matrix(8, DIGITS_IMAGE_SIZE)
    upsampled = np.einsum("ij,njk,lk->nil", matrix, images, matrix)
    x = np.ascontiguousarray(upsampled[:, None, :, :], dtype=np.float32)
    ids = np.arange(len(images), dtype=np.int64)
    is_test = np.array([is_test_id(int(i)) for i in ids], dtype=bool)
    for array in (x, ids, is_test):
        array.setflags(write=False)
    y = np.asarray(bunch.target, dtype=np.int64)
    y.setflags(write=False)
    return DigitsArrays(x=x, y=y, ids=ids, is_test=is_test)


def digits_arrays() -> DigitsArrays:
    """The prepared digits (read-only arrays, computed once per process)."""
    return _digits_arrays_cached()


# --- transforms -----------------------------------------------------------------------------------------------------

BatchFn = Callable[["torch.Tensor", "torch.Generator | None"], "torch.Tensor"]


@dataclass(frozen=True)
class BatchTransform:
    """A transform over image batches together with its description in the standard.

    ``transform(x, generator=g)`` applies it; :meth:`standard` gives the standard's ``Transform`` (description and
    its sha256) that a fitting convention names. Equality ignores ``fn``: the description is the identity.
    """

    mode: TransformMode
    reference: str
    fn: BatchFn = field(repr=False, compare=False)
    resize: str | None = None
    crop: str | None = None
    augmentations: tuple[str, ...] = ()

    def __call__(self, x: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.fn(x, generator)

    @property
    def description(self) -> TransformDescription:
        """The standard's description of this transform (what :func:`transform_sha256` hashes)."""
        return self.standard().description

    def standard(self) -> Transform:
        return make_transform(mode=self.mode, reference=self.reference, resize=self.resize, crop=self.crop,
                              augmentations=self.augmentations)


def identity_batch(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The eval transform: returns ``x`` unchanged."""
    return x


def random_shift_batch(x: torch.Tensor, generator: torch.Generator | None = None, *,
                       max_shift: int = 1) -> torch.Tensor:
    """Shift every image of an ``N×C×H×W`` batch by its own random offset in ``[-max_shift, max_shift]`` per axis.

    Vacated pixels are zero (the digits' background). Offsets come from ``generator``, so a seeded generator makes
    the batch reproducible.

    >>> import torch
    >>> x = torch.zeros(1, 1, 3, 3); x[0, 0, 1, 1] = 1.0
    >>> y = random_shift_batch(x, torch.Generator().manual_seed(0))
    >>> float(y.sum())
    1.0
    """
    n, _, height, width = x.shape
    span = 2 * max_shift + 1
    offsets = torch.randint(0, span, (n, 2), generator=generator)
    padded = F.pad(x, (max_shift, max_shift, max_shift, max_shift))
    out = torch.empty_like(x)
    for dy in range(span):
        for dx in range(span):
            chosen = (offsets[:, 0] == dy) & (offsets[:, 1] == dx)
            if bool(chosen.any()):
                out[chosen] = padded[chosen, :, dy:dy + height, dx:dx + width]
    return out


DIGITS_TRAIN_TRANSFORM = BatchTransform(
    mode="train", reference="bnconvention.data.digits:DIGITS_TRAIN_TRANSFORM", fn=random_shift_batch,
    resize=DIGITS_RESIZE, augmentations=(DIGITS_SHIFT,),
)
DIGITS_EVAL_TRANSFORM = BatchTransform(
    mode="eval", reference="bnconvention.data.digits:DIGITS_EVAL_TRANSFORM", fn=identity_batch, resize=DIGITS_RESIZE,
)


def class_indices(y: np.ndarray, classes: Sequence[int]) -> np.ndarray:
    """Boolean mask of the records whose label is in ``classes``."""
    return np.isin(y, np.asarray(list(classes), dtype=y.dtype))


def digits_split_masks(forget_classes: Sequence[int] = (3,)) -> dict[str, np.ndarray]:
    """Masks over the digits records: ``train``, ``retain`` (train minus forget classes), ``forget`` (train records
    of the forget classes) and ``test`` (the whole test split).

    >>> {role: int(mask.sum()) for role, mask in digits_split_masks((3,)).items()}
    {'train': 1334, 'retain': 1199, 'forget': 135, 'test': 463}
    """
    arrays = digits_arrays()
    forget = class_indices(arrays.y, forget_classes)
    train = ~arrays.is_test
    return {"train": train, "retain": train & ~forget, "forget": train & forget, "test": arrays.is_test.copy()}
