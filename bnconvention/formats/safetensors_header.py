"""Read and check safetensors headers without loading tensors (and without torch).

The safetensors layout: an 8-byte little-endian unsigned header length ``N``, ``N`` bytes of UTF-8 JSON (which may
be padded with trailing spaces), then the data section. Every check the reference parser makes is made here, before
anything is allocated from the untrusted length: ``N`` is bounded by the file size and by :data:`MAX_HEADER_BYTES`.

What this reader accepts, ``safetensors.safe_open`` opens (``tests/test_safetensors_agreement.py`` checks it on
generated headers). The reference parser is Rust's ``serde_json``, which is stricter than Python's ``json`` in
ways that matter here, so the JSON is decoded with the same limits: no lone surrogate escapes (``"\\ud800"``), no
``NaN``/``Infinity``, no number beyond a 64-bit float, ``-0`` is a float, integers in shapes and offsets fit 64 bits,
at most :data:`MAX_JSON_DEPTH` levels of nesting, and element counts that overflow 64 bits are refused. Tensor
entries may carry extra keys, and ``"__metadata__": null`` means no metadata, as the reference parser allows.
Where safetensors 0.8 is laxer than the format's own specification, the specification wins: the header must start
with ``{`` and no object may repeat a key (readers disagree on which copy counts).

A file that is not safetensors at all (a PyTorch pickle or zip checkpoint, ...) is recognised by its magic bytes
and named, with how to convert it; nothing is ever unpickled.

``parse_header`` is pure (bytes in, :class:`SafetensorsHeader` out); ``read_header`` is the file wrapper.

>>> import json, struct
>>> body = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
>>> header = parse_header(body, data_size=8)
>>> header.tensors["w"].shape
(2,)
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnconvention.errors import SafetensorsHeaderError
from bnconvention.formats.json_types import JsonObject, JsonValue

MAX_HEADER_BYTES = 100_000_000  # safetensors' MAX_HEADER_SIZE (tensor.rs): a longer header is "header too large"
MAX_JSON_DEPTH = 127  # serde_json's recursion limit: the 128th nested array or object is refused
METADATA_KEY = "__metadata__"
PREFIX_BYTES = 64  # what readers read first: the length field and enough to recognise another file format
_U64_MAX = 2**64 - 1
_MAX_FLOAT_DIGITS = 309  # an integer with more digits is beyond the largest 64-bit float
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_TENSOR_KEYS = ("dtype", "shape", "data_offsets")

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
    raw: JsonObject = field(repr=False, default_factory=dict)  # the decoded JSON object, key order kept

    @property
    def data_offset(self) -> int:
        """Absolute file offset of the data section."""
        return 8 + self.header_size

    @property
    def file_size(self) -> int:
        return 8 + self.header_size + self.data_size


def _fail(source: str, message: str, *, reason: str = "invalid") -> SafetensorsHeaderError:
    return SafetensorsHeaderError(f"{source}: {message}", source=source, reason=reason)


# --- other formats under a weights name -----------------------------------------------------------------------------

_CONVERT = ("convert it where you trust its origin, e.g. safetensors.torch.save_file(torch.load(PATH, "
            "weights_only=True), 'model.safetensors') (bnconvention never unpickles)")
_LEGACY_TORCH = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"  # pickle of torch.save's magic number, before zip files
_OTHER_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x93NUMPY", "a NumPy .npy array (numpy.save), not safetensors; save it with safetensors.numpy.save_file"),
    (b"GGUF", "a GGUF file (llama.cpp), not safetensors; bnconvention reads safetensors files only"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (e.g. Keras .h5), not safetensors; bnconvention reads safetensors files only"),
)


def _first_zip_member(prefix: bytes) -> str | None:
    """The name in a zip file's first local file header, when ``prefix`` holds it."""
    if len(prefix) < 30:
        return None
    (name_length,) = struct.unpack("<H", prefix[26:28])
    name = prefix[30:30 + name_length]
    return name.decode("utf-8", "replace") if len(name) == name_length else None


