"""Stamping records into model cards (bnconvention.authoring.card_stamp and the ``card`` command).

Input cards are in ``tests/fixtures/cards/``; the expected results in ``tests/fixtures/cards/expected/`` are golden
files: regenerate them with ``BNC_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_card_stamp.py`` and review
the diff.
"""

from __future__ import annotations

import codecs
import copy
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from bnconvention.authoring.card_stamp import (
    SECTION_BEGIN,
    SECTION_END,
    render_card_block,
    render_card_section,
    stamp_card_file,
    stamp_card_refit_text,
    stamp_card_text,
)
from bnconvention.cli.main import main
from bnconvention.errors import CardError, RecordError, StampError
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.card import load_yaml_strict, parse_card_metadata, read_card_record, split_front_matter
from bnconvention.standard.models import parse_record

CARDS = Path(__file__).resolve().parent / "fixtures" / "cards"
EXPECTED = CARDS / "expected"
STAMP = Path(__file__).resolve().parent / "fixtures" / "stamp"
RECORD: dict = json.loads((STAMP / "record.json").read_text(encoding="utf-8"))
GOOD = ["lf.md", "crlf.md", "no_front_matter.md", "comments.md", "unknown_keys.md", "existing_block.md",
        "alias.md", "anchors.md", "empty_front_matter.md"]


def card_text(name: str) -> str:
    return (CARDS / name).read_bytes().decode("utf-8")


def other_record(reporting_line: str) -> dict:
    record = copy.deepcopy(RECORD)
    record["reporting_line"] = reporting_line
    return record


# --- golden results ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GOOD])
def test_stamped_card_matches_its_golden_file(name: str) -> None:
    result = stamp_card_text(card_text(name), RECORD, source=name)
    golden = EXPECTED / name
    if os.environ.get("BNC_REGEN_GOLDEN") == "1":
        EXPECTED.mkdir(exist_ok=True)
        golden.write_bytes(result.encode("utf-8"))
    assert result == golden.read_bytes().decode("utf-8")


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GOOD])
def test_stamping_twice_gives_the_same_text(name: str) -> None:
    once = stamp_card_text(card_text(name), RECORD, source=name)
    assert stamp_card_text(once, RECORD, source=name) == once


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GOOD])
def test_the_record_reads_back_through_our_reader_and_huggingface_hub(name: str) -> None:
    result = stamp_card_text(card_text(name), RECORD, source=name)
    block = read_card_record(result, source=name)
    assert canonical_json(block) == canonical_json(RECORD)
    assert parse_record(block) == parse_record(RECORD)
    layer = block["deployed_state"][0]["layers"][0]
    assert isinstance(layer["eps"], float) and layer["eps"] == 1e-05  # YAML 1.1 reads 1.0e-05 as a float
    hub = ModelCard(result)
    assert canonical_json(hub.data.to_dict()["bnconvention"]) == canonical_json(RECORD)
    assert hub.text.count(SECTION_BEGIN) == 1 and hub.text.count("## BatchNorm fitting convention") == 1


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GOOD if n not in ("existing_block.md",
                                                                                    "anchors.md")])
def test_other_front_matter_is_kept_byte_for_byte(name: str) -> None:
    text = card_text(name)
    result = stamp_card_text(text, RECORD, source=name)
    before, after = split_front_matter(text), split_front_matter(result)
    assert after is not None
    if before is not None:
        assert after.yaml_text.startswith(before.yaml_text)  # keys, order, comments, quoting untouched
    assert list(parse_card_metadata(result)) == [*parse_card_metadata(text), "bnconvention"]
    body = text if before is None else text[before.body_start:]
    assert result[after.body_start:].startswith(body)  # the body is only appended to


