"""Hugging Face ``datasets`` sources: a dataset repo on the Hub at a pinned revision, a ``save_to_disk`` folder,
parquet files. Read by the library's own code; images decoded by its ``Image`` feature (Pillow), one at a time.

* ``hub``: the revision is resolved to its commit first (``HfApi.dataset_info``), so the audit records the exact
  commit and a revision that does not exist is one line; then ``datasets.load_dataset_builder(repo, revision=sha)``
  and ``download_and_prepare``. ``datasets`` reads the Hub at ``HF_ENDPOINT`` (read when it is imported), so a
  caller that talks to another Hub (``hub audit --endpoint``) passes it as ``endpoint`` and a mismatch is refused:
  the data would otherwise come silently from a different Hub. Only builders that read data files without code
  are used: parquet, arrow and imagefolder (``datasets`` no longer runs loading scripts; we check anyway).
* ``hf_disk``: ``datasets.load_from_disk`` (Arrow files and JSON; nothing is unpickled). A ``DatasetDict`` folder
  has named splits; a single ``Dataset`` folder is the train split.
* ``parquet``: a ``.parquet`` file is the train split; a folder's files are assigned to splits by ``datasets``'
  own file-name patterns.

The revision of a local source is the sha256 over its files (relative path -> sha256), as for an image folder.

Images are not decoded by ``datasets`` (it decodes a whole batch of rows before our code sees any): the image
column is read as ``Image(decode=False)`` (the encoded bytes, or a local path), each image's size is read from its
header, and it is decoded by the column's own ``Image`` feature (``decode_example``: the same pixels, EXIF rotation
and mode) one at a time, within the pixel budget of :class:`bnconvention.data.images.ImageBudget`.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets.utils.logging import disable_progress_bar, enable_progress_bar, is_progress_bar_enabled
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

from bnconvention.data.images import (
    ImageBudget,
    SourceRecords,
    files_digest,
    label_array,
    numbered_ids,
    stack_images,
    unique_ids,
)
from bnconvention.data.source import DatasetSource
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.links import folder_files, skipped_line
from bnconvention.formats.text import one_line

SAFE_BUILDERS = ("parquet", "arrow", "imagefolder")
DECODE_BATCH = 32  # rows read at a time: their encoded bytes only (images are decoded one at a time)

__all__ = ["SAFE_BUILDERS", "datasets_endpoint", "download_dataset_file", "read_hf_source"]


def read_hf_source(spec: DatasetSource, *, endpoint: str | None = None,
                   token: str | bool | None = None) -> SourceRecords:
    """The records of a ``hub``, ``hf_disk`` or ``parquet`` source (see the module docstring)."""
    if spec.kind == "hub":
        splits, where, revision = _hub_splits(spec, endpoint=endpoint, token=token)
        dataset_id, hub_repo = spec.dataset_id or str(spec.repo), str(spec.repo)
    elif spec.kind == "hf_disk":
        splits, where, revision = _disk_splits(spec)
        dataset_id, hub_repo = spec.dataset_id or f"hf_disk:{Path(str(spec.path)).name}", None
    else:
        splits, where, revision = _parquet_splits(spec)
        dataset_id, hub_repo = spec.dataset_id or f"parquet:{Path(str(spec.path)).name}", None
    return _records(spec, splits, where=where, dataset_id=dataset_id, revision=revision, hub_repo=hub_repo)


def datasets_endpoint() -> str:
    """The Hub ``datasets`` talks to: ``HF_ENDPOINT`` as it was when ``datasets`` was imported."""
    return str(datasets.config.HF_ENDPOINT).rstrip("/")


def download_dataset_file(repo: str, revision: str, filename: str, *, token: str | bool | None = None) -> Path:
    """One file of a dataset repo at a commit, from the Hub ``datasets`` reads (for an index file in the repo)."""
    try:
        return Path(hf_hub_download(repo, filename, repo_type="dataset", revision=revision,
                                    endpoint=datasets_endpoint(), token=token))
    except EntryNotFoundError:
        raise FileNotFoundError(f"index file {repo}/{filename} does not exist in the dataset repo at "
                                f"{revision}") from None


# --- the three sources ----------------------------------------------------------------------------------------------


def _hub_splits(spec: DatasetSource, *, endpoint: str | None,
                token: str | bool | None) -> tuple[dict[str, Any], str, str]:
    configured = datasets_endpoint()
    if endpoint is not None and endpoint.rstrip("/") != configured:
        raise UsageError(f"dataset repo {spec.repo} would be read from {configured} (HF_ENDPOINT as datasets sees "
                         f"it), but this audit talks to the Hub at {endpoint}; set HF_ENDPOINT={endpoint}")
    sha = _resolve_revision(str(spec.repo), str(spec.revision), endpoint=configured, token=token)
    where = f"{spec.repo}@{spec.revision}"
    try:
        builder = datasets.load_dataset_builder(str(spec.repo), name=spec.config_name, revision=sha, token=token)
    except ValueError as exc:  # an unknown config name, data files that match no builder
        raise UsageError(f"dataset {where}: {_one_line(exc)}") from exc
    except FileNotFoundError as exc:  # no data files at this revision
        raise UntrustedInputError(f"dataset {where}: {_one_line(exc)}", source=where) from exc
    return _prepared(builder, spec, where=where), where, sha


def _resolve_revision(repo: str, revision: str, *, endpoint: str, token: str | bool | None) -> str:
    try:
        info = HfApi(endpoint=endpoint, token=token).dataset_info(repo, revision=revision)
    except RevisionNotFoundError:
        raise UntrustedInputError(f"dataset {repo}: revision {revision!r} does not exist on {endpoint}; pin a "
                                  "commit sha or tag of the dataset repo", source=f"{repo}@{revision}") from None
    except RepositoryNotFoundError:
        raise UntrustedInputError(f"dataset repo {repo} does not exist on {endpoint} (or is not visible with this "
                                  "token)", source=repo) from None
    return str(info.sha)


def _disk_splits(spec: DatasetSource) -> tuple[dict[str, Any], str, str]:
    root = Path(str(spec.path))
    where = str(root)
    found = folder_files(root) if root.is_dir() else None
    if found is not None and found.skipped:  # datasets would read through a link: one folder rule, none followed
        raise UntrustedInputError(f"{where}: {skipped_line(root, found.skipped[0])}: links are not followed (the "
                                  "dataset's digest binds the bytes read); copy the files into the folder",
                                  source=where)
    try:
        loaded = datasets.load_from_disk(where)
    except (FileNotFoundError, ValueError, KeyError, OSError) as exc:
        raise UntrustedInputError(f"{where}: not a datasets save_to_disk folder ({_one_line(exc)})",
                                  source=where) from exc
    if isinstance(loaded, datasets.DatasetDict):
        splits = dict(loaded)
    elif spec.test_split is not None:
        raise UsageError(f"{where} holds one Dataset (no named splits), read as the train split; set test_split: "
                         "null, or save a DatasetDict with train and test splits")
    else:
        splits = {spec.train_split: loaded}
    files = [root / name for name in found.files] if found is not None else []
    return _select(splits, spec, where=where), where, files_digest(files, root)


def _parquet_splits(spec: DatasetSource) -> tuple[dict[str, Any], str, str]:
    path = Path(str(spec.path))
    where = str(path)
    try:
        if path.is_dir():
            builder = datasets.load_dataset_builder("parquet", data_dir=where)
        else:
            builder = datasets.load_dataset_builder("parquet", data_files={spec.train_split: [where]})
    except (FileNotFoundError, ValueError) as exc:
        raise UntrustedInputError(f"{where}: no parquet data files ({_one_line(exc)})", source=where) from exc
    root = (path if path.is_dir() else path.parent).resolve()
    files = sorted(Path(f).resolve() for files in builder.config.data_files.values() for f in files)
    return _prepared(builder, spec, where=where), where, files_digest(files, root)


# --- shared ---------------------------------------------------------------------------------------------------------


def _prepared(builder: Any, spec: DatasetSource, *, where: str) -> dict[str, Any]:
    """The wanted splits of a builder, after checking it reads plain data files and has those splits."""
    module = type(builder).__module__
    name = module.split(".")[2] if module.startswith("datasets.packaged_modules.") else None
    if name not in SAFE_BUILDERS:
        raise UntrustedInputError(f"dataset {where}: read by {module}.{type(builder).__name__}; only the "
                                  f"{', '.join(SAFE_BUILDERS)} builders of datasets are used (plain data files, no "
                                  "code)", source=where)
    available = sorted((builder.config.data_files or {}).keys())
    _check_splits(available, spec, where=where)
    try:
        with _quiet_datasets():
            builder.download_and_prepare()
            return {split: builder.as_dataset(split=split) for split in _wanted(spec)}
    except (OSError, ValueError) as exc:  # a corrupt parquet file, a schema mismatch between shards
        raise UntrustedInputError(f"dataset {where}: cannot be read ({_one_line(exc)})", source=where) from exc


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets' own "Generating split" bars off (they land in piped logs; the caller's bars report progress)."""
    was_enabled = is_progress_bar_enabled()
    disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            enable_progress_bar()


