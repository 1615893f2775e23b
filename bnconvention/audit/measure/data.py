"""The data of an audit: forget, retain and test splits as tensors, and the named train/eval transforms.

Reading and splitting are the data layer's job (:mod:`bnconvention.data.pools`: the bundled digits, ``.npz``
arrays, image folders, Hugging Face ``datasets`` sources, torchvision roots; splits by classes or by index files;
:mod:`bnconvention.data.repo_transforms`: transforms from a model repo). This module applies the spec to it and
turns every failure that is the spec's to fix into an :class:`~bnconvention.errors.AuditSpecError` naming the field:
a class index out of range, an empty split, an unreadable, unbound or inconsistent index file, a dataset path that
does not exist, a missing column or split, a train transform the repo does not declare.

Two parts of a spec can depend on the model repo being audited: ``transform: from_repo`` and index files with
``index_files_in: model_repo``. The repo is a local folder (the checkpoint's folder for a local audit; the download
folder of a Hub repo), given as ``repo_dir``; ``repo_name`` (the repo id) names its files in messages instead. The
decoded dataset is the expensive part and does not depend on the repo: :func:`load_spec_dataset` loads it once and
:func:`load_audit_data` (or :meth:`AuditData.for_repo`) binds it to each repo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.data.ids import IndexFile, load_index_file
from bnconvention.data.pools import LocalDataset, load_dataset, split_by_classes, split_by_index_files
from bnconvention.data.repo_transforms import after_decode_resize, transforms_from_repo
from bnconvention.errors import AuditSpecError, DigestMismatchError, UntrustedInputError, UsageError

# bnconvention.data.hf is imported where an index file is downloaded from a dataset repo: it needs the datasets
# extra (bnconvention/extras.py), which a local audit does not.

__all__ = ["AuditData", "Split", "load_audit_data", "load_spec_dataset", "model_repo_files", "needs_repo"]

REPO_TRANSFORM_FILES = ("config.json", "preprocessor_config.json")


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
    train_transform: Any  # (x, *, generator) -> x with .mode and .standard(); None: the repo declares none
    eval_transform: Any
    dataset: Any = field(default=None, repr=False, compare=False)  # the decoded LocalDataset, reused per repo
    repo_dir: Path | None = None

    def transform(self, mode: str) -> Any:
        if mode != "train":
            return self.eval_transform
        if self.train_transform is None:
            raise AuditSpecError("the model repo declares evaluation preprocessing only; set refit.transform "
                                 "(and recoverability.transform) to eval", field="/refit/transform")
        return self.train_transform

    def for_repo(self, spec: AuditSpec, repo_dir: Path | str, *, repo_name: str | None = None) -> AuditData:
        """This data bound to another model repo: itself when the spec reads nothing from the repo."""
        if not needs_repo(spec) or (self.repo_dir is not None and self.repo_dir == Path(repo_dir)):
            return self
        return load_audit_data(spec, repo_dir=repo_dir, repo_name=repo_name, dataset=self.dataset)


def needs_repo(spec: AuditSpec) -> bool:
    """Whether the spec reads files of the model repo (``transform: from_repo``, index files in the model repo)."""
    return spec.transform == "from_repo" or spec.splits.index_files_in == "model_repo"


def model_repo_files(spec: AuditSpec) -> tuple[str, ...]:
    """The files of a model repo the data may read (download those the repo has before binding to it)."""
    files: tuple[str, ...] = REPO_TRANSFORM_FILES if spec.transform == "from_repo" else ()
    if spec.splits.index_files_in == "model_repo":
        files += tuple(name for name, _ in spec.splits.index_files().values())
    return files


def load_spec_dataset(spec: AuditSpec, *, endpoint: str | None = None,
                      token: str | bool | None = None) -> LocalDataset:
    """The spec's dataset, decoded (it depends on ``spec.dataset`` only: cache it across repos)."""
    try:
        return load_dataset(spec.dataset.loader_spec(), endpoint=endpoint, token=token)
    except FileNotFoundError as exc:
        raise AuditSpecError(f"dataset: {exc}", field="/dataset/path") from exc
    except (UntrustedInputError, UsageError) as exc:
        raise AuditSpecError(f"dataset cannot be read: {exc}", field=_dataset_field(spec, str(exc))) from exc


