"""Sharded checkpoints: check a ``*.safetensors.index.json`` and its agreement with the shards' headers.

One rule for every reader of an index: the Hub census (:mod:`bnconvention.hub.headers`, over HTTP) and the offline
validator (:mod:`bnconvention.validation`, on a folder, which ``hub validate`` downloads). An index is strict JSON
(:func:`~bnconvention.formats.canonical.loads_strict`) holding a non-empty ``weight_map`` of tensor names to shard files
beside it; every shard it names must be there; every shard tensor must be listed, in the shard that holds it, and
no tensor may be stored twice. Everything here is pure: bytes and names in, a checked index or a message out.

>>> index = parse_index(b'{"weight_map": {"w": "m-1.safetensors"}}', filename="sub/m.safetensors.index.json",
...                     source="m.safetensors.index.json")
>>> index.shards, index_mismatch(index, {"sub/m-1.safetensors": ["w"]})
(['sub/m-1.safetensors'], None)
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bnconvention.errors import JSONInputError
from bnconvention.formats.canonical import loads_strict

INDEX_SUFFIX = ".safetensors.index.json"
MAX_INDEX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ShardIndex:
    """A checked ``*.safetensors.index.json``: tensor name -> shard path (relative to the repo root)."""

    filename: str
    weight_map: dict[str, str]
    size: int

    @property
    def shards(self) -> list[str]:
        return sorted(set(self.weight_map.values()))


def parse_index(data: bytes, *, filename: str, source: str) -> ShardIndex:
    """Check an index file's bytes: strict JSON, ``weight_map`` of tensor names to shard files beside the index.

    ``filename`` is the index's path (inside the repo or folder); shard paths are resolved against its folder.
    Raises :class:`~bnconvention.errors.JSONInputError` naming ``source``.
    """
    if len(data) > MAX_INDEX_BYTES:
        raise JSONInputError(f"{source}: {len(data)} bytes, over the {MAX_INDEX_BYTES}-byte bound for an index",
                             source=source)
    decoded = loads_strict(data, source=source)
    if not isinstance(decoded, dict):
        raise JSONInputError(f"{source}: an index is a JSON object, found {type(decoded).__name__}", source=source)
    weight_map = decoded.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise JSONInputError(f"{source}: 'weight_map' is missing or empty; expected an object of tensor name -> "
                             "shard file", source=source)
    folder = posixpath.dirname(filename)
    resolved: dict[str, str] = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(".safetensors"):
            raise JSONInputError(f"{source}: weight_map[{tensor!r}] is {shard!r}, not a .safetensors file name",
                                 source=source)
        if shard.startswith("/") or "\\" in shard or any(part in ("", ".", "..") for part in shard.split("/")):
            raise JSONInputError(f"{source}: weight_map[{tensor!r}] = {shard!r} is not a plain path inside the repo",
                                 source=source)
        resolved[tensor] = posixpath.join(folder, shard) if folder else shard
    return ShardIndex(filename=filename, weight_map=resolved, size=len(data))


def index_missing_shards(index: ShardIndex, available: Iterable[str], *, holder: str = "the repo") -> str | None:
    """Why the shards the index names are not all in ``available`` (paths like the index's), or ``None``."""
    present = set(available)
    missing = [shard for shard in index.shards if shard not in present]
    if not missing:
        return None
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return f"names shard {missing[0]!r}, which {holder} does not hold{more}"


def index_mismatch(index: ShardIndex, shard_tensors: Mapping[str, Iterable[str]]) -> str | None:
    """How the index and the shards' headers (shard path -> its tensor names) disagree, or ``None``.

    A tensor stored in two shards, a tensor mapped to a shard that does not hold it, and a shard tensor the index
    does not list are disagreements; the first is named, with a count of the rest.
    """
    seen: dict[str, str] = {}
    for shard in sorted(shard_tensors):
        for tensor in shard_tensors[shard]:
            if tensor in seen:
                return f"tensor {tensor!r} is stored in both {seen[tensor]} and {shard}"
            seen[tensor] = shard
    misplaced = sorted(t for t, shard in index.weight_map.items() if seen.get(t) != shard)
    unlisted = sorted(set(seen) - set(index.weight_map))
    if not misplaced and not unlisted:
        return None
    name = (misplaced or unlisted)[0]
    where = (f"maps {name!r} to {index.weight_map[name]}, but that shard does not hold it" if misplaced
             else f"does not list {name!r}, stored in {seen[name]}")
    count = len(misplaced) + len(unlisted)
    return (f"the index and the shard headers disagree: it {where}"
            + (f" ({count - 1} more differences)" if count > 1 else ""))


def checkpoint_files(filenames: Iterable[str]) -> tuple[list[str], list[str]]:
    """A file list's checkpoints: index files, and ``.safetensors`` files that no index claims by name pattern
    (``<prefix>-00001-of-00002.safetensors`` belongs to the index ``<prefix>.safetensors.index.json``).

    Shards may also carry other names, which only the index itself lists: readers drop the shards an index names
    once it is read. One rule for the Hub census (a repo's file list) and for local folders (audit, census, refit).

    >>> checkpoint_files(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    ...                   "model.safetensors.index.json", "extra.safetensors"])
    (['model.safetensors.index.json'], ['extra.safetensors'])
    """
    names = list(filenames)
    indexes = sorted(f for f in names if f.endswith(INDEX_SUFFIX))
    claimed_prefixes = [f[: -len(INDEX_SUFFIX)] for f in indexes]
    singles = []
    for name in sorted(f for f in names if f.endswith(".safetensors")):
        stem = name[: -len(".safetensors")]
        if any(_is_shard_of(stem, prefix) for prefix in claimed_prefixes):
            continue
        singles.append(name)
    return indexes, singles


def _is_shard_of(stem: str, prefix: str) -> bool:
    # "model-00001-of-00003" is a shard of "model"
    if not stem.startswith(prefix + "-"):
        return False
    rest = stem[len(prefix) + 1:].split("-of-")
    return len(rest) == 2 and all(part.isdigit() for part in rest)


__all__ = ["INDEX_SUFFIX", "MAX_INDEX_BYTES", "ShardIndex", "checkpoint_files", "index_mismatch",
           "index_missing_shards", "parse_index"]