def _wanted(spec: DatasetSource) -> list[str]:
    return [spec.train_split] + ([spec.test_split] if spec.test_split else [])


def _check_splits(available: Iterable[str], spec: DatasetSource, *, where: str) -> None:
    names = sorted(available)
    for key, split in (("train_split", spec.train_split), ("test_split", spec.test_split)):
        if split is not None and split not in names:
            raise UsageError(f"dataset {where} has no split {split!r}; its splits are {names}; set {key} "
                             f"to one of them" + (" (or test_split: null)" if key == "test_split" else ""))


def _select(splits: Mapping[str, Any], spec: DatasetSource, *, where: str) -> dict[str, Any]:
    _check_splits(splits.keys(), spec, where=where)
    return {split: splits[split] for split in _wanted(spec)}


def _records(spec: DatasetSource, splits: Mapping[str, Any], *, where: str, dataset_id: str, revision: str,
             hub_repo: str | None) -> SourceRecords:
    classes = _check_columns(spec, splits, where=where)
    budget = ImageBudget(sum(len(dataset) for dataset in splits.values()), channels=spec.channels,
                         image_size=spec.image_size, where=f"dataset {where}")
    xs, ys, ids = [], [], []
    for split, dataset in splits.items():
        x, y, column_ids = _decode(spec, dataset, budget, where=f"dataset {where} split {split!r}")
        xs.append(x)
        ys.append(y)
        ids.append(column_ids)
    y_all = np.concatenate(ys)
    n = len(y_all)
    if classes is None:
        classes = tuple(str(i) for i in range(int(y_all.max()) + 1)) if n else ()
    record_ids = (unique_ids(np.concatenate(ids), n, where=f"dataset {where} column {spec.id_column!r}")
                  if spec.id_column else numbered_ids(n))
    is_test = np.concatenate([np.full(len(y), index == 1) for index, y in enumerate(ys)])
    return SourceRecords(x=np.concatenate(xs), y=y_all, ids=record_ids, is_test=is_test, classes=classes,
                         dataset_id=dataset_id, revision=revision, hub_repo=hub_repo)


