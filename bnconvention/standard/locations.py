"""Where a record lives, fixed by the standard (see docs/standard.md, "Where the record lives").

- safetensors: one key, :data:`SAFETENSORS_METADATA_KEY`, in ``__metadata__``, holding the record as canonical JSON
  text (metadata values are strings). No other metadata key is ever touched.
- model card: one top-level key, :data:`CARD_BLOCK_KEY`, in the README's YAML front matter, holding the record as
  a YAML mapping; plus a human-readable body section under :data:`CARD_SECTION_HEADING`.
- refit annotations pushed to a Hub repo: ``bnconvention/refit-<first 12 hex of the annotation's sha256>.json``.
"""

from __future__ import annotations

from typing import Any

from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import CARD_BLOCK_KEY, read_card_record
from bnconvention.formats.safetensors_header import SafetensorsHeader

SAFETENSORS_METADATA_KEY = "bnconvention.record"
CARD_SECTION_HEADING = "BatchNorm fitting convention"
ANNOTATION_DIR = "bnconvention"

__all__ = [
    "ANNOTATION_DIR",
    "CARD_BLOCK_KEY",
    "CARD_SECTION_HEADING",
    "SAFETENSORS_METADATA_KEY",
    "annotation_filename",
    "read_card_record",
    "record_from_header",
]


def record_from_header(header: SafetensorsHeader, *, source: str = "<safetensors>") -> Any | None:
    """The decoded (not yet validated) record stamped in a safetensors header, or ``None`` if there is none."""
    if not header.metadata or SAFETENSORS_METADATA_KEY not in header.metadata:
        return None
    text = header.metadata[SAFETENSORS_METADATA_KEY]
    return loads_strict(text, source=f"{source} __metadata__[{SAFETENSORS_METADATA_KEY!r}]")


def annotation_filename(annotation_sha256: str) -> str:
    """Repository path of a refit annotation, derived from the sha256 of its canonical JSON."""
    return f"{ANNOTATION_DIR}/refit-{annotation_sha256[:12]}.json"
