"""Write side of model cards: put a record into a README's front matter and render its human-readable section.

The read side (:mod:`bnconvention.formats.card`) is what the validator uses; this module only writes, and checks what it
writes with that read side, which reads a card as ``huggingface_hub.ModelCard`` does (the Hub's front-matter regex,
a ``yaml.SafeLoader``). ``ModelCard`` itself is not built to re-check: its tag list handling is quadratic
(``repocard_data._to_unique_list``), and a card with 350,000 tags took minutes. Every step here is linear in the
card: the front matter is parsed once, the result once more to check it.

Only the top-level ``bnconvention:`` block and the generated body section change; the edit itself (every other key,
comment, anchor and line ending kept) is :mod:`bnconvention.authoring.card_edit`. The block is the record dumped by
PyYAML's ``safe_dump`` (floats come out as ``1.0e-05``, which YAML 1.1 reads back as a float). Refit results an audit
writes back have their own block and section (:mod:`bnconvention.authoring.card_refit`, re-exported here).

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bnconvention.authoring.card_edit import Markers, apply_edit, code_cell, parse_for_edit
from bnconvention.authoring.card_refit import (  # importable from here as before the refit section had its module
    REFIT_BLOCK_KEY,
    REFIT_SECTION_BEGIN,
    REFIT_SECTION_END,
    REFIT_SECTION_HEADING,
    read_refit_entries,
    refit_card_entry,
    render_refit_section,
    stamp_card_refit_text,
)
from bnconvention.authoring.stamp import checked_record, ensure_writable
from bnconvention.errors import CardError, StampError
from bnconvention.formats.atomic import WRITE_TEMP_SUFFIX, atomic_write_bytes, remove_stale_temps
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.card import CARD_BLOCK_KEY, CARD_NAME, decode_card
from bnconvention.formats.text import plural, table_cell
from bnconvention.standard.locations import CARD_SECTION_HEADING
from bnconvention.standard.models import BatchNormState, Declaration, RefitAnnotation, to_dict

SECTION_BEGIN = "<!-- bnconvention:begin -->"
SECTION_END = "<!-- bnconvention:end -->"
SECTION_MARKERS = Markers(SECTION_BEGIN, SECTION_END, CARD_SECTION_HEADING)

__all__ = [
    "REFIT_BLOCK_KEY",
    "REFIT_SECTION_BEGIN",
    "REFIT_SECTION_END",
    "REFIT_SECTION_HEADING",
    "SECTION_BEGIN",
    "SECTION_END",
    "SECTION_MARKERS",
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


def _convention_rows(convention: Any) -> list[tuple[str, str]]:
    data = convention.data
    dataset = code_cell(data.dataset.id + (f"@{data.dataset.revision}" if data.dataset.revision else ""))
    split = f"{table_cell(data.role)} of {dataset}: {table_cell(data.subset)}"
    if data.record_count is not None:
        split += f" ({plural(data.record_count, 'record')})"
    transform = table_cell(convention.transform.mode)
    if convention.transform.reference:
        transform += f" ({code_cell(convention.transform.reference)})"
    transform += f", description sha256 {code_cell(convention.transform.sha256)}"
    acc = convention.accumulation
    rule = table_cell(acc.rule)
    if acc.rule == "ema":
        rule += f", momentum {canonical_json(acc.momentum)}"
    details = [f"{acc.variance_estimator} variance", f"{acc.precision}"]
    if acc.batch_size is not None:
        details.append(f"batch size {acc.batch_size}")
    if acc.num_batches is not None:
        details.append(f"{acc.num_batches} batch{'es' if acc.num_batches != 1 else ''}")
    return [
        ("Canonical name", code_cell(convention.name)),
        ("Data split", split),
        ("Transform", transform),
        ("Accumulation rule", f"{rule} ({', '.join(details)})"),
        ("Buffer-update mode", code_cell(convention.buffer_update_mode)),
    ]


def render_card_section(record: Declaration | RefitAnnotation) -> str:
    """The body section (markers included) describing ``record``, with LF line ends and no trailing line break."""
    rows = _convention_rows(record.convention)
    if isinstance(record, Declaration):
        layers = [layer for state in record.deployed_state if isinstance(state, BatchNormState)
              for layer in state.layers]
        rows.append(("BatchNorm layers", str(len(layers)) if layers else "none (channel absent)"))
        digests = [("trainable tensors", record.digests.trainable_sha256),
                   ("running statistics", record.digests.running_sha256)]
        algorithm = record.digests.algorithm
        intro = "Digests"
    else:
        rows.append(("Audited file", code_cell(record.subject.filename)))
        rows.append(("Cells", f"{plural(len(record.cells), 'cell')}, {plural(record.replicates, 'replicate')}, margin "
                              f"{canonical_json(record.margin_pp)} pp"))
        digests = [("trainable tensors", record.subject.trainable_sha256),
                   ("running statistics as shipped", record.subject.running_sha256)]
        algorithm = "bnconvention-tensors/1"
        intro = "Digests of the audited file"
    lines = [SECTION_BEGIN, f"## {CARD_SECTION_HEADING}", "", "| Field | Value |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines += ["", f"{intro} (`{algorithm}`):", ""]
    lines += [f"- {name}: {code_cell(value) if value else 'none'}" for name, value in digests]
    if record.reporting_line:
        lines += ["", f"Reporting line: {table_cell(record.reporting_line)}"]
    lines.append(SECTION_END)
    return "\n".join(lines)


def stamp_card_text(text: str, record: Declaration | RefitAnnotation | Mapping[str, Any], *,
                    source: str = CARD_NAME, validate: bool = True) -> str:
    """``text`` with ``record`` in its front matter and its section in the body. Pure; idempotent.

    ``validate=False`` skips the schema check of ``record`` (and the body section, which needs a valid record).
    Raises :class:`CardError` for malformed front matter or markers, :class:`~bnconvention.errors.RecordError` for
    an invalid record. The result is checked: it parses, every other key keeps its value and order, and the block
    reads back as the record.
    """
    if validate:
        model, data = checked_record(record, source=f"record for {source}")
    else:
        model, data = None, (dict(record) if isinstance(record, Mapping) else to_dict(record))
    parsed = parse_for_edit(text, source=source)  # malformed YAML raises here, before anything is built
    section = render_card_section(model) if model is not None else None
    return apply_edit(text, parsed, block=render_card_block(data), data=data, section=section, source=source,
                      key_name=CARD_BLOCK_KEY, markers=SECTION_MARKERS)


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
    ensure_writable(target, os.stat(target), what="card", shown=source)
    try:
        atomic_write_bytes(target, new_raw)
    except OSError as exc:
        raise StampError(f"{source}: writing the updated card failed: {exc.strerror or exc}; the original card is "
                         "unchanged") from exc
    return CardStampResult(path=target, changed=True, created=False)


