"""Model cards (README.md): find the YAML front matter and read the bnconvention block from it, safely.

Parsing is pure (text in, values out). The front-matter regex is huggingface_hub's ``REGEX_YAML_BLOCK``, which
mirrors the Hub server's, so we see exactly the block the Hub sees; an empty front matter (``---`` on two
consecutive lines, which that regex misses) is recognised too, so that a stamp fills it instead of adding a second.

Untrusted YAML is loaded with a safe loader that refuses duplicate keys (which YAML loaders silently resolve to the
last one). Anchors, aliases and merge keys (``&defaults`` / ``*defaults`` / ``<<:``) are valid YAML and load as
``huggingface_hub.ModelCard`` (``yaml.safe_load``) loads them; what is bounded is what they expand to: at most
:data:`MAX_YAML_EXPANSION` characters of scalars and nodes, as large as a card without aliases can be, so an alias
bomb (billion laughs) is refused before anything is built, and a recursive alias is refused (JSON cannot hold it).
The bound is computed on the composed node graph, each shared node once: linear in the size of the card. So is
the nesting bound, :data:`MAX_YAML_DEPTH` levels with aliases expanded, the same whichever parser composed the card.

The card is composed by libyaml's parser (``yaml.CSafeLoader``) when PyYAML was built with it, else by PyYAML's
pure-Python one (a legal 3.4 MB front matter: 4-11 s instead of 22-26 s per parse on two busy cores).
:data:`YAML_LOADER` is that choice, made once here; every check above runs on its composed nodes the same way, so
both refuse the same cards.

>>> card = "---\\nlicense: mit\\nbnconvention:\\n  kind: declaration\\n---\\n# Model\\n"
>>> read_card_record(card, source="README.md")
{'kind': 'declaration'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bnconvention.errors import CardError
from bnconvention.formats.text import one_line

# Same pattern as huggingface_hub.repocard.REGEX_YAML_BLOCK (which must match the Hub server's).
REGEX_YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")
# An empty front matter: the closing fence right after the opening one (REGEX_YAML_BLOCK wants a line between).
_EMPTY_YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))(---[ \t]*(?:\r\n|\n|$))")
CARD_BLOCK_KEY = "bnconvention"
CARD_NAME = "README.md"  # the model card of a release folder or a Hub repo, where the Hub looks for it
MAX_CARD_BYTES = 4 * 1024 * 1024  # the one bound for a card, whoever reads it (validator, census, stamping)
MAX_YAML_EXPANSION = 2 * MAX_CARD_BYTES  # characters of scalars plus one per node, aliases expanded
# Levels of nested mappings and sequences, aliases expanded. Pure PyYAML's recursive composer fails near 490 levels
# (at the default recursion limit) and libyaml stops at 1,000: an explicit bound makes both refuse the same cards,
# and keeps every later recursive walk of the data (JSON, jsonschema) far from Python's recursion limit.
MAX_YAML_DEPTH = 100
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class FrontMatter:
    """Where the YAML front matter sits in a card. Offsets index the card text."""

    yaml_text: str  # between the fences, without the line break before the closing fence
    yaml_start: int
    yaml_end: int
    body_start: int  # first character after the closing fence line
    newline: str  # the card's line ending: "\r\n", "\r" or "\n"
    first_line: int = 2  # the card's line number (1-based) of the first YAML line: the one after the opening fence


def detect_newline(text: str) -> str:
    """The first line ending in ``text`` ("\\n" when there is none)."""
    match = re.search(r"\r\n|\r|\n", text)
    return match.group(0) if match else "\n"


def split_front_matter(text: str) -> FrontMatter | None:
    """Locate the front matter; ``None`` when the card has none. An empty one has ``yaml_text == ""``."""
    match = REGEX_YAML_BLOCK.search(text)
    if match is not None:
        return FrontMatter(yaml_text=match.group(2), yaml_start=match.start(2), yaml_end=match.end(2),
                           body_start=match.end(), newline=detect_newline(match.group(1)),
                           first_line=len(re.findall(r"\r\n|\r|\n", text[:match.start(2)])) + 1)
    empty = _EMPTY_YAML_BLOCK.search(text)
    if empty is None:
        return None
    return FrontMatter(yaml_text="", yaml_start=empty.end(1), yaml_end=empty.end(1), body_start=empty.end(),
                       newline=detect_newline(empty.group(1)))


class _StrictConstruction:
    """The safe constructor's mappings, refusing duplicate keys (keys brought in by a ``<<:`` merge may be
    overridden); mixed into a safe loader class by :func:`strict_loader`."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"mapping key {key!r} is not hashable", key_node.start_mark) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


