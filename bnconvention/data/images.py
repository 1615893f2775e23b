"""Decoded records of a dataset source, and the one way every source turns an image into an array.

Every source (our readers, ``datasets``, torchvision roots) ends in :class:`SourceRecords`: images as float32
N×C×H×W in [0, 1] (or N×F features), integer labels, unique integer record ids, a test mask, the class names and
the dataset's identity. Images go through :func:`image_array` (Pillow: convert to grey or RGB, optionally resize
bilinear, uint8 C×H×W) and :func:`stack_images`, so a CIFAR batch, a parquet ``Image`` column and a PNG file give
the same array for the same pixels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bnconvention.errors import UntrustedInputError
from bnconvention.formats.atomic import file_sha256
from bnconvention.formats.canonical import canonical_sha256

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["SourceRecords", "files_digest", "image_array", "label_array", "numbered_ids", "stack_images", "unique_ids"]


@dataclass(frozen=True)
class SourceRecords:
    """What a source read: ``x`` float32 (N×C×H×W in [0, 1], or N×F), ``y``/``ids`` int64, ``is_test`` bool."""

    x: np.ndarray
    y: np.ndarray
    ids: np.ndarray
    is_test: np.ndarray
    classes: tuple[str, ...]
    dataset_id: str
    revision: str | None
    hub_repo: str | None = None  # a dataset repo on the Hub, read at ``revision`` (a commit sha)


def image_array(image: Image, *, channels: Literal[1, 3], image_size: tuple[int, int] | None,
                where: str) -> np.ndarray:
    """One decoded image as uint8 C×H×W: converted to grey (1) or RGB (3), resized bilinear to ``image_size``
    (height, width) when given. Pillow's errors (a truncated file, a decompression bomb) name ``where``."""
    from PIL import Image as PILImage

    try:
        converted = image.convert("L" if channels == 1 else "RGB")
        if image_size is not None:
            height, width = image_size
            converted = converted.resize((width, height), PILImage.Resampling.BILINEAR)
        pixels = np.asarray(converted, dtype=np.uint8)
    except Exception as exc:  # Pillow raises many types (OSError, DecompressionBombError, ValueError, ...)
        raise UntrustedInputError(f"{where}: not a readable image ({type(exc).__name__}: {exc})",
                                  source=where) from exc
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


def stack_images(images: Sequence[np.ndarray], *, where: str) -> np.ndarray:
    """uint8 C×H×W images as one float32 N×C×H×W array in [0, 1]; all images must have one size."""
    if not images:
        raise UntrustedInputError(f"{where}: no images", source=where)
    shapes = sorted({im.shape for im in images})
    if len(shapes) > 1:
        raise UntrustedInputError(f"{where}: images differ in size ({shapes[:3]}...); set image_size: [height, "
                                  "width] in the dataset spec to resize them all", source=where)
    return np.stack(images).astype(np.float32) / np.float32(255.0)


def numbered_ids(n: int) -> np.ndarray:
    """Record ids 0..n-1: the row index, train rows first, then test rows."""
    return np.arange(n, dtype=np.int64)


def unique_ids(values: Any, n: int, *, where: str) -> np.ndarray:
    """Record ids read from a file or a column: ``n`` unique integers."""
    array = np.asarray(values)
    if array.ndim != 1 or len(array) != n or array.dtype.kind not in "iu":
        raise UntrustedInputError(f"{where}: record ids must be {n} integers in a 1-d array, found dtype "
                                  f"{array.dtype} and shape {array.shape}", source=where)
    ids = array.astype(np.int64)
    repeated = n - len(np.unique(ids))
    if repeated:
        raise UntrustedInputError(f"{where}: record ids must be unique; {repeated} are repeated", source=where)
    return ids


def label_array(values: Any, n: int, *, where: str) -> np.ndarray:
    """Labels read from a file or a column: ``n`` non-negative integers."""
    array = np.asarray(values)
    if array.ndim != 1 or len(array) != n or array.dtype.kind not in "iu":
        raise UntrustedInputError(f"{where}: labels must be {n} integers in a 1-d array, found dtype "
                                  f"{array.dtype} and shape {array.shape}", source=where)
    if (array < 0).any():
        raise UntrustedInputError(f"{where}: labels must be non-negative, found {int(array.min())}", source=where)
    return array.astype(np.int64)


def files_digest(files: Iterable[Path], root: Path) -> str:
    """The revision of a local source: sha256 of the canonical JSON of {path relative to root: sha256 of bytes}."""
    return canonical_sha256({path.relative_to(root).as_posix(): file_sha256(path) for path in files})
