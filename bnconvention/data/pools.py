"""Datasets for refits and audits: the built-in digits, ``.npz`` arrays (images or tabular features), image folders,
Hugging Face ``datasets`` sources (a Hub dataset repo at a pinned revision, ``save_to_disk`` folders, parquet) and
torchvision dataset roots.

Every record has a stable integer id, so :func:`~bnconvention.standard.naming.record_ids_sha256` fingerprints a
split. Nothing is downloaded except a ``hub`` dataset, from the Hub ``datasets`` is configured for.

Sources (:func:`load_dataset` takes a :class:`DatasetSource`, a mapping with its fields, or a short string; the
fields of each kind are listed in :mod:`bnconvention.data.source`):

* ``"digits"`` (or ``"sklearn/digits"``): the zoo's exact preparation (:mod:`bnconvention.data.digits`), with its
  hash-defined test split and its train (±1-pixel random shifts) and eval (identity) transforms.
* ``"npz:PATH"``: arrays ``x`` (N×F tabular features, taken as they are; or N×H×W / N×C×H×W images, uint8 scaled
  by 1/255, floats taken as they are), ``y`` (integer labels), optionally ``ids`` (unique integers; default 0..N-1)
  and a test mask (bool or 0/1; default: no test records). Key names are configurable (``x_key``, ``y_key``,
  ``ids_key``, ``test_key``). Loaded with ``allow_pickle=False``.
* ``"folder:PATH"``: ``PATH/<class>/<image>`` or ``PATH/train/<class>/<image>`` plus ``PATH/test/<class>/<image>``;
  PNG and JPEG via Pillow (other files and hidden files are ignored); labels are the sorted class-folder names; ids
  number the images in sorted (split, class, file name) order. ``image_size`` resizes (bilinear), ``channels`` is 1
  (grey) or 3 (RGB).
* ``hub``, ``hf_disk``, ``parquet``: :mod:`bnconvention.data.hf`; ``torchvision``:
  :mod:`bnconvention.data.torchvision_roots`.

The transforms of a dataset are its own: the digits' shift and identity; the identity (with the decode-time resize
recorded) for every other source. A model repo's transforms replace them through
:mod:`bnconvention.data.repo_transforms`.

Splits: :func:`split_by_classes` (``forget classes [3]``: forget = train records of class 3, retain = the other train
records, test = the test split) or :func:`split_by_index_files` (text files of record ids, one per line, ``#``
comments allowed; :mod:`bnconvention.data.ids`).

>>> dataset = load_dataset("digits")
>>> splits = split_by_classes(dataset, forget_classes=[3])
>>> splits.forget.record_count, splits.retain.record_count, splits.test.record_count
(135, 1199, 463)
>>> splits.retain.subset
'train split without classes 3'
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
from bnconvention.data.ids import IndexFile, load_index_file, read_index_file
from bnconvention.data.images import SourceRecords
from bnconvention.data.readers import IMAGE_SUFFIXES, read_image_folder, read_npz_records
from bnconvention.data.source import DatasetKind, DatasetSource
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.atomic import file_sha256
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.standard.models import DatasetRef, DataSplit, SplitRole
from bnconvention.standard.naming import record_ids_sha256

# The readers of the `datasets` sources (bnconvention[datasets], an optional extra) and of torchvision roots (whose
# import takes seconds) are imported in load_dataset, when such a source is read.
__all__ = [
    "IMAGE_SUFFIXES", "DIGITS_EVAL_TRANSFORM", "DIGITS_TRAIN_TRANSFORM", "BatchTransform", "DatasetKind",
    "DatasetSource", "IndexFile", "LocalDataset", "Splits", "Subset", "iter_batches", "load_dataset",
    "read_index_file", "split_by_classes", "split_by_index_files",
]


@dataclass(frozen=True)
class LocalDataset:
    """Records of a dataset: inputs ``x`` (float32 N×C×H×W images or N×F features), labels ``y``, stable ``ids``,
    a test mask; ``hub_repo`` is the dataset repo (read at ``revision``, a commit) of a ``hub`` source."""

    dataset_id: str
    revision: str | None
    x: torch.Tensor
    y: torch.Tensor
    ids: torch.Tensor
    is_test: torch.Tensor
    classes: tuple[str, ...]
    train_transform: BatchTransform = field(repr=False)
    eval_transform: BatchTransform = field(repr=False)
    hub_repo: str | None = None
    decode_resize: str | None = None  # how images were resized when decoded (it precedes any transform)

    @property
    def ref(self) -> DatasetRef:
        return DatasetRef(id=self.dataset_id, revision=self.revision)

    @property
    def is_tabular(self) -> bool:
        return self.x.ndim == 2

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
        return getattr(self, role)


# --- loading ------------------------------------------------------------------------------------------------------


def load_dataset(spec: DatasetSource | Mapping[str, Any] | str, *, endpoint: str | None = None,
                 token: str | bool | None = None, origin: Literal["user", "hub"] = "user") -> LocalDataset:
    """Load a dataset (see the module docstring for the accepted sources).

    ``endpoint``/``token``: the Hub a ``hub`` source must come from (refused when ``datasets`` is configured for
    another) and its token. ``origin="hub"``: the spec's path came from a Hub repo, so pickle-based torchvision
    roots (CIFAR) are refused.
    """
    parsed = DatasetSource.parse(spec)
    if parsed.kind == "digits":
        return _load_digits(parsed)
    if parsed.kind == "hub":
        from bnconvention.data.hf import read_hf_source

        return _from_records(read_hf_source(parsed, endpoint=endpoint, token=token), parsed)
    path = Path(parsed.path or "")  # DatasetSource._check guarantees a path for these kinds
    if not path.exists():
        raise FileNotFoundError(f"dataset {path} does not exist; check the path in the dataset spec")
    if parsed.kind in ("hf_disk", "parquet"):
        from bnconvention.data.hf import read_hf_source

        return _from_records(read_hf_source(parsed), parsed)
    if parsed.kind == "torchvision":
        from bnconvention.data.torchvision_roots import read_torchvision_root

        return _from_records(read_torchvision_root(parsed, origin=origin), parsed)
    return _load_npz(parsed, path) if parsed.kind == "npz" else _load_folder(parsed, path)


def _load_digits(spec: DatasetSource) -> LocalDataset:
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


def _from_records(records: SourceRecords, spec: DatasetSource) -> LocalDataset:
    train_transform, eval_transform = _plain_transforms("bnconvention.data.pools:identity_batch", spec.resize_text)
    return LocalDataset(
        dataset_id=records.dataset_id, revision=records.revision, x=torch.from_numpy(records.x),
        y=torch.from_numpy(records.y), ids=torch.from_numpy(records.ids), is_test=torch.from_numpy(records.is_test),
        classes=records.classes, train_transform=train_transform, eval_transform=eval_transform,
        hub_repo=records.hub_repo, decode_resize=spec.resize_text,
    )


def _load_npz(spec: DatasetSource, path: Path) -> LocalDataset:
    records = read_npz_records(path, x_key=spec.x_key, y_key=spec.y_key, ids_key=spec.ids_key,
                               test_key=spec.test_key)
    n = len(records.x)
    train_transform, eval_transform = _plain_transforms("bnconvention.data.pools:identity_batch", None)
    return LocalDataset(
        dataset_id=spec.dataset_id or f"file:{path.name}", revision=file_sha256(path),
        x=torch.from_numpy(records.x), y=torch.from_numpy(records.y), ids=torch.from_numpy(records.ids),
        is_test=torch.from_numpy(records.is_test),
        classes=tuple(str(i) for i in range(int(records.y.max()) + 1)) if n else (),
        train_transform=train_transform, eval_transform=eval_transform,
    )


def _load_folder(spec: DatasetSource, root: Path) -> LocalDataset:
    images = read_image_folder(root, channels=spec.channels, image_size=spec.image_size)
    train_transform, eval_transform = _plain_transforms("bnconvention.data.pools:identity_batch", spec.resize_text)
    return LocalDataset(
        dataset_id=spec.dataset_id or f"folder:{root.name}", revision=canonical_sha256(images.file_digests),
        x=torch.from_numpy(images.x), y=torch.tensor(images.labels, dtype=torch.int64),
        ids=torch.arange(len(images.labels), dtype=torch.int64), is_test=torch.tensor(images.is_test),
        classes=images.classes, train_transform=train_transform, eval_transform=eval_transform,
        decode_resize=spec.resize_text,
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


IndexSource = Path | str | IndexFile


def _index(value: IndexSource) -> IndexFile:
    return value if isinstance(value, IndexFile) else load_index_file(value)


def _mask_of(dataset: LocalDataset, index: IndexFile) -> torch.Tensor:
    wanted = torch.tensor(sorted(index.ids), dtype=torch.int64)
    known = torch.isin(wanted, dataset.ids)
    if not bool(known.all()):
        unknown = wanted[~known][:5].tolist()
        raise UntrustedInputError(f"{index.source}: record ids {unknown} are not in {dataset.dataset_id} "
                                  f"(ids run from {int(dataset.ids.min())} to {int(dataset.ids.max())})",
                                  source=index.source)
    return torch.isin(dataset.ids, wanted)


def split_by_index_files(dataset: LocalDataset, *, forget: IndexSource, retain: IndexSource | None = None,
                         test: IndexSource | None = None) -> Splits:
    """Splits from index files (paths, or :class:`IndexFile` already read and checked against their digest).
    Without ``retain``: the train records not in ``forget``; without ``test``: the dataset's test split. Forget,
    retain and test must be disjoint."""
    forget_index = _index(forget)
    forget_mask = _mask_of(dataset, forget_index)
    if test is None:
        test_mask, test_text = dataset.is_test.clone(), "test split"
    else:
        test_index = _index(test)
        test_mask, test_text = _mask_of(dataset, test_index), f"index file {test_index.name}"
    if retain is None:
        retain_mask = ~dataset.is_test & ~forget_mask & ~test_mask
        retain_text = f"train records not in index file {forget_index.name}"
    else:
        retain_index = _index(retain)
        retain_mask = _mask_of(dataset, retain_index)
        retain_text = f"index file {retain_index.name}"
    for (a_name, a), (b_name, b) in (
        (("forget", forget_mask), ("retain", retain_mask)), (("forget", forget_mask), ("test", test_mask)),
        (("retain", retain_mask), ("test", test_mask)),
    ):
        overlap = dataset.ids[a & b][:5].tolist()
        if overlap:
            raise UsageError(f"the {a_name} and {b_name} splits share record ids {overlap}; they must be disjoint")
    return Splits(
        train=dataset.subset("train", forget_mask | retain_mask,
                             f"index file {forget_index.name} plus {retain_text}"),
        retain=dataset.subset("retain", retain_mask, retain_text),
        forget=dataset.subset("forget", forget_mask, f"index file {forget_index.name}"),
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

