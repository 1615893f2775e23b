"""Surgical edits of a model card's text: replace one top-level front-matter block and one generated body section.

The front matter is edited as text, not re-dumped: only the named top-level block is replaced (or appended), so
every other key, its order, its comments, its quoting and its anchors and aliases stay byte-for-byte what they were,
and the card's line endings (CRLF stays CRLF) are kept. An empty front matter is filled in; a card without one gets
one. The body section sits between two HTML comment markers and is replaced, not duplicated, when the card is
stamped again. Every result is checked with the read side (:mod:`bnconvention.formats.card`) before it is returned.

Shared by the declaration block (:mod:`bnconvention.authoring.card_stamp`) and the refit results an audit writes
back (:mod:`bnconvention.authoring.card_refit`); every step is linear in the card.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from bnconvention.errors import CardError
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.card import (
    FrontMatter,
    YamlDocument,
    detect_newline,
    front_matter_mapping,
    load_yaml_document,
    split_front_matter,
)
from bnconvention.formats.text import table_cell

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Markers:
    """A generated body section: its begin and end comment markers and its heading's text."""

    begin: str
    end: str
    heading: str


@functools.lru_cache(maxsize=8)
def _heading_pattern(title: str) -> re.Pattern[str]:
    """A Markdown heading (any level) whose text is ``title``."""
    return re.compile(rf"^[ ]{{0,3}}#{{1,6}}[ \t]+{re.escape(title)}[ \t#]*\r?$", re.MULTILINE)


def code_cell(value: Any) -> str:
    """A table-cell-safe value in backticks (as it is when it holds a backtick itself)."""
    text = table_cell(value)
    return f"`{text}`" if "`" not in text else text


def _with_newline(text: str, newline: str) -> str:
    return text.replace("\n", newline) if newline != "\n" else text


def _lines(text: str) -> list[str]:
    """Lines with their line breaks (``\\r\\n``, ``\\r`` or ``\\n``, as YAML counts them)."""
    out, start = [], 0
    for match in _LINE_BREAK.finditer(text):
        out.append(text[start:match.end()])
        start = match.end()
    if start < len(text):
        out.append(text[start:])
    return out


def _replace_block(yaml_text: str, doc: YamlDocument, block: str, *, newline: str, source: str,
                   key_name: str) -> str:
    """``yaml_text`` (loaded as ``doc``) with its top-level ``key_name`` block replaced by ``block`` (LF text) or
    appended."""
    root = doc.root
    column = 0
    if root is not None:
        if not isinstance(root, yaml.MappingNode) or root.flow_style:
            raise CardError(f"{source}: the front matter is a flow-style mapping ({{...}}); write it as a block "
                            "mapping (one key per line) so the bnconvention block can be updated", source=source)
        if doc.keys:
            column = doc.keys[0].start_mark.column
    indent = " " * column
    new_block = newline.join(indent + line if line else line for line in block.rstrip("\n").split("\n"))
    span = block_span(yaml_text, doc, key_name=key_name, column=column)
    if span is None:
        if not yaml_text:
            return new_block
        separator = "" if yaml_text.endswith(("\n", "\r")) else newline
        return yaml_text + separator + new_block
    return yaml_text[: span[0]] + new_block + yaml_text[span[1]:]


def block_span(yaml_text: str, doc: YamlDocument, *, key_name: str, column: int = 0) -> tuple[int, int] | None:
    """Where the top-level ``key_name`` block sits in ``yaml_text``: from its key's line to the end of its last
    line (without the final line break); ``None`` when the front matter has no such key. Blank lines and comments
    at the root's indentation (``column``) after the block belong to what follows it and are not part of it."""
    keys = doc.keys
    index = next((i for i, key in enumerate(keys)
                  if isinstance(key, yaml.ScalarNode) and key.value == key_name), None)
    if index is None:
        return None
    key = keys[index]
    start = key.start_mark.index - key.start_mark.column
    if index + 1 < len(keys):
        following = keys[index + 1]
        end = following.start_mark.index - following.start_mark.column
    else:
        end = len(yaml_text)
    lines = _lines(yaml_text[start:end])
    while len(lines) > 1:
        stripped = lines[-1].strip()
        leading = len(lines[-1]) - len(lines[-1].lstrip(" "))
        if stripped and not (stripped.startswith("#") and leading <= column):
            break
        lines.pop()
    old = "".join(lines)
    trailing = re.search(r"(?:\r\n|\r|\n)$", old)
    return start, start + (trailing.start() if trailing else len(old))


