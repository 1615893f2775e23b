"""Our header reader and ``safetensors.safe_open`` agree on which files open (bnconvention.formats.safetensors_header).

Regression: a header whose metadata held a lone surrogate escape passed ``bnconvention validate`` while
``safe_open`` refused it. The property: every file our reader accepts opens with the real library, with the same
tensors and metadata; and every file the library opens, our reader opens too, except where the format's
specification is stricter than safetensors 0.8 (the header must start with ``{``; keys must not repeat), which we
follow and name in the message.

Headers are generated near-valid: tensors that tile the data section, metadata of strings, written with random
whitespace, string escapes (surrogate pairs, lone surrogates), number spellings (``-0``, ``2.0``, ``1e400``, 65-bit
integers), extra keys holding arbitrary JSON (NaN, deep nesting), duplicate keys, shapes that overflow 64 bits,
wrong offsets and data sizes, and single-character edits. Derandomized, no example database: the same examples on
every run and every machine.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from bnconvention.errors import SafetensorsHeaderError
from bnconvention.formats.safetensors_header import DTYPE_BITS, read_header

Draw = Callable[[st.SearchStrategy[Any]], Any]

# --- rendering JSON text token by token, so that every spelling the parsers might disagree on can be produced ------

_NAME_CHARS = st.sampled_from(list("wab.0_") + ["é", "\u2028", "😀", "\x7f", "\\", '"', "\x01"])
_LONE = ["\\ud800", "\\udc00", "\\udbff\\ud800", "\\ud83d"]


@st.composite
def json_string(draw: Draw, value: str | None = None) -> str:
    """``value`` (or a random short name) as a JSON string literal: each character literal or escaped, and now and
    then a lone surrogate escape spliced in."""
    text = value if value is not None else "".join(draw(st.lists(_NAME_CHARS, min_size=0, max_size=4)))
    parts = []
    for char in text:
        code = ord(char)
        if char in '"\\' or code < 0x20:
            parts.append(f"\\u{code:04x}" if draw(st.booleans()) else json.dumps(char)[1:-1])
        elif rare(draw, 5):  # escaped: astral characters as a surrogate pair
            units = char.encode("utf-16-be")
            parts.append("".join(f"\\u{int.from_bytes(units[i:i + 2], 'big'):04x}" for i in range(0, len(units), 2)))
        else:
            parts.append(char)
    if rare(draw, 30):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(_LONE)))
    return '"' + "".join(parts) + '"'


@st.composite
def json_int(draw: Draw, value: int) -> str:
    """An integer as JSON, now and then spelled as the reference parser reads as a float or out of range."""
    spelling = draw(st.sampled_from(["plain"] * 30 + ["float", "exponent", "negative"]))
    if spelling == "float":
        return f"{value}.0"
    if spelling == "exponent":
        return f"{value}e0"
    return "-0" if spelling == "negative" and value == 0 else str(value)


def rare(draw: Draw, one_in: int) -> bool:
    """True about once in ``one_in`` draws (not ``integers(...) == 0``: Hypothesis favours 0, which is not rare)."""
    return draw(st.sampled_from([False] * (one_in - 1) + [True]))


def _ws(draw: Draw) -> str:
    return draw(st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n"]))


@st.composite
def json_value(draw: Draw, depth: int = 0) -> str:
    """Arbitrary JSON for extra keys: numbers of every spelling, strings, constants, nesting (sometimes 126 deep)."""
    kind = draw(st.integers(0, 9 if depth < 3 else 5))
    if kind == 0:  # (Hypothesis favours 0: the special spellings, here welcome)
        return draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "-0", "0.5",
                                     "18446744073709551616", "1" + "0" * 320, "true", "null"]))
    if kind in (1, 2):
        return str(draw(st.integers(-(2**70), 2**70)))
    if kind in (3, 4, 5):
        return draw(json_string())
    if kind == 6:
        levels = draw(st.sampled_from([1, 10, 124, 125, 126]))  # the header and the entry add two levels
        return "[" * levels + "]" * levels
    if kind == 7:
        items = draw(st.lists(json_value(depth + 1), max_size=3))
        return "[" + ",".join(items) + "]"
    keys = draw(st.lists(st.sampled_from(["a", "b", "dtype"]), max_size=3))
    return "{" + ",".join(f'"{k}":{draw(json_value(depth + 1))}' for k in keys) + "}"


# --- near-valid headers ------------------------------------------------------------------------------------------

_DTYPES = sorted(DTYPE_BITS) + ["f32", "C128", "F33"]
_DIMS = st.one_of(st.integers(0, 4), st.sampled_from([2**32, 2**63, 2**64 - 1, 2**64]))


@st.composite
def tensor_entry(draw: Draw, begin: int) -> tuple[str, int]:
    """One tensor entry's JSON text and the offset where the next tensor starts."""
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.lists(_DIMS, max_size=3)) if rare(draw, 6) else draw(st.lists(st.integers(0, 4), max_size=3))
    numel = 1
    for dim in shape:
        numel *= dim
    size = numel * DTYPE_BITS.get(dtype, 32) // 8 if numel < 2**20 else 0
    end = begin + size + draw(st.sampled_from([0] * 12 + [1, -1]))
    fields = [f'"dtype"{_ws(draw)}:{_ws(draw)}{draw(json_string(dtype))}',
              '"shape":[' + ",".join(draw(json_int(d)) for d in shape) + "]",
              f'"data_offsets":[{draw(json_int(begin))},{_ws(draw)}{draw(json_int(max(end, 0)))}]']
    for _ in range(draw(st.sampled_from([0] * 5 + [1, 2]))):
        fields.insert(draw(st.integers(0, len(fields))),
                      f"{draw(json_string(draw(st.sampled_from(['x', 'dtype', 'shape']))))}:{draw(json_value())}")
    if rare(draw, 20):
        fields.pop(draw(st.integers(0, len(fields) - 1)))
    return "{" + ",".join(fields) + "}", max(end, 0)