def test_an_existing_block_is_replaced_where_it_is_and_what_follows_it_is_kept() -> None:
    text = card_text("existing_block.md")
    result = stamp_card_text(text, RECORD, source="existing_block.md")
    assert list(parse_card_metadata(result)) == ["license", "bnconvention", "model-index"]
    assert "an outdated declaration" not in result and "An outdated section" not in result
    front = split_front_matter(result)
    assert front is not None
    assert front.yaml_text.startswith("license: mit\nbnconvention:\n  spec_version: '1.0'\n")
    assert front.yaml_text.endswith("\n\n# the model index is maintained by the evaluation team\n"
                                    "model-index:\n- name: tiny-digits\n  results: []")
    body = result[front.body_start:]
    assert body.startswith("\n# Tiny digits ConvNet\n\nIntro text stays.\n\n" + SECTION_BEGIN)
    assert body.endswith(SECTION_END + "\n\n## Citation\n\nText after the section stays too.\n")


def test_crlf_cards_stay_crlf() -> None:
    result = stamp_card_text(card_text("crlf.md"), RECORD, source="crlf.md")
    assert result.count("\n") == result.count("\r\n") > 60
    assert result.startswith("---\r\nlicense: mit  # CRLF card\r\ntags:\r\n- batchnorm\r\nbnconvention:\r\n")


def test_a_card_without_front_matter_gets_one() -> None:
    result = stamp_card_text(card_text("no_front_matter.md"), RECORD, source="no_front_matter.md")
    block = render_card_block(RECORD)
    assert result == ("---\n" + block + "---\n# Tiny digits ConvNet\n\nNo metadata here yet.\n\n"
                      + render_card_section(parse_record(RECORD)) + "\n")


def test_an_empty_card_gets_front_matter_and_the_section() -> None:
    result = stamp_card_text("", RECORD)
    assert result == "---\n" + render_card_block(RECORD) + "---\n" + render_card_section(parse_record(RECORD)) + "\n"


def test_a_restamp_replaces_the_section_instead_of_adding_one() -> None:
    first = stamp_card_text(card_text("lf.md"), RECORD)
    second = stamp_card_text(first, other_record("refit on the retained split; cell moves +2.47pp"))
    assert second.count(SECTION_BEGIN) == 1 and second.count(SECTION_END) == 1
    assert second.count("## BatchNorm fitting convention") == 1
    assert "Reporting line: refit on the retained split; cell moves +2.47pp" in second
    assert RECORD["reporting_line"] not in second
    assert stamp_card_text(second, RECORD) == first  # back to A: the same text as the first stamp


def test_an_indented_root_mapping_gets_an_indented_block() -> None:
    text = "---\n  license: mit\n  tags: [a]\n---\n"
    result = stamp_card_text(text, RECORD)
    assert result.startswith("---\n  license: mit\n  tags: [a]\n  bnconvention:\n    spec_version: '1.0'\n")
    assert canonical_json(read_card_record(result)) == canonical_json(RECORD)


def test_a_non_record_value_under_our_key_is_replaced() -> None:
    result = stamp_card_text("---\nbnconvention: TODO  # fill in\nlicense: mit\n---\n", RECORD)
    assert list(parse_card_metadata(result)) == ["bnconvention", "license"]
    assert "TODO" not in result


def test_markdown_and_html_in_values_cannot_break_the_section() -> None:
    line = f"a | b {SECTION_END} <b>c</b>\nsecond line"
    record = other_record(line)
    result = stamp_card_text(card_text("lf.md"), record)
    body = result[split_front_matter(result).body_start:]  # type: ignore[union-attr]
    assert body.count(SECTION_END) == 1 and body.count(SECTION_BEGIN) == 1
    assert "Reporting line: a \\| b &lt;!-- bnconvention:end --&gt; &lt;b&gt;c&lt;/b&gt; second line" in result
    assert read_card_record(result)["reporting_line"] == line  # the block keeps the exact text
    assert stamp_card_text(result, record) == result


