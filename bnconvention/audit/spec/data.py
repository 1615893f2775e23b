"""The data section of an audit spec: ``dataset`` (where the records come from) and ``splits`` (forget, retain,
test), with the checks a JSON Schema cannot express. :mod:`bnconvention.audit.spec.audit_spec` assembles the whole spec
from these models; the base model and the small field types shared by every section live here too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from bnconvention.data.ids import check_repo_path
from bnconvention.data.source import KIND_FIELDS, PATH_KINDS, DatasetKind, DatasetSource, TorchvisionFormat
from bnconvention.errors import AuditSpecError, UsageError

IndexLocation: TypeAlias = Literal["spec", "dataset_repo", "model_repo"]
Text = Annotated[str, StringConstraints(min_length=1)]
PositiveInt = Annotated[int, Field(ge=1)]

# Upper bounds of the spec's counts (docs/statistics.md#bounds-of-an-audit-spec): what the tools run in reasonable time,
# refused past them in one line naming the file and the field. A replicate is one refit plus the evaluation of every
# split: about 4 s on the digits zoo on two CPU cores (R = 12 took 57 s, R = 2 19 s), so 200 replicates (or draws) are
# about 13 minutes per checkpoint there and hours for larger models, far past what a decision needs (the sign test's p
# is 0.5^R; the band's rank test needs N >= 1/level - 1: 199 at level 0.005). A pool of 2,000,000 records holds a whole
# ImageNet-1k train split (1.28 M); a batch of 65,536 records is past what one forward holds for images; lists
# that multiply the refits (budgets, pool sizes) hold 32 values, recounts read from stored replicates 256.
MAX_REPLICATES = 200
MAX_RECORDS = 2_000_000
MAX_BATCH = 65_536
MAX_DRAWS = 200
MAX_ITERATIONS = 100_000
MAX_SWEEP_VALUES = 32
MAX_LEVELS = 256
Replicates = Annotated[int, Field(ge=1, le=MAX_REPLICATES)]
Records = Annotated[int, Field(ge=1, le=MAX_RECORDS)]
BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH)]
Draws = Annotated[int, Field(ge=1, le=MAX_DRAWS)]
Iterations = Annotated[int, Field(ge=1, le=MAX_ITERATIONS)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]

__all__ = ["MAX_BATCH", "MAX_DRAWS", "MAX_ITERATIONS", "MAX_LEVELS", "MAX_RECORDS", "MAX_REPLICATES",
           "MAX_SWEEP_VALUES", "BatchSize", "DatasetSpec", "Draws", "IndexLocation", "Iterations", "PositiveInt",
           "Records", "Replicates", "SpecModel", "SplitsSpec", "Text", "check_dataset", "check_splits"]


class SpecModel(BaseModel):
    """Base of every section: strict like the records ("10" is not 10); unknown keys are typos, not extensions."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DatasetSpec(SpecModel):
    """Where the records come from (read by :func:`bnconvention.data.pools.load_dataset`); only 'hub' downloads."""

    kind: DatasetKind = Field(default="digits", description=(
        "'digits': the bundled sklearn digits prepared as in bnconvention.zoo (16x16, hash-defined test split); "
        "'npz': arrays in a .npz file (images, or N x F tabular features); 'image_folder': <class>/<image> or "
        "train/<class>/<image> + test/...; 'hub': a dataset repo on the Hub read by the datasets library at a "
        "pinned revision; 'hf_disk': a datasets save_to_disk folder; 'parquet': a .parquet file or a folder of "
        "them; 'torchvision': a torchvision dataset root (see format)."))
    path: Text | None = Field(default=None, description=(
        "The .npz file, image folder, save_to_disk folder, parquet file or folder, or torchvision root, relative "
        "to the spec file's folder."))
    dataset_id: Text | None = Field(default=None, description="Dataset identity recorded in the annotation.")
    x_key: Text = Field(default="x", description=(
        "npz: array of inputs (N x F features, N x H x W or N x C x H x W images)."))
    y_key: Text = Field(default="y", description="npz: array of integer labels.")
    ids_key: Text | None = Field(default=None, description="npz: array of unique integer record ids (default 0..N-1).")
    test_key: Text | None = Field(default=None, description="npz: boolean test mask (default: no test records).")
    image_size: list[PositiveInt] | None = Field(default=None, min_length=2, max_length=2, description=(
        "image_folder, hub, hf_disk, parquet, torchvision: resize every image to [height, width] (bilinear) when "
        "it is decoded."))
    channels: Literal[1, 3] = Field(default=3, description=(
        "image_folder, hub, hf_disk, parquet, torchvision: decode images as 1 (grey) or 3 (RGB) channels."))
    repo: Text | None = Field(default=None, description="hub: the dataset repo id, 'owner/name'.")
    revision: Text | None = Field(default=None, description=(
        "hub: the revision to read (a commit sha or a tag; required); the annotation records its commit sha."))
    config_name: Text | None = Field(default=None, description="hub: the dataset configuration (subset) name.")
    image_column: Text = Field(default="image", description="hub, hf_disk, parquet: the Image column.")
    label_column: Text = Field(default="label", description=(
        "hub, hf_disk, parquet: the label column (a ClassLabel or integers)."))
    id_column: Text | None = Field(default=None, description=(
        "hub, hf_disk, parquet: a column of unique integer record ids (default: the row index, train rows first, "
        "then test rows)."))
    train_split: Text = Field(default="train", description=(
        "The split read as the train split (hub, hf_disk, parquet; svhn; image_folder root: its sub-folder)."))
    test_split: Text | None = Field(default="test", description=(
        "The split read as the test split (e.g. 'validation', or 'val' for an ImageNet-style root); null: no "
        "test records."))
    format: TorchvisionFormat | None = Field(default=None, description=(
        "torchvision: the root's format, 'cifar10', 'cifar100', 'svhn' or 'image_folder' (download=False)."))
    verify: bool = Field(default=True, description=(
        "torchvision cifar10/cifar100/svhn: check each file against the published dataset's md5 (false for a "
        "re-packed or subset root)."))

    def loader_spec(self) -> dict[str, Any]:
        """The mapping :func:`bnconvention.data.pools.load_dataset` accepts."""
        return {**self.model_dump(exclude_none=True), "test_split": self.test_split}

    def unread_fields(self) -> list[str]:
        """Fields given a value other than their default that this kind does not read (a typo or a wrong kind).
        Defaults are never reported, so a spec dumped with every field (a worker's copy) checks the same."""
        fields = type(self).model_fields
        return sorted(name for name in fields.keys() - KIND_FIELDS[self.kind] - {"kind"}
                      if getattr(self, name) != fields[name].get_default(call_default_factory=True))


