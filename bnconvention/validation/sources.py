"""Read untrusted inputs (JSON records, safetensors headers, model cards) into plain JSON data plus issues.

Nothing here raises on bad input: every problem becomes an issue with a stable code, and the caller gets ``None``
for what could not be read. Files are opened read-only and never modified.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnconvention.errors import CanonicalJSONError, CardError, JSONInputError, SafetensorsHeaderError
from bnconvention.formats.canonical import _DuplicateKey, canonical_json, loads_strict
from bnconvention.formats.card import MAX_CARD_BYTES, load_yaml_strict, split_front_matter
from bnconvention.formats.safetensors_header import SafetensorsHeader, read_header
from bnconvention.standard.locations import CARD_BLOCK_KEY, SAFETENSORS_METADATA_KEY
from bnconvention.validation.issues import Issue, make_pointer, new_issue
from bnconvention.validation.schema_errors import show

MAX_RECORD_BYTES = 16 * 1024 * 1024  # a record is a few kilobytes; refuse to slurp anything huge


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_bytes(path: Path, *, source: str, limit: int) -> tuple[bytes | None, list[Issue]]:
    """The file's bytes (at most ``limit`` + 1, so the caller can tell it is too large), or an issue."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + 1), []
    except OSError as exc:
        return None, [new_issue("input.unreadable", file=source, message=(
            f"{source} cannot be read: {_reason(exc)}; check the path and its permissions"))]


def _json_issue(exc: JSONInputError, *, source: str) -> Issue:
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        code = "json.not_utf8"
    elif isinstance(cause, _DuplicateKey):
        code = "json.duplicate_key"
    else:
        code = "json.invalid"
    return new_issue(code, file=source, message=str(exc))


def load_json_record(path: Path, *, source: str) -> tuple[Any | None, bool, list[Issue]]:
    """Decode a ``.json`` record file: (data, readable, issues)."""
    data, issues = read_bytes(path, source=source, limit=MAX_RECORD_BYTES)
    if data is None:
        return None, False, issues
    if len(data) > MAX_RECORD_BYTES:
        return None, False, [new_issue("json.invalid", file=source, message=(
            f"{source} is over {MAX_RECORD_BYTES} bytes, far larger than any record; is it the right file?"))]
    try:
        return loads_strict(data, source=source), True, []
    except JSONInputError as exc:
        return None, False, [_json_issue(exc, source=source)]


# --- safetensors ----------------------------------------------------------------------------------------------------


_HEADER_CODES = {  # SafetensorsHeaderError.reason -> (code, how to fix it)
    "unreadable": ("input.unreadable", "check the path and its permissions"),
    "truncated": ("safetensors.truncated", "download or copy the file again"),
    "too_large": ("safetensors.header_too_large", "no safetensors reader accepts it; re-save the weights"),
    "not_safetensors": ("safetensors.not_safetensors", ""),  # the message says what the file is and how to convert
    "invalid": ("safetensors.invalid_header", "re-save the weights with safetensors.torch.save_file"),
}


def load_header(path: Path, *, source: str) -> tuple[SafetensorsHeader | None, list[Issue]]:
    """The checked header of a safetensors file, or an issue saying why it cannot be read."""
    try:
        return read_header(path), []
    except SafetensorsHeaderError as exc:
        message = str(exc).replace(f"{path}: ", f"{source}: ", 1)
        code, fix = _HEADER_CODES.get(exc.reason, _HEADER_CODES["invalid"])
        return None, [new_issue(code, file=source, message=f"{message}; {fix}" if fix else message)]


def header_record(header: SafetensorsHeader, *, source: str) -> tuple[Any | None, bool, list[Issue]]:
    """The record stamped in the header: (data, present, issues). ``present`` is False when nothing is stamped."""
    if not header.metadata or SAFETENSORS_METADATA_KEY not in header.metadata:
        return None, False, []
    text = header.metadata[SAFETENSORS_METADATA_KEY]
    where = f"__metadata__[{show(SAFETENSORS_METADATA_KEY)}]"
    try:
        data = loads_strict(text, source=f"{source} {where}")
    except JSONInputError as exc:
        return None, True, [new_issue("safetensors.record_not_json", file=source, message=(
            f"{exc}; the stamped record must be the record as canonical JSON text: re-stamp the file "
            "(bnconvention stamp)"))]
    issues = []
    try:
        canonical = canonical_json(data)
    except CanonicalJSONError:
        canonical = None
    if canonical is not None and canonical != text:
        issues.append(new_issue("safetensors.record_not_canonical", file=source, message=(
            f"{where} holds valid JSON that is not in canonical form (RFC 8785: sorted keys, no spaces, shortest "
            "numbers), so its bytes are not reproducible; re-stamp the file (bnconvention stamp)")))
    return data, True, issues


