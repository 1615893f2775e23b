"""Tensor digests that bind a record to the exact tensors of a weights file (algorithm ``bnconvention-tensors/1``).

A digest covers a set of named tensors in canonical order (names sorted by their UTF-8 bytes). For each tensor it
hashes, with sha256, the 8-byte little-endian length of a canonical-JSON entry header ``{"dtype","name","shape"}``,
that header, the 8-byte little-endian length of the raw data, and the raw little-endian data bytes (exactly the
bytes a safetensors file stores). The same tensors therefore give the same digest whether they come from a
``state_dict`` in memory or from a ``.safetensors`` file streamed from disk.

Which tensors are *running statistics*: for every BatchNorm layer ``L``, ``L.running_mean``, ``L.running_var`` and
``L.num_batches_tracked``. Everything else is *trainable* for the purpose of the digest (parameters and any other
buffers: nothing we do may change them).

>>> d = TensorSetDigest()
>>> d.add("w", "F32", (1,), b"\\x00\\x00\\x80?")
>>> len(d.hexdigest())
64
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from bnconvention.errors import DigestMismatchError, SafetensorsHeaderError
from bnconvention.formats.canonical import canonical_json_bytes
from bnconvention.formats.checkpoint_files import CheckpointFiles
from bnconvention.formats.safetensors_header import SafetensorsHeader, read_header

# torch is imported inside the functions that take tensors or modules: digests of files, and the validator that
# checks them, do not import torch.
if TYPE_CHECKING:
    import torch

RUNNING_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")
# One tensor for TensorSetDigest.add: name, safetensors dtype, shape, its bytes (one buffer or chunks), byte count.
_Entry: TypeAlias = tuple[str, str, tuple[int, ...], bytes | memoryview | Iterable[bytes | memoryview], int]
_CHUNK = 8 * 1024 * 1024


class TensorSetDigest:
    """Incremental digest of named tensors; names must be added in canonical (sorted UTF-8) order."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"bnconvention-tensors/1\n")
        self._last: bytes | None = None
        self.count = 0

    def add(self, name: str, dtype: str, shape: tuple[int, ...] | list[int],
            data: bytes | memoryview | Iterable[bytes | memoryview], nbytes: int | None = None) -> None:
        for _ in self.add_steps(name, dtype, shape, data, nbytes):
            pass

    def add_steps(self, name: str, dtype: str, shape: tuple[int, ...] | list[int],
                  data: bytes | memoryview | Iterable[bytes | memoryview],
                  nbytes: int | None = None) -> Iterator[int]:
        """:meth:`add`, one data chunk per step: a generator that hashes the entry header, then one chunk each time
        it is advanced (yielding that chunk's byte count). A digest cut into steps can be carried on by whichever
        thread advances it (the refit's θ witness: a background thread, then the caller). Nothing is hashed before
        the first step."""
        key = name.encode("utf-8")
        if self._last is not None and key <= self._last:
            raise ValueError(f"tensor {name!r} added out of canonical order (after {self._last.decode()!r})")
        self._last = key
        entry = canonical_json_bytes({"dtype": dtype, "name": name, "shape": list(shape)})
        self._hash.update(struct.pack("<Q", len(entry)))
        self._hash.update(entry)
        if isinstance(data, (bytes, bytearray, memoryview)):
            chunks: Iterable[bytes | memoryview] = [data]
            nbytes = memoryview(data).nbytes if nbytes is None else nbytes
        else:
            chunks = data
        if nbytes is None:
            raise ValueError("nbytes is required when data is an iterable of chunks")
        self._hash.update(struct.pack("<Q", nbytes))
        seen = 0
        for chunk in chunks:
            size = memoryview(chunk).nbytes
            seen += size
            self._hash.update(chunk)
            yield size
        if seen != nbytes:
            raise ValueError(f"tensor {name!r}: got {seen} data bytes, expected {nbytes}")
        self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def canonical_order(names: Iterable[str]) -> list[str]:
    """Names sorted by their UTF-8 bytes: the order digests are computed in."""
    return sorted(names, key=lambda n: n.encode("utf-8"))


def running_names_for_layer(layer: str, available: Iterable[str]) -> list[str]:
    """The running-statistics tensor names of BN layer ``layer`` that exist in ``available``."""
    present = set(available)
    prefix = f"{layer}." if layer else ""
    return [prefix + s for s in RUNNING_SUFFIXES if prefix + s in present]


