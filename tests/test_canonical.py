"""RFC 8785 canonical JSON and strict parsing of untrusted JSON (bnconvention.formats.canonical)."""

from __future__ import annotations

import json
import struct

import pytest

from bnconvention.errors import CanonicalJSONError, JSONInputError
from bnconvention.formats.canonical import (
    canonical_json,
    canonical_json_bytes,
    canonical_sha256,
    loads_strict,
    sha256_hex,
)

# RFC 8785 appendix B: IEEE 754 bit patterns and their ECMAScript serialization (checked against node's String()).
NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), [pytest.param(b, e, id=b) for b, e in NUMBERS])
def test_numbers_follow_ecmascript(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical_json(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param(16.0, "16", id="integral-float"),
    pytest.param(1e-05, "0.00001", id="eps"),
    pytest.param(1e-07, "1e-7", id="small"),
    pytest.param(0.1, "0.1", id="momentum"),
    pytest.param(2**53, "9007199254740992", id="int-2^53"),
    pytest.param(2**53 + 1, "9007199254740992", id="int-beyond-2^53-as-double"),
    pytest.param(2**63, "9223372036854776000", id="int-2^63"),
    pytest.param(-(2**63), "-9223372036854776000", id="int-minus-2^63"),
    pytest.param(True, "true", id="true"),
    pytest.param(None, "null", id="null"),
])
def test_scalars(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


def test_rfc8785_example() -> None:
    # RFC 8785 section 3.2.2's example, parsed from its JSON text.
    text = ('{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],'
            '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/","literals":[null,true,false]}')
    expected = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
                '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')
    assert canonical_json(json.loads(text)) == expected


def test_keys_sort_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3: "\ud83d\ude00" (U+1F600) sorts before "\ufb33" in UTF-16, after it in code points.
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    text = canonical_json(dict.fromkeys(keys, 0))
    assert list(json.loads(text)) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_order_and_whitespace_do_not_matter() -> None:
    a = json.loads('{"b": [1, 2.0, {"y": 1, "x": 2}], "a": "é"}')
    b = json.loads('{"a":"é","b":[1,2,{"x":2,"y":1}]}')
    assert canonical_json(a) == canonical_json(b) == '{"a":"é","b":[1,2,{"x":2,"y":1}]}'
    assert canonical_sha256(a) == sha256_hex(canonical_json_bytes(b))


@pytest.mark.parametrize("value", [
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param({1: "x"}, id="int-key"),
    pytest.param("\ud800", id="lone-surrogate"),
    pytest.param(b"bytes", id="bytes"),
    pytest.param(10**400, id="int-beyond-double"),
])
def test_unwritable_values_raise(value: object) -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_json(value)


def test_control_characters_escape_lowercase() -> None:
    assert canonical_json("\x0f\x1f\t\u2028") == '"\\u000f\\u001f\\t\u2028"'


# --- loads_strict ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "fragment", "cause"), [
    pytest.param(b'{"a": 1, "a": 2}', "duplicate object key 'a'", "_DuplicateKey", id="duplicate-key"),
    pytest.param(b'{"a": NaN}', "NaN is not valid JSON", "_BadConstant", id="nan"),
    pytest.param(b'{"a": -Infinity}', "-Infinity is not valid JSON", "_BadConstant", id="infinity"),
    pytest.param(b'{"a": 1e400}', "number 1e400 is too large", "_OutOfRange", id="overflow"),
    pytest.param(b'{"a": "\xff"}', "not valid UTF-8 at byte 7", "UnicodeDecodeError", id="not-utf8"),
    pytest.param(b'{"a": ', "not valid JSON at line 1 column 7", "JSONDecodeError", id="truncated"),
    pytest.param(b"[" * 100000, "nested too deeply", "RecursionError", id="deep"),
])
def test_loads_strict_rejects(data: bytes, fragment: str, cause: str) -> None:
    with pytest.raises(JSONInputError) as info:
        loads_strict(data, source="r.json")
    assert str(info.value).startswith("r.json: ")
    assert fragment in str(info.value)
    assert type(info.value.__cause__).__name__ == cause
    assert info.value.source == "r.json"


def test_loads_strict_accepts_bom_and_text() -> None:
    assert loads_strict(b'\xef\xbb\xbf{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    assert loads_strict('{"a": 1}') == {"a": 1}
