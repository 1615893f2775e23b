"""Reading safetensors headers without loading tensors (bnconvention.formats.safetensors_header): every malformed
case."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tracemalloc
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bnconvention.errors import SafetensorsHeaderError
from bnconvention.formats.safetensors_header import MAX_HEADER_BYTES, header_length, parse_header, read_header


def _file(tmp_path: Path, header: bytes | dict | str, data: bytes = b"", *, length: int | None = None,
          name: str = "x.safetensors") -> Path:
    if isinstance(header, dict):
        header = json.dumps(header).encode()
    elif isinstance(header, str):
        header = header.encode()
    path = tmp_path / name
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry(dtype: str = "F32", shape: list[int] | None = None, offsets: list[int] | None = None) -> dict:
    return {"dtype": dtype, "shape": [2] if shape is None else shape, "data_offsets": offsets or [0, 8]}


def test_real_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "real.safetensors"
    tensors = {"b": torch.zeros(3, dtype=torch.bfloat16), "a": torch.ones(2, 2), "flag": torch.tensor(True),
               "empty": torch.zeros(0, 4), "idx": torch.arange(5)}
    save_file(tensors, str(path), metadata={"format": "pt", "note": "x"})
    header = read_header(path)
    assert header.metadata == {"format": "pt", "note": "x"}
    assert {name: (t.dtype, t.shape) for name, t in header.tensors.items()} == {
        "a": ("F32", (2, 2)), "b": ("BF16", (3,)), "flag": ("BOOL", ()), "empty": ("F32", (0, 4)),
        "idx": ("I64", (5,))}
    assert header.file_size == path.stat().st_size
    assert header.data_offset % 8 == 0  # the writer pads the header to 8 bytes with spaces


def test_trailing_space_padding_accepted(tmp_path: Path) -> None:
    body = json.dumps({"w": _entry()}).encode() + b"      "
    header = read_header(_file(tmp_path, body, b"\x00" * 8))
    assert header.padding == 6
    assert header.header_size == len(body)


def test_no_metadata_is_none() -> None:
    assert parse_header(json.dumps({"w": _entry()}).encode(), data_size=8).metadata is None


BAD_HEADERS = [
    pytest.param(b"{not json}", 0, "header is not valid JSON", id="not-json"),
    pytest.param(b"[1, 2]", 0, "does not start with '{'", id="not-an-object"),
    pytest.param(b'{"w": 1}\xff', 0, "not valid UTF-8", id="not-utf8"),
    pytest.param(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                 b'"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', 8, "duplicate key 'w'",
                 id="duplicate-key"),
    pytest.param(json.dumps({"__metadata__": {"format": 1}}).encode(), 0,
                 "__metadata__ value of 'format' is int", id="metadata-int"),
    pytest.param(json.dumps({"__metadata__": {"a": "x", "b": {"nested": "y"}}}).encode(), 0,
                 "__metadata__ value of 'b' is dict", id="metadata-object"),
    pytest.param(json.dumps({"__metadata__": ["x"]}).encode(), 0, "__metadata__ is list", id="metadata-list"),
    pytest.param(json.dumps({"w": _entry(dtype="F33")}).encode(), 8, "unknown dtype 'F33'", id="bad-dtype"),
    pytest.param(json.dumps({"w": _entry(shape=[-2])}).encode(), 8, "is not a list of non-negative integers",
                 id="negative-shape"),
    pytest.param(json.dumps({"w": {"dtype": "F32", "shape": [2]}}).encode(), 8,
                 "has no 'data_offsets' (keys: ['dtype', 'shape']); a tensor entry needs dtype, shape and data_offsets",
                 id="missing-offsets"),
    pytest.param(json.dumps({"w": _entry(offsets=[0, 12])}).encode(), 12, "holds 12 bytes but dtype F32",
                 id="wrong-byte-count"),
    pytest.param(json.dumps({"a": _entry(offsets=[0, 8]), "b": _entry(offsets=[12, 20])}).encode(), 20,
                 "starts at data offset 12, expected 8", id="gap"),
    pytest.param(json.dumps({"a": _entry(offsets=[0, 8]), "b": _entry(offsets=[4, 12])}).encode(), 12,
                 "starts at data offset 4, expected 8", id="overlap"),
    pytest.param(json.dumps({"w": _entry()}).encode(), 16, "tensors cover 8 bytes but the data section holds 16",
                 id="trailing-bytes"),
    pytest.param(json.dumps({"w": _entry(offsets=[8, 0])}).encode(), 8, "end before they begin",
                 id="reversed-offsets"),
]


@pytest.mark.parametrize(("header", "data_size", "fragment"), BAD_HEADERS)
def test_malformed_headers(tmp_path: Path, header: bytes, data_size: int, fragment: str) -> None:
    path = _file(tmp_path, header, b"\x00" * data_size)
    before = _digest(path)
    with pytest.raises(SafetensorsHeaderError) as info:
        read_header(path)
    assert fragment in str(info.value)
    assert str(info.value).startswith(str(path))
    assert _digest(path) == before


@pytest.mark.parametrize(("content", "fragment"), [
    pytest.param(b"", "is 0 bytes long", id="empty"),
    pytest.param(b"\x10\x00\x00", "is 3 bytes long", id="shorter-than-length"),
    pytest.param(struct.pack("<Q", 1000) + b"{}", "header length 1000 exceeds the 2 bytes", id="length-beyond-file"),
    pytest.param(struct.pack("<Q", 1) + b"{", "too small to hold a JSON object", id="length-one"),
])
def test_truncated_files(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(content)
    with pytest.raises(SafetensorsHeaderError) as info:
        read_header(path)
    assert fragment in str(info.value)
    assert path.read_bytes() == content


def test_real_file_truncated_in_data(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    save_file({"w": torch.ones(16)}, str(path))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(SafetensorsHeaderError, match="tensors cover 64 bytes but the data section holds 54"):
        read_header(path)


def test_huge_length_is_refused_before_allocating(tmp_path: Path) -> None:
    # A sparse file just over the bound whose length field claims all of it: the bound is checked on the 8-byte
    # length alone, so nothing near 100 MB is ever read or allocated.
    path = tmp_path / "huge.safetensors"
    size = MAX_HEADER_BYTES + 64
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", size - 8))
        handle.truncate(size)
    tracemalloc.start()
    try:
        with pytest.raises(SafetensorsHeaderError, match=f"exceeds the {MAX_HEADER_BYTES}-byte limit"):
            read_header(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024
    assert os.path.getsize(path) == size


def test_unreadable_path(tmp_path: Path) -> None:
    with pytest.raises(SafetensorsHeaderError, match="cannot read"):
        read_header(tmp_path / "missing.safetensors")


# --- the reference parser's limits -----------------------------------------------------------------------------


def test_the_header_limit_is_the_reference_implementations() -> None:
    # Regression: the limit was 100 MiB (104,857,600); safetensors refuses anything over 100,000,000 bytes
    assert MAX_HEADER_BYTES == 100_000_000
    prefix = struct.pack("<Q", 100_000_008)
    with pytest.raises(SafetensorsHeaderError,
                       match="header length 100000008 exceeds the 100000000-byte limit") as info:
        header_length(prefix + b"{", file_size=200_000_000)
    assert info.value.reason == "too_large"
    assert header_length(struct.pack("<Q", 100_000_000) + b"{", file_size=200_000_000) == 100_000_000


@pytest.mark.parametrize(("length", "too_large"), [
    pytest.param(100_000_000, False, id="at-the-limit"),
    pytest.param(100_000_001, True, id="one-over"),
])
def test_safe_open_draws_the_limit_where_we_do(tmp_path: Path, length: int, too_large: bool) -> None:
    # Pins our constant to the library's behaviour, on a sparse file (no header bytes are written).
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", length))
        handle.truncate(8 + length + 8)
    with pytest.raises(Exception) as info:  # noqa: PT011 - at the limit it fails as JSON, not as "too large"
        safe_open(str(path), framework="np")
    assert ("header too large" in str(info.value)) == too_large
    prefix = struct.pack("<Q", length) + b"{"
    if too_large:
        with pytest.raises(SafetensorsHeaderError) as ours:
            header_length(prefix, file_size=path.stat().st_size)
        assert ours.value.reason == "too_large"
    else:
        assert header_length(prefix, file_size=path.stat().st_size) == length


ACCEPTED_LIKE_SAFETENSORS = [
    pytest.param(b'{"__metadata__": null, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', None,
                 id="metadata-null"),
    pytest.param(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "note": {"any": [1, "x"]}}}', None,
                 id="extra-tensor-key"),
    pytest.param(b'{"__metadata__": {"a": "\\ud83d\\ude00"}, "w": {"dtype": "F32", "shape": [2], '
                 b'"data_offsets": [0, 8]}}\n\t ', {"a": "\U0001F600"}, id="surrogate-pair-and-trailing-whitespace"),
]


@pytest.mark.parametrize(("header", "metadata"), ACCEPTED_LIKE_SAFETENSORS)
def test_headers_safetensors_opens_are_read(tmp_path: Path, header: bytes, metadata: dict | None) -> None:
    path = _file(tmp_path, header, b"\x00" * 8)
    parsed = read_header(path)
    assert parsed.metadata == metadata and list(parsed.tensors) == ["w"]
    with safe_open(str(path), framework="np") as handle:
        assert handle.metadata() == metadata and list(handle.keys()) == ["w"]


REFUSED_LIKE_SAFETENSORS = [
    pytest.param(b'{"__metadata__": {"a": "\\ud800"}}', 0, "lone surrogate escape \\ud800", id="lone-surrogate"),
    pytest.param(b'{"\\udc00": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}', 0,
                 "lone surrogate escape \\udc00", id="lone-surrogate-in-a-name"),
    pytest.param(b'{"w": {"dtype": "U8", "shape": [-0], "data_offsets": [0, 0]}}', 0,
                 "shape [-0.0] is not a list of non-negative integers", id="negative-zero-is-a-float"),
    pytest.param(b'{"w": {"dtype": "U8", "shape": [18446744073709551616, 0], "data_offsets": [0, 0]}}', 0,
                 "is not a list of non-negative integers below 2**64", id="dimension-over-64-bits"),
    pytest.param(b'{"w": {"dtype": "U8", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}}', 0,
                 "has more elements than a 64-bit size can count", id="element-count-overflows-before-a-zero"),
    pytest.param(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": NaN}}', 8, "NaN is not JSON",
                 id="nan-in-an-extra-key"),
    pytest.param(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1e400}}', 8,
                 "number 1e400 is out of range", id="float-out-of-range"),
    pytest.param(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1' + b"0" * 400 + b"}}", 8,
                 "is out of range for a 64-bit float", id="integer-out-of-range"),
    pytest.param(b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": ' + b"[" * 126 + b"]" * 126
                 + b"}}", 8, "nested more than 127 levels", id="nested-128-deep"),
]


@pytest.mark.parametrize(("header", "data_size", "fragment"), REFUSED_LIKE_SAFETENSORS)
def test_headers_safetensors_refuses_are_refused(tmp_path: Path, header: bytes, data_size: int,
                                                 fragment: str) -> None:
    # Regression: each of these passed our reader (and bnconvention validate) while safe_open refused the file
    path = _file(tmp_path, header, b"\x00" * data_size)
    with pytest.raises(SafetensorsHeaderError) as info:
        read_header(path)
    assert fragment in str(info.value)
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the library raises, it does not open the file
        safe_open(str(path), framework="np")


def test_nesting_up_to_the_limit_is_read(tmp_path: Path) -> None:
    header = (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": ' + b"[" * 125 + b"]" * 125
              + b"}}")
    assert list(read_header(_file(tmp_path, header, b"\x00" * 8)).tensors) == ["w"]


# --- other formats under a weights name, recognised by their magic bytes -----------------------------------------


def _torch_zip(path: Path) -> None:
    torch.save({"w": torch.ones(2)}, path)


def _torch_legacy(path: Path) -> None:
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)


def _pickle(path: Path) -> None:
    import pickle

    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))


def _npz(path: Path) -> None:
    import numpy as np

    with open(path, "wb") as handle:
        np.savez(handle, w=np.ones(2))


FOREIGN = [
    pytest.param(_torch_zip, "is a PyTorch checkpoint (torch.save's zip archive holding a pickle), not safetensors",
                 id="torch-zip"),
    pytest.param(_torch_legacy, "is a PyTorch checkpoint in torch.save's legacy pickle format", id="torch-legacy"),
    pytest.param(_pickle, "is a Python pickle (protocol 4), not safetensors", id="pickle"),
    pytest.param(_npz, "is a zip archive (first member 'w.npy', e.g. a NumPy .npz)", id="npz"),
]


@pytest.mark.parametrize(("make", "fragment"), FOREIGN)
def test_other_formats_are_named_not_misread(tmp_path: Path, make, fragment: str) -> None:
    # Regression: pytorch_model.bin was reported as "header length 578712552184433488 exceeds ..."
    path = tmp_path / "pytorch_model.bin"
    make(path)
    before = _digest(path)
    with pytest.raises(SafetensorsHeaderError) as info:
        read_header(path)
    assert str(info.value).startswith(f"{path}: {fragment}")
    assert info.value.reason == "not_safetensors" and "exceeds" not in str(info.value)
    assert _digest(path) == before


def test_a_real_file_whose_length_looks_like_a_pickle_is_read(tmp_path: Path) -> None:
    # A 640-byte header's length field starts with 0x80 0x02, a pickle's first two bytes: magic numbers are only
    # consulted once the bytes have failed as safetensors.
    name = "w" * (640 - len('{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'))
    body = json.dumps({name: {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, separators=(",", ":")).encode()
    assert len(body) == 640 and struct.pack("<Q", 640)[:2] == b"\x80\x02"
    assert list(read_header(_file(tmp_path, body, b"\x00")).tensors) == [name]
