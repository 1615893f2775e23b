"""The data of an audit: forget, retain and test splits as tensors, and the named train/eval transforms.

Reading and splitting are :mod:`bnconvention.data.pools`' job (the bundled digits, an ``.npz``, an image folder;
splits by classes or by index files). This module applies the spec to it and turns every failure that is the
spec's to fix into an :class:`~bnconvention.errors.AuditSpecError` naming the field: a class index out of range, an
empty split, an unreadable or inconsistent index file, a dataset path that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bnconvention.errors import AuditSpecError, UntrustedInputError, UsageError

# bnconvention.data.pools (torch) is imported where a dataset is loaded: importing this module does not import torch.
if TYPE_CHECKING:
    import torch

    from bnconvention.audit.spec import AuditSpec


@dataclass(frozen=True)
class Split:
    """One split: prepared inputs (before any transform), labels, stable record ids, and how it was defined."""

    role: str
    x: torch.Tensor
    y: torch.Tensor
    ids: np.ndarray
    definition: str


@dataclass(frozen=True)
class AuditData:
    dataset_id: str
    dataset_revision: str | None
    num_classes: int
    forget: Split
    retain: Split
    test: Split
    train_transform: Any  # bnconvention.data.digits.BatchTransform: (x, *, generator) -> x, .mode, .standard()
    eval_transform: Any

    def transform(self, mode: str) -> Any:
        return self.train_transform if mode == "train" else self.eval_transform


def _load(spec: AuditSpec) -> Any:
    from bnconvention.data.pools import load_dataset

    try:
        return load_dataset(spec.dataset.loader_spec())
    except FileNotFoundError as exc:
        raise AuditSpecError(f"dataset: {exc}", field="/dataset/path") from exc
    except (UntrustedInputError, UsageError) as exc:
        raise AuditSpecError(f"dataset cannot be read: {exc}", field="/dataset") from exc


def _split(subset: Any, *, field: str) -> Split:
    if subset.record_count == 0:
        raise AuditSpecError(f"the {subset.role} split is empty ({subset.subset}); define the splits so that each "
                             "holds records", field=field)
    return Split(role=subset.role, x=subset.x, y=subset.y, ids=subset.ids.numpy(), definition=subset.subset)


def load_audit_data(spec: AuditSpec) -> AuditData:
    """The spec's dataset, split as the spec defines it (every spec-related failure names its field)."""
    from bnconvention.data.pools import split_by_classes, split_by_index_files

    dataset = _load(spec)
    num_classes = len(dataset.classes)
    splits_spec = spec.splits
    if splits_spec.forget_classes is not None:
        for index, label in enumerate(splits_spec.forget_classes):
            if label >= num_classes:
                raise AuditSpecError(f"forget class {label} is out of range: dataset {dataset.dataset_id!r} has "
                                     f"classes 0..{num_classes - 1}", field=f"/splits/forget_classes/{index}")
        try:
            splits = split_by_classes(dataset, forget_classes=splits_spec.forget_classes)
        except UsageError as exc:
            raise AuditSpecError(str(exc), field="/splits/forget_classes") from exc
        fields = {"forget": "/splits/forget_classes", "retain": "/splits/forget_classes", "test": "/dataset"}
    else:
        fields = {"forget": "/splits/forget_index",
                  "retain": "/splits/retain_index" if splits_spec.retain_index else "/splits/forget_index",
                  "test": "/splits/test_index" if splits_spec.test_index else "/dataset"}
        try:
            splits = split_by_index_files(dataset, forget=splits_spec.forget_index,  # type: ignore[arg-type]
                                          retain=splits_spec.retain_index, test=splits_spec.test_index)
        except FileNotFoundError as exc:
            raise AuditSpecError(f"index file: {exc}", field=_index_field(spec, str(exc))) from exc
        except (UntrustedInputError, UsageError) as exc:
            raise AuditSpecError(f"index files: {exc}", field=_index_field(spec, str(exc))) from exc
    return AuditData(
        dataset_id=dataset.dataset_id, dataset_revision=dataset.revision, num_classes=num_classes,
        forget=_split(splits.forget, field=fields["forget"]), retain=_split(splits.retain, field=fields["retain"]),
        test=_split(splits.test, field=fields["test"]),
        train_transform=dataset.train_transform, eval_transform=dataset.eval_transform,
    )


def _index_field(spec: AuditSpec, message: str) -> str:
    """The index-file field a message is about (the file it names), else the forget index."""
    from pathlib import Path

    for key in ("forget_index", "retain_index", "test_index"):
        value = getattr(spec.splits, key)
        if value and (value in message or Path(value).name in message.split(":")[0]):
            return f"/splits/{key}"
    return "/splits/forget_index"
