"""Local datasets for refits and audits: the built-in digits, an ``.npz`` of arrays, or an image folder.

No network: everything is read from the bundled scikit-learn data or from the user's files. Every record has a
stable integer id, so :func:`~bnconvention.standard.naming.record_ids_sha256` fingerprints a split.

Sources (:func:`load_dataset` takes a :class:`DatasetSpec`, a mapping with its fields, or a short string):

* ``"digits"`` (or ``"sklearn/digits"``): the zoo's exact preparation (:mod:`bnconvention.data.digits`), with its
  hash-defined test split and its train (±1-pixel random shifts) and eval (identity) transforms.
* ``"npz:PATH"``: arrays ``x`` (N×H×W or N×C×H×W; uint8 is scaled by 1/255, floats are taken as they are), ``y``
  (integer labels), optionally ``ids`` (unique integers; default 0..N-1) and a test mask (bool or 0/1; default: no
  test records). Key names are configurable (``x_key``, ``y_key``, ``ids_key``, ``test_key``). Loaded with
  ``allow_pickle=False``.
* ``"folder:PATH"``: ``PATH/<class>/<image>`` or ``PATH/train/<class>/<image>`` plus ``PATH/test/<class>/<image>``;
  PNG and JPEG via Pillow (other files and hidden files are ignored); labels are the sorted class-folder names; ids
  number the images in sorted (split, class, file name) order. ``image_size`` resizes (bilinear), ``channels`` is 1
  (grey) or 3 (RGB).

Splits: :func:`split_by_classes` (``forget classes [3]``: forget = train records of class 3, retain = the other train
records, test = the test split) or :func:`split_by_index_files` (text files of record ids, one per line, ``#``
comments allowed).

>>> dataset = load_dataset("digits")
>>> splits = split_by_classes(dataset, forget_classes=[3])
>>> splits.forget.record_count, splits.retain.record_count, splits.test.record_count
(135, 1199, 463)
>>> splits.retain.subset
'train split without classes 3'
"""

from __future__ import annotations

# PIL is imported only where an image folder is read.
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
import torch

from bnconvention.data.digits import (
    DIGITS_DATASET_ID,
    DIGITS_EVAL_TRANSFORM,
    DIGITS_TRAIN_TRANSFORM,
    BatchTransform,
    digits_arrays,
    identity_batch,
)
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.atomic import file_sha256
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.standard.models import DatasetRef, DataSplit, SplitRole
from bnconvention.standard.naming import record_ids_sha256

DatasetKind: TypeAlias = Literal["digits", "npz", "image_folder"]
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")

__all__ = [
    "IMAGE_SUFFIXES", "DIGITS_EVAL_TRANSFORM", "DIGITS_TRAIN_TRANSFORM", "BatchTransform", "DatasetKind",
    "DatasetSpec", "LocalDataset", "Splits", "Subset", "iter_batches", "load_dataset", "read_index_file",
    "split_by_classes", "split_by_index_files",
]


@dataclass(frozen=True)
class DatasetSpec:
    """Where a local dataset comes from and how to read it (see the module docstring)."""

    kind: DatasetKind
    path: Path | None = None
    dataset_id: str | None = None
    x_key: str = "x"
    y_key: str = "y"
    ids_key: str | None = None
    test_key: str | None = None
    image_size: tuple[int, int] | None = None
    channels: Literal[1, 3] = 3

    @classmethod
    def parse(cls, spec: DatasetSpec | Mapping[str, Any] | str) -> DatasetSpec:
        """Accept a spec, a mapping of its fields (e.g. from an audit spec) or ``digits`` / ``npz:P`` / ``folder:P``."""
        if isinstance(spec, DatasetSpec):
            parsed = spec
        elif isinstance(spec, str):
            parsed = _parse_string(spec)
        elif isinstance(spec, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(spec) - known)
            if unknown:
                raise UsageError(f"dataset spec has unknown keys {unknown}; known keys: {sorted(known)}")
            values = dict(spec)
            if values.get("path") is not None:
                values["path"] = Path(values["path"])
            if values.get("image_size") is not None:
                values["image_size"] = tuple(values["image_size"])
            try:
                parsed = cls(**values)
            except TypeError as exc:
                raise UsageError(f"dataset spec is incomplete: {exc}; it needs at least 'kind'") from exc
        else:
            raise UsageError(f"a dataset spec is a DatasetSpec, a mapping or a string, not {type(spec).__name__}")
        parsed._check()
        return parsed

    def _check(self) -> None:
        if self.kind not in ("digits", "npz", "image_folder"):
            raise UsageError(f"dataset kind {self.kind!r} is unknown; use 'digits', 'npz' or 'image_folder'")
        if self.kind != "digits" and self.path is None:
            raise UsageError(f"a {self.kind} dataset needs a path")
        if self.channels not in (1, 3):
            raise UsageError(f"channels must be 1 or 3, got {self.channels!r}")
        if self.image_size is not None and (
            len(self.image_size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in self.image_size)
        ):
            raise UsageError(f"image_size must be two positive integers (height, width), got {self.image_size!r}")