def bn_layers_from_tensor_names(shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """BN layer names recognisable from tensor names alone: ``L`` with 1-D ``L.running_mean`` and ``L.running_var``.

    This is what a header-only census can see; layers with ``track_running_stats=False`` store nothing and are
    invisible here, which is correct: they have no deployed state.
    """
    layers = []
    for name, shape in shapes.items():
        if name.endswith(".running_mean") or name == "running_mean":
            layer = name[: -len("running_mean")].rstrip(".")
            var = f"{layer}.running_var" if layer else "running_var"
            if var in shapes and len(shape) == 1 and tuple(shapes[var]) == tuple(shape):
                layers.append(layer)
    return layers


@dataclass(frozen=True)
class DigestSet:
    """The digests of one set of tensors: trainable, all running statistics, and per BN layer."""

    trainable_sha256: str
    running_sha256: str | None
    layer_running_sha256: dict[str, str | None] = field(default_factory=dict)
    trainable_count: int = 0
    running_count: int = 0

    def check_against(self, *, trainable_sha256: str, running_sha256: str | None,
                      layer_running_sha256: Mapping[str, str | None] | None = None, where: str = "file") -> None:
        """Raise :class:`DigestMismatchError` on the first digest that differs from the expected one."""
        pairs: list[tuple[str, str | None, str | None]] = [
            ("digests.trainable_sha256", trainable_sha256, self.trainable_sha256),
            ("digests.running_sha256", running_sha256, self.running_sha256),
        ]
        for layer, expected in (layer_running_sha256 or {}).items():
            pairs.append((f"layer {layer!r} running_sha256", expected, self.layer_running_sha256.get(layer)))
        for name, expected, found in pairs:
            if expected != found:
                raise DigestMismatchError(
                    f"{name} is {expected} but the {where}'s tensors give {found}; the record describes other "
                    "tensors: rebuild it from these weights (bnconvention declare) instead of reusing it",
                    field=name, expected=expected, found=found,
                )


def _split(names: Iterable[str], bn_layers: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
    name_list = list(names)
    per_layer = {layer: running_names_for_layer(layer, name_list) for layer in bn_layers}
    running = {n for group in per_layer.values() for n in group}
    trainable = [n for n in name_list if n not in running]
    return trainable, per_layer


def _digest(entries: Iterator[_Entry]) -> tuple[str, int]:
    digest = TensorSetDigest()
    for name, dtype, shape, data, nbytes in entries:
        digest.add(name, dtype, shape, data, nbytes)
    return digest.hexdigest(), digest.count


def _digest_set(names: list[str], bn_layers: Iterable[str], entry: Callable[[str], _Entry]) -> DigestSet:
    trainable, per_layer = _split(names, bn_layers)
    trainable_hex, trainable_count = _digest(entry(n) for n in canonical_order(trainable))
    running_all = canonical_order(n for group in per_layer.values() for n in group)
    running_hex, running_count = _digest(entry(n) for n in running_all) if running_all else (None, 0)
    layer_hex = {
        layer: (_digest(entry(n) for n in canonical_order(group))[0] if group else None)
        for layer, group in per_layer.items()
    }
    return DigestSet(trainable_sha256=trainable_hex, running_sha256=running_hex, layer_running_sha256=layer_hex,
                     trainable_count=trainable_count, running_count=running_count)


# --- torch ----------------------------------------------------------------------------------------------------------


def torch_dtype_name(dtype: torch.dtype) -> str:
    """The safetensors dtype string of a torch dtype."""
    import torch

    names = {
        torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
        torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
        torch.bool: "BOOL", torch.complex64: "C64",
    }
    for attr, name in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"), ("uint16", "U16"),
                       ("uint32", "U32"), ("uint64", "U64")):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = name
    try:
        return names[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} has no safetensors equivalent; it cannot be digested") from None


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return flat.view(torch.uint8).numpy().data.cast("B")


def state_dict_digests(state: Mapping[str, torch.Tensor], bn_layers: Iterable[str]) -> DigestSet:
    """Digests of a ``state_dict`` (or any name → tensor mapping) given the names of its BN layers."""
    def entry(name: str) -> _Entry:
        tensor = state[name]
        data = _tensor_bytes(tensor)
        return name, torch_dtype_name(tensor.dtype), tuple(tensor.shape), data, data.nbytes

    return _digest_set(list(state), bn_layers, entry)


def tensor_digest_steps(state: Mapping[str, torch.Tensor], *, piece: int = 1 << 20) -> Generator[int, None, str]:
    """The digest of every tensor of ``state`` (as ``state_dict_digests(state, []).trainable_sha256``), computed
    one piece of at most ``piece`` data bytes per step: a generator yielding each piece's byte count and returning
    the hex digest. Each step only hashes (the tensors' bytes are viewed here, in the calling thread), releases the
    GIL while it does, and any thread may take the next one."""
    entries: list[_Entry] = []
    for name in canonical_order(state):
        tensor = state[name]
        data = _tensor_bytes(tensor)
        pieces = [data[start:start + piece] for start in range(0, data.nbytes, piece)]
        entries.append((name, torch_dtype_name(tensor.dtype), tuple(tensor.shape), pieces, data.nbytes))
    return _steps(entries)


def _steps(entries: list[_Entry]) -> Generator[int, None, str]:
    digest = TensorSetDigest()
    for name, dtype, shape, pieces, nbytes in entries:
        yield from digest.add_steps(name, dtype, shape, pieces, nbytes)
    return digest.hexdigest()


def bn_layer_names(model: torch.nn.Module) -> list[str]:
    """Names of every BatchNorm module (``_BatchNorm`` subclasses, SyncBatchNorm included), in module order."""
    from torch.nn.modules.batchnorm import _BatchNorm

    return [name for name, module in model.named_modules() if isinstance(module, _BatchNorm)]


def model_digests(model: torch.nn.Module) -> DigestSet:
    """Digests of a model's ``state_dict``: the same as those of the safetensors file it is saved to."""
    return state_dict_digests(model.state_dict(), bn_layer_names(model))


def running_digests_from_bytes(tensors: Mapping[str, tuple[str, tuple[int, ...], bytes]],
                               bn_layers: Iterable[str]) -> tuple[str | None, dict[str, str | None]]:
    """The combined and per-layer running-statistics digests of raw tensors ``name -> (dtype, shape, bytes)``.

    For checks that read only the running buffers' bytes (e.g. ranged reads over HTTP): ``tensors`` must hold every
    running tensor of ``bn_layers`` (other names are ignored).
    """
    def entry(name: str) -> _Entry:
        dtype, shape, data = tensors[name]
        return name, dtype, shape, data, len(data)

    layers = list(bn_layers)
    running = [n for layer in layers for n in running_names_for_layer(layer, tensors)]
    result = _digest_set(running, layers, entry)
    return result.running_sha256, result.layer_running_sha256


# --- safetensors files ----------------------------------------------------------------------------------------------


def file_digests(path: str | os.PathLike[str], *, bn_layers: Iterable[str] | None = None,
                 header: SafetensorsHeader | None = None, rename: Callable[[str], str] | None = None) -> DigestSet:
    """Digests of a safetensors file, streamed from disk in chunks (memory independent of the file size).

    ``bn_layers`` defaults to the layers recognisable from tensor names (:func:`bn_layers_from_tensor_names`).
    ``rename`` gives each tensor the name it has in another namespace (a wrapper's: ``net.`` + name) before it is
    digested, so the file can be compared with digests taken there; ``bn_layers`` are then names of that namespace.
    """
    return _stored_digests([(path, header or read_header(path))], bn_layers, rename)


def checkpoint_digests(files: CheckpointFiles, *, bn_layers: Iterable[str] | None = None) -> DigestSet:
    """Digests of a checkpoint over all its shards: those of the merged single file, whatever the sharding.

    A digest takes tensors in name order whichever file holds them, so a sharded checkpoint, the same tensors
    merged into one file and any re-sharding of them give the same digests (``docs/standard.md``)."""
    return _stored_digests([(shard.path, shard.header) for shard in files.shards], bn_layers)


def _stored_digests(sources: list[tuple[str | os.PathLike[str], SafetensorsHeader]],
                    bn_layers: Iterable[str] | None, rename: Callable[[str], str] | None = None) -> DigestSet:
    """Digests of the tensors of one or more files (tensor names unique across them), streamed in chunks."""
    named = rename or (lambda name: name)
    stored = {named(name): name for _, header in sources for name in header.tensors}
    where = {named(name): index for index, (_, header) in enumerate(sources) for name in header.tensors}
    shapes = {named(name): info.shape for _, header in sources for name, info in header.tensors.items()}
    layers = list(bn_layers) if bn_layers is not None else bn_layers_from_tensor_names(shapes)
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(path, "rb")) for path, _ in sources]

        def chunks(index: int, begin: int, end: int) -> Iterator[bytes]:
            handle, header = handles[index], sources[index][1]
            handle.seek(header.data_offset + begin)
            remaining = end - begin
            while remaining:
                chunk = handle.read(min(_CHUNK, remaining))
                if not chunk:
                    raise SafetensorsHeaderError(f"{sources[index][0]}: file ended inside tensor data",
                                                 source=str(sources[index][0]))
                remaining -= len(chunk)
                yield chunk

        def entry(name: str) -> _Entry:
            index = where[name]
            info = sources[index][1].tensors[stored[name]]
            return name, info.dtype, info.shape, chunks(index, info.begin, info.end), info.nbytes

        return _digest_set(list(where), layers, entry)


def data_section_sha256(path: str | os.PathLike[str], header: SafetensorsHeader | None = None) -> str:
    """sha256 of the bytes after the header: unchanged by any stamp."""
    header = header or read_header(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(header.data_offset)
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