def _replace_section(body: str, section: str, *, newline: str, source: str, first_line: int,
                     markers: Markers) -> str:
    begin_marker, end_marker = markers.begin, markers.end
    begins = [m.start() for m in re.finditer(re.escape(begin_marker), body)]
    ends = [m.end() for m in re.finditer(re.escape(end_marker), body)]
    section = _with_newline(section, newline)
    if begins or ends:
        if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
            raise CardError(f"{source}: the card has {len(begins)} '{begin_marker}' and {len(ends)} "
                            f"'{end_marker}' markers, not one pair in order; fix or remove them by hand so the "
                            "generated section can be found", source=source)
        _refuse_handwritten_heading(body, source=source, first_line=first_line, markers=markers,
                                    skip=(begins[0], ends[0]))
        return body[: begins[0]] + section + body[ends[0]:]
    _refuse_handwritten_heading(body, source=source, first_line=first_line, markers=markers)
    if not body.strip():
        return body + section + newline
    trailing = len(re.search(r"(?:\r\n|\r|\n)*$", body).group(0).replace("\r\n", "\n"))  # type: ignore[union-attr]
    return body + newline * max(0, 2 - trailing) + section + newline


def _refuse_handwritten_heading(text: str, *, source: str, first_line: int, markers: Markers,
                                skip: tuple[int, int] | None = None) -> None:
    """Refuse a heading like ours outside the markers: we would duplicate it or overwrite someone's prose."""
    begin_marker, end_marker, title = markers.begin, markers.end, markers.heading
    for match in _heading_pattern(title).finditer(text):
        if skip is not None and skip[0] <= match.start() < skip[1]:
            continue
        line = first_line + len(_lines(text[: match.start()]))
        raise CardError(f"{source}: line {line} already has a hand-written '{title}' heading outside "
                        f"the generated markers; remove or rename it (or wrap it in {begin_marker} / "
                        f"{end_marker}) so it is not duplicated or overwritten", source=source)


@dataclass(frozen=True)
class ParsedCard:
    """A card's front matter, located and loaded once for an edit."""

    front: FrontMatter | None
    doc: YamlDocument
    metadata: dict[str, Any]


def parse_for_edit(text: str, *, source: str) -> ParsedCard:
    """Locate and load the front matter once; malformed YAML raises :class:`CardError` here, before an edit is
    built."""
    front = split_front_matter(text)
    doc = (load_yaml_document(front.yaml_text, source=source, first_line=front.first_line) if front
           else YamlDocument(data=None, root=None, keys=()))
    return ParsedCard(front=front, doc=doc, metadata=front_matter_mapping(doc.data, source=source))


def apply_edit(text: str, parsed: ParsedCard, *, block: str, data: Any, section: str | None, source: str,
               key_name: str, markers: Markers) -> str:
    """``text`` with the front-matter block ``key_name`` set to ``block`` and, when given, the body ``section``
    between ``markers`` replaced or appended; checked by :func:`_check` before it is returned."""
    front = parsed.front
    if front is None:
        newline = detect_newline(text)
        yaml_text = _with_newline(block.rstrip("\n"), newline)
        head, body = f"---{newline}{yaml_text}{newline}---{newline}", text
    else:
        newline = front.newline
        yaml_text = _replace_block(front.yaml_text, parsed.doc, block, newline=newline, source=source,
                                   key_name=key_name)
        closing = text[front.yaml_end: front.body_start]
        if not _LINE_BREAK.match(closing):  # an empty front matter: its closing fence followed the opening one
            closing = newline + closing
        head, body = text[: front.yaml_start] + yaml_text + closing, text[front.body_start:]
    if section is not None:
        body_newline = detect_newline(body) if _LINE_BREAK.search(body) else newline
        body = _replace_section(body, section, newline=body_newline, source=source,
                                first_line=1 if front is None else len(_lines(text[: front.body_start])) + 1,
                                markers=markers)
    result = head + body
    _check(parsed.metadata, result, data, source=source, key_name=key_name)
    return result


def _check(before: dict[str, Any], result: str, data: Any, *, source: str, key_name: str) -> None:
    """Refuse to write a card whose front matter lost or changed anything but our block."""
    front = split_front_matter(result)
    try:
        after = load_yaml_document(front.yaml_text, source=source).data if front else None
    except CardError as exc:
        raise CardError(f"{source}: the updated front matter would not load ({exc}); if the {key_name} block defines a "
                        "YAML anchor that other keys use, move the anchor out of the block; the card was left as it "
                        "is", source=source) from exc
    if not isinstance(after, dict):
        raise CardError(f"{source}: the updated front matter is not a mapping; this is a bug, please report it",
                        source=source)
    expected_keys = list(before) + ([] if key_name in before else [key_name])
    others_before = {k: v for k, v in before.items() if k != key_name}
    others_after = {k: v for k, v in after.items() if k != key_name}
    if list(after) != expected_keys or repr(others_before) != repr(others_after):
        raise CardError(f"{source}: updating the bnconvention block would change other front-matter keys; the card "
                        "was left as it is: move the bnconvention block to the end of the front matter and retry",
                        source=source)
    if canonical_json(after[key_name]) != canonical_json(_plain(data)):
        raise CardError(f"{source}: the bnconvention block does not read back as the record; this is a bug, please "
                        "report it", source=source)


def _plain(data: Any) -> Any:
    return dict(data) if isinstance(data, Mapping) else data


__all__ = ["Markers", "ParsedCard", "apply_edit", "block_span", "code_cell", "parse_for_edit"]