def foreign_format(prefix: bytes) -> str | None:
    r"""What a file that is not safetensors is, from its first bytes (magic numbers); ``None`` when not recognised.

    Called only once the bytes have failed as safetensors, so a real file whose length field happens to start like
    a magic number is never misnamed. Nothing is unpickled or unzipped: only the bytes are compared.

    >>> foreign_format(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00").split(";")[0]
    'a Python pickle (protocol 4), not safetensors'
    """
    if prefix.startswith(b"PK\x03\x04"):
        member = _first_zip_member(prefix)
        if member is None or member.endswith(".pkl"):
            kind = "a PyTorch checkpoint (torch.save's zip archive holding a pickle)" if member else (
                "a zip archive (torch.save writes PyTorch checkpoints as zip archives)")
            return f"{kind}, not safetensors; {_CONVERT}"
        return (f"a zip archive (first member {member!r}, e.g. a NumPy .npz), not safetensors; save the tensors with "
                "safetensors (safetensors.numpy.save_file or safetensors.torch.save_file)")
    if prefix.startswith(_LEGACY_TORCH):
        return f"a PyTorch checkpoint in torch.save's legacy pickle format, not safetensors; {_CONVERT}"
    if len(prefix) >= 2 and prefix[0] == 0x80 and 2 <= prefix[1] <= 5:
        return f"a Python pickle (protocol {prefix[1]}), not safetensors; {_CONVERT}"
    return next((what for magic, what in _OTHER_MAGIC if prefix.startswith(magic)), None)


def _refuse(prefix: bytes, source: str, message: str, *, reason: str) -> SafetensorsHeaderError:
    """The error for bytes that are not a usable safetensors file: named after their real format when it is known."""
    what = foreign_format(prefix)
    if what is not None:
        return _fail(source, f"is {what}", reason="not_safetensors")
    return _fail(source, message, reason=reason)


def header_length(prefix: bytes, *, file_size: int, source: str = "<safetensors>") -> int:
    """Decode and bound the 8-byte header length. ``prefix`` holds at least the first 8 bytes of the file.

    When ``prefix`` also holds the header's first byte, a header that does not start with ``{`` is refused here,
    before it is read. A file of another format (see :func:`foreign_format`) is named as such.
    """
    if file_size < 8 or len(prefix) < 8:
        raise _refuse(prefix, source, f"file is {file_size} bytes long, shorter than the 8-byte header length; "
                                      "it is truncated or not a safetensors file", reason="truncated")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > file_size - 8:
        raise _refuse(prefix, source, f"header length {length} exceeds the {file_size - 8} bytes after the length "
                                      "field; the file is truncated or not a safetensors file", reason="truncated")
    if length > MAX_HEADER_BYTES:
        raise _refuse(prefix, source, f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit of the "
                                      "format", reason="too_large")
    if length < 2:
        raise _refuse(prefix, source, f"header length {length} is too small to hold a JSON object", reason="invalid")
    if len(prefix) > 8 and prefix[8:9] != b"{":
        raise _refuse(prefix, source, "header does not start with '{'; it is not a safetensors JSON header",
                      reason="invalid")
    return length


# --- the JSON of a header, decoded with serde_json's limits ---------------------------------------------------------


class _Refused(ValueError):
    """A JSON detail Python's ``json`` accepts and the reference parser (serde_json) refuses."""


