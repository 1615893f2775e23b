"""A checkpoint on disk: one ``.safetensors`` file, or the shards a ``*.safetensors.index.json`` names.

Large releases ship sharded (transformers' ``save_pretrained(max_shard_size=...)``): an index maps every tensor name
to the shard holding it, and one BatchNorm layer's buffers and affine tensors may sit in different shards. Everything
that reads a checkpoint as a whole (the audit, the local census, ``refit``) opens it here, so a sharded checkpoint is
one set of tensors, whatever the shards, and its digests (:func:`bnconvention.formats.digests.checkpoint_digests`)
are those of the merged file.

:func:`open_checkpoint` takes a ``.safetensors`` file, an index file, or a folder holding exactly one checkpoint. The
index is checked by the rule the census and the validator share (:mod:`bnconvention.formats.safetensors_index`):
strict JSON, every shard beside it, every shard tensor listed in the shard that holds it, none stored twice. A folder
whose only weights are pickles (``pytorch_model.bin``) is refused with the file's format and how to convert it,
read from its magic bytes alone.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bnconvention.errors import SafetensorsHeaderError, UsageError
from bnconvention.formats.safetensors_header import (
    PREFIX_BYTES,
    SafetensorsHeader,
    TensorInfo,
    foreign_format,
    read_header,
)
from bnconvention.formats.safetensors_index import (
    INDEX_SUFFIX,
    MAX_INDEX_BYTES,
    ShardIndex,
    checkpoint_files,
    index_mismatch,
    index_missing_shards,
    parse_index,
)

SAFETENSORS_SUFFIX = ".safetensors"
# Weights files of other formats (pickles, zip checkpoints, HDF5): listed and named by their magic bytes, never opened
# beyond them.
FOREIGN_WEIGHTS_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".h5")


@dataclass(frozen=True)
class ShardFile:
    """One safetensors file of a checkpoint: where it is, its name inside the checkpoint's folder, its header."""

    path: Path
    name: str
    header: SafetensorsHeader


@dataclass(frozen=True)
class CheckpointFiles:
    """A checked checkpoint: a single file (one shard) or an index and its shards (in the index's shard order)."""

    path: Path  # the .safetensors file, or the index file
    kind: Literal["single", "sharded"]
    shards: tuple[ShardFile, ...]
    index: ShardIndex | None = None

    @property
    def name(self) -> str:
        return checkpoint_name(self.path)

    @property
    def header(self) -> SafetensorsHeader:
        """The first shard's header: where a stamped record is read (every shard carries the same one)."""
        return self.shards[0].header

    def tensors(self) -> dict[str, TensorInfo]:
        """Every tensor of the checkpoint, shards merged (names are unique: checked when it was opened)."""
        merged: dict[str, TensorInfo] = {}
        for shard in self.shards:
            merged.update(shard.header.tensors)
        return merged

    def shard_of(self) -> dict[str, ShardFile]:
        """Tensor name -> the shard that stores it."""
        return {name: shard for shard in self.shards for name in shard.header.tensors}

    def data_size(self) -> int:
        return sum(shard.header.data_size for shard in self.shards)


def checkpoint_name(path: str | os.PathLike[str]) -> str:
    """The checkpoint's name: the file name without ``.safetensors`` or ``.safetensors.index.json``."""
    name = Path(path).name
    for suffix in (INDEX_SUFFIX, SAFETENSORS_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def is_index_path(path: str | os.PathLike[str]) -> bool:
    return Path(path).name.endswith(INDEX_SUFFIX)


def resolve_checkpoint_path(path: str | os.PathLike[str]) -> Path:
    """A file as given; a folder's one checkpoint (its index, or its only ``.safetensors`` file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    if not path.is_dir():
        return path
    files = sorted(p.name for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    indexes, singles = checkpoint_files(files)
    found = indexes or singles
    if len(found) == 1:
        return path / found[0]
    if not found:
        raise pickle_in_folder(path) or UsageError(
            f"{path} holds no .safetensors checkpoint; pass a .safetensors file, a {INDEX_SUFFIX} or a folder "
            "holding one")
    raise UsageError(f"{path} holds {len(found)} checkpoints ({', '.join(found[:4])}); name the file (or the "
                     f"{INDEX_SUFFIX} of a sharded one) to use")


def pickle_in_folder(folder: Path) -> SafetensorsHeaderError | None:
    """The error naming a pickled checkpoint in ``folder`` (``pytorch_model.bin``, ``.pth``, ...) from its magic
    bytes, with how to convert it (never unpickled); ``None`` when there is none."""
    for item in sorted(folder.iterdir()):
        if item.is_file() and item.name.endswith(FOREIGN_WEIGHTS_SUFFIXES):
            with open(item, "rb") as handle:
                what = foreign_format(handle.read(PREFIX_BYTES))
            if what is not None:
                return SafetensorsHeaderError(f"{item}: is {what}", source=str(item), reason="not_safetensors")
    return None


def open_checkpoint(path: str | os.PathLike[str]) -> CheckpointFiles:
    """The checkpoint at ``path`` (file, index or folder), every header read and checked, no tensor data read."""
    resolved = resolve_checkpoint_path(path)
    if not resolved.is_file():
        raise FileNotFoundError(f"checkpoint {str(resolved)!r} is not a file")
    if not is_index_path(resolved):
        return CheckpointFiles(path=resolved, kind="single",
                               shards=(ShardFile(path=resolved, name=resolved.name, header=read_header(resolved)),))
    index = read_local_index(resolved)
    folder = resolved.parent
    missing = index_missing_shards(index, [s for s in index.shards if (folder / s).is_file()], holder="the folder")
    if missing:
        raise SafetensorsHeaderError(f"{resolved}: {missing}", source=str(resolved))
    shards = tuple(ShardFile(path=folder / s, name=s, header=read_header(folder / s)) for s in index.shards)
    mismatch = index_mismatch(index, {s.name: list(s.header.tensors) for s in shards})
    if mismatch:
        raise SafetensorsHeaderError(f"{resolved}: {mismatch}", source=str(resolved))
    return CheckpointFiles(path=resolved, kind="sharded", shards=shards, index=index)


def read_local_index(path: Path) -> ShardIndex:
    """A local index file, checked; shard names are relative to the index's folder."""
    size = path.stat().st_size
    if size > MAX_INDEX_BYTES:
        raise SafetensorsHeaderError(f"{path}: {size} bytes, over the {MAX_INDEX_BYTES}-byte bound for an index",
                                     source=str(path))
    return parse_index(path.read_bytes(), filename=posixpath.basename(path.name), source=str(path))


__all__ = [
    "FOREIGN_WEIGHTS_SUFFIXES",
    "CheckpointFiles",
    "ShardFile",
    "checkpoint_name",
    "is_index_path",
    "open_checkpoint",
    "pickle_in_folder",
    "read_local_index",
    "resolve_checkpoint_path",
]
