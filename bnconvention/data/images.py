"""Decoded records of a dataset source, and the one way every source turns an image into an array.

Every source (our readers, ``datasets``, torchvision roots) ends in :class:`SourceRecords`: images as float32
N×C×H×W in [0, 1] (or N×F features), integer labels, unique integer record ids, a test mask, the class names and
the dataset's identity. Images go through :func:`image_array` (Pillow: convert to grey or RGB, optionally resize
bilinear, uint8 C×H×W) and :func:`stack_images`, so a CIFAR batch, a parquet ``Image`` column and a PNG file give
the same array for the same pixels.

Every source decodes through one :class:`ImageBudget` (docs/quickstart-auditor.md#the-specs-data-section), so the work
is sized before it is done:

* an image's width and height are read from its header (Pillow's lazy ``open`` reads nothing else) and an image of
  more than :data:`~bnconvention.data.repo_transforms.MAX_BATCH_PIXELS` pixels is refused before it is decoded;
* images are decoded one at a time and converted and resized at once: a decode batch is one image, so the
  full-size pixels held at any time are one image's, within that same budget of a batch;
* the records kept are at most :data:`MAX_DATASET_PIXELS`: the record count times ``image_size`` (or, with no
  ``image_size``, the first image's own size, which every image must then have, checked from its header) is
  checked before the first image is decoded.

Each refusal is one :class:`~bnconvention.errors.UntrustedInputError` naming the image (file, or dataset, split
and row) or the source.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
from PIL import Image as PILImage
from PIL.Image import Image

from bnconvention.data.repo_transforms import MAX_BATCH_PIXELS
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.atomic import file_sha256
from bnconvention.formats.canonical import canonical_sha256

MAX_DATASET_PIXELS = 2**30  # pixels (height × width) of a source's decoded records together (RGB: 12 GiB float32)

__all__ = ["MAX_DATASET_PIXELS", "ImageBudget", "SourceRecords", "files_digest", "image_array", "label_array",
           "numbered_ids", "stack_images", "unique_ids"]


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


class ImageBudget:
    """The pixel budget of decoding one source's ``count`` images (see the module docstring): create it before the
    first image is decoded (the records' total is checked then when ``image_size`` is given), then
    :meth:`decode` each image, opened lazily, in turn."""

    def __init__(self, count: int, *, channels: Literal[1, 3], image_size: tuple[int, int] | None,
                 where: str) -> None:
        self.count, self.channels, self.image_size, self.where = count, channels, image_size, where
        self._first: tuple[int, int] | None = None  # (width, height) of the first image, with no image_size
        self._first_shape: tuple[int, ...] | None = None
        if image_size is not None:
            height, width = image_size
            if height * width > MAX_BATCH_PIXELS:
                raise UsageError(f"image_size [{height}, {width}] is {height * width:,} pixels an image, over the "
                                 f"{MAX_BATCH_PIXELS:,}-pixel limit of one image; set a smaller image_size")
            self._check_total(width, height, "image_size")

    def decode_file(self, source: str | Path | IO[bytes], *, where: str,
                    load: Callable[[], Image] | None = None) -> np.ndarray:
        """:meth:`decode` of an encoded image opened lazily by Pillow (a file's path, or its bytes). Pillow's
        ``DecompressionBombWarning`` is off meanwhile: this budget decides (Pillow's own error, at twice its warning
        size, still refuses larger images). Pillow's errors propagate for the caller to name the input."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            with PILImage.open(source) as header:
                return self.decode(header, where=where, load=load)

    def decode(self, image: Image, *, where: str, load: Callable[[], Image] | None = None) -> np.ndarray:
        """One image as uint8 C×H×W (:func:`image_array`), its size checked from its header first. ``image`` is
        opened lazily (nothing decoded yet); ``load`` decodes it as the source does (``datasets``' EXIF rotation,
        torchvision's loader), else ``image`` is decoded by the conversion itself."""
        width, height = image.size
        if width * height > MAX_BATCH_PIXELS:
            raise UntrustedInputError(f"{where}: the image is {width}×{height} ({width * height:,} pixels), over the "
                                      f"{MAX_BATCH_PIXELS:,}-pixel limit of one decoded image (read from its header; "
                                      "nothing decoded); resize or tile the source images", source=where)
        if self.image_size is None:
            if self._first is None:
                self._check_total(width, height, "the first image's size, with no image_size")
                self._first = (width, height)
            elif width * height != self._first[0] * self._first[1]:
                raise self._differ(f"{width}×{height}", where=where)
        array = image_array(load() if load is not None else image, channels=self.channels,
                            image_size=self.image_size, where=where)
        if self.image_size is None:
            if self._first_shape is None:
                self._first_shape = array.shape
            elif array.shape != self._first_shape:
                raise self._differ("×".join(map(str, array.shape[:0:-1])), where=where)
        return array

    def _check_total(self, width: int, height: int, what: str) -> None:
        total = self.count * width * height
        if total > MAX_DATASET_PIXELS:
            fix = ("set a smaller image_size" if self.image_size is not None
                   else "set image_size: [height, width] in the dataset spec to resize them when decoded")
            raise UntrustedInputError(f"{self.where}: {self.count:,} images of {width}×{height} ({what}) are "
                                      f"{total:,} pixels, over the {MAX_DATASET_PIXELS:,}-pixel budget of a "
                                      f"dataset's decoded records; {fix} (or read fewer records)", source=self.where)

    def _differ(self, size: str, *, where: str) -> UntrustedInputError:
        first = f"{self._first[0]}×{self._first[1]}" if self._first else "?"
        return UntrustedInputError(f"{where}: the image is {size}, the first image is {first}: images differ in "
                                   "size; set image_size: [height, width] in the dataset spec to resize them all",
                                   source=where)


def stack_images(images: Sequence[np.ndarray], *, where: str) -> np.ndarray:
    """uint8 C×H×W images as one float32 N×C×H×W array in [0, 1]; all images must have one size. Filled in place:
    the float32 array is the only copy made."""
    if not images:
        raise UntrustedInputError(f"{where}: no images", source=where)
    shapes = sorted({im.shape for im in images})
    if len(shapes) > 1:
        raise UntrustedInputError(f"{where}: images differ in size ({shapes[:3]}...); set image_size: [height, "
                                  "width] in the dataset spec to resize them all", source=where)
    stacked = np.empty((len(images), *shapes[0]), dtype=np.float32)
    for index, image in enumerate(images):
        stacked[index] = image
    stacked /= np.float32(255.0)
    return stacked


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