def test_a_refit_annotation_section_names_the_audited_file() -> None:
    annotation = {
        "spec_version": "1.0", "kind": "refit_annotation",
        "subject": {"filename": "model.safetensors", "trainable_sha256": "a" * 64, "running_sha256": "b" * 64},
        "convention": RECORD["convention"], "channel": "present", "replicates": 10, "margin_pp": 1.2,
        "cells": [], "producer": {"tool": "bnconvention", "version": "0.1.0"},
        "reporting_line": "shipped state audited",
    }
    section = render_card_section(parse_record(annotation))
    assert "| Audited file | `model.safetensors` |" in section
    assert "| Cells | 0 cells, 10 replicates, margin 1.2 pp |" in section  # text.plural
    assert f"- running statistics as shipped: `{'b' * 64}`" in section


def test_render_card_section_for_the_fixture_record() -> None:
    section = render_card_section(parse_record(RECORD))
    assert section.splitlines()[:11] == [
        SECTION_BEGIN,
        "## BatchNorm fitting convention",
        "",
        "| Field | Value |",
        "| --- | --- |",
        "| Canonical name | `train/train/train-transform/ema-m0.1` |",
        "| Data split | train of `sklearn/digits`: all 1797 images |",
        "| Transform | train (`train.py:train_transform`), description sha256 "
        "`8ad0f27ba01bcea03e78205eb1352b5d8693ad4c85e0ced7e1adab95e4a4be71` |",
        "| Accumulation rule | ema, momentum 0.1 (unbiased variance, float32, batch size 4, 1 batch) |",
        "| Buffer-update mode | `train` |",
        "| BatchNorm layers | 2 |",
    ]


def test_render_card_block_round_trips_floats() -> None:
    record = {"a": 1e-05, "b": 0.1, "c": 1e17, "d": 1.0, "e": "1e-5", "f": 3}
    loaded = load_yaml_strict(render_card_block(record))["bnconvention"]
    assert loaded == record and [type(v) for v in loaded.values()] == [float, float, float, float, str, int]


# --- bad input ---------------------------------------------------------------------------------------------------

BAD_CARDS = [
    # libyaml's parser says "did not find expected ',' or ']'", PyYAML's own "expected ',' or ']', but got ..."
    pytest.param("malformed.md", "invalid YAML front matter at line 3 column 39: (did not find )?expected ',' or ']'",
                 id="malformed"),
    pytest.param("alias_bomb.md", "invalid YAML front matter at line 8 column 4: YAML aliases expand this value to "
                 "more than 8388608 characters", id="alias-bomb"),
    pytest.param("anchor_in_block.md", "if the bnconvention block defines a YAML anchor that other keys use, move the "
                 "anchor out of the block", id="anchor-in-the-block"),
    pytest.param("not_mapping.md", "YAML front matter is a list, expected a mapping", id="not-a-mapping"),
    pytest.param("flow_mapping.md", "the front matter is a flow-style mapping", id="flow-mapping"),
    pytest.param("handwritten_heading.md", "line 6 already has a hand-written 'BatchNorm fitting convention' heading",
                 id="handwritten-heading"),
    pytest.param("broken_markers.md", "has 1 '<!-- bnconvention:begin -->' and 0 '<!-- bnconvention:end -->'",
                 id="broken-markers"),
]


