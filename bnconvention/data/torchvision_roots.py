"""torchvision dataset roots in their standard on-disk formats, read by torchvision itself (``download=False``).

* ``cifar10`` / ``cifar100``: ``ROOT/cifar-10-batches-py/`` (``data_batch_1`` .. ``data_batch_5``, ``test_batch``,
  ``batches.meta``) / ``ROOT/cifar-100-python/`` (``train``, ``test``, ``meta``); splits ``train`` and ``test``.
* ``svhn``: ``ROOT/train_32x32.mat``, ``ROOT/test_32x32.mat``, ``ROOT/extra_32x32.mat`` (read by scipy);
  ``train_split``/``test_split`` name two of ``train``, ``test``, ``extra``.
* ``image_folder``: ``ROOT/<train_split>/<class>/<image>`` and ``ROOT/<test_split>/<class>/<image>`` (ImageNet's
  ``train``/``val`` layout with ``test_split: val``), through ``torchvision.datasets.ImageFolder``; class indices
  are the sorted class folders of the train split, and the test split's folders must be among them.

With ``verify: true`` (the default) torchvision checks each file against the md5 of the published dataset, so the
root is the real CIFAR or SVHN; ``verify: false`` reads a re-packed root (a subset, a test fixture) as long as it
has the format. Record ids are the row index: train rows first, then test rows. Every image goes through the pixel
budget of :class:`~bnconvention.data.images.ImageBudget`: an image folder's files are checked from their headers and
decoded one at a time; CIFAR's and SVHN's 32×32 arrays count against the budget of the records kept.

**Pickle.** CIFAR's "python version" *is* a pickle format and torchvision reads it with ``pickle.load``. We accept
that for a root on the user's own disk, named by the user's own spec: it is the user's data, trusted like the
user's code. A root that came from a Hub repo (``origin="hub"``) is untrusted, and a pickle-based format is refused
before any file is opened (SVHN's ``.mat`` files and image folders are not pickles and are read from anywhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image
from torchvision.datasets import CIFAR10, CIFAR100, SVHN, ImageFolder

from bnconvention.data.images import ImageBudget, SourceRecords, files_digest, numbered_ids, stack_images
from bnconvention.data.source import DatasetSource
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.text import one_line

PICKLED_FORMATS = ("cifar10", "cifar100")
SVHN_SPLITS = ("train", "test", "extra")
_CIFAR_LAYOUT = {
    "cifar10": "cifar-10-batches-py/ with data_batch_1..data_batch_5, test_batch and batches.meta",
    "cifar100": "cifar-100-python/ with train, test and meta",
    "svhn": "<split>_32x32.mat for each split read",
}
# torchvision's advice; the audit never downloads (download=False), so it is dropped from our messages
_DOWNLOAD_HINT = " You can use download=True to download it"

__all__ = ["PICKLED_FORMATS", "read_torchvision_root"]


def read_torchvision_root(spec: DatasetSource, *, origin: Literal["user", "hub"] = "user") -> SourceRecords:
    """The records of a torchvision root (see the module docstring); ``origin="hub"`` refuses pickle formats."""
    root = Path(spec.path or "")
    if spec.format in PICKLED_FORMATS and origin != "user":
        raise UntrustedInputError(f"{root}: a {spec.format} root is stored as Python pickles, and this one came from "
                                  "a Hub repo; pickles are read only from a root on your own disk named in your spec",
                                  source=str(root))
    if not root.is_dir():
        raise UntrustedInputError(f"{root}: a torchvision {spec.format} root is a folder", source=str(root))
    if spec.format in PICKLED_FORMATS:
        return _cifar(spec, root)
    if spec.format == "svhn":
        return _svhn(spec, root)
    return _image_folder(spec, root)


# --- CIFAR ----------------------------------------------------------------------------------------------------------


def _cifar(spec: DatasetSource, root: Path) -> SourceRecords:
    if spec.train_split != "train" or spec.test_split not in ("test", None):
        raise UsageError(f"a {spec.format} root has the splits 'train' and 'test' (found train_split "
                         f"{spec.train_split!r}, test_split {spec.test_split!r})")
    base = CIFAR10 if spec.format == "cifar10" else CIFAR100
    cls = base if spec.verify else _unverified_cifar(base)
    parts = [_open(lambda train=train: cls(str(root), train=train, download=False), spec, root)
             for train in ([True, False] if spec.test_split else [True])]
    files = [root / base.base_folder / name for name, _ in base.train_list + base.test_list] + \
        [root / base.base_folder / base.meta["filename"]]
    return _records(spec, [(p.data, np.asarray(p.targets)) for p in parts], classes=tuple(parts[0].classes),
                    revision=files_digest(files, root), hwc=True)


def _unverified_cifar(base: Any) -> Any:
    """The same torchvision reader, without the md5 check of each file (``verify: false``)."""
    return type(f"Unverified{base.__name__}", (base,), {
        "train_list": [[name, None] for name, _ in base.train_list],
        "test_list": [[name, None] for name, _ in base.test_list],
        "meta": {**base.meta, "md5": None},
    })


# --- SVHN -----------------------------------------------------------------------------------------------------------


def _svhn(spec: DatasetSource, root: Path) -> SourceRecords:
    wanted = [spec.train_split] + ([spec.test_split] if spec.test_split else [])
    unknown = [name for name in wanted if name not in SVHN_SPLITS]
    if unknown:
        raise UsageError(f"an svhn root has no split {unknown[0]!r}; its splits are {', '.join(SVHN_SPLITS)}")
    cls = SVHN if spec.verify else type("UnverifiedSVHN", (SVHN,), {
        "split_list": {key: [url, name, None] for key, (url, name, _) in SVHN.split_list.items()}})
    parts = [_open(lambda name=name: cls(str(root), split=name, download=False), spec, root) for name in wanted]
    files = [root / SVHN.split_list[name][1] for name in wanted]
    return _records(spec, [(p.data, np.asarray(p.labels)) for p in parts], classes=tuple(str(i) for i in range(10)),
                    revision=files_digest(files, root), hwc=False)


# --- ImageFolder ----------------------------------------------------------------------------------------------------


def _image_folder(spec: DatasetSource, root: Path) -> SourceRecords:
    wanted = [spec.train_split] + ([spec.test_split] if spec.test_split else [])
    for name in wanted:
        if not (root / name).is_dir():
            raise UntrustedInputError(f"{root}: no split folder {name!r}; an image_folder root holds "
                                      f"{root}/{spec.train_split}/<class>/<image> (set train_split/test_split to its "
                                      "folder names, test_split: null for none)", source=str(root))
    parts = [_open(lambda name=name: ImageFolder(str(root / name)), spec, root) for name in wanted]
    classes = tuple(parts[0].classes)
    budget = ImageBudget(sum(len(part.samples) for part in parts), channels=spec.channels,
                         image_size=spec.image_size, where=str(root))
    arrays, files = [], []
    for part in parts:
        unknown = sorted(set(part.classes) - set(classes))
        if unknown:
            raise UntrustedInputError(f"{part.root}: class folders {unknown[:3]} are not classes of the train split "
                                      f"{spec.train_split!r}", source=str(part.root))
        labels = np.asarray([classes.index(part.classes[index]) for _, index in part.samples], dtype=np.int64)
        images = [_decoded(part.loader, path, budget) for path, _ in part.samples]
        arrays.append((stack_images(images, where=str(part.root)), labels))
        files += [Path(path) for path, _ in part.samples]
    return _assemble(spec, arrays, classes=classes, revision=files_digest(files, root))


def _decoded(loader: Any, path: str, budget: ImageBudget) -> np.ndarray:
    """One file as uint8 C×H×W: its size read from its header (Pillow's lazy open), then decoded by torchvision's
    loader (``pil_loader``: RGB) as before."""
    try:
        return budget.decode_file(path, where=path, load=lambda: loader(path))
    except UntrustedInputError:
        raise
    except Exception as exc:  # Pillow raises many types
        raise UntrustedInputError(f"{path}: not a readable image ({type(exc).__name__}: {exc})", source=path) from exc


# --- shared ---------------------------------------------------------------------------------------------------------


def _open(make: Any, spec: DatasetSource, root: Path) -> Any:
    """torchvision's dataset object, its failures as one line that says which format was expected."""
    try:
        return make()
    except UsageError:
        raise
    except Exception as exc:  # RuntimeError (not found/corrupted), pickle/scipy/PIL errors, KeyError, ValueError
        layout = _CIFAR_LAYOUT.get(spec.format or "", "")
        expected = f" (expected {root}/{layout})" if layout else ""
        hint = ("; torchvision checks each file against the published dataset's md5: set verify: false for a "
                "re-packed or subset root") if spec.verify and spec.format != "image_folder" else ""
        message = one_line(exc).replace(_DOWNLOAD_HINT, "").rstrip(".") or type(exc).__name__
        raise UntrustedInputError(f"{root}: not a {spec.format} root in torchvision's format{expected}: "
                                  f"{message}{hint}", source=str(root)) from exc


def _records(spec: DatasetSource, parts: list[tuple[Any, np.ndarray]], *, classes: tuple[str, ...],
             revision: str, hwc: bool) -> SourceRecords:
    """Arrays of uint8 images (N×H×W×C for CIFAR, N×C×H×W for SVHN) through the common image rule."""
    where = str(spec.path)
    budget = ImageBudget(sum(len(data) for data, _ in parts), channels=spec.channels, image_size=spec.image_size,
                         where=where)
    arrays = []
    for data, labels in parts:
        pixels = np.asarray(data, dtype=np.uint8)
        pixels = pixels if hwc else pixels.transpose(0, 2, 3, 1)
        images = [budget.decode(Image.fromarray(im), where=where) for im in pixels]
        arrays.append((stack_images(images, where=where), labels.astype(np.int64).reshape(-1)))
    return _assemble(spec, arrays, classes=classes, revision=revision)


def _assemble(spec: DatasetSource, parts: list[tuple[np.ndarray, np.ndarray]], *, classes: tuple[str, ...],
              revision: str) -> SourceRecords:
    x = np.concatenate([images for images, _ in parts])
    y = np.concatenate([labels for _, labels in parts])
    is_test = np.concatenate([np.full(len(labels), index == 1) for index, (_, labels) in enumerate(parts)])
    if len(y) and (y.min() < 0 or y.max() >= len(classes)):
        raise UntrustedInputError(f"{spec.path}: labels outside 0..{len(classes) - 1}", source=str(spec.path))
    return SourceRecords(x=x, y=y, ids=numbered_ids(len(y)), is_test=is_test, classes=classes,
                         dataset_id=spec.dataset_id or f"torchvision/{spec.format}", revision=revision)
