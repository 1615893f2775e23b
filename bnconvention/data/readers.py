"""Reading a user's dataset files into checked arrays: an ``.npz`` of arrays (images or tabular features) and a
folder of images.

These are the untrusted-input half of :mod:`bnconvention.data.pools` (which turns the arrays into a
:class:`~bnconvention.data.pools.LocalDataset`): every array is checked for shape, dtype and values, and a bad file
raises :class:`~bnconvention.errors.UntrustedInputError` naming the file (and the array) before anything uses it.
Nothing is unpickled (``allow_pickle=False``); images are decoded by Pillow, one at a time, within the pixel budget
of :class:`~bnconvention.data.images.ImageBudget` (each file's size read from its header first).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from bnconvention.data.images import ImageBudget, label_array, stack_images, unique_ids
from bnconvention.errors import UntrustedInputError, UsageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class ArrayRecords:
    """Checked records: ``x`` (float32 N×C×H×W images or N×F features), labels ``y`` and ``ids`` (int64), a
    boolean test mask."""

    x: np.ndarray
    y: np.ndarray
    ids: np.ndarray
    is_test: np.ndarray


@dataclass(frozen=True)
class FolderImages:
    """The images of a class-folder tree in sorted (split, class, file name) order, with each file's sha256."""

    x: np.ndarray  # float32 N×C×H×W in [0, 1]
    labels: list[int]
    is_test: list[bool]
    classes: tuple[str, ...]
    file_digests: dict[str, str]  # path relative to the root -> sha256 of the file's bytes


# --- .npz -----------------------------------------------------------------------------------------------------------


def read_npz_records(path: Path, *, x_key: str, y_key: str, ids_key: str | None,
                     test_key: str | None) -> ArrayRecords:
    """The records of an ``.npz``: ``ids`` default to 0..N-1 and the test mask to no test records."""
    wanted = [k for k in (x_key, y_key, ids_key, test_key) if k is not None]
    arrays = read_npz(path, wanted)
    x = images_array(arrays[x_key], where=f"{path}[{x_key!r}]")
    n = len(x)
    y = label_array(arrays[y_key], n, where=f"{path}[{y_key!r}]")
    ids = (unique_ids(arrays[ids_key], n, where=f"{path}[{ids_key!r}]") if ids_key
           else np.arange(n, dtype=np.int64))
    is_test = (mask_array(arrays[test_key], n, where=f"{path}[{test_key!r}]") if test_key
               else np.zeros(n, dtype=bool))
    return ArrayRecords(x=x, y=y, ids=ids, is_test=is_test)