@st.composite
def metadata_entry(draw: Draw) -> str:
    choice = draw(st.sampled_from(["object"] * 8 + ["null", "other"]))
    if choice == "null":
        return "null"
    if choice == "other":
        return draw(json_value())
    keys = [f"k{i}" for i in range(draw(st.integers(0, 3)))]
    items = [f"{draw(json_string(key + draw(st.sampled_from(['', 'é', '😀']))))}:{_ws(draw)}"
             f"{draw(json_value()) if rare(draw, 10) else draw(json_string())}" for key in keys]
    return "{" + ",".join(items) + "}"


@st.composite
def safetensors_file(draw: Draw) -> tuple[bytes, bytes]:
    """A header's bytes (without the length field) and the data section."""
    entries: list[str] = []
    offset = 0
    for index in range(draw(st.integers(0, 3))):
        text, offset = draw(tensor_entry(offset))
        name = draw(json_string(f"t{index}" + draw(st.sampled_from(["", ".w", "é", "😀", "\\", '"']))))
        entries.append(f"{name}{_ws(draw)}:{_ws(draw)}{text}")
    if not rare(draw, 3):
        entries.insert(draw(st.integers(0, len(entries))),
                       f'{draw(json_string("__metadata__"))}:{_ws(draw)}{draw(metadata_entry())}')
    if entries and rare(draw, 15):
        entries.append(draw(st.sampled_from(entries)))  # a repeated key
    separator = "," + _ws(draw)
    text = "{" + _ws(draw) + separator.join(entries) + _ws(draw) + "}"
    if rare(draw, 40):
        text = draw(st.sampled_from(["[]", "null", '"x"', "1", "", "{", "{}{}"]))
    if rare(draw, 25):
        text = draw(st.sampled_from([" ", "\n", "\ufeff", "\x0c"])) + text
    padding = " " * draw(st.integers(1, 9))
    text += draw(st.sampled_from([""] * 8 + [padding, "\n", "\t ", "\x00", "\x0b", "x"]))
    body = text.encode("utf-8", "surrogatepass")
    if body and rare(draw, 10):  # one byte edited, inserted or removed
        at = draw(st.integers(0, len(body) - 1))
        new = draw(st.sampled_from([b"", b"{", b"}", b",", b'"', b"\\", b" ", b"0", b"\xff", b"-"]))
        body = body[:at] + new + body[at + draw(st.integers(0, 1)):]
    data_size = max(0, offset + draw(st.sampled_from([0] * 15 + [1, -1])))
    return body, b"\x00" * data_size


