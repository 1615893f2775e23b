"""Write side of model cards: put a record into a README's front matter and render its human-readable section.

The read side (:mod:`bnconvention.formats.card`) is what the validator uses; this module only writes, and checks what it
writes with that read side, which reads a card as ``huggingface_hub.ModelCard`` does (the Hub's front-matter regex,
a ``yaml.SafeLoader``). ``ModelCard`` itself is not built to re-check: its tag list handling is quadratic
(``repocard_data._to_unique_list``), and a card with 350,000 tags took minutes. Every step here is linear in the
card: the front matter is parsed once, the result once more to check it.

The front matter is edited as text, not re-dumped: only the top-level ``bnconvention:`` block is replaced (or
appended), so every other key, its order, its comments, its quoting and its anchors and aliases stay byte-for-byte
what they were, and the card's line endings (CRLF stays CRLF) are kept. An empty front matter is filled in. The
block itself is the record dumped by PyYAML's ``safe_dump`` (floats come out as ``1.0e-05``, which YAML 1.1 reads
back as a float). The body section sits between two HTML comment markers and is replaced, not duplicated, when the
card is stamped again. A card without front matter gets one.

>>> card = "---\\r\\nlicense: mit  # keep me\\r\\n---\\r\\n# Model\\r\\n"
>>> new = stamp_card_text(card, {"kind": "x"}, validate=False)
>>> new.startswith("---\\r\\nlicense: mit  # keep me\\r\\nbnconvention:\\r\\n  kind: x\\r\\n---\\r\\n# Model\\r\\n")
True
>>> stamp_card_text(new, {"kind": "x"}, validate=False) == new
True
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bnconvention.errors import CardError, StampError
from bnconvention.formats.atomic import WRITE_TEMP_SUFFIX, atomic_write_bytes, remove_stale_temps
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.card import (
    CARD_BLOCK_KEY,
    FrontMatter,
    YamlDocument,
    decode_card,
    detect_newline,
    front_matter_mapping,
    load_yaml_document,
    parse_card_metadata,
    split_front_matter,
)
from bnconvention.formats.text import plural, signed
from bnconvention.standard.locations import CARD_SECTION_HEADING
from bnconvention.standard.models import Declaration, RefitAnnotation, to_dict

SECTION_BEGIN = "<!-- bnconvention:begin -->"
SECTION_END = "<!-- bnconvention:end -->"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_HEADING = re.compile(rf"^[ ]{{0,3}}#{{1,6}}[ \t]+{re.escape(CARD_SECTION_HEADING)}[ \t#]*\r?$", re.MULTILINE)


def _heading_pattern(title: str) -> re.Pattern[str]:
    """A Markdown heading (any level) whose text is ``title``."""
    return re.compile(rf"^[ ]{{0,3}}#{{1,6}}[ \t]+{re.escape(title)}[ \t#]*\r?$", re.MULTILINE)


__all__ = [
    "REFIT_BLOCK_KEY",
    "REFIT_SECTION_BEGIN",
    "REFIT_SECTION_END",
    "REFIT_SECTION_HEADING",
    "SECTION_BEGIN",
    "SECTION_END",
    "CardStampResult",
    "render_card_block",
    "read_refit_entries",
    "refit_card_entry",
    "render_card_section",
    "render_refit_section",
    "stamp_card_file",
    "stamp_card_refit_text",
    "stamp_card_text",
]


@dataclass(frozen=True)
class CardStampResult:
    path: Path
    changed: bool
    created: bool


# --- rendering ------------------------------------------------------------------------------------------------------


def render_card_block(record: Mapping[str, Any]) -> str:
    """The ``bnconvention:`` front-matter block for a record dict, as YAML text with LF line ends."""
    return yaml.safe_dump({CARD_BLOCK_KEY: dict(record)}, sort_keys=False, allow_unicode=True,
                          default_flow_style=False, width=2**16)


def _text(value: Any) -> str:
    """A table-cell-safe rendering: no line breaks, no pipes, no HTML (a value must not be able to end our markers)."""
    return " ".join(str(value).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: Any) -> str:
    text = _text(value)
    return f"`{text}`" if "`" not in text else text


def _convention_rows(convention: Any) -> list[tuple[str, str]]:
    data = convention.data
    dataset = _code(data.dataset.id + (f"@{data.dataset.revision}" if data.dataset.revision else ""))
    split = f"{_text(data.role)} of {dataset}: {_text(data.subset)}"
    if data.record_count is not None:
        split += f" ({plural(data.record_count, 'record')})"
    transform = _text(convention.transform.mode)
    if convention.transform.reference:
        transform += f" ({_code(convention.transform.reference)})"
    transform += f", description sha256 {_code(convention.transform.sha256)}"
    acc = convention.accumulation
    rule = _text(acc.rule)
    if acc.rule == "ema":
        rule += f", momentum {canonical_json(acc.momentum)}"
    details = [f"{acc.variance_estimator} variance", f"{acc.precision}"]
    if acc.batch_size is not None:
        details.append(f"batch size {acc.batch_size}")
    if acc.num_batches is not None:
        details.append(f"{acc.num_batches} batch{'es' if acc.num_batches != 1 else ''}")
    return [
        ("Canonical name", _code(convention.name)),
        ("Data split", split),
        ("Transform", transform),
        ("Accumulation rule", f"{rule} ({', '.join(details)})"),
        ("Buffer-update mode", _code(convention.buffer_update_mode)),
    ]


def render_card_section(record: Declaration | RefitAnnotation) -> str:
    """The body section (markers included) describing ``record``, with LF line ends and no trailing line break."""
    rows = _convention_rows(record.convention)
    if isinstance(record, Declaration):
        layers = [layer for state in record.deployed_state for layer in state.layers]
        rows.append(("BatchNorm layers", str(len(layers)) if layers else "none (channel absent)"))
        digests = [("trainable tensors", record.digests.trainable_sha256),
                   ("running statistics", record.digests.running_sha256)]
        algorithm = record.digests.algorithm
        intro = "Digests"
    else:
        rows.append(("Audited file", _code(record.subject.filename)))
        rows.append(("Cells", f"{plural(len(record.cells), 'cell')}, {plural(record.replicates, 'replicate')}, margin "
                              f"{canonical_json(record.margin_pp)} pp"))
        digests = [("trainable tensors", record.subject.trainable_sha256),
                   ("running statistics as shipped", record.subject.running_sha256)]
        algorithm = "bnconvention-tensors/1"
        intro = "Digests of the audited file"
    lines = [SECTION_BEGIN, f"## {CARD_SECTION_HEADING}", "", "| Field | Value |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines += ["", f"{intro} (`{algorithm}`):", ""]
    lines += [f"- {name}: {_code(value) if value else 'none'}" for name, value in digests]
    if record.reporting_line:
        lines += ["", f"Reporting line: {_text(record.reporting_line)}"]
    lines.append(SECTION_END)
    return "\n".join(lines)


# --- surgical edits ---------------------------------------------------------------------------------------------


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
                   key_name: str = CARD_BLOCK_KEY) -> str:
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
    keys = doc.keys
    index = next((i for i, key in enumerate(keys)
                  if isinstance(key, yaml.ScalarNode) and key.value == key_name), None)
    if index is None:
        if not yaml_text:
            return new_block
        separator = "" if yaml_text.endswith(("\n", "\r")) else newline
        return yaml_text + separator + new_block
    key = keys[index]
    start = key.start_mark.index - key.start_mark.column
    if index + 1 < len(keys):
        following = keys[index + 1]
        end = following.start_mark.index - following.start_mark.column
    else:
        end = len(yaml_text)
    lines = _lines(yaml_text[start:end])
    # Blank lines and comments at the root's indentation after the block belong to what follows it: keep them.
    while len(lines) > 1:
        stripped = lines[-1].strip()
        leading = len(lines[-1]) - len(lines[-1].lstrip(" "))
        if stripped and not (stripped.startswith("#") and leading <= column):
            break
        lines.pop()
    old = "".join(lines)
    trailing = re.search(r"(?:\r\n|\r|\n)$", old)
    core = old[: trailing.start()] if trailing else old
    return yaml_text[:start] + new_block + yaml_text[start + len(core):]


def _replace_section(body: str, section: str, *, newline: str, source: str, first_line: int,
                     markers: tuple[str, str, str] = (SECTION_BEGIN, SECTION_END, CARD_SECTION_HEADING)) -> str:
    begin_marker, end_marker, _ = markers
    begins = [m.start() for m in re.finditer(re.escape(begin_marker), body)]
    ends = [m.end() for m in re.finditer(re.escape(end_marker), body)]
    section = _with_newline(section, newline)
    if begins or ends:
        if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
            raise CardError(f"{source}: the card has {len(begins)} '{begin_marker}' and {len(ends)} "
                            f"'{end_marker}' markers, not one pair in order; fix or remove them by hand so the "
                            "generated section can be found", source=source)
        _refuse_handwritten_heading(body, source=source, first_line=first_line, skip=(begins[0], ends[0]),
                                    markers=markers)
        return body[: begins[0]] + section + body[ends[0]:]
    _refuse_handwritten_heading(body, source=source, first_line=first_line, markers=markers)
    if not body.strip():
        return body + section + newline
    trailing = len(re.search(r"(?:\r\n|\r|\n)*$", body).group(0).replace("\r\n", "\n"))  # type: ignore[union-attr]
    return body + newline * max(0, 2 - trailing) + section + newline


def _refuse_handwritten_heading(text: str, *, source: str, first_line: int,
                                skip: tuple[int, int] | None = None,
                                markers: tuple[str, str, str] = (SECTION_BEGIN, SECTION_END, CARD_SECTION_HEADING),
                                ) -> None:
    """Refuse a heading like ours outside the markers: we would duplicate it or overwrite someone's prose."""
    begin_marker, end_marker, title = markers
    heading = _HEADING if title == CARD_SECTION_HEADING else _heading_pattern(title)
    for match in heading.finditer(text):
        if skip is not None and skip[0] <= match.start() < skip[1]:
            continue
        line = first_line + len(_lines(text[: match.start()]))
        raise CardError(f"{source}: line {line} already has a hand-written '{title}' heading outside "
                        f"the generated markers; remove or rename it (or wrap it in {begin_marker} / "
                        f"{end_marker}) so it is not duplicated or overwritten", source=source)