def strict_loader(base: type[Any]) -> type[Any]:
    """``base`` (``yaml.CSafeLoader`` or ``yaml.SafeLoader``: safe types only, so ``!!python/...`` tags are refused)
    with duplicate keys refused."""
    return type(f"Strict{base.__name__}", (_StrictConstruction, base), {})


# The one choice of parser: libyaml's when PyYAML has it (the C parser composes nodes; construction, and so every
# safety check, stays PyYAML's SafeConstructor), else the pure-Python one.
YAML_LOADER: type[Any] = strict_loader(yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False)
                                       else yaml.SafeLoader)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_expansion(root: yaml.Node, *, limit: int = MAX_YAML_EXPANSION, depth: int = MAX_YAML_DEPTH) -> None:
    """Refuse a node graph whose aliases expand past ``limit`` characters or ``depth`` levels, or that contains
    itself.

    Each node's expanded size and height are computed once (post-order over the graph, shared nodes memoised), so
    the check is linear in the composed card even when the expansion is exponential. Raises
    ``yaml.constructor.ConstructorError`` at the node where a bound is crossed.
    """
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    open_nodes: set[int] = set()
    scalar = yaml.ScalarNode
    # (node, None): not yet opened; (node, children): its children are done, its own size and height are due
    stack: list[tuple[yaml.Node, list[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, children = stack.pop()
        key = id(node)
        if children is not None:
            open_nodes.discard(key)
            size = 1 + sum(sizes[id(child)] for child in children)
            if size > limit:
                raise yaml.constructor.ConstructorError(
                    None, None, f"YAML aliases expand this value to more than {limit} characters (an alias bomb?); "
                                "write the values out or use fewer aliases", node.start_mark)
            height = 1 + max((heights[id(child)] for child in children), default=0)
            if height > depth:
                raise yaml.constructor.ConstructorError(
                    None, None, f"YAML values nested more than {depth} levels deep; flatten them", node.start_mark)
            sizes[key] = size
            heights[key] = height
        elif key in sizes:
            continue
        elif isinstance(node, scalar):  # a leaf (most nodes): sized at once, it cannot contain itself
            size = len(node.value) + 1
            if size > limit:
                raise yaml.constructor.ConstructorError(
                    None, None, f"YAML aliases expand this value to more than {limit} characters (an alias bomb?); "
                                "write the values out or use fewer aliases", node.start_mark)
            sizes[key] = size
            heights[key] = 1
        elif key in open_nodes:
            raise yaml.constructor.ConstructorError(
                None, None, "a YAML alias refers to a node that contains it (a recursive structure, which JSON "
                            "cannot hold)", node.start_mark)
        else:
            open_nodes.add(key)
            kids = _children(node)
            stack.append((node, kids))
            stack.extend((child, None) for child in kids)


@dataclass(frozen=True)
class YamlDocument:
    """A loaded YAML document: its data and, for surgical edits, its root node and the root's own keys as composed
    (before ``<<:`` merges were flattened into the root)."""

    data: Any
    root: yaml.Node | None
    keys: tuple[yaml.Node, ...]


_LIBYAML_ALIAS = "found undefined alias"
_UNDEFINED_ALIAS = re.compile(r"\*([^\s,\[\]{}]+)")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _position(mark: yaml.Mark, text: str) -> tuple[int, int]:
    """A mark's 0-based line and column; a mark past the end of the text (libyaml's end of stream, which it puts on
    a line of its own) is the end of the text's last line, where PyYAML's own parser puts it."""
    if mark.index < len(text):
        return mark.line, mark.column
    breaks = list(_LINE_BREAK.finditer(text))
    return len(breaks), len(text) - (breaks[-1].end() if breaks else 0)


def load_yaml_document(text: str, *, source: str = "<yaml>", first_line: int = 1) -> YamlDocument:
    """Load untrusted YAML: safe types only, no duplicate keys, aliases bounded; errors name line and column, counted
    in the file when the YAML starts on its line ``first_line`` (a card's front matter starts after its fence)."""
    loader = None
    try:
        loader = YAML_LOADER(text)  # the pure loader checks the characters here, libyaml as it reads
        root = loader.get_single_node()
        if root is None:
            return YamlDocument(data=None, root=None, keys=())
        keys = tuple(key for key, _ in root.value) if isinstance(root, yaml.MappingNode) else ()
        check_expansion(root)
        return YamlDocument(data=loader.construct_document(root), root=root, keys=keys)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = None if mark is None else _position(mark, text)
        line = None if position is None else position[0] + first_line
        where = f" at line {line} column {position[1] + 1}" if position is not None else ""
        problem = exc.problem or exc.context or "malformed YAML"
        alias = _UNDEFINED_ALIAS.match(text, mark.index) if mark is not None and problem == _LIBYAML_ALIAS else None
        if alias is not None:  # libyaml does not name it; PyYAML's own parser does
            problem = f"found undefined alias {alias.group(1)!r}"
        raise CardError(f"{source}: invalid YAML front matter{where}: {problem}", source=source, line=line) from exc
    except yaml.reader.ReaderError as exc:  # a control character; its own text spans two lines
        raise CardError(f"{source}: invalid YAML front matter: unacceptable character #x{exc.character:04x} at "
                        f"character {exc.position}: {exc.reason}", source=source) from exc
    except yaml.YAMLError as exc:
        raise CardError(f"{source}: invalid YAML front matter: {one_line(exc)}", source=source) from exc
    except UnicodeEncodeError as exc:  # a lone surrogate: libyaml reads UTF-8, which cannot hold one
        raise CardError(f"{source}: invalid YAML front matter: not valid Unicode text at character {exc.start}",
                        source=source) from exc
    except RecursionError as exc:
        raise CardError(f"{source}: YAML front matter nested too deeply", source=source) from exc
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_strict(text: str, *, source: str = "<yaml>", first_line: int = 1) -> Any:
    """Load untrusted YAML: safe types only, no duplicate keys, aliases bounded; errors name line and column."""
    return load_yaml_document(text, source=source, first_line=first_line).data


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


def read_card_text(path: Path) -> str:
    """The text of the card file ``path``: at most :data:`MAX_CARD_BYTES` read (one more, to tell a card over the
    limit), decoded by :func:`decode_card`."""
    with open(path, "rb") as handle:
        return decode_card(handle.read(MAX_CARD_BYTES + 1), source=str(path))


def parse_card_metadata(text: str, *, source: str = "README.md") -> dict[str, Any]:
    """The card's front matter as a dict (empty when the card has none)."""
    front = split_front_matter(text)
    if front is None:
        return {}
    return front_matter_mapping(load_yaml_document(front.yaml_text, source=source, first_line=front.first_line).data,
                                source=source)


def front_matter_mapping(data: Any, *, source: str = "README.md") -> dict[str, Any]:
    """Loaded front matter as a dict: ``{}`` for an empty one, :class:`CardError` for anything but a mapping."""
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