def _parse_string(text: str) -> DatasetSpec:
    if text in ("digits", DIGITS_DATASET_ID):
        return DatasetSpec(kind="digits")
    prefix, sep, rest = text.partition(":")
    if sep and rest and prefix in ("npz", "folder"):
        return DatasetSpec(kind="npz" if prefix == "npz" else "image_folder", path=Path(rest))
    raise UsageError(f"dataset {text!r} is not understood; use 'digits', 'npz:PATH' or 'folder:PATH'")


@dataclass(frozen=True)
class LocalDataset:
    """Records of a local dataset: images ``x`` (float32 N×C×H×W), labels ``y``, stable ``ids``, a test mask."""

    dataset_id: str
    revision: str | None
    x: torch.Tensor
    y: torch.Tensor
    ids: torch.Tensor
    is_test: torch.Tensor
    classes: tuple[str, ...]
    train_transform: BatchTransform = field(repr=False)
    eval_transform: BatchTransform = field(repr=False)

    @property
    def ref(self) -> DatasetRef:
        return DatasetRef(id=self.dataset_id, revision=self.revision)

    def subset(self, role: SplitRole, mask: torch.Tensor, description: str) -> Subset:
        """The records selected by ``mask``, in id order."""
        order = torch.argsort(self.ids[mask])
        return Subset(role=role, subset=description, dataset=self.ref, x=self.x[mask][order],
                      y=self.y[mask][order], ids=self.ids[mask][order])


@dataclass(frozen=True)
class Subset:
    """One split of a dataset, ready for a refit pool or an accuracy cell, and for the standard's ``DataSplit``."""

    role: SplitRole
    subset: str
    dataset: DatasetRef
    x: torch.Tensor
    y: torch.Tensor
    ids: torch.Tensor

    @property
    def record_count(self) -> int:
        return len(self.ids)

    @property
    def ids_sha256(self) -> str:
        return record_ids_sha256(int(i) for i in self.ids)

    def data_split(self, *, sampling_seed: int | None = None) -> DataSplit:
        """The standard's description of this split (role, dataset, subset, record count, ids sha256)."""
        return DataSplit(role=self.role, dataset=self.dataset, subset=self.subset, record_count=self.record_count,
                         ids_sha256=self.ids_sha256, sampling_seed=sampling_seed)

    def convention_fields(self) -> dict[str, Any]:
        """Keyword arguments of :func:`bnconvention.authoring.declaration.make_convention` that describe this split."""
        return {"role": self.role, "dataset_id": self.dataset.id, "dataset_revision": self.dataset.revision,
                "subset": self.subset, "record_count": self.record_count, "ids_sha256": self.ids_sha256}


@dataclass(frozen=True)
class Splits:
    """``train`` = ``retain`` + ``forget``; ``test`` is disjoint from both."""

    train: Subset
    retain: Subset
    forget: Subset
    test: Subset

    def __getitem__(self, role: str) -> Subset:
        if role not in ("train", "retain", "forget", "test"):
            raise UsageError(f"no split {role!r}; splits are train, retain, forget and test")
        return getattr(self, role)  # type: ignore[no-any-return]


# --- loading ------------------------------------------------------------------------------------------------------


def load_dataset(spec: DatasetSpec | Mapping[str, Any] | str) -> LocalDataset:
    """Load a local dataset (see the module docstring for the accepted sources)."""
    parsed = DatasetSpec.parse(spec)
    if parsed.kind == "digits":
        return _load_digits(parsed)
    path = Path(parsed.path or "")  # DatasetSpec._check guarantees a path for these kinds
    if not path.exists():
        raise FileNotFoundError(f"dataset {path} does not exist; check the path in the dataset spec")
    return _load_npz(parsed, path) if parsed.kind == "npz" else _load_folder(parsed, path)


