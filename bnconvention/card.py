"""Model cards (README.md): find the YAML front matter and read the bnconvention block from it, safely.

Parsing is pure (text in, values out). The front-matter regex is huggingface_hub's ``REGEX_YAML_BLOCK``, which
mirrors the Hub server's, so we see exactly the block the Hub sees.

Untrusted YAML is loaded with a safe loader that also rejects anchors and aliases (a billion-laughs card expands
to gigabytes when serialized) and duplicate keys (which YAML loaders silently resolve to the last one).

>>> card = "---\\nlicense: mit\\nbnconvention:\\n  kind: declaration\\n---\\n# Model\\n"
>>> read_card_record(card, source="README.md")
{'kind': 'declaration'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from bnconvention.errors import CardError

# Same pattern as huggingface_hub.repocard.REGEX_YAML_BLOCK (which must match the Hub server's).
REGEX_YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")
CARD_BLOCK_KEY = "bnconvention"
MAX_CARD_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class FrontMatter:
    """Where the YAML front matter sits in a card. Offsets index the card text."""

    yaml_text: str  # between the fences, without the line break before the closing fence
    yaml_start: int
    yaml_end: int
    body_start: int  # first character after the closing fence line
    newline: str  # the card's line ending: "\r\n", "\r" or "\n"


def detect_newline(text: str) -> str:
    """The first line ending in ``text`` ("\\n" when there is none)."""
    match = re.search(r"\r\n|\r|\n", text)
    return match.group(0) if match else "\n"


def split_front_matter(text: str) -> FrontMatter | None:
    """Locate the front matter; ``None`` when the card has none."""
    match = REGEX_YAML_BLOCK.search(text)
    if match is None:
        return None
    return FrontMatter(
        yaml_text=match.group(2),
        yaml_start=match.start(2),
        yaml_end=match.end(2),
        body_start=match.end(),
        newline=detect_newline(match.group(1)),
    )


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and duplicate mapping keys."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases are not allowed in model cards (they can expand without bound)",
                event.start_mark)
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise yaml.constructor.ConstructorError(
                None, None, f"YAML anchor &{event.anchor} is not allowed in model cards", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"mapping key {key!r} is not hashable", key_node.start_mark) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_strict(text: str, *, source: str = "<yaml>") -> Any:
    """Load untrusted YAML: safe types only, no anchors/aliases, no duplicate keys; errors name line and column."""
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "malformed YAML"
        raise CardError(f"{source}: invalid YAML front matter{where}: {problem}", source=source) from exc
    except yaml.YAMLError as exc:
        raise CardError(f"{source}: invalid YAML front matter: {exc}", source=source) from exc
    except RecursionError as exc:
        raise CardError(f"{source}: YAML front matter nested too deeply", source=source) from exc


def decode_card(data: bytes, *, source: str = "README.md") -> str:
    """Decode card bytes as UTF-8 (a BOM is tolerated), bounded in size."""
    if len(data) > MAX_CARD_BYTES:
        raise CardError(f"{source}: card is {len(data)} bytes, over the {MAX_CARD_BYTES}-byte limit", source=source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CardError(
            f"{source}: not valid UTF-8 at byte {exc.start}; model cards must be UTF-8 text", source=source
        ) from exc


def parse_card_metadata(text: str, *, source: str = "README.md") -> dict[str, Any]:
    """The card's front matter as a dict (empty when the card has none)."""
    front = split_front_matter(text)
    if front is None:
        return {}
    data = load_yaml_strict(front.yaml_text, source=source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CardError(
            f"{source}: YAML front matter is a {type(data).__name__}, expected a mapping of keys to values",
            source=source,
        )
    return data


def read_card_record(text: str, *, source: str = "README.md") -> Any | None:
    """The value of the card's ``bnconvention`` block, or ``None`` when the card declares nothing.

    The value is returned as parsed; check it with the validator (it may not be a valid record).
    """
    return parse_card_metadata(text, source=source).get(CARD_BLOCK_KEY)