def read_npz(path: Path, wanted: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays ``wanted`` from an ``.npz`` file, never unpickling anything."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # not a zip, pickled content, truncated: numpy, zipfile and zlib raise many types
        raise UntrustedInputError(f"{path}: not a readable .npz of plain arrays ({exc})", source=path) from exc
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UntrustedInputError(f"{path}: a single .npy array, not an .npz archive of named arrays", source=path)
    with loaded:
        missing = [k for k in wanted if k not in loaded.files]
        if missing:
            raise UntrustedInputError(
                f"{path}: no array named {', '.join(map(repr, missing))}; it has {sorted(loaded.files)}; "
                "set x_key/y_key/ids_key/test_key to the names used in the file", source=path)
        try:
            return {k: loaded[k] for k in wanted}
        except Exception as exc:  # object arrays (pickle) or a corrupt member
            raise UntrustedInputError(f"{path}: cannot read its arrays ({exc})", source=path) from exc


def images_array(array: np.ndarray, *, where: str) -> np.ndarray:
    """The inputs of an ``.npz`` as float32: N×F features (a tabular pool, taken as they are: no scaling) or
    N×H×W / N×C×H×W images (as N×C×H×W; uint8 scaled by 1/255, floats taken as they are). All finite."""
    if array.ndim == 2 and array.shape[0] > 0 and array.shape[1] > 0:
        return _features_array(array, where=where)
    if array.ndim == 3:
        array = array[:, None]
    if array.ndim != 4 or array.shape[0] == 0:
        raise UntrustedInputError(f"{where}: inputs must be a non-empty N×F (tabular), N×H×W or N×C×H×W array, "
                                  f"found shape {array.shape}", source=where)
    if array.dtype == np.uint8:
        return np.ascontiguousarray(array, dtype=np.float32) / np.float32(255.0)
    if array.dtype.kind != "f":
        raise UntrustedInputError(f"{where}: images must be uint8 or floating point, found dtype {array.dtype}",
                                  source=where)
    return _finite(np.ascontiguousarray(array, dtype=np.float32), where=where)


def _features_array(array: np.ndarray, *, where: str) -> np.ndarray:
    """N×F tabular features as float32, values unchanged (integers converted, never rescaled)."""
    if array.dtype.kind not in "fiu":
        raise UntrustedInputError(f"{where}: tabular features must be numbers, found dtype {array.dtype}",
                                  source=where)
    return _finite(np.ascontiguousarray(array, dtype=np.float32), where=where)


def _finite(array: np.ndarray, *, where: str) -> np.ndarray:
    if not np.isfinite(array).all():
        raise UntrustedInputError(f"{where}: inputs contain NaN or infinite values", source=where)
    return array


def mask_array(array: np.ndarray, n: int, *, where: str) -> np.ndarray:
    if array.ndim != 1 or len(array) != n or not (array.dtype == np.bool_ or (
            array.dtype.kind in "iu" and np.isin(array, (0, 1)).all())):
        raise UntrustedInputError(f"{where}: the test mask must be {n} booleans (or 0/1) in a 1-d array, found "
                                  f"dtype {array.dtype} and shape {array.shape}", source=where)
    return array.astype(bool)


# --- image folders --------------------------------------------------------------------------------------------------


def read_image_folder(root: Path, *, channels: Literal[1, 3],
                      image_size: tuple[int, int] | None) -> FolderImages:
    """``root/<class>/<image>`` or ``root/train|test/<class>/<image>``: labels are the sorted class-folder names."""
    if not root.is_dir():
        raise UsageError(f"image folder {root} is not a directory")
    split_layout = (root / "train").is_dir()
    sources = [("train", root / "train"), ("test", root / "test")] if split_layout else [("train", root)]
    class_names = sorted({d.name for _, base in sources if base.is_dir() for d in base.iterdir()
                          if d.is_dir() and not d.name.startswith(".")})
    if not class_names:
        raise UntrustedInputError(f"{root}: no class folders found; expected {root}/<class>/<image> or "
                                  f"{root}/train/<class>/<image>", source=root)
    records = _image_files(sources, class_names)
    if not records:
        raise UntrustedInputError(f"{root}: no PNG or JPEG images in the class folders", source=root)
    budget = ImageBudget(len(records), channels=channels, image_size=image_size, where=str(root))
    images, file_digests = [], {}
    for _, _, path in records:
        data = path.read_bytes()
        file_digests[path.relative_to(root).as_posix()] = hashlib.sha256(data).hexdigest()
        images.append(_decode_image(path, budget))
    return FolderImages(x=stack_images(images, where=str(root)),
                        labels=[label for _, label, _ in records], is_test=[split == "test" for split, _, _ in records],
                        classes=tuple(class_names), file_digests=file_digests)


def _image_files(sources: Sequence[tuple[str, Path]], class_names: Sequence[str]) -> list[tuple[str, int, Path]]:
    """(split, label, path) of every PNG/JPEG under the class folders, hidden files and other suffixes ignored."""
    records: list[tuple[str, int, Path]] = []
    for split, base in sources:
        if not base.is_dir():
            continue
        for label, name in enumerate(class_names):
            folder = base / name
            if folder.is_dir():
                records += [(split, label, p) for p in sorted(folder.iterdir()) if p.is_file()
                            and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES]
    return records


def _decode_image(path: Path, budget: ImageBudget) -> np.ndarray:
    """One image file as uint8 C×H×W (see :func:`bnconvention.data.images.image_array`), its size checked from its
    header before it is decoded."""
    try:
        return budget.decode_file(path, where=str(path))
    except UntrustedInputError:
        raise
    except Exception as exc:  # Pillow raises many types (UnidentifiedImageError, DecompressionBombError, ...)
        raise UntrustedInputError(f"{path}: not a readable image ({type(exc).__name__}: {exc})",
                                  source=path) from exc