def _load_digits(spec: DatasetSpec) -> LocalDataset:
    arrays = digits_arrays()
    return LocalDataset(
        dataset_id=spec.dataset_id or DIGITS_DATASET_ID, revision=None, x=torch.tensor(np.array(arrays.x)),
        y=torch.tensor(np.array(arrays.y)), ids=torch.tensor(np.array(arrays.ids)),
        is_test=torch.tensor(np.array(arrays.is_test)), classes=tuple(str(i) for i in range(10)),
        train_transform=DIGITS_TRAIN_TRANSFORM, eval_transform=DIGITS_EVAL_TRANSFORM,
    )


def _plain_transforms(reference: str, resize: str | None) -> tuple[BatchTransform, BatchTransform]:
    return (BatchTransform(mode="train", reference=reference, fn=identity_batch, resize=resize),
            BatchTransform(mode="eval", reference=reference, fn=identity_batch, resize=resize))


def _read_npz(path: Path, wanted: Sequence[str]) -> dict[str, np.ndarray]:
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


def _load_npz(spec: DatasetSpec, path: Path) -> LocalDataset:
    wanted = [k for k in (spec.x_key, spec.y_key, spec.ids_key, spec.test_key) if k is not None]
    arrays = _read_npz(path, wanted)
    x = _images_array(arrays[spec.x_key], where=f"{path}[{spec.x_key!r}]")
    n = len(x)
    y = _label_array(arrays[spec.y_key], n, where=f"{path}[{spec.y_key!r}]")
    ids = (_id_array(arrays[spec.ids_key], n, where=f"{path}[{spec.ids_key!r}]") if spec.ids_key
           else np.arange(n, dtype=np.int64))
    is_test = (_mask_array(arrays[spec.test_key], n, where=f"{path}[{spec.test_key!r}]") if spec.test_key
               else np.zeros(n, dtype=bool))
    train_transform, eval_transform = _plain_transforms("bnconvention.data.pools:identity_batch", None)
    return LocalDataset(
        dataset_id=spec.dataset_id or f"file:{path.name}", revision=file_sha256(path), x=torch.from_numpy(x),
        y=torch.from_numpy(y), ids=torch.from_numpy(ids), is_test=torch.from_numpy(is_test),
        classes=tuple(str(i) for i in range(int(y.max()) + 1)) if n else (),
        train_transform=train_transform, eval_transform=eval_transform,
    )


def _images_array(array: np.ndarray, *, where: str) -> np.ndarray:
    if array.ndim == 3:
        array = array[:, None]
    if array.ndim != 4 or array.shape[0] == 0:
        raise UntrustedInputError(f"{where}: images must be a non-empty N×H×W or N×C×H×W array, "
                                  f"found shape {array.shape}", source=where)
    if array.dtype == np.uint8:
        return np.ascontiguousarray(array, dtype=np.float32) / np.float32(255.0)
    if array.dtype.kind != "f":
        raise UntrustedInputError(f"{where}: images must be uint8 or floating point, found dtype {array.dtype}",
                                  source=where)
    out = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(out).all():
        raise UntrustedInputError(f"{where}: images contain NaN or infinite values", source=where)
    return out


def _label_array(array: np.ndarray, n: int, *, where: str) -> np.ndarray:
    if array.ndim != 1 or len(array) != n or array.dtype.kind not in "iu":
        raise UntrustedInputError(f"{where}: labels must be {n} integers in a 1-d array, found dtype "
                                  f"{array.dtype} and shape {array.shape}", source=where)
    if (array < 0).any():
        raise UntrustedInputError(f"{where}: labels must be non-negative, found {int(array.min())}", source=where)
    return array.astype(np.int64)


def _id_array(array: np.ndarray, n: int, *, where: str) -> np.ndarray:
    if array.ndim != 1 or len(array) != n or array.dtype.kind not in "iu":
        raise UntrustedInputError(f"{where}: record ids must be {n} integers in a 1-d array, found dtype "
                                  f"{array.dtype} and shape {array.shape}", source=where)
    ids = array.astype(np.int64)
    if len(np.unique(ids)) != n:
        raise UntrustedInputError(f"{where}: record ids must be unique; {n - len(np.unique(ids))} are repeated",
                                  source=where)
    return ids


