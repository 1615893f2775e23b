"""Reading model cards (bnconvention.formats.card): front matter, the bnconvention block, and hostile YAML."""

from __future__ import annotations

import pytest
import yaml

from bnconvention.errors import CardError
from bnconvention.formats import card as card_module
from bnconvention.formats.card import (
    MAX_CARD_BYTES,
    MAX_YAML_EXPANSION,
    REGEX_YAML_BLOCK,
    decode_card,
    detect_newline,
    load_yaml_strict,
    parse_card_metadata,
    read_card_record,
    split_front_matter,
)

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


BOMB = "---\na: &a [" + ", ".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)) + "---\n"


@pytest.mark.parametrize(("text", "fragment"), [
    # Regression: anchors were refused outright; now only what they expand to is bounded
    # line numbers are the card's: its YAML starts on line 2, after the opening fence
    pytest.param(BOMB, "at line 8 column 4: YAML aliases expand this value to more than 8388608 characters",
                 id="billion-laughs"),
    pytest.param("---\na: &a [1, *a]\n---\n", "at line 2 column 4: a YAML alias refers to a node that contains it",
                 id="recursive-alias"),
    pytest.param("---\nx: 1\ny: *x\n---\n", "found undefined alias 'x'", id="undefined-alias"),
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


def test_anchors_aliases_and_merge_keys_load_as_huggingface_hub_loads_them() -> None:
    from huggingface_hub import ModelCard

    card = ("---\ndefaults: &defaults\n  license: mit\n  tags: [a, b]\nmodel:\n  <<: *defaults\n  license: apache-2.0\n"
            "copy: *defaults\nbnconvention: {kind: declaration}\n---\n# Model\n")
    ours = parse_card_metadata(card)
    assert ours == ModelCard(card).data.to_dict()
    assert ours["model"] == {"license": "apache-2.0", "tags": ["a", "b"]}  # an explicit key overrides a merged one
    assert read_card_record(card) == {"kind": "declaration"}


def test_expansion_is_bounded_by_size_not_by_refusing_aliases() -> None:
    big = "x" * 1000
    fits = f"---\na: &a \"{big}\"\nb: [" + ", ".join(["*a"] * (MAX_YAML_EXPANSION // 2000)) + "]\n---\n"
    assert len(parse_card_metadata(fits)["b"]) == MAX_YAML_EXPANSION // 2000
    over = fits.replace("]\n---", ", " + ", ".join(["*a"] * (MAX_YAML_EXPANSION // 2000)) + "]\n---")
    with pytest.raises(CardError, match="YAML aliases expand this value to more than"):
        parse_card_metadata(over)


def test_our_front_matter_regex_is_huggingface_hubs() -> None:
    from huggingface_hub.repocard import REGEX_YAML_BLOCK as HUB_REGEX

    assert REGEX_YAML_BLOCK.pattern == HUB_REGEX.pattern


def test_an_empty_front_matter_is_found() -> None:
    front = split_front_matter("---\n---\n# Body\n")
    assert front is not None and front.yaml_text == "" and front.body_start == len("---\n---\n")
    assert parse_card_metadata("---\n---\n# Body\n") == {}


def test_a_yaml_error_names_the_cards_own_line_whatever_its_line_endings() -> None:
    for newline in ("\n", "\r\n"):
        text = newline.join(["---", "license: mit", "tags: [a, b", "---", "# body"])
        with pytest.raises(CardError) as info:
            read_card_record(text, source="README.md")
        assert "at line 3 column" in str(info.value) and info.value.line == 3


# --- the parser: libyaml's where PyYAML has it, with the same limits ------------------------------------------------

LOADERS = [pytest.param(yaml.SafeLoader, id="pure")] + (
    [pytest.param(yaml.CSafeLoader, id="libyaml")] if getattr(yaml, "__with_libyaml__", False) else [])


@pytest.fixture(params=LOADERS)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type:
    """Cards parsed through the strict loader built on one parser (both where libyaml is installed)."""
    monkeypatch.setattr(card_module, "YAML_LOADER", card_module.strict_loader(request.param))
    return request.param


def test_cards_are_parsed_by_libyaml_when_pyyaml_has_it() -> None:
    # Regression: cards went through the pure-Python parser although libyaml was installed; a
    # legal 3.4 MB front matter took 35-40 s per parse
    base = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader
    assert issubclass(card_module.YAML_LOADER, base)
    assert issubclass(card_module.YAML_LOADER, yaml.constructor.SafeConstructor)
    assert not issubclass(card_module.YAML_LOADER, (yaml.constructor.FullConstructor, yaml.constructor.Constructor))


def test_the_installed_pyyaml_has_libyaml() -> None:
    # the environment this project is tested in: the C parser is the one whose limits the tests below hold
    assert yaml.__with_libyaml__


def _nested_laughs() -> str:
    lines = ["a: &a [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    return "\n".join(lines)


HOSTILE_YAML = [
    pytest.param("x: !!python/object/apply:os.system ['echo owned']", "at line 2 column 4: could not determine a "
                 "constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'", id="python-apply"),
    pytest.param("x: !!python/name:os.system", "could not determine a constructor for the tag", id="python-name"),
    pytest.param("!!python/object:os.system {}", "could not determine a constructor for the tag", id="python-object"),
    pytest.param("x: !!python/object/new:builtins.print [owned]", "could not determine a constructor", id="python-new"),
    pytest.param(_nested_laughs(), "at line 8 column 4: YAML aliases expand this value to more than 8388608 "
                 "characters", id="billion-laughs"),
    pytest.param("a: &a [1, *a]", "at line 2 column 4: a YAML alias refers to a node that contains it",
                 id="recursive-alias"),
    pytest.param("a: " + "[" * 150 + "]" * 150, "YAML values nested more than 100 levels deep", id="deep-flow"),
    pytest.param("a:\n  " + "- " * 150 + "x", "at line 3 column 103: YAML values nested more than 100 levels deep",
                 id="deep-block"),
    pytest.param("a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 60 + "*a" + "]" * 60,
                 "YAML values nested more than 100 levels deep", id="deep-through-an-alias"),
    pytest.param("a: " + "[" * 5000 + "]" * 5000, "nest", id="deeper-than-the-parsers"),
    pytest.param("bnconvention: 1\nbnconvention: 2", "at line 3 column 1: duplicate key 'bnconvention'",
                 id="duplicate-key"),
    pytest.param("x: 1\ny: *x", "at line 3 column 4: found undefined alias 'x'", id="undefined-alias"),
    pytest.param("a: b\x01c", "unacceptable character #x0001 at character 4", id="control-character"),
    pytest.param("a: \ud800", "at character 3", id="lone-surrogate"),
    pytest.param("license: mit\ntags: [a, b", "at line 3 column 12: ", id="unclosed-at-the-end"),
]


@pytest.mark.parametrize(("front", "fragment"), HOSTILE_YAML)
def test_hostile_yaml_is_refused_in_one_line_by_either_parser(loader: type, front: str, fragment: str) -> None:
    with pytest.raises(CardError) as info:
        parse_card_metadata(f"---\n{front}\n---\n# Model\n", source="cards/README.md")
    message = str(info.value)
    assert message.startswith("cards/README.md: ") and fragment in message
    assert "\n" not in message


def test_an_alias_bomb_is_refused_before_it_is_built(loader: type, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    monkeypatch.setattr(card_module.YAML_LOADER, "construct_document",
                        lambda self, node: built.append(node), raising=False)
    with pytest.raises(CardError, match="alias bomb"):
        load_yaml_strict(_nested_laughs())
    assert built == []


LEGAL_YAML = [
    pytest.param("license: mit\r\nbnconvention:\r\n  eps: 1.0e-05\r\n  name: é ✓ 🙂", id="crlf-unicode"),
    pytest.param("base: &base {a: 1, b: [x, y]}\nderived:\n  <<: *base\n  a: 2\nlist: [*base, *base]", id="merge"),
    pytest.param("a: " + "[" * 99 + "]" * 99, id="99-levels"),
    pytest.param("when: 2024-01-02\nyes_no: yes\noctal: 010\nsci: 1e-5\nnull_value: ~", id="yaml-1.1-scalars"),
]


@pytest.mark.parametrize("front", LEGAL_YAML)
def test_both_parsers_read_a_legal_card_alike(front: str, monkeypatch: pytest.MonkeyPatch) -> None:
    read = []
    for base in [p.values[0] for p in LOADERS]:
        monkeypatch.setattr(card_module, "YAML_LOADER", card_module.strict_loader(base))
        document = card_module.load_yaml_document(front)
        read.append((document.data, [(k.start_mark.index, k.start_mark.line, k.start_mark.column)
                                     for k in document.keys]))
    assert all(r == read[0] for r in read)
