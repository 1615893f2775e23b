"""Reading safetensors headers without loading tensors (bnconvention.safetensors_header): every malformed case."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tracemalloc
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bnconvention.errors import SafetensorsHeaderError
from bnconvention.safetensors_header import MAX_HEADER_BYTES, parse_header, read_header


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
    pytest.param(json.dumps({"w": {"dtype": "F32", "shape": [2]}}).encode(), 8, "expected exactly dtype",
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