@pytest.mark.parametrize(("name", "match"), BAD_CARDS)
def test_a_bad_card_is_refused_and_left_as_it_was(name: str, match: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CardError, match=match):
        stamp_card_text(card_text(name), RECORD, source=name)
    card = tmp_path / "README.md"
    shutil.copyfile(CARDS / name, card)
    record = tmp_path / "record.json"
    record.write_text(json.dumps(RECORD), encoding="utf-8")
    code = main(["card", str(card), "--record", str(record)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("bnconvention: unreadable input: ") and err.count("\n") == 1
    assert card.read_bytes() == (CARDS / name).read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["README.md", "record.json"]


def test_a_record_that_fails_the_schema_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = copy.deepcopy(RECORD)
    record["convention"]["buffer_update_mode"] = "sometimes"
    with pytest.raises(RecordError, match="buffer_update_mode"):
        stamp_card_text(card_text("lf.md"), record)
    card = tmp_path / "README.md"
    shutil.copyfile(CARDS / "lf.md", card)
    bad = tmp_path / "record.json"
    bad.write_text(json.dumps(record), encoding="utf-8")
    assert main(["card", str(card), "--record", str(bad)]) == 1
    assert capsys.readouterr().err.startswith("bnconvention: invalid record: ")
    assert card.read_bytes() == (CARDS / "lf.md").read_bytes()


def test_a_non_utf8_card_is_refused(tmp_path: Path) -> None:
    card = tmp_path / "README.md"
    card.write_bytes(b"---\nlicense: mit\n---\n\xff\xfe")
    with pytest.raises(CardError, match="not valid UTF-8 at byte 21"):
        stamp_card_file(card, RECORD)
    assert card.read_bytes() == b"---\nlicense: mit\n---\n\xff\xfe"


# --- the file wrapper ------------------------------------------------------------------------------------------


def test_stamp_card_file_keeps_a_bom_and_the_mode(tmp_path: Path) -> None:
    card = tmp_path / "README.md"
    card.write_bytes(codecs.BOM_UTF8 + (CARDS / "lf.md").read_bytes())
    os.chmod(card, 0o640)
    result = stamp_card_file(card, RECORD)
    assert (result.changed, result.created) == (True, False)
    data = card.read_bytes()
    assert data == codecs.BOM_UTF8 + (EXPECTED / "lf.md").read_bytes()
    assert card.stat().st_mode & 0o777 == 0o640
    mtime = card.stat().st_mtime_ns
    assert stamp_card_file(card, RECORD).changed is False and card.stat().st_mtime_ns == mtime


def test_stamp_card_file_creates_a_missing_card(tmp_path: Path) -> None:
    card = tmp_path / "README.md"
    result = stamp_card_file(card, RECORD)
    assert (result.changed, result.created) == (True, True)
    assert card.read_text(encoding="utf-8") == stamp_card_text("", RECORD)
    with pytest.raises(FileNotFoundError):
        stamp_card_file(tmp_path / "other.md", RECORD, create=False)


def test_a_read_only_card_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "README.md"
    shutil.copyfile(CARDS / "lf.md", card)
    os.chmod(card, 0o444)
    with pytest.raises(StampError, match="card is read-only"):
        stamp_card_file(card, RECORD)
    assert card.read_bytes() == (CARDS / "lf.md").read_bytes()


# --- the command ------------------------------------------------------------------------------------------------


def test_card_command_from_stamped_weights_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "README.md"
    shutil.copyfile(CARDS / "crlf.md", card)
    weights = STAMP / "tiny.stamped.safetensors"
    assert main(["card", str(card), "--from", str(weights), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert card.read_bytes() == (CARDS / "crlf.md").read_bytes()
    assert main(["card", str(card), "--from", str(weights)]) == 0
    assert capsys.readouterr().out == f"{card}: updated\n"
    assert card.read_bytes() == (EXPECTED / "crlf.md").read_bytes()
    assert main(["card", str(card), "--from", str(weights), "--check"]) == 0
    assert capsys.readouterr().out == f"{card}: up to date\n"
    assert main(["card", str(card), "--from", str(weights)]) == 0
    assert capsys.readouterr().out == f"{card}: unchanged\n"


def test_card_command_needs_a_stamped_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "README.md"
    assert main(["card", str(card), "--from", str(STAMP / "tiny.safetensors")]) == 1
    assert "has no bnconvention record in its header" in capsys.readouterr().err
    assert not card.exists()


def test_card_command_needs_exactly_one_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["card", str(tmp_path / "README.md")])
    assert exit_info.value.code == 2
    assert "one of the arguments --record --from is required" in capsys.readouterr().err


# --- empty front matter, anchors and aliases, linear work on large cards -----------------------------------------


def test_an_empty_front_matter_is_filled_not_duplicated() -> None:
    # Regression: "---" on two consecutive lines got a new front matter and stayed in the body
    text = card_text("empty_front_matter.md")
    result = stamp_card_text(text, RECORD, source="empty_front_matter.md")
    assert result.startswith("---\n" + render_card_block(RECORD) + "---\n# A card whose front matter is empty\n")
    assert result.count("---\n") == 2 + render_card_block(RECORD).count("---\n")
    assert stamp_card_text(result, RECORD) == result


def test_a_card_with_anchors_is_stamped_and_the_rest_survives_byte_for_byte() -> None:
    # Regression: anchors were refused (exit 2, "YAML anchor &defaults is not allowed in model cards")
    text = card_text("anchors.md")
    result = stamp_card_text(text, RECORD, source="anchors.md")
    before, after = split_front_matter(text), split_front_matter(result)
    assert before is not None and after is not None
    old_start = before.yaml_text.index("bnconvention:")
    old_end = before.yaml_text.index("model:")
    new_block = render_card_block(RECORD)
    assert after.yaml_text == before.yaml_text[:old_start] + new_block + before.yaml_text[old_end:]
    hub = ModelCard(result).data.to_dict()
    assert hub["model"] == {"license": "mit", "library_name": "pytorch", "tags": ["batchnorm", "vision"],
                            "name": "convnet"}
    assert canonical_json(hub["bnconvention"]) == canonical_json(RECORD)


def _tag_card(count: int) -> str:
    return "---\nlicense: mit\ntags:\n" + "".join(f"- tag{i}\n" for i in range(count)) + "---\n# Model\n"


class TokenCounter:
    """Counts the YAML tokens PyYAML's scanner produces: a deterministic measure of parsing work."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import yaml.scanner

        self.count = 0
        original = yaml.scanner.Scanner.fetch_more_tokens

        def counted(scanner: yaml.scanner.Scanner) -> None:
            before = len(scanner.tokens)
            original(scanner)
            self.count += max(0, len(scanner.tokens) - before)

        monkeypatch.setattr(yaml.scanner.Scanner, "fetch_more_tokens", counted)

    def of(self, run: Callable[[], object]) -> int:
        self.count = 0
        run()
        return self.count


def test_stamping_a_large_card_parses_it_twice_and_never_builds_a_model_card(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: stamp --card took 110 s on an 80,000-tag card and hub push stalled on 350,000 tags: four or five
    # YAML parses per stamp, and huggingface_hub.ModelCard (its _to_unique_list is quadratic in the tags) to
    # re-check the result. Counted, not timed: a stamp may scan the card once and the stamped card once.
    import huggingface_hub
    import huggingface_hub.repocard_data as repocard_data

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the card was routed through huggingface_hub's ModelCard")

    monkeypatch.setattr(huggingface_hub.ModelCard, "__init__", refuse)
    monkeypatch.setattr(repocard_data, "_to_unique_list", refuse)
    tokens = TokenCounter(monkeypatch)
    text = _tag_card(2000)
    card = tokens.of(lambda: load_yaml_strict(split_front_matter(text).yaml_text))  # about 6,000 tokens
    block = tokens.of(lambda: load_yaml_strict(render_card_block(RECORD)))
    stamped = stamp_card_text(text, RECORD, source="tags.md")
    assert tokens.of(lambda: stamp_card_text(text, RECORD, source="tags.md")) <= 2 * card + 2 * block
    entry = {"annotation": "bnconvention/a.json", "subject": "model.safetensors", "cells": []}
    refit_block = tokens.of(lambda: load_yaml_strict(yaml.safe_dump({"bnconvention_refit": [entry]})))
    refit = tokens.of(lambda: stamp_card_refit_text(stamped, entry, source="tags.md"))
    assert refit <= 2 * (card + block) + 2 * refit_block
    assert stamp_card_refit_text(stamped, entry, source="tags.md").count("- tag1999\n") == 1