def _mask_array(array: np.ndarray, n: int, *, where: str) -> np.ndarray:
    if array.ndim != 1 or len(array) != n or not (array.dtype == np.bool_ or (
            array.dtype.kind in "iu" and np.isin(array, (0, 1)).all())):
        raise UntrustedInputError(f"{where}: the test mask must be {n} booleans (or 0/1) in a 1-d array, found "
                                  f"dtype {array.dtype} and shape {array.shape}", source=where)
    return array.astype(bool)


def _load_folder(spec: DatasetSpec, root: Path) -> LocalDataset:
    from PIL import Image

    if not root.is_dir():
        raise UsageError(f"image folder {root} is not a directory")
    split_layout = (root / "train").is_dir()
    sources = [("train", root / "train"), ("test", root / "test")] if split_layout else [("train", root)]
    class_names = sorted({d.name for _, base in sources if base.is_dir() for d in base.iterdir()
                          if d.is_dir() and not d.name.startswith(".")})
    if not class_names:
        raise UntrustedInputError(f"{root}: no class folders found; expected {root}/<class>/<image> or "
                                  f"{root}/train/<class>/<image>", source=root)
    records: list[tuple[str, int, Path]] = []
    for split, base in sources:
        if not base.is_dir():
            continue
        for label, name in enumerate(class_names):
            folder = base / name
            if folder.is_dir():
                records += [(split, label, p) for p in sorted(folder.iterdir()) if p.is_file()
                            and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES]
    if not records:
        raise UntrustedInputError(f"{root}: no PNG or JPEG images in the class folders", source=root)
    mode = "L" if spec.channels == 1 else "RGB"
    images, file_digests = [], {}
    for _, _, path in records:
        data = path.read_bytes()
        file_digests[path.relative_to(root).as_posix()] = hashlib.sha256(data).hexdigest()
        try:
            with Image.open(path) as image:
                image = image.convert(mode)
                if spec.image_size is not None:
                    height, width = spec.image_size
                    image = image.resize((width, height), Image.Resampling.BILINEAR)
                pixels = np.asarray(image, dtype=np.uint8)
        except Exception as exc:  # Pillow raises many types (UnidentifiedImageError, DecompressionBombError, ...)
            raise UntrustedInputError(f"{path}: not a readable image ({type(exc).__name__}: {exc})",
                                      source=path) from exc
        images.append(pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1))
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        raise UntrustedInputError(f"{root}: images differ in size ({sorted(shapes)[:3]}...); set image_size to "
                                  "resize them all", source=root)
    x = np.stack(images).astype(np.float32) / np.float32(255.0)
    resize = None if spec.image_size is None else f"{spec.image_size[1]}x{spec.image_size[0]} bilinear"
    train_transform, eval_transform = _plain_transforms("bnconvention.data.pools:identity_batch", resize)
    return LocalDataset(
        dataset_id=spec.dataset_id or f"folder:{root.name}", revision=canonical_sha256(file_digests),
        x=torch.from_numpy(x), y=torch.tensor([label for _, label, _ in records], dtype=torch.int64),
        ids=torch.arange(len(records), dtype=torch.int64),
        is_test=torch.tensor([split == "test" for split, _, _ in records]), classes=tuple(class_names),
        train_transform=train_transform, eval_transform=eval_transform,
    )


# --- splits ---------------------------------------------------------------------------------------------------------


def split_by_classes(dataset: LocalDataset, *, forget_classes: Sequence[int]) -> Splits:
    """Forget = train records of ``forget_classes``, retain = the other train records, test = the test split."""
    classes = sorted({int(c) for c in forget_classes})
    if not classes:
        raise UsageError("split_by_classes needs at least one forget class")
    train = ~dataset.is_test
    present = set(dataset.y[train].tolist())
    absent = [c for c in classes if c not in present]
    if absent:
        raise UsageError(f"forget classes {absent} have no train records in {dataset.dataset_id}; "
                         f"labels present: {sorted(present)}")
    forget = train & torch.isin(dataset.y, torch.tensor(classes, dtype=dataset.y.dtype))
    listed = ", ".join(map(str, classes))
    return Splits(
        train=dataset.subset("train", train, "train split"),
        retain=dataset.subset("retain", train & ~forget, f"train split without classes {listed}"),
        forget=dataset.subset("forget", forget, f"train records of classes {listed}"),
        test=dataset.subset("test", dataset.is_test.clone(), "test split"),
    )


