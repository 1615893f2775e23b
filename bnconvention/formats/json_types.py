"""Names for JSON as it is read from or written to a file or the wire, where no model of ours describes it.

Prefer a model: these are for documents that are someone else's (a Hub API response, a card's metadata, a foreign
header) or that a model keeps as written.
"""

from __future__ import annotations

from typing import TypeAlias

from pydantic import JsonValue

JsonObject: TypeAlias = dict[str, JsonValue]  # a JSON object, its values any JSON

__all__ = ["JsonObject", "JsonValue"]
