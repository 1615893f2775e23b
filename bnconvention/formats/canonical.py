"""Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) and strict JSON parsing.

Canonical JSON is what every digest and every stamped record is computed over: object keys sorted by UTF-16 code
units, no insignificant whitespace, numbers in the ECMAScript shortest form, strings with minimal escaping, UTF-8.
Two records with the same content therefore have the same bytes, and the same sha256.

>>> canonical_json({"b": 1.0, "a": [1e-7, "é"]})
'{"a":[1e-7,"é"],"b":1}'
>>> sha256_hex(b"")[:12]
'e3b0c44298fc'
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from bnconvention.errors import CanonicalJSONError, JSONInputError
from bnconvention.formats.json_types import JsonObject, JsonValue

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _number(value: float) -> str:
    if not math.isfinite(value):
        raise CanonicalJSONError(f"{value!r} cannot be written as canonical JSON: only finite numbers are allowed")
    if value == 0:
        return "0"  # also for -0.0, as ECMAScript does
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that round-trip, which is also what ECMAScript picks
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    all_digits = int_part + frac_part
    significant = all_digits.lstrip("0")
    # value == 0.<significant> * 10**n, ECMAScript's n
    n = len(int_part) + (int(exp_text) if exp_text else 0) - (len(all_digits) - len(significant))
    digits = significant.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        exponent = n - 1
        head = digits[0] + ("." + digits[1:] if k > 1 else "")
        text = f"{head}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"
    return sign + text


def _string(value: str) -> str:
    out = ['"']
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        elif "\ud800" <= char <= "\udfff":
            raise CanonicalJSONError(f"string {value!r} holds a lone surrogate, which is not valid Unicode")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if -(2**53) <= value <= 2**53:
            out.append(str(value))
        else:
            # RFC 8785 numbers are IEEE doubles: beyond 2**53 an integer is written as its nearest double would be
            # (2**63 -> 9223372036854776000), as every other JCS implementation does.
            try:
                out.append(_number(float(value)))
            except OverflowError:
                raise CanonicalJSONError(
                    f"integer {value} is too large for a 64-bit float; canonical JSON numbers are doubles"
                ) from None
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, Mapping):
        keys = list(value.keys())
        for key in keys:
            if not isinstance(key, str):
                raise CanonicalJSONError(f"object key {key!r} is not a string; canonical JSON keys must be strings")
        out.append("{")
        for index, key in enumerate(sorted(keys, key=lambda k: k.encode("utf-16-be", "surrogatepass"))):
            if index:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise CanonicalJSONError(
            f"{type(value).__name__} value {value!r} cannot be written as canonical JSON; "
            "convert it to a JSON type first"
        )


def canonical_json(value: Any) -> str:
    """Serialize ``value`` as RFC 8785 canonical JSON text."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def canonical_json_bytes(value: Any) -> bytes:
    """Canonical JSON encoded as UTF-8."""
    return canonical_json(value).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``: equal content gives an equal digest."""
    return sha256_hex(canonical_json_bytes(value))


def _reject_duplicates(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    result: JsonObject = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _reject_constant(name: str) -> Any:
    raise _BadConstant(name)


class _BadConstant(Exception):
    pass


def _finite_float(text: str) -> float:
    # json would turn 1e400 into infinity silently; canonical JSON cannot write it back, so refuse it here.
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfRange(text)
    return value


class _OutOfRange(Exception):
    pass


def loads_strict(data: bytes | str, *, source: str = "<input>") -> Any:
    """Parse untrusted JSON: UTF-8 only, no duplicate keys, no NaN/Infinity.

    Raises :class:`~bnconvention.errors.JSONInputError` naming ``source`` and the position of the problem.

    >>> loads_strict(b'{"a": 1}')
    {'a': 1}
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError(
                f"{source}: not valid UTF-8 at byte {exc.start} ({data[exc.start:exc.start + 1]!r}); "
                "save the file as UTF-8",
                source=source,
            ) from exc
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant,
                          parse_float=_finite_float)
    except _DuplicateKey as exc:
        raise JSONInputError(
            f"{source}: duplicate object key {exc.key!r}; each key may appear once per object", source=source
        ) from exc
    except _BadConstant as exc:
        raise JSONInputError(
            f"{source}: {exc.args[0]} is not valid JSON; write numbers as finite decimals", source=source
        ) from exc
    except _OutOfRange as exc:
        raise JSONInputError(
            f"{source}: number {exc.args[0]} is too large for a 64-bit float; write a finite number", source=source
        ) from exc
    except json.JSONDecodeError as exc:
        raise JSONInputError(
            f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", source=source
        ) from exc
    except RecursionError as exc:
        raise JSONInputError(f"{source}: JSON nested too deeply to parse", source=source) from exc