def stamp_card_text(text: str, record: Declaration | RefitAnnotation | Mapping[str, Any], *,
                    source: str = "README.md", validate: bool = True) -> str:
    """``text`` with ``record`` in its front matter and its section in the body. Pure; idempotent.

    ``validate=False`` skips the schema check of ``record`` (and the body section, which needs a valid record).
    Raises :class:`CardError` for malformed front matter or markers, :class:`~bnconvention.errors.RecordError` for
    an invalid record. The result is checked: it parses, every other key keeps its value and order, and the block
    reads back as the record.
    """
    if validate:
        from bnconvention.authoring.stamp import checked_record

        model, data = checked_record(record, source=f"record for {source}")
    else:
        model, data = None, (dict(record) if isinstance(record, Mapping) else to_dict(record))
    parsed = _parse(text, source=source)  # malformed YAML raises here, before anything is built
    section = render_card_section(model) if model is not None else None
    return _apply(text, parsed, block=render_card_block(data), data=data, section=section, source=source)


@dataclass(frozen=True)
class _Parsed:
    """A card's front matter, located and loaded once for an edit."""

    front: FrontMatter | None
    doc: YamlDocument
    metadata: dict[str, Any]


def _parse(text: str, *, source: str) -> _Parsed:
    front = split_front_matter(text)
    doc = load_yaml_document(front.yaml_text, source=source) if front else YamlDocument(data=None, root=None, keys=())
    return _Parsed(front=front, doc=doc, metadata=front_matter_mapping(doc.data, source=source))


