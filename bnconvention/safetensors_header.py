"""Read and check safetensors headers without loading tensors (and without torch).

The safetensors layout: an 8-byte little-endian unsigned header length ``N``, ``N`` bytes of UTF-8 JSON (which may
be padded with trailing spaces), then the data section. Every check the reference parser makes is made here, before
anything is allocated from the untrusted length: ``N`` is bounded by the file size and by :data:`MAX_HEADER_BYTES`.

``parse_header`` is pure (bytes in, :class:`SafetensorsHeader` out); ``read_header`` is the file wrapper.

>>> import json, struct
>>> body = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
>>> header = parse_header(body, data_size=8)
>>> header.tensors["w"].shape
(2,)
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnconvention.errors import SafetensorsHeaderError

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the reference implementation's limit
METADATA_KEY = "__metadata__"

# Bits per element of every dtype the format defines.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor entry of a header: dtype, shape and byte range inside the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    """A checked header. ``tensors`` keeps the header's key order; ``metadata`` is ``None`` when absent."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] | None
    header_size: int  # N, including any trailing-space padding
    data_size: int
    padding: int = 0  # trailing spaces after the JSON object: room for in-place header updates
    raw: dict[str, Any] = field(repr=False, default_factory=dict)  # the decoded JSON object, key order kept

    @property
    def data_offset(self) -> int:
        """Absolute file offset of the data section."""
        return 8 + self.header_size

    @property
    def file_size(self) -> int:
        return 8 + self.header_size + self.data_size


def _fail(source: str, message: str) -> SafetensorsHeaderError:
    return SafetensorsHeaderError(f"{source}: {message}", source=source)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def header_length(prefix: bytes, *, file_size: int, source: str = "<safetensors>") -> int:
    """Decode and bound the 8-byte header length. ``prefix`` holds at least the first 8 bytes of the file."""
    if file_size < 8 or len(prefix) < 8:
        raise _fail(source, f"file is {file_size} bytes long, shorter than the 8-byte header length; "
                            "it is truncated or not a safetensors file")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > file_size - 8:
        raise _fail(source, f"header length {length} exceeds the {file_size - 8} bytes after the length field; "
                            "the file is truncated or not a safetensors file")
    if length > MAX_HEADER_BYTES:
        raise _fail(source, f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit of the format")
    if length < 2:
        raise _fail(source, f"header length {length} is too small to hold a JSON object")
    return length


def parse_header(header_bytes: bytes, *, data_size: int, source: str = "<safetensors>") -> SafetensorsHeader:
    """Check the JSON header of a safetensors file whose data section is ``data_size`` bytes long."""
    try:
        text = header_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(source, f"header is not valid UTF-8 (byte {exc.start} of the header)") from exc
    if not text.startswith("{"):
        raise _fail(source, "header does not start with '{'; it is not a safetensors JSON header")
    stripped = text.rstrip(" ")
    padding = len(text) - len(stripped)
    try:
        raw = json.loads(stripped, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise _fail(source, f"header is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise _fail(source, f"header is JSON {type(raw).__name__}, expected an object")

    metadata: dict[str, str] | None = None
    if METADATA_KEY in raw:
        meta = raw[METADATA_KEY]
        if not isinstance(meta, dict):
            raise _fail(source, f"__metadata__ is {type(meta).__name__}, expected an object of strings")
        bad = [key for key, value in meta.items() if not isinstance(value, str)]
        if bad:
            raise _fail(source, f"__metadata__ value of {bad[0]!r} is {type(meta[bad[0]]).__name__}; "
                                "metadata values must be strings (store JSON as text)")
        metadata = dict(meta)

    tensors: dict[str, TensorInfo] = {}
    for name, entry in raw.items():
        if name == METADATA_KEY:
            continue
        tensors[name] = _tensor_info(name, entry, source)

    expected = 0
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin != expected:
            raise _fail(source, f"tensor {info.name!r} starts at data offset {info.begin}, expected {expected}; "
                                "tensors must tile the data section without gaps or overlaps")
        expected = info.end
    if expected != data_size:
        raise _fail(source, f"tensors cover {expected} bytes but the data section holds {data_size}; "
                            "the file is truncated or has trailing bytes")
    return SafetensorsHeader(tensors=tensors, metadata=metadata, header_size=len(header_bytes),
                             data_size=data_size, padding=padding, raw=raw)


def _tensor_info(name: str, entry: Any, source: str) -> TensorInfo:
    where = f"tensor {name!r}"
    if not isinstance(entry, dict):
        raise _fail(source, f"{where} entry is {type(entry).__name__}, expected an object")
    unknown = set(entry) - {"dtype", "shape", "data_offsets"}
    missing = {"dtype", "shape", "data_offsets"} - set(entry)
    if missing or unknown:
        raise _fail(source, f"{where} has keys {sorted(entry)}; expected exactly dtype, shape, data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_BITS:
        raise _fail(source, f"{where} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise _fail(source, f"{where} shape {shape!r} is not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)):
        raise _fail(source, f"{where} data_offsets {offsets!r} is not a pair of non-negative integers")
    begin, end = offsets
    if end < begin:
        raise _fail(source, f"{where} data_offsets {offsets} end before they begin")
    numel = 1
    for dim in shape:
        numel *= dim
    bits = numel * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        raise _fail(source, f"{where} holds {end - begin} bytes but dtype {dtype} with shape {shape} needs "
                            f"{bits / 8:g}")
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Read and check the header of the safetensors file at ``path``; never reads the data section."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            file_size = os.fstat(handle.fileno()).st_size
            length = header_length(handle.read(8), file_size=file_size, source=source)
            header_bytes = handle.read(length)
    except OSError as exc:
        raise SafetensorsHeaderError(f"{source}: cannot read: {exc.strerror or exc}", source=source) from exc
    if len(header_bytes) != length:
        raise _fail(source, f"file ended after {len(header_bytes)} of {length} header bytes")
    return parse_header(header_bytes, data_size=file_size - 8 - length, source=source)


def looks_like_safetensors(path: Path) -> bool:
    """Cheap guess used to route a path in ``validate``: the suffix, not the content."""
    return path.suffix == ".safetensors"