def _no_duplicates(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    seen: JsonObject = {}
    for key, value in pairs:
        if key in seen:
            raise _Refused(f"duplicate key {key!r} in one object; the format disallows duplicate keys (readers "
                           "disagree on which copy counts)")
        seen[key] = value
    return seen


def _int(text: str) -> int | float:
    if text == "-0":
        return -0.0  # serde_json reads -0 as a float, so it is no shape or offset
    if len(text.lstrip("-")) > _MAX_FLOAT_DIGITS:
        raise _Refused(f"number {text[:12]}... ({len(text)} characters) is out of range for a 64-bit float")
    value = int(text)
    if not -(2**63) <= value <= _U64_MAX:
        try:
            float(value)  # serde_json falls back to a float for integers beyond 64 bits
        except OverflowError:
            raise _Refused(f"number {text[:12]}... is out of range for a 64-bit float") from None
    return value


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused(f"number {text} is out of range for a 64-bit float")
    return value


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON (write numbers as finite decimals)")


def _nesting_and_strings(raw: JsonObject, *, walk_strings: bool) -> str | None:
    """What serde_json refuses in decoded JSON: nesting beyond :data:`MAX_JSON_DEPTH`, or (``walk_strings``) a
    string holding a lone surrogate, which only a ``\\uD8xx``-style escape can produce."""
    stack: list[tuple[Any, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if walk_strings and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
                bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
                return (f"string {value[:40]!r} holds the lone surrogate escape \\u{ord(bad):04x}, which is not "
                        "Unicode; safetensors refuses it")
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_JSON_DEPTH:
            return f"JSON is nested more than {MAX_JSON_DEPTH} levels deep, which safetensors refuses"
        items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
        for key, item in items:
            if key is not None:
                stack.append((key, depth))
            stack.append((item, depth + 1))
    return None


def _decode_json(text: str, *, source: str) -> Any:
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_int, parse_float=_float,
                         parse_constant=_constant)
    except _Refused as exc:
        raise _fail(source, f"header is not valid safetensors JSON: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise _fail(source, f"header is not valid JSON: {exc}") from exc
    # Fast paths: no escape that can make a surrogate, and too few brackets to nest that deep.
    walk_strings = _SURROGATE_ESCAPE.search(text) is not None
    if walk_strings or text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        problem = _nesting_and_strings(raw, walk_strings=walk_strings)
        if problem is not None:
            raise _fail(source, f"header is not valid safetensors JSON: {problem}")
    return raw


# --- the header ----------------------------------------------------------------------------------------------------


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
    raw = _decode_json(stripped, source=source)
    if not isinstance(raw, dict):
        raise _fail(source, f"header is JSON {type(raw).__name__}, expected an object")
    metadata = _metadata(raw.get(METADATA_KEY), source)
    tensors = {name: _tensor_info(name, entry, source) for name, entry in raw.items() if name != METADATA_KEY}
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


def _metadata(meta: Any, source: str) -> dict[str, str] | None:
    """``__metadata__``: absent or ``null`` (both mean none), else an object of strings."""
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise _fail(source, f"__metadata__ is {type(meta).__name__}, expected an object of strings")
    bad = [key for key, value in meta.items() if not isinstance(value, str)]
    if bad:
        raise _fail(source, f"__metadata__ value of {bad[0]!r} is {type(meta[bad[0]]).__name__}; "
                            "metadata values must be strings (store JSON as text)")
    return dict(meta)


def _is_size(value: Any) -> bool:
    """A JSON integer the reference parser reads as a 64-bit size (``usize``)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MAX


def _tensor_info(name: str, entry: Any, source: str) -> TensorInfo:
    where = f"tensor {name!r}"
    if not isinstance(entry, dict):
        raise _fail(source, f"{where} entry is {type(entry).__name__}, expected an object")
    missing = [key for key in _TENSOR_KEYS if key not in entry]
    if missing:
        raise _fail(source, f"{where} has no {missing[0]!r} (keys: {sorted(entry)}); a tensor entry needs dtype, "
                            "shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _fail(source, f"{where} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
        raise _fail(source, f"{where} shape {shape!r} is not a list of non-negative integers below 2**64")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_size(o) for o in offsets):
        raise _fail(source, f"{where} data_offsets {offsets!r} is not a pair of non-negative integers below 2**64")
    begin, end = offsets
    if end < begin:
        raise _fail(source, f"{where} data_offsets {offsets} end before they begin")
    numel = 1
    for dim in shape:  # in order, as the reference parser multiplies: an overflow before a 0 is still refused
        numel *= dim
        if numel > _U64_MAX:
            raise _fail(source, f"{where} shape {shape} has more elements than a 64-bit size can count")
    bits = numel * DTYPE_BITS[dtype]
    if bits > _U64_MAX:
        raise _fail(source, f"{where} shape {shape} of dtype {dtype} needs more bits than a 64-bit size can count")
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
            length = header_length(handle.read(PREFIX_BYTES), file_size=file_size, source=source)
            handle.seek(8)
            header_bytes = handle.read(length)
    except OSError as exc:
        raise SafetensorsHeaderError(f"{source}: cannot read: {exc.strerror or exc}", source=source,
                                     reason="unreadable") from exc
    if len(header_bytes) != length:
        raise _fail(source, f"file ended after {len(header_bytes)} of {length} header bytes", reason="truncated")
    return parse_header(header_bytes, data_size=file_size - 8 - length, source=source)


def looks_like_safetensors(path: Path) -> bool:
    """Cheap guess used to route a path in ``validate``: the suffix, not the content."""
    return path.suffix == ".safetensors"