def _apply(text: str, parsed: _Parsed, *, block: str, data: Any, section: str | None, source: str,
           key_name: str = CARD_BLOCK_KEY,
           markers: tuple[str, str, str] = (SECTION_BEGIN, SECTION_END, CARD_SECTION_HEADING)) -> str:
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


def _check(before: dict[str, Any], result: str, data: Any, *, source: str, key_name: str = CARD_BLOCK_KEY) -> None:
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


# --- the file wrapper -------------------------------------------------------------------------------------------


def stamp_card_file(path: str | os.PathLike[str], record: Declaration | RefitAnnotation | Mapping[str, Any], *,
                    create: bool = True) -> CardStampResult:
    """Stamp ``record`` into the card at ``path`` atomically (file mode and a UTF-8 BOM are kept).

    A missing card is created when ``create`` is true. Nothing is written when the card already says exactly this.
    """
    target = Path(os.path.realpath(path))
    source = str(path)
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        if not create:
            raise
        raw = None
    except IsADirectoryError as exc:
        raise CardError(f"{source}: is a directory, not a model card", source=source) from exc
    if raw is None:
        new_text = stamp_card_text("", record, source=source)
        remove_stale_temps(target, suffix=WRITE_TEMP_SUFFIX)  # what a killed write of this card left behind
        atomic_write_bytes(target, new_text.encode("utf-8"))
        return CardStampResult(path=target, changed=True, created=True)
    bom = codecs.BOM_UTF8 if raw.startswith(codecs.BOM_UTF8) else b""
    text = decode_card(raw, source=source)
    new_text = stamp_card_text(text, record, source=source)
    new_raw = bom + new_text.encode("utf-8")
    remove_stale_temps(target, suffix=WRITE_TEMP_SUFFIX)  # what a killed write of this card left behind
    if new_raw == raw:
        return CardStampResult(path=target, changed=False, created=False)
    st = os.stat(target)
    if not st.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise StampError(f"{source}: card is read-only (mode {stat.filemode(st.st_mode)}); make it writable "
                         f"(chmod u+w {source}) to stamp it; nothing was changed")
    try:
        atomic_write_bytes(target, new_raw)
    except OSError as exc:
        raise StampError(f"{source}: writing the updated card failed: {exc.strerror or exc}; the original card is "
                         "unchanged") from exc
    return CardStampResult(path=target, changed=True, created=False)


