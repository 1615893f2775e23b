"""Upgrade a record of an older spec version to the latest (``bnconvention migrate``), in a JSON file or a card's
block.

The versions come from the table in :mod:`bnconvention.standard.versions`: each version after the first only adds
optional fields (marked ``since``), so every record of an older version is a valid record of the latest with the
same meaning once its ``spec_version`` says so.
The migration therefore changes that one value and nothing else, in place in the key order, and
proves it: the record must be valid before (a record with errors is not migrated: fix it first), valid after, and
its parsed form, ``spec_version`` aside, must be what it was. A card keeps every byte outside its ``bnconvention:``
block (:mod:`bnconvention.authoring.card_edit`), its line endings and a UTF-8 BOM; the body section is not
touched. Writes are atomic: on any failure the original file is left as it was.

Pure functions over decoded data and text; :func:`migrate_file` is the I/O wrapper.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnconvention.authoring.card_edit import apply_edit, parse_for_edit
from bnconvention.authoring.card_stamp import SECTION_MARKERS, render_card_block
from bnconvention.errors import CardError, RecordError, UsageError
from bnconvention.formats.atomic import WRITE_TEMP_SUFFIX, atomic_write_bytes, remove_stale_temps
from bnconvention.formats.canonical import canonical_json, loads_strict
from bnconvention.formats.card import CARD_BLOCK_KEY, decode_card
from bnconvention.standard.models import LATEST_SPEC_VERSION, to_dict
from bnconvention.standard.versions import older_versions
from bnconvention.validation.records import ensure_valid_record

FROM_VERSIONS = older_versions()
TO_VERSION = LATEST_SPEC_VERSION


@dataclass(frozen=True)
class MigrationResult:
    """What a migration did: the file written (None when nothing was), and the versions before and after."""

    source: Path
    written: Path | None
    version_before: str
    version_after: str


def _meaning(data: dict[str, Any], *, source: str) -> str:
    """A record's parsed content without its version, as canonical JSON: what must not change."""
    record = to_dict(ensure_valid_record(data, source=source))
    record.pop("spec_version", None)
    return canonical_json(record)


def migrate_record_data(data: Any, *, source: str) -> dict[str, Any]:
    """A valid record of an older version as the latest, the same keys in the same order; raises
    :class:`RecordError` otherwise.

    >>> migrate_record_data({"spec_version": "1.1", "kind": "declaration"}, source="r.json")
    Traceback (most recent call last):
    ...
    bnconvention.errors.RecordError: r.json: spec_version is "1.1"; migrate upgrades 1.0 records to 1.1
    """
    if not isinstance(data, dict):
        raise RecordError(f"{source}: a record is a JSON object; found {type(data).__name__}", source=source)
    version = data.get("spec_version")
    if version not in FROM_VERSIONS:
        raise RecordError(f"{source}: spec_version is {json.dumps(version)}; migrate upgrades "
                          f"{' or '.join(FROM_VERSIONS)} records to {TO_VERSION}", source=source)
    before = _meaning(data, source=source)  # an invalid record raises here, naming its first error
    migrated = {key: (TO_VERSION if key == "spec_version" else value) for key, value in data.items()}
    if _meaning(migrated, source=f"{source} (migrated)") != before:
        raise RecordError(f"{source}: the record would not mean the same at {TO_VERSION}; this is a bug in "
                          "bnconvention, please report it with the record", source=source)
    return migrated


def migrate_json_text(raw: bytes, *, source: str) -> bytes:
    """The bytes of a migrated JSON record: canonical JSON when the input was, else 2-space indented."""
    data = loads_strict(raw, source=source)
    migrated = migrate_record_data(data, source=source)
    if raw.rstrip(b"\n") == canonical_json(data).encode("utf-8"):
        return canonical_json(migrated).encode("utf-8") + raw[len(raw.rstrip(b"\n")):]
    return (json.dumps(migrated, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def migrate_card_text(text: str, *, source: str) -> str:
    """A card with its ``bnconvention:`` block migrated; every byte outside the block kept."""
    parsed = parse_for_edit(text, source=source)
    if CARD_BLOCK_KEY not in parsed.metadata:
        raise CardError(f"{source}: the card has no {CARD_BLOCK_KEY}: block to migrate", source=source)
    migrated = migrate_record_data(parsed.metadata[CARD_BLOCK_KEY], source=f"{source} {CARD_BLOCK_KEY}:")
    return apply_edit(text, parsed, block=render_card_block(migrated), data=migrated, section=None, source=source,
                      key_name=CARD_BLOCK_KEY, markers=SECTION_MARKERS)


def _version_of(raw: bytes, *, is_card: bool, source: str) -> Any:
    if is_card:
        block = parse_for_edit(decode_card(raw, source=source), source=source).metadata.get(CARD_BLOCK_KEY)
        return block.get("spec_version") if isinstance(block, dict) else None
    data = loads_strict(raw, source=source)
    return data.get("spec_version") if isinstance(data, dict) else None


def migrate_file(path: Path, *, out: Path | None = None) -> MigrationResult:
    """Migrate the record at ``path`` (a ``.json`` record or a ``.md`` card) into ``out`` (default: in place).

    A record already at the latest version is left alone and nothing is written.
    """
    source = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".md"):
        raise UsageError(f"{source}: migrate reads a record (.json) or a model card (.md); a weights file's record "
                         "is migrated by stamping the migrated record again (bnconvention stamp)")
    raw = path.read_bytes()
    is_card = suffix == ".md"
    version = _version_of(raw, is_card=is_card, source=source)
    if version == TO_VERSION:
        return MigrationResult(source=path, written=None, version_before=TO_VERSION, version_after=TO_VERSION)
    if is_card:
        bom = codecs.BOM_UTF8 if raw.startswith(codecs.BOM_UTF8) else b""
        new_raw = bom + migrate_card_text(decode_card(raw, source=source), source=source).encode("utf-8")
    else:
        new_raw = migrate_json_text(raw, source=source)
    target = out if out is not None else path
    remove_stale_temps(target, suffix=WRITE_TEMP_SUFFIX)
    atomic_write_bytes(target, new_raw)
    return MigrationResult(source=path, written=target, version_before=str(version), version_after=TO_VERSION)


__all__ = ["MigrationResult", "migrate_card_text", "migrate_file", "migrate_json_text", "migrate_record_data"]