def _dataset_field(spec: AuditSpec, message: str) -> str:
    """The dataset field a loader message is about (a column, a split, the revision), else the section."""
    dataset = spec.dataset
    for key in ("image_column", "label_column", "id_column", "train_split", "test_split"):
        value = getattr(dataset, key)
        if value is not None and (f"set {key}" in message or f"column {value!r}" in message):
            return f"/dataset/{key}"
    if dataset.kind == "hub" and f"revision {dataset.revision!r}" in message:
        return "/dataset/revision"
    return "/dataset"


def load_audit_data(spec: AuditSpec, *, repo_dir: Path | str | None = None, repo_name: str | None = None,
                    dataset: LocalDataset | None = None, endpoint: str | None = None,
                    token: str | bool | None = None) -> AuditData:
    """The spec's dataset, split and transformed as the spec defines it (every spec-related failure names its
    field). ``repo_dir``: the model repo folder, for a spec that reads from it; ``dataset``: an already decoded
    :func:`load_spec_dataset`; ``endpoint``/``token``: the Hub a ``hub`` dataset must come from."""
    folder = None if repo_dir is None else Path(repo_dir)
    if needs_repo(spec) and folder is None:
        field_name = "/transform" if spec.transform == "from_repo" else "/splits/index_files_in"
        raise AuditSpecError("the spec reads files of the model repo (transform: from_repo or index files in the "
                             "model repo); audit a checkpoint inside its repo folder", field=field_name)
    dataset = dataset if dataset is not None else load_spec_dataset(spec, endpoint=endpoint, token=token)
    splits, fields = _splits(spec, dataset, repo_dir=folder, repo_name=repo_name, token=token)
    train_transform, eval_transform = _transforms(spec, dataset, repo_dir=folder, repo_name=repo_name)
    return AuditData(
        dataset_id=dataset.dataset_id, dataset_revision=dataset.revision, num_classes=len(dataset.classes),
        forget=_split(splits.forget, field=fields["forget"]), retain=_split(splits.retain, field=fields["retain"]),
        test=_split(splits.test, field=fields["test"]), train_transform=train_transform,
        eval_transform=eval_transform, dataset=dataset, repo_dir=folder,
    )


def _split(subset: Any, *, field: str) -> Split:
    if subset.record_count == 0:
        raise AuditSpecError(f"the {subset.role} split is empty ({subset.subset}); define the splits so that each "
                             "holds records", field=field)
    return Split(role=subset.role, x=subset.x, y=subset.y, ids=subset.ids.numpy(), definition=subset.subset)


# --- splits ---------------------------------------------------------------------------------------------------------


def _splits(spec: AuditSpec, dataset: LocalDataset, *, repo_dir: Path | None, repo_name: str | None,
            token: str | bool | None) -> tuple[Any, dict[str, str]]:
    splits_spec = spec.splits
    if splits_spec.forget_classes is not None:
        num_classes = len(dataset.classes)
        for index, label in enumerate(splits_spec.forget_classes):
            if label >= num_classes:
                raise AuditSpecError(f"forget class {label} is out of range: dataset {dataset.dataset_id!r} has "
                                     f"classes 0..{num_classes - 1}", field=f"/splits/forget_classes/{index}")
        try:
            splits = split_by_classes(dataset, forget_classes=splits_spec.forget_classes)
        except UsageError as exc:
            raise AuditSpecError(str(exc), field="/splits/forget_classes") from exc
        return splits, {"forget": "/splits/forget_classes", "retain": "/splits/forget_classes", "test": "/dataset"}
    fields = {"forget": "/splits/forget_index",
              "retain": "/splits/retain_index" if splits_spec.retain_index else "/splits/forget_index",
              "test": "/splits/test_index" if splits_spec.test_index else "/dataset"}
    files = {role: _index_file(spec, dataset, role, name, digest, repo_dir=repo_dir, repo_name=repo_name,
                               token=token)
             for role, (name, digest) in splits_spec.index_files().items()}
    try:
        splits = split_by_index_files(dataset, forget=files["forget"], retain=files.get("retain"),
                                      test=files.get("test"))
    except (UntrustedInputError, UsageError) as exc:
        raise AuditSpecError(f"index files: {exc}", field=_index_field(spec, str(exc))) from exc
    return splits, fields