# --- refit results written back by an audit (``bnconvention hub push``) -------------------------------------------
#
# The ``bnconvention`` block belongs to the release's own declaration and must equal the record stamped in the
# weights, so refit results get their own top-level key: a list with one entry per pushed annotation file (the
# file holds the full record; the entry is a summary a reader of the card can use), and their own body section.

REFIT_BLOCK_KEY = "bnconvention_refit"
REFIT_SECTION_BEGIN = "<!-- bnconvention:refit:begin -->"
REFIT_SECTION_END = "<!-- bnconvention:refit:end -->"
REFIT_SECTION_HEADING = "BatchNorm refit audit"


def refit_card_entry(annotation: RefitAnnotation, *, path: str, sha256: str) -> dict[str, Any]:
    """The card's summary of one refit annotation stored at ``path`` in the repo (``sha256``: of its canonical
    JSON)."""
    subject = annotation.subject
    entry: dict[str, Any] = {"annotation": path, "sha256": sha256, "subject": subject.filename}
    if subject.revision:
        entry["revision"] = subject.revision
    entry.update({
        "convention": annotation.convention.name,
        "channel": annotation.channel,
        "replicates": annotation.replicates,
        "margin_pp": annotation.margin_pp,
        "cells": [{"metric": c.metric, "shipped": c.shipped, "refit": c.refit, "shift_pp": c.shift_pp,
                   "decision": c.decision.outcome} for c in annotation.cells],
        "reporting_line": annotation.reporting_line,
    })
    return entry


