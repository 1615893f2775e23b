"""Refit results written back into a model card by an audit (``bnconvention hub push``).

The ``bnconvention`` block belongs to the release's own declaration and must equal the record stamped in the
weights, so refit results get their own top-level key, :data:`REFIT_BLOCK_KEY`: a list with one entry per pushed
annotation file (the file holds the full record; the entry is a summary a reader of the card can use), and their own
body section between :data:`REFIT_SECTION_BEGIN` and :data:`REFIT_SECTION_END`. Edits go through
:mod:`bnconvention.authoring.card_edit`, so the declaration block and everything else in the card are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import yaml

from bnconvention.authoring.card_edit import Markers, apply_edit, code_cell, parse_for_edit
from bnconvention.errors import CardError
from bnconvention.formats.card import CARD_NAME, parse_card_metadata
from bnconvention.formats.json_types import JsonObject
from bnconvention.formats.text import signed, table_cell
from bnconvention.standard.models import RefitAnnotation

REFIT_BLOCK_KEY = "bnconvention_refit"
REFIT_SECTION_BEGIN = "<!-- bnconvention:refit:begin -->"
REFIT_SECTION_END = "<!-- bnconvention:refit:end -->"
REFIT_SECTION_HEADING = "BatchNorm refit audit"
REFIT_MARKERS = Markers(REFIT_SECTION_BEGIN, REFIT_SECTION_END, REFIT_SECTION_HEADING)


class RefitCardCell(TypedDict):
    """One cell of a refit entry: the metric as shipped and after the refit, the shift and the decision."""

    metric: str
    shipped: float
    refit: float
    shift_pp: float
    decision: str


class _Revision(TypedDict, total=False):
    revision: str


class RefitCardEntry(_Revision):
    """The card's summary of one refit annotation (the annotation file holds the full record): its path and
    sha256, the audited file (and revision, when the annotation names one), the refit convention, the cells and
    the reporting line. Keys in this order in the card."""

    annotation: str
    sha256: str
    subject: str
    convention: str
    channel: str
    replicates: int
    margin_pp: float
    cells: list[RefitCardCell]
    reporting_line: str


def refit_card_entry(annotation: RefitAnnotation, *, path: str, sha256: str) -> RefitCardEntry:
    """The card's summary of one refit annotation stored at ``path`` in the repo (``sha256``: of its canonical
    JSON)."""
    subject = annotation.subject
    revision: _Revision = {"revision": subject.revision} if subject.revision else {}
    return {
        "annotation": path, "sha256": sha256, "subject": subject.filename, **revision,
        "convention": annotation.convention.name,
        "channel": annotation.channel,
        "replicates": annotation.replicates,
        "margin_pp": annotation.margin_pp,
        "cells": [{"metric": c.metric, "shipped": c.shipped, "refit": c.refit, "shift_pp": c.shift_pp,
                   "decision": c.decision.outcome} for c in annotation.cells],
        "reporting_line": annotation.reporting_line,
    }


def read_refit_entries(text: str, *, source: str = CARD_NAME) -> list[JsonObject]:
    """The refit entries of a card as written there (empty when it has none): each a mapping with an
    ``annotation`` path, the rest as the card has it (an entry may have been edited by hand); a malformed block
    raises :class:`CardError`."""
    return _refit_entries(parse_card_metadata(text, source=source), source=source)


def _refit_entries(metadata: Mapping[str, Any], *, source: str) -> list[JsonObject]:
    value = metadata.get(REFIT_BLOCK_KEY)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(e, dict) and isinstance(e.get("annotation"), str)
                                              for e in value):
        raise CardError(f"{source}: the {REFIT_BLOCK_KEY} block is not a list of entries with an 'annotation' path; "
                        "fix or remove it by hand so refit results can be added", source=source)
    return value


def _number(value: Any, digits: int) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{digits}f}"
    return table_cell(value)


def render_refit_section(entries: Sequence[Mapping[str, Any]]) -> str:
    """The body section (markers included) listing every refit entry's cells, LF line ends, no trailing break."""
    lines = [REFIT_SECTION_BEGIN, f"## {REFIT_SECTION_HEADING}", "",
             "Refit annotations added by an audit: each cell as shipped and after a refit of the running statistics "
             "at bit-identical weights (shift in percentage points, decision on the replicates). The annotation "
             "file holds the full record.", "",
             "| Annotation | Audited file | Refit convention | Cell | Shipped | Refit | Shift | Decision |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for entry in entries:
        subject = code_cell(entry.get("subject", ""))
        if entry.get("revision"):
            subject += f" @ {code_cell(str(entry['revision'])[:12])}"
        for cell in entry.get("cells") or []:
            shift = cell.get("shift_pp")
            shown = f"{signed(shift)}pp" if isinstance(shift, (int, float)) and not isinstance(shift, bool) else "-"
            lines.append(f"| {code_cell(entry.get('annotation', ''))} | {subject} | "
                         f"{code_cell(entry.get('convention', ''))} | {table_cell(cell.get('metric', ''))} | "
                         f"{_number(cell.get('shipped'), 4)} | {_number(cell.get('refit'), 4)} | {shown} | "
                         f"{table_cell(cell.get('decision', ''))} |")
    for entry in entries:
        if entry.get("reporting_line"):
            lines += ["", f"Reporting line ({code_cell(entry.get('annotation', ''))}): "
                          f"{table_cell(entry['reporting_line'])}"]
    lines.append(REFIT_SECTION_END)
    return "\n".join(lines)


def stamp_card_refit_text(text: str, entry: RefitCardEntry, *, source: str = CARD_NAME) -> str:
    """``text`` with ``entry`` (from :func:`refit_card_entry`) in its refit block and section. Pure; idempotent.

    An entry for the same annotation path is replaced where it is; a new one is appended. The declaration block,
    every other key, the card's line endings and the rest of the body are kept.
    """
    parsed = parse_for_edit(text, source=source)
    entries: list[Mapping[str, Any]] = [dict(e) for e in _refit_entries(parsed.metadata, source=source)]
    item = dict(entry)
    index = next((i for i, e in enumerate(entries) if e.get("annotation") == item.get("annotation")), None)
    if index is None:
        entries.append(item)
    else:
        entries[index] = item
    block = yaml.safe_dump({REFIT_BLOCK_KEY: entries}, sort_keys=False, allow_unicode=True, default_flow_style=False,
                           width=2**16)
    return apply_edit(text, parsed, block=block, data=entries, section=render_refit_section(entries),
                      source=source, key_name=REFIT_BLOCK_KEY, markers=REFIT_MARKERS)


__all__ = [
    "REFIT_BLOCK_KEY",
    "REFIT_MARKERS",
    "REFIT_SECTION_BEGIN",
    "REFIT_SECTION_END",
    "REFIT_SECTION_HEADING",
    "RefitCardCell",
    "RefitCardEntry",
    "read_refit_entries",
    "refit_card_entry",
    "render_refit_section",
    "stamp_card_refit_text",
]
