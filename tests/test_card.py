"""Reading model cards (bnconvention.card): front matter, the bnconvention block, and hostile YAML."""

from __future__ import annotations

import pytest

from bnconvention.card import (
    MAX_CARD_BYTES,
    decode_card,
    detect_newline,
    load_yaml_strict,
    parse_card_metadata,
    read_card_record,
    split_front_matter,
)
from bnconvention.errors import CardError

CARD = "---\nlicense: mit\nbnconvention:\n  spec_version: '1.0'\n  eps: 1.0e-05\n---\n# Model\n\ntext\n"


def test_front_matter_found() -> None:
    front = split_front_matter(CARD)
    assert front is not None
    assert front.yaml_text == "license: mit\nbnconvention:\n  spec_version: '1.0'\n  eps: 1.0e-05"
    assert CARD[front.body_start:] == "# Model\n\ntext\n"
    assert front.newline == "\n"


def test_record_read_with_float_from_safe_dump_notation() -> None:
    assert read_card_record(CARD) == {"spec_version": "1.0", "eps": 1e-05}


def test_yaml11_reads_bare_exponent_as_string() -> None:
    # the trap the validator warns about: YAML 1.1 needs a dot in the mantissa
    assert read_card_record("---\nbnconvention:\n  eps: 1e-5\n---\n") == {"eps": "1e-5"}


@pytest.mark.parametrize("text", [
    pytest.param("# Model\n\nno front matter\n", id="none"),
    pytest.param("text before\n---\nbnconvention: {}\n---\n", id="not-at-start"),
    pytest.param("---\n---\n# empty front matter\n", id="empty"),
])
def test_front_matter_absent_or_empty(text: str) -> None:
    assert read_card_record(text) is None


def test_crlf_card() -> None:
    text = CARD.replace("\n", "\r\n")
    front = split_front_matter(text)
    assert front is not None and front.newline == "\r\n"
    assert read_card_record(text) == {"spec_version": "1.0", "eps": 1e-05}
    assert detect_newline("a\rb") == "\r"


BOMB = """---
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: [*c, *c, *c, *c, *c, *c, *c, *c, *c]
---
"""


@pytest.mark.parametrize(("text", "fragment"), [
    pytest.param(BOMB, "YAML anchor &a is not allowed", id="billion-laughs"),
    pytest.param("---\nx: 1\ny: *x\n---\n", "YAML aliases are not allowed", id="alias"),
    pytest.param("---\nbnconvention: 1\nbnconvention: 2\n---\n", "duplicate key 'bnconvention'", id="duplicate-key"),
    pytest.param("---\na: [1, 2\n---\n", "invalid YAML front matter at line", id="malformed"),
    pytest.param("---\n!!python/object:os.system {}\n---\n", "could not determine a constructor", id="python-tag"),
])
def test_hostile_yaml_rejected(text: str, fragment: str) -> None:
    with pytest.raises(CardError) as info:
        read_card_record(text, source="cards/README.md")
    assert fragment in str(info.value)
    assert str(info.value).startswith("cards/README.md: ")


@pytest.mark.parametrize("text", [
    pytest.param("---\n- a\n- b\n---\n", id="list"),
    pytest.param("---\njust a string\n---\n", id="scalar"),
])
def test_front_matter_not_a_mapping(text: str) -> None:
    with pytest.raises(CardError, match="expected a mapping"):
        parse_card_metadata(text)


def test_block_returned_as_is_even_when_not_a_mapping() -> None:
    # the reader does not judge the block: the validator reports card.block_not_mapping
    assert read_card_record("---\nbnconvention: [1, 2]\n---\n") == [1, 2]


def test_decode_card() -> None:
    assert decode_card(b"\xef\xbb\xbf---\na: 1\n---\n") == "---\na: 1\n---\n"
    with pytest.raises(CardError, match="not valid UTF-8 at byte 1"):
        decode_card(b"-\xff")
    with pytest.raises(CardError, match="over the"):
        decode_card(b" " * (MAX_CARD_BYTES + 1))


def test_load_yaml_strict_keeps_safe_types() -> None:
    assert load_yaml_strict("a: [1, 2.5, true, null, '1.0']") == {"a": [1, 2.5, True, None, "1.0"]}