def read_refit_entries(text: str, *, source: str = "README.md") -> list[dict[str, Any]]:
    """The refit entries of a card (empty when it has none); a malformed block raises :class:`CardError`."""
    return _refit_entries(parse_card_metadata(text, source=source), source=source)


def _refit_entries(metadata: Mapping[str, Any], *, source: str) -> list[dict[str, Any]]:
    value = metadata.get(REFIT_BLOCK_KEY)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(e, dict) and isinstance(e.get("annotation"), str)
                                              for e in value):
        raise CardError(f"{source}: the {REFIT_BLOCK_KEY} block is not a list of entries with an 'annotation' path; "
                        "fix or remove it by hand so refit results can be added", source=source)
    return value


def _number(value: Any, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else _text(value)


def render_refit_section(entries: list[Mapping[str, Any]]) -> str:
    """The body section (markers included) listing every refit entry's cells, LF line ends, no trailing break."""
    lines = [REFIT_SECTION_BEGIN, f"## {REFIT_SECTION_HEADING}", "",
             "Refit annotations added by an audit: each cell as shipped and after a refit of the running statistics "
             "at bit-identical weights (shift in percentage points, decision on the replicates). The annotation "
             "file holds the full record.", "",
             "| Annotation | Audited file | Refit convention | Cell | Shipped | Refit | Shift | Decision |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for entry in entries:
        subject = _code(entry.get("subject", ""))
        if entry.get("revision"):
            subject += f" @ {_code(str(entry['revision'])[:12])}"
        for cell in entry.get("cells") or []:
            shift = cell.get("shift_pp")
            shown = f"{signed(shift)}pp" if isinstance(shift, (int, float)) and not isinstance(shift, bool) else "-"
            lines.append(f"| {_code(entry.get('annotation', ''))} | {subject} | {_code(entry.get('convention', ''))} "
                         f"| {_text(cell.get('metric', ''))} | {_number(cell.get('shipped'), 4)} | "
                         f"{_number(cell.get('refit'), 4)} | {shown} | {_text(cell.get('decision', ''))} |")
    for entry in entries:
        if entry.get("reporting_line"):
            lines += ["", f"Reporting line ({_code(entry.get('annotation', ''))}): {_text(entry['reporting_line'])}"]
    lines.append(REFIT_SECTION_END)
    return "\n".join(lines)


def stamp_card_refit_text(text: str, entry: Mapping[str, Any], *, source: str = "README.md") -> str:
    """``text`` with ``entry`` (from :func:`refit_card_entry`) in its refit block and section. Pure; idempotent.

    An entry for the same annotation path is replaced where it is; a new one is appended. The declaration block,
    every other key, the card's line endings and the rest of the body are kept.
    """
    parsed = _parse(text, source=source)
    entries = [dict(e) for e in _refit_entries(parsed.metadata, source=source)]
    item = dict(entry)
    index = next((i for i, e in enumerate(entries) if e.get("annotation") == item.get("annotation")), None)
    if index is None:
        entries.append(item)
    else:
        entries[index] = item
    block = yaml.safe_dump({REFIT_BLOCK_KEY: entries}, sort_keys=False, allow_unicode=True, default_flow_style=False,
                           width=2**16)
    return _apply(text, parsed, block=block, data=entries, section=render_refit_section(entries),
                  source=source, key_name=REFIT_BLOCK_KEY,
                  markers=(REFIT_SECTION_BEGIN, REFIT_SECTION_END, REFIT_SECTION_HEADING))