class SplitsSpec(SpecModel):
    """How forget, retain and test are defined: by classes, or by index files of record ids."""

    forget_classes: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1, description=(
        "Forget = train records of these classes, retain = the other train records, test = the test split."))
    forget_index: Text | None = Field(default=None, description=(
        "Index file of forget record ids (one integer per line, '#' comments), in the place index_files_in "
        "names (relative to the spec's folder by default)."))
    retain_index: Text | None = Field(default=None, description=(
        "Index file of retain record ids; default: the train records not in forget_index."))
    test_index: Text | None = Field(default=None, description="Index file of test record ids; default: the test "
                                    "split.")
    index_files_in: IndexLocation = Field(default="spec", description=(
        "Where the index files are: 'spec' (paths relative to the spec's folder), 'dataset_repo' (files of the "
        "hub dataset repo at its revision) or 'model_repo' (files of each audited model repo)."))
    forget_ids_sha256: Sha256 | None = Field(default=None, description=(
        "record_ids_sha256 of the ids in forget_index (required for a file in a repo): a file whose ids hash "
        "otherwise is refused."))
    retain_ids_sha256: Sha256 | None = Field(default=None, description=(
        "record_ids_sha256 of the ids in retain_index (required for a file in a repo)."))
    test_ids_sha256: Sha256 | None = Field(default=None, description=(
        "record_ids_sha256 of the ids in test_index (required for a file in a repo)."))

    def index_files(self) -> dict[str, tuple[str, str | None]]:
        """``role -> (file, ids_sha256)`` of every index file given."""
        return {role: (getattr(self, f"{role}_index"), getattr(self, f"{role}_ids_sha256"))
                for role in ("forget", "retain", "test") if getattr(self, f"{role}_index") is not None}


