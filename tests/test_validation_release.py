"""The stages of validate_release (bnconvention.validation.release), each on its own: reading a weights file,
reading the card, binding the card to the file it describes, checking one file against its declaration.
The whole release is tested through validate_paths in test_validation_files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from bnconvention.formats.canonical import canonical_json
from bnconvention.validation.release import (
    Release,
    WeightsFile,
    bind_release_card,
    check_weights_file,
    read_release_card,
    read_weights_file,
    validate_release,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stamp"
RECORD: dict[str, Any] = json.loads((FIXTURES / "record.json").read_text("utf-8"))
STAMPED = FIXTURES / "tiny.stamped.safetensors"  # tiny.safetensors with RECORD stamped in
UNSTAMPED = FIXTURES / "tiny.safetensors"


def _card(path: Path, block: Any | None) -> Path:
    front = "" if block is None else "---\n" + yaml.safe_dump({"bnconvention": block}, sort_keys=False) + "---\n"
    path.write_text(front + "# model\n", "utf-8")
    return path


def _weights(tmp_path: Path, name: str, source: Path = UNSTAMPED) -> WeightsFile:
    path = tmp_path / name
    shutil.copyfile(source, path)
    weights, issues = read_weights_file(name, path)
    assert issues == []
    return weights


def test_reading_a_weights_file_parses_its_stamped_record(tmp_path: Path) -> None:
    weights = _weights(tmp_path, "model.safetensors", STAMPED)
    assert weights.record_present and weights.record is not None
    assert weights.header_bn_layers() == ["1", "4"]
    stored = weights.stored()
    assert stored is not None and stored.file == "model.safetensors" and stored.form["kind"] == "declaration"


def test_an_unreadable_weights_file_is_an_issue_and_no_record(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x01")
    weights, issues = read_weights_file("model.safetensors", path)
    assert (weights.header, weights.stored(), [i.code for i in issues]) == (None, None, ["safetensors.truncated"])
    assert check_weights_file(weights, None, require_declaration=False)[1].note == "unreadable"


@pytest.mark.parametrize(("block", "explicit", "stamped", "codes", "note"), [
    pytest.param(RECORD, False, False, [], "declaration", id="record"),
    pytest.param(None, False, True, ["release.card_missing_record"], "no bnconvention block", id="missing-record"),
    pytest.param(None, True, False, ["card.no_record"], "no bnconvention block", id="named-card-declares-nothing"),
    pytest.param(["a", "list"], False, False, ["card.block_not_mapping"], "bnconvention block invalid",
                 id="not-a-mapping"),
])
def test_reading_the_card(tmp_path: Path, block: Any, explicit: bool, stamped: bool, codes: list[str],
                          note: str) -> None:
    weights = [_weights(tmp_path, "model.safetensors", STAMPED)] if stamped else []
    card = read_release_card("README.md", _card(tmp_path / "README.md", block), weights=weights, explicit=explicit,
                             has_weights=bool(weights))
    assert [i.code for i in card.issues] == codes
    assert card.summary is not None and card.summary.note.startswith(note)
    assert (card.declaration is not None) == (block is RECORD)


def test_the_card_binds_to_the_file_its_digests_describe(tmp_path: Path) -> None:
    other = _weights(tmp_path, "other.safetensors", Path(__file__).resolve().parent.parent / "examples" / "releases"
                     / "convnet-bn" / "model.safetensors")
    tiny = _weights(tmp_path, "tiny.safetensors")
    card = read_release_card("README.md", _card(tmp_path / "README.md", RECORD), weights=[other, tiny],
                             explicit=False, has_weights=True)
    assert bind_release_card(card, [other, tiny], single=False) == (tiny, [])


def test_a_card_describing_none_of_the_files_is_unbound(tmp_path: Path) -> None:
    other = _weights(tmp_path, "other.safetensors", Path(__file__).resolve().parent.parent / "examples" / "releases"
                     / "convnet-bn" / "model.safetensors")
    card = read_release_card("README.md", _card(tmp_path / "README.md", RECORD), weights=[other, other],
                             explicit=False, has_weights=True)
    bound, issues = bind_release_card(card, [other, other], single=False)
    assert bound is None and [(i.code, i.path) for i in issues] == [("release.card_unbound",
                                                                      "/digests/trainable_sha256")]
    # a one-file release's card describes its file whatever it says: consistency is checked next
    assert bind_release_card(card, [other], single=True) == (other, [])


def test_a_file_declared_by_its_card_only(tmp_path: Path) -> None:
    weights = _weights(tmp_path, "model.safetensors")
    card = read_release_card("README.md", _card(tmp_path / "README.md", RECORD), weights=[weights],
                             explicit=False, has_weights=True)
    issues, summary = check_weights_file(weights, card, require_declaration=False)
    # the header lost (or never had) the card's record, e.g. re-saved by a library: named, with the fix
    assert [(i.code, i.severity) for i in issues] == [("release.header_missing_record", "warning")]
    assert issues[0].message.endswith("restore it: bnconvention stamp model.safetensors --from-card README.md")
    assert summary.note.endswith("in README.md; digests match the tensors")


def test_card_and_header_agree(tmp_path: Path) -> None:
    weights = _weights(tmp_path, "model.safetensors", STAMPED)
    card = read_release_card("README.md", _card(tmp_path / "README.md", RECORD), weights=[weights],
                             explicit=False, has_weights=True)
    issues, summary = check_weights_file(weights, card, require_declaration=False)
    assert issues == [] and summary.note.endswith("; digests match the tensors; agrees with README.md")


@pytest.mark.parametrize(("required", "severity"), [(False, "warning"), (True, "error")])
def test_running_buffers_without_a_declaration(tmp_path: Path, required: bool, severity: str) -> None:
    issues, summary = check_weights_file(_weights(tmp_path, "model.safetensors"), None,
                                         require_declaration=required)
    assert [(i.code, i.severity) for i in issues] == [("declaration.missing", severity)]
    assert summary.note == "2 BatchNorm layers, no declaration"


def test_a_stale_card_is_reported_under_the_card(tmp_path: Path) -> None:
    stale = json.loads(canonical_json(RECORD))
    stale["deployed_state"][0]["layers"][1]["running_sha256"] = "2" * 64
    weights = _weights(tmp_path, "model.safetensors")
    release = Release(directory=tmp_path, weights=[("model.safetensors", weights.path)],
                      card=("README.md", _card(tmp_path / "README.md", stale)))
    issues, summaries = validate_release(release)
    assert ("README.md", "digests.layer_mismatch") in [(i.file, i.code) for i in issues]
    assert [s.note.split("; ")[-1] for s in summaries if s.kind == "weights"] == ["checked there (see its issues)"]