def _check_columns(spec: DatasetSource, splits: Mapping[str, Any], *, where: str) -> tuple[str, ...] | None:
    """Every named column exists with the right feature; the ClassLabel names (None for integer labels)."""
    names: tuple[str, ...] | None = None
    for split, dataset in splits.items():
        features = dataset.features
        for key in ("image_column", "label_column", "id_column"):
            column = getattr(spec, key)
            if column is not None and column not in features:
                raise UsageError(f"dataset {where} split {split!r} has no column {column!r}; its columns are "
                                 f"{sorted(features)}; set {key} to one of them")
        if not isinstance(features[spec.image_column], datasets.Image):
            raise UntrustedInputError(f"dataset {where}: column {spec.image_column!r} is "
                                      f"{type(features[spec.image_column]).__name__}, not an Image feature",
                                      source=where)
        label = features[spec.label_column]
        if isinstance(label, datasets.ClassLabel):
            if names is not None and tuple(label.names) != names:
                raise UntrustedInputError(f"dataset {where}: the splits' {spec.label_column!r} ClassLabels name "
                                          "different classes", source=where)
            names = tuple(label.names)
        elif not (isinstance(label, datasets.Value) and label.dtype.startswith(("int", "uint"))):
            raise UntrustedInputError(f"dataset {where}: column {spec.label_column!r} is {label!r}; labels are a "
                                      "ClassLabel or integers", source=where)
    return names


def _decode(spec: DatasetSource, dataset: Any, budget: ImageBudget, *,
            where: str) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    feature = dataset.features[spec.image_column]
    decoder = datasets.Image(mode=feature.mode)  # decodes as the column would (a column saved undecoded too)
    columns = list(dict.fromkeys(c for c in (spec.image_column, spec.label_column, spec.id_column) if c is not None))
    encoded = dataset.select_columns(columns).cast_column(spec.image_column, datasets.Image(decode=False))
    images, labels, ids = [], [], []
    row = 0
    for batch in encoded.iter(batch_size=DECODE_BATCH):
        for value in batch[spec.image_column]:
            if value is None or (value.get("bytes") is None and value.get("path") is None):
                raise UntrustedInputError(f"{where} row {row}: the image is missing", source=where)
            images.append(_decoded(value, decoder, budget, column=spec.image_column, where=f"{where} row {row}"))
            row += 1
        labels += batch[spec.label_column]
        if spec.id_column:
            ids += batch[spec.id_column]
    if any(label is None for label in labels):
        raise UntrustedInputError(f"{where}: a label is missing", source=where)
    x = stack_images(images, where=where)
    return x, label_array(np.asarray(labels), len(images), where=f"{where} column {spec.label_column!r}"), ids


def _decoded(value: Mapping[str, Any], decoder: Any, budget: ImageBudget, *, column: str, where: str) -> np.ndarray:
    """One encoded image (``{"bytes", "path"}``) as uint8 C×H×W: its header read first (Pillow's lazy open), then
    decoded by ``datasets``' own ``decode_example``. Pillow's errors name the dataset, split and row, not the
    ``BytesIO`` object they were read from."""
    try:
        encoded = value["bytes"]
        return budget.decode_file(io.BytesIO(encoded) if encoded is not None else value["path"], where=where,
                                  load=lambda: decoder.decode_example(dict(value)))
    except UntrustedInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types
        raise UntrustedInputError(f"{where}: column {column!r} does not hold a readable image "
                                  f"({type(exc).__name__}: {_without_objects(exc)})", source=where) from exc


def _without_objects(exc: BaseException) -> str:
    """An exception's one line without the reprs of in-memory objects (``<_io.BytesIO object at 0x7f..>``), which
    say nothing about the input."""
    return re.sub(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>", "", _one_line(exc)) or type(exc).__name__


def _one_line(exc: BaseException) -> str:
    return one_line(exc) or type(exc).__name__