# --- model cards ----------------------------------------------------------------------------------------------------


@dataclass
class CardContent:
    """What a card holds: ``block`` is the bnconvention block as JSON data (``None`` if absent or unusable)."""

    readable: bool
    has_block: bool
    block: Any | None
    issues: list[Issue]
    metadata: dict[str, Any] | None = None  # the whole front matter, when it is a readable mapping


def yaml_to_json(value: Any, *, source: str, tokens: tuple[str | int, ...] = ()) -> tuple[Any, list[Issue]]:
    """Convert YAML-loaded data to JSON data; values JSON cannot hold become issues (and ``None``)."""
    pointer = make_pointer(tokens)
    if value is None or isinstance(value, (bool, int, str)):
        return value, []
    if isinstance(value, float):
        if math.isfinite(value):
            return value, []
        return None, [new_issue("card.non_json_value", file=source, path=pointer, message=(
            f"{show(value)} is not a finite number: JSON cannot hold it; write a finite decimal"))]
    if isinstance(value, list):
        out, issues = [], []
        for index, item in enumerate(value):
            converted, found = yaml_to_json(item, source=source, tokens=(*tokens, index))
            out.append(converted)
            issues += found
        return out, issues
    if isinstance(value, dict):
        out_map: dict[str, Any] = {}
        issues = []
        for key, item in value.items():
            if not isinstance(key, str):
                issues.append(new_issue("card.non_json_value", file=source, path=pointer, message=(
                    f"{show(key)} is a {type(key).__name__} mapping key: JSON keys are strings; quote the key")))
                continue
            converted, found = yaml_to_json(item, source=source, tokens=(*tokens, key))
            out_map[key] = converted
            issues += found
        return out_map, issues
    kind = "date" if isinstance(value, (datetime.date, datetime.datetime)) else type(value).__name__
    return None, [new_issue("card.non_json_value", file=source, path=pointer, message=(
        f"{show(value)} is a YAML {kind}, which JSON cannot hold; quote it to make it a string"))]


def load_card(path: Path, *, source: str) -> CardContent:
    """Read a model card and its bnconvention block (as JSON data)."""
    data, issues = read_bytes(path, source=source, limit=MAX_CARD_BYTES)
    if data is None:
        return CardContent(False, False, None, issues)
    if len(data) > MAX_CARD_BYTES:
        return CardContent(False, False, None, [new_issue("card.too_large", file=source, message=(
            f"{source} is over the {MAX_CARD_BYTES}-byte bound for model cards; move long content out of the "
            "card"))])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return CardContent(False, False, None, [new_issue("card.not_utf8", file=source, message=(
            f"{source} is not valid UTF-8 at byte {exc.start} ({show(data[exc.start:exc.start + 1])}); save the card "
            "as UTF-8"))])
    front = split_front_matter(text)
    if front is None:
        return CardContent(True, False, None, [])
    try:
        meta = load_yaml_strict(front.yaml_text, source=source, first_line=front.first_line)
    except CardError as exc:
        return CardContent(False, False, None, [new_issue("card.invalid_yaml", file=source, line=exc.line, message=(
            f"{exc}; fix the YAML between the --- lines (repeated keys, and aliases that expand past the size bound, "
            "are refused)"))])
    if meta is None:
        return CardContent(True, False, None, [])
    if not isinstance(meta, dict):
        return CardContent(False, False, None, [new_issue("card.front_matter_not_mapping", file=source, message=(
            f"{source}: the YAML front matter is a {type(meta).__name__}, expected a mapping of keys to values "
            "(key: value lines)"))])
    if CARD_BLOCK_KEY not in meta:
        return CardContent(True, False, None, [], meta)
    block = meta[CARD_BLOCK_KEY]
    if not isinstance(block, dict):
        return CardContent(True, True, None, [new_issue("card.block_not_mapping", file=source, message=(
            f"the {show(CARD_BLOCK_KEY)} block of {source} is a {type(block).__name__}, expected a mapping holding the "
            f"record (spec_version, kind, ...); regenerate it (bnconvention card)"))], meta)
    converted, issues = yaml_to_json(block, source=source)
    if issues:
        return CardContent(True, True, None, issues, meta)
    return CardContent(True, True, converted, [], meta)


__all__ = ["CardContent", "header_record", "load_card", "load_header", "load_json_record", "yaml_to_json"]
