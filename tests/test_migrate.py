"""``bnconvention migrate`` (bnconvention.authoring.migrate): 1.0 records and card blocks upgraded to 1.1 losslessly.

Inputs: every valid 1.0 conformance vector (schema/tests/valid/) and the stamped golden cards
(tests/fixtures/cards/expected/), whose blocks were written by ``render_card_block``.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from bnconvention.authoring.card_edit import block_span
from bnconvention.authoring.migrate import migrate_card_text, migrate_file, migrate_json_text, migrate_record_data
from bnconvention.cli.main import main
from bnconvention.errors import CardError, RecordError, UsageError
from bnconvention.formats.canonical import canonical_json, loads_strict
from bnconvention.formats.card import CARD_BLOCK_KEY, load_yaml_document, parse_card_metadata, split_front_matter
from bnconvention.validation.records import validate_record

ROOT = Path(__file__).resolve().parent.parent
VALID = ROOT / "schema" / "tests" / "valid"
CARDS = Path(__file__).resolve().parent / "fixtures" / "cards" / "expected"
V10 = sorted(p for p in VALID.glob("*.json") if json.loads(p.read_text())["spec_version"] == "1.0")
CARD_FILES = sorted(CARDS.glob("*.md"))


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in V10])
def test_every_valid_1_0_vector_migrates_to_a_valid_1_1_record_with_only_the_version_changed(path: Path) -> None:
    original = json.loads(path.read_text(encoding="utf-8"))
    migrated = migrate_record_data(original, source=path.name)
    assert [i for i in validate_record(migrated) if i.severity == "error"] == []
    assert list(migrated) == list(original)  # key order kept
    assert {**migrated, "spec_version": "1.0"} == original


def test_json_file_in_place_changes_one_line_of_an_indented_record(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    before = (VALID / "refit-annotation-full.json").read_bytes()
    target.write_bytes(before)
    result = migrate_file(target)
    after = target.read_bytes()
    assert (result.written, result.version_before, result.version_after) == (target, "1.0", "1.1")
    assert after.replace(b'"spec_version": "1.1"', b'"spec_version": "1.0"', 1) == before


def test_canonical_json_stays_canonical() -> None:
    data = json.loads((VALID / "declaration-ema-train.json").read_text(encoding="utf-8"))
    raw = canonical_json(data).encode("utf-8")
    out = migrate_json_text(raw, source="r.json")
    assert out == canonical_json({**data, "spec_version": "1.1"}).encode("utf-8")


def test_out_leaves_the_original_as_it_was_and_a_1_1_record_is_not_rewritten(tmp_path: Path) -> None:
    source = tmp_path / "a.json"
    source.write_bytes((VALID / "refit-annotation-minimal.json").read_bytes())
    before = source.read_bytes()
    out = tmp_path / "b.json"
    migrate_file(source, out=out)
    assert source.read_bytes() == before
    again = migrate_file(out)
    assert again.written is None and again.version_before == "1.1"


@pytest.mark.parametrize("name", ["invalid/semantic-cell-mean.json", "invalid/invalid-additional-property.json"])
def test_an_invalid_record_is_refused_and_left_intact(tmp_path: Path, name: str) -> None:
    target = tmp_path / "bad.json"
    target.write_bytes((ROOT / "schema" / "tests" / name).read_bytes())
    before = target.read_bytes()
    with pytest.raises(RecordError) as caught:
        migrate_file(target)
    assert str(target) in str(caught.value) and "\n" not in str(caught.value)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]  # no temporary left behind


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(RecordError, match=r'spec_version is "2.0"; migrate upgrades 1.0 records to 1.1'):
        migrate_record_data({"spec_version": "2.0", "kind": "declaration"}, source="r.json")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in CARD_FILES])
def test_card_migration_keeps_every_byte_outside_the_block(path: Path) -> None:
    text = path.read_bytes().decode("utf-8")
    new = migrate_card_text(text, source=path.name)
    old_front, new_front = split_front_matter(text), split_front_matter(new)
    assert old_front is not None and new_front is not None
    old_span = block_span(old_front.yaml_text, load_yaml_document(old_front.yaml_text, source="a"),
                          key_name=CARD_BLOCK_KEY, column=0)
    new_span = block_span(new_front.yaml_text, load_yaml_document(new_front.yaml_text, source="b"),
                          key_name=CARD_BLOCK_KEY, column=0)
    assert old_span is not None and new_span is not None
    old_start, new_start = old_front.yaml_start + old_span[0], new_front.yaml_start + new_span[0]
    assert new[:new_start] == text[:old_start]
    assert new[new_front.yaml_start + new_span[1]:] == text[old_front.yaml_start + old_span[1]:]
    # the block itself was written by render_card_block, so only the version line differs
    assert new.replace("spec_version: '1.1'", "spec_version: '1.0'", 1) == text
    block = parse_card_metadata(new)[CARD_BLOCK_KEY]
    assert block["spec_version"] == "1.1" and validate_record(block) == []


def test_card_file_keeps_its_bom_and_crlf(tmp_path: Path) -> None:
    target = tmp_path / "README.md"
    raw = codecs.BOM_UTF8 + (CARDS / "crlf.md").read_bytes()
    target.write_bytes(raw)
    migrate_file(target)
    after = target.read_bytes()
    assert after.startswith(codecs.BOM_UTF8) and b"\r\n" in after
    assert after.replace(b"spec_version: '1.1'", b"spec_version: '1.0'", 1) == raw


def test_a_card_without_a_block_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "README.md"
    target.write_text("---\nlicense: mit\n---\n# Model\n", encoding="utf-8")
    with pytest.raises(CardError, match="has no bnconvention: block to migrate"):
        migrate_file(target)
    assert target.read_text(encoding="utf-8") == "---\nlicense: mit\n---\n# Model\n"


def test_weights_files_are_sent_to_stamp(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="bnconvention stamp"):
        migrate_file(tmp_path / "model.safetensors")


def test_cli_migrates_and_then_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "a.json"
    source.write_bytes((VALID / "refit-annotation-full.json").read_bytes())
    out = tmp_path / "b.json"
    assert main(["migrate", str(source), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"{source}: spec_version 1.0 -> 1.1, wrote {out}\n"
    assert loads_strict(out.read_bytes())["spec_version"] == "1.1"
    assert main(["validate", str(out)]) == 0


def test_a_migrated_annotation_takes_the_encoder_diagnostics_and_round_trips(tmp_path: Path) -> None:
    """A 1.0 annotation migrated to 1.1 can carry the encoder-level diagnostics (typed cells, linear probe,
    attack, relearning), and the 1.1 record round-trips byte for byte through the models and through migrate."""
    from bnconvention.standard.models import parse_record, to_dict

    vectors = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid"
    full = json.loads((vectors / "refit-annotation-full.json").read_text(encoding="utf-8"))
    encoder = json.loads((vectors / "refit-annotation-v11-encoder.json").read_text(encoding="utf-8"))
    migrated = migrate_record_data(full, source="full.json")
    for key in ("linear_probe", "membership_inference", "relearning"):
        migrated[key] = encoder[key]
    migrated["cells"] = [*migrated["cells"], *encoder["cells"][3:]]
    assert migrated == encoder  # the encoder vector is the full 1.0 annotation, migrated, plus the diagnostics
    assert validate_record(migrated) == []
    assert to_dict(parse_record(encoder)) == encoder
    path = tmp_path / "encoder.json"
    path.write_text(json.dumps(encoder, indent=2) + "\n", encoding="utf-8")
    before = path.read_bytes()
    assert migrate_file(path).written is None and path.read_bytes() == before  # already 1.1: nothing written
    with pytest.raises(RecordError, match='spec_version is "1.1"'):
        migrate_record_data(encoder, source="encoder.json")
