"""Where a dataset comes from and how to read it: :class:`DatasetSource`, checked before anything is read.

A spec is a mapping (the ``dataset`` section of an audit spec), a :class:`DatasetSource`, or a short string
(``digits``, ``npz:PATH``, ``folder:PATH``). The kinds and the fields each one reads:

* ``digits``: the bundled scikit-learn digits, prepared as the zoo prepares them (no other field).
* ``npz``: ``path``; ``x_key``, ``y_key``, ``ids_key``, ``test_key``. ``x`` is N×F (a tabular pool, for
  BatchNorm1d models), N×H×W or N×C×H×W.
* ``image_folder``: ``path``; ``image_size``, ``channels`` (our reader: ``<class>/<image>`` or
  ``train|test/<class>/<image>``).
* ``hub``: a dataset repo on the Hub read by ``datasets``: ``repo``, ``revision`` (required: the audit is pinned),
  ``config_name``; the columns and splits below.
* ``hf_disk``: ``path`` of a ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` folder; columns and splits.
* ``parquet``: ``path`` of a ``.parquet`` file (one split, ``train``) or of a folder of them (splits from the file
  names, as ``datasets`` infers them: ``train-*.parquet``, ``data/test-*.parquet``, ...); columns and splits.
* ``torchvision``: ``path`` of a torchvision dataset root and its ``format`` (``cifar10``, ``cifar100``, ``svhn``,
  ``image_folder``); ``verify`` (torchvision's checksums); for ``image_folder`` the splits are the sub-folders
  ``train_split`` and ``test_split``.

Columns (``hub``, ``hf_disk``, ``parquet``): ``image_column`` (a ``datasets.Image`` feature, decoded by Pillow),
``label_column`` (a ``ClassLabel`` or integers), ``id_column`` (unique integers; default: the row index, train
rows first, then test rows). Splits: ``train_split`` and ``test_split`` (``null``: no test records). Images are
converted to ``channels`` (1: grey, 3: RGB) and, with ``image_size``, resized (bilinear) when decoded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypeAlias, get_args

from bnconvention.errors import UsageError

# The bundled digits' dataset id (``digits`` names them in a spec; :mod:`~bnconvention.data.digits` reads them).
DIGITS_DATASET_ID = "sklearn/digits"

DatasetKind: TypeAlias = Literal["digits", "npz", "image_folder", "hub", "hf_disk", "parquet", "torchvision"]
TorchvisionFormat: TypeAlias = Literal["cifar10", "cifar100", "svhn", "image_folder"]
DATASET_KINDS: tuple[str, ...] = get_args(DatasetKind)
TORCHVISION_FORMATS: tuple[str, ...] = get_args(TorchvisionFormat)
HF_KINDS = ("hub", "hf_disk", "parquet")
PATH_KINDS = ("npz", "image_folder", "hf_disk", "parquet", "torchvision")
_COLUMNS = frozenset({"dataset_id", "image_column", "label_column", "id_column", "train_split", "test_split",
                      "image_size", "channels"})
# The fields each kind reads (besides ``kind``): a field set for a kind that does not read it is a mistake.
KIND_FIELDS: dict[str, frozenset[str]] = {
    "digits": frozenset({"dataset_id"}),
    "npz": frozenset({"path", "dataset_id", "x_key", "y_key", "ids_key", "test_key"}),
    "image_folder": frozenset({"path", "dataset_id", "image_size", "channels"}),
    "hub": _COLUMNS | {"repo", "revision", "config_name"},
    "hf_disk": _COLUMNS | {"path"},
    "parquet": _COLUMNS | {"path"},
    "torchvision": frozenset({"path", "dataset_id", "format", "verify", "train_split", "test_split", "image_size",
                              "channels"}),
}
# A split name as `datasets` spells one (its own rule: word characters, dots between words); no slicing syntax,
# so the record ids of a split never depend on a slice.
SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

__all__ = ["DATASET_KINDS", "KIND_FIELDS", "DatasetKind", "DatasetSource", "TORCHVISION_FORMATS", "TorchvisionFormat"]


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset comes from and how to read it (see the module docstring for which kind reads which field)."""

    kind: DatasetKind
    path: Path | None = None
    dataset_id: str | None = None
    x_key: str = "x"
    y_key: str = "y"
    ids_key: str | None = None
    test_key: str | None = None
    image_size: tuple[int, int] | None = None
    channels: Literal[1, 3] = 3
    repo: str | None = None
    revision: str | None = None
    config_name: str | None = None
    image_column: str = "image"
    label_column: str = "label"
    id_column: str | None = None
    train_split: str = "train"
    test_split: str | None = "test"
    format: TorchvisionFormat | None = None
    verify: bool = True

    @classmethod
    def parse(cls, spec: DatasetSource | Mapping[str, Any] | str) -> DatasetSource:
        """Accept a spec, a mapping of its fields (e.g. from an audit spec) or ``digits`` / ``npz:P`` / ``folder:P``."""
        if isinstance(spec, DatasetSource):
            parsed = spec
        elif isinstance(spec, str):
            parsed = _parse_string(spec)
        elif isinstance(spec, Mapping):
            parsed = _parse_mapping(cls, spec)
        else:
            raise UsageError(f"a dataset spec is a DatasetSource, a mapping or a string, not {type(spec).__name__}")
        parsed._check()
        return parsed

    def _check(self) -> None:
        if self.kind not in DATASET_KINDS:
            raise UsageError(f"dataset kind {self.kind!r} is unknown; use one of {', '.join(DATASET_KINDS)}")
        if self.kind in PATH_KINDS and self.path is None:
            raise UsageError(f"a {self.kind} dataset needs a path")
        if self.channels not in (1, 3):
            raise UsageError(f"channels must be 1 or 3, got {self.channels!r}")
        if self.image_size is not None and (
            len(self.image_size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in self.image_size)
        ):
            raise UsageError(f"image_size must be two positive integers (height, width), got {self.image_size!r}")
        if self.kind == "hub":
            self._check_hub()
        if self.kind == "torchvision" and self.format not in TORCHVISION_FORMATS:
            raise UsageError(f"a torchvision dataset needs a format: one of {', '.join(TORCHVISION_FORMATS)} "
                             f"(found {self.format!r})")
        for name in ("train_split", "test_split"):
            value = getattr(self, name)
            if value is not None and not SPLIT_NAME.match(value):
                raise UsageError(f"{name} {value!r} is not a split name (letters, digits, '_' and '.'; no slices)")
        if self.test_split is not None and self.test_split == self.train_split:
            raise UsageError(f"train_split and test_split are both {self.train_split!r}; name two different splits")

    def _check_hub(self) -> None:
        if self.repo is None or not REPO_ID.match(self.repo):
            raise UsageError(f"a hub dataset needs repo: 'owner/name' of a dataset repo (found {self.repo!r})")
        if not self.revision:
            raise UsageError(f"a hub dataset is read at a pinned revision: give revision: (a commit sha or a tag) "
                             f"for {self.repo}")

    @property
    def resize_text(self) -> str | None:
        """How images were resized when decoded, for the transform's description (None: not resized)."""
        return None if self.image_size is None else f"{self.image_size[1]}x{self.image_size[0]} bilinear"


def _parse_mapping(cls: type[DatasetSource], spec: Mapping[str, Any]) -> DatasetSource:
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
        return cls(**values)
    except TypeError as exc:
        raise UsageError(f"dataset spec is incomplete: {exc}; it needs at least 'kind'") from exc


def _parse_string(text: str) -> DatasetSource:
    if text in ("digits", DIGITS_DATASET_ID):
        return DatasetSource(kind="digits")
    prefix, sep, rest = text.partition(":")
    if sep and rest and prefix in ("npz", "folder"):
        return DatasetSource(kind="npz" if prefix == "npz" else "image_folder", path=Path(rest))
    raise UsageError(f"dataset {text!r} is not understood; use 'digits', 'npz:PATH' or 'folder:PATH'")