# --- the two readers ---------------------------------------------------------------------------------------------


def library_view(path: Path) -> tuple[dict[str, tuple[str, list[int]]], dict[str, str] | None] | str:
    """Tensors (dtype, shape) and metadata as ``safe_open`` sees them, or its error message."""
    try:
        with safe_open(str(path), framework="np") as handle:
            tensors = {name: (handle.get_slice(name).get_dtype(), list(handle.get_slice(name).get_shape()))
                       for name in handle.keys()}  # noqa: SIM118 - safe_open is not a dict: keys() is its API
            return tensors, handle.metadata()
    except Exception as exc:  # noqa: BLE001 - any refusal of the library is the outcome we compare
        return f"{type(exc).__name__}: {exc}"


def our_view(path: Path) -> tuple[dict[str, tuple[str, list[int]]], dict[str, str] | None] | str:
    try:
        header = read_header(path)
    except SafetensorsHeaderError as exc:
        return str(exc)
    return {name: (t.dtype, list(t.shape)) for name, t in header.tensors.items()}, header.metadata


def spec_violation(body: bytes) -> str | None:
    """Which rule of the format's specification (not enforced by safetensors 0.8) the header breaks, judged
    independently of our reader: ``"start"`` (it does not begin with ``{``) or ``"duplicate"`` (a repeated key)."""
    if not body.startswith(b"{"):
        return "start"
    repeated = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        repeated.extend(key for key in keys if keys.count(key) > 1)
        return dict(items)

    try:
        json.loads(body.decode("utf-8"), object_pairs_hook=pairs)
    except ValueError:
        return None
    return "duplicate" if repeated else None


SPEC_MESSAGES = {"start": "header does not start with '{'", "duplicate": "duplicate key"}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agreement") / "x.safetensors"


def _check(scratch: Path, body: bytes, data: bytes) -> None:
    scratch.write_bytes(struct.pack("<Q", len(body)) + body + data)
    library, ours = library_view(scratch), our_view(scratch)
    if not isinstance(ours, str):
        refusal = f"refuses it: {library}" if isinstance(library, str) else "reads other tensors or metadata"
        assert library == ours, f"we accept {body!r}; safetensors {refusal}"
    elif not isinstance(library, str):
        violation = spec_violation(body)
        assert violation is not None, f"safetensors opens {body!r}, we refuse it: {ours}"
        assert SPEC_MESSAGES[violation] in ours


_OK = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'


@pytest.mark.slow  # 600 generated files
@settings(max_examples=600, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=safetensors_file())
# the disagreements found while writing this test, kept as fixed examples
@example(case=(_OK + b',"__metadata__":{"a":"\\ud800"}}', b"\x00" * 8))  # the lone surrogate
@example(case=(_OK + b',"\\udc00":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}}', b"\x00" * 8))
@example(case=(_OK + b',"__metadata__":null}', b"\x00" * 8))
@example(case=(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":{"y":[1]}}}', b"\x00" * 8))
@example(case=(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":' + b"[" * 126 + b"]" * 126 + b"}}",
               b"\x00" * 8))
@example(case=(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1e400}}', b"\x00" * 8))
@example(case=(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":NaN}}', b"\x00" * 8))
@example(case=(b'{"w":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}', b""))
@example(case=(b'{"w":{"dtype":"U8","shape":[18446744073709551615,2,0],"data_offsets":[0,0]}}', b""))
@example(case=(b'{"w":{"dtype":"U8","shape":[18446744073709551616,0],"data_offsets":[0,0]}}', b""))
@example(case=(b' {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\x00" * 8))
@example(case=(_OK + b',' + _OK[1:] + b"}", b"\x00" * 8))
def test_our_reader_and_safe_open_agree(scratch: Path, case: tuple[bytes, bytes]) -> None:
    _check(scratch, *case)