def read_index_file(path: Path | str) -> list[int]:
    """Record ids from a text file: one integer per line; blank lines and ``#`` comments are ignored."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedInputError(f"{path}: not UTF-8 text at byte {exc.start}", source=path) from exc
    ids: list[int] = []
    seen: set[int] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        try:
            value = int(content, 10)
        except ValueError:
            raise UntrustedInputError(f"{path}:{number}: expected one integer record id, found {content[:40]!r}",
                                      source=path) from None
        if value in seen:
            raise UntrustedInputError(f"{path}:{number}: record id {value} is listed twice", source=path)
        seen.add(value)
        ids.append(value)
    if not ids:
        raise UntrustedInputError(f"{path}: no record ids found; write one integer id per line", source=path)
    return ids


def _mask_of(dataset: LocalDataset, ids: Iterable[int], *, path: Path) -> torch.Tensor:
    wanted = torch.tensor(sorted(ids), dtype=torch.int64)
    known = torch.isin(wanted, dataset.ids)
    if not bool(known.all()):
        unknown = wanted[~known][:5].tolist()
        raise UntrustedInputError(f"{path}: record ids {unknown} are not in {dataset.dataset_id} "
                                  f"(ids run from {int(dataset.ids.min())} to {int(dataset.ids.max())})",
                                  source=path)
    return torch.isin(dataset.ids, wanted)


def split_by_index_files(dataset: LocalDataset, *, forget: Path | str, retain: Path | str | None = None,
                         test: Path | str | None = None) -> Splits:
    """Splits from index files. Without ``retain``: the train records not in ``forget``; without ``test``: the
    dataset's test split. Forget, retain and test must be disjoint."""
    forget_path = Path(forget)
    forget_mask = _mask_of(dataset, read_index_file(forget_path), path=forget_path)
    if test is None:
        test_mask, test_text = dataset.is_test.clone(), "test split"
    else:
        test_path = Path(test)
        test_mask, test_text = _mask_of(dataset, read_index_file(test_path), path=test_path), \
            f"index file {test_path.name}"
    if retain is None:
        retain_mask = ~dataset.is_test & ~forget_mask & ~test_mask
        retain_text = f"train records not in index file {forget_path.name}"
    else:
        retain_path = Path(retain)
        retain_mask = _mask_of(dataset, read_index_file(retain_path), path=retain_path)
        retain_text = f"index file {retain_path.name}"
    for (a_name, a), (b_name, b) in (
        (("forget", forget_mask), ("retain", retain_mask)), (("forget", forget_mask), ("test", test_mask)),
        (("retain", retain_mask), ("test", test_mask)),
    ):
        overlap = dataset.ids[a & b][:5].tolist()
        if overlap:
            raise UsageError(f"the {a_name} and {b_name} splits share record ids {overlap}; they must be disjoint")
    return Splits(
        train=dataset.subset("train", forget_mask | retain_mask, f"index file {forget_path.name} plus {retain_text}"),
        retain=dataset.subset("retain", retain_mask, retain_text),
        forget=dataset.subset("forget", forget_mask, f"index file {forget_path.name}"),
        test=dataset.subset("test", test_mask, test_text),
    )


# --- batches --------------------------------------------------------------------------------------------------------


def iter_batches(x: torch.Tensor, *, batch_size: int, transform: BatchTransform | None = None,
                 generator: torch.Generator | None = None, shuffle: bool = False) -> Iterator[torch.Tensor]:
    """Batches of ``x`` (a refit pool), transformed with ``transform`` drawing from ``generator``.

    >>> [b.shape[0] for b in iter_batches(torch.zeros(5, 1, 2, 2), batch_size=2)]
    [2, 2, 1]
    """
    if batch_size < 1:
        raise UsageError(f"batch_size must be positive, got {batch_size}")
    order = torch.randperm(len(x), generator=generator) if shuffle else torch.arange(len(x))
    for start in range(0, len(x), batch_size):
        batch = x[order[start:start + batch_size]]
        yield batch if transform is None else transform(batch, generator=generator)