def _index_file(spec: AuditSpec, dataset: LocalDataset, role: str, name: str, digest: str | None, *,
                repo_dir: Path | None, repo_name: str | None, token: str | bool | None) -> IndexFile:
    """An index file from where the spec says, checked against its ``ids_sha256``."""
    location = spec.splits.index_files_in
    try:
        if location == "spec":
            path, source = Path(name), name
        elif location == "model_repo":
            path, source = Path(repo_dir or ".") / name, f"{repo_name or repo_dir}/{name}"
        else:
            from bnconvention.data.hf import download_dataset_file

            repo, revision = str(dataset.hub_repo), str(dataset.revision)
            path, source = download_dataset_file(repo, revision, name, token=token), f"{repo}/{name}"
        return load_index_file(path, source=source, expected_sha256=digest)
    except DigestMismatchError as exc:
        raise AuditSpecError(f"index file: {exc}", field=f"/splits/{role}_ids_sha256") from exc
    except FileNotFoundError as exc:  # its message names the index file and where it was looked for
        raise AuditSpecError(str(exc), field=f"/splits/{role}_index") from exc
    except UntrustedInputError as exc:
        raise AuditSpecError(f"index files: {exc}", field=f"/splits/{role}_index") from exc


def _index_field(spec: AuditSpec, message: str) -> str:
    """The index-file field a message is about (the file it names), else the forget index."""
    for key in ("forget_index", "retain_index", "test_index"):
        value = getattr(spec.splits, key)
        if value and (value in message or Path(value).name in message.split(":")[0]):
            return f"/splits/{key}"
    return "/splits/forget_index"


# --- transforms -----------------------------------------------------------------------------------------------------


def _transforms(spec: AuditSpec, dataset: LocalDataset, *, repo_dir: Path | None,
                repo_name: str | None) -> tuple[Any, Any]:
    """The dataset's own transforms, or the model repo's (with the decode-time resize recorded before them)."""
    if spec.transform == "dataset":
        return dataset.train_transform, dataset.eval_transform
    if dataset.is_tabular:
        raise AuditSpecError(f"transform: from_repo applies image preprocessing, but dataset {dataset.dataset_id!r} "
                             "is tabular (N x F); use transform: dataset", field="/transform")
    repo = transforms_from_repo(Path(repo_dir or "."), repo_name=repo_name)
    repo.check_records(int(dataset.x.shape[2]), int(dataset.x.shape[3]))  # sized by the records: before any work
    wants_train = spec.refit.transform == "train" or (
        spec.recoverability is not None and spec.recoverability.transform == "train")
    if repo.train is None and wants_train:
        field_name = "/refit/transform" if spec.refit.transform == "train" else "/recoverability/transform"
        raise AuditSpecError(f"{repo.source} declares evaluation preprocessing only ({repo.library} image "
                             f"processor), so there is no train transform; set {field_name[1:].replace('/', '.')}: "
                             "eval", field=field_name)
    train = None if repo.train is None else after_decode_resize(repo.train, dataset.decode_resize)
    return train, after_decode_resize(repo.eval, dataset.decode_resize)
