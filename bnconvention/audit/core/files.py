"""The audit's file names and its JSON writer, shared by the single audit, the sweeps, the shipped store and the
census (:mod:`bnconvention.audit.render.outputs` writes one audit's folder with them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bnconvention.formats.atomic import atomic_write_text

ANNOTATION_FILE = "annotation.json"
SCALES_ANNOTATION_FILE = "scales_annotation.json"


def json_text(value: Any) -> str:
    """Indented JSON text with a trailing newline (no NaN: values come from validated models)."""
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json_text(value))


__all__ = ["ANNOTATION_FILE", "SCALES_ANNOTATION_FILE", "json_text", "write_json"]