def check_dataset(dataset: DatasetSpec) -> None:
    """The dataset fields a schema cannot tie to the kind (which fields it reads, which it needs)."""
    unread = dataset.unread_fields()
    if unread:
        raise AuditSpecError(f"dataset.{unread[0]} is not read by dataset kind {dataset.kind!r}; remove it or "
                             "change the kind", field=f"/dataset/{unread[0]}")
    if dataset.kind in PATH_KINDS and dataset.path is None:
        raise AuditSpecError(f"dataset kind {dataset.kind!r} needs a path (relative to the spec file's folder)",
                             field="/dataset/path")
    if dataset.kind == "hub":
        for key in ("repo", "revision"):
            if getattr(dataset, key) is None:
                raise AuditSpecError(f"a hub dataset needs {key} (the dataset repo and the revision it is pinned "
                                     "to)", field=f"/dataset/{key}")
    if dataset.kind == "torchvision" and dataset.format is None:
        raise AuditSpecError("a torchvision dataset needs a format: cifar10, cifar100, svhn or image_folder",
                             field="/dataset/format")
    try:
        DatasetSource.parse(dataset.loader_spec())
    except UsageError as exc:
        raise AuditSpecError(f"dataset: {exc}", field="/dataset") from exc


def check_splits(splits: SplitsSpec, dataset: DatasetSpec) -> None:
    """The split fields a schema cannot express: one way of defining them, no repeated class, index files."""
    files = {"forget_index": splits.forget_index, "retain_index": splits.retain_index,
             "test_index": splits.test_index}
    if splits.forget_classes is None and splits.forget_index is None:
        raise AuditSpecError("define the splits by forget_classes or by index files (forget_index, and "
                             "optionally retain_index and test_index)",
                             field="/splits/forget_index" if any(files.values()) else "/splits")
    if splits.forget_classes is not None:
        for key, value in files.items():
            if value is not None:
                raise AuditSpecError(f"splits.{key} given together with forget_classes; define the splits "
                                     "either by classes or by index files", field=f"/splits/{key}")
        seen: set[int] = set()
        for index, label in enumerate(splits.forget_classes):
            if label in seen:
                raise AuditSpecError(f"forget class {label} is listed twice in {splits.forget_classes}",
                                     field=f"/splits/forget_classes/{index}")
            seen.add(label)
    _check_index_files(splits, dataset)


def _check_index_files(splits: SplitsSpec, dataset: DatasetSpec) -> None:
    """Digests go with files; a file in a repo is a repo-relative name bound by its digest."""
    for role in ("forget", "retain", "test"):
        if getattr(splits, f"{role}_ids_sha256") is not None and getattr(splits, f"{role}_index") is None:
            raise AuditSpecError(f"splits.{role}_ids_sha256 binds {role}_index, which is not given",
                                 field=f"/splits/{role}_ids_sha256")
    if splits.index_files_in == "spec":
        return
    if splits.index_files_in == "dataset_repo" and dataset.kind != "hub":
        raise AuditSpecError(f"index_files_in: dataset_repo reads the files from the hub dataset repo, but the "
                             f"dataset kind is {dataset.kind!r}", field="/splits/index_files_in")
    for role, (name, digest) in splits.index_files().items():
        try:
            check_repo_path(name, what=f"splits.{role}_index")
        except UsageError as exc:
            raise AuditSpecError(str(exc), field=f"/splits/{role}_index") from exc
        if digest is None:
            raise AuditSpecError(f"splits.{role}_index is a file of the {splits.index_files_in.replace('_', ' ')}: "
                                 f"bind it with {role}_ids_sha256 (record_ids_sha256 of its ids)",
                                 field=f"/splits/{role}_ids_sha256")
