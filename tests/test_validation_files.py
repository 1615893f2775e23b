"""Validating files and releases (bnconvention.validation.files and .release): routing, cross-checks, bad input.

Every bad-input test checks the exit code, the issue code, that nothing raised, and that the input files are
byte-identical afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.card import read_card_record
from bnconvention.formats.safetensors_header import MAX_HEADER_BYTES
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY
from bnconvention.validation import ValidationReport, render, validate_paths

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures" / "releases"
BN = EXAMPLES / "releases" / "convnet-bn"
GN = EXAMPLES / "releases" / "convnet-gn"


def _snapshot(root: Path) -> dict[str, str]:
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _validate(*paths: Path | str, require_declaration: bool = False) -> ValidationReport:
    """validate_paths, asserting the inputs are unchanged afterwards."""
    existing = [Path(p) for p in paths if Path(p).exists()]
    before = [_snapshot(p) for p in existing]
    report = validate_paths([str(p) for p in paths], require_declaration=require_declaration)
    assert [_snapshot(p) for p in existing] == before
    return report


def _triples(report: ValidationReport, root: Path | None = None) -> list[tuple[str, str, str]]:
    def rel(file: str) -> str:
        return os.path.relpath(file, root) if root else file
    return [(rel(i.file), i.code, i.path) for i in report.issues]


def _header_parts(path: Path) -> tuple[dict[str, Any], bytes]:
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + length]), blob[8 + length:]


def _write_with_metadata(path: Path, metadata: dict[str, Any] | None, *, source: Path = BN / "model.safetensors",
                         raw_header: bytes | None = None) -> None:
    """``source``'s tensors with another ``__metadata__`` (or a raw header), same data bytes."""
    header, data = _header_parts(source)
    header.pop("__metadata__", None)
    if metadata is not None:
        header = {"__metadata__": metadata, **header}
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A copy of the declared BN example release."""
    target = tmp_path / "release"
    shutil.copytree(BN, target)
    return target


def _record() -> dict[str, Any]:
    record = read_card_record((BN / "README.md").read_text(encoding="utf-8"))
    assert isinstance(record, dict)
    return record


# --- the shipped examples and fixture releases ----------------------------------------------------------------------


def test_example_releases_are_valid() -> None:
    report = _validate(EXAMPLES / "releases")
    assert report.issues == []
    assert report.exit_code == 0
    assert [(os.path.relpath(s.file, EXAMPLES), s.kind) for s in report.files] == [
        ("releases/convnet-bn/README.md", "card"), ("releases/convnet-bn/model.safetensors", "weights"),
        ("releases/convnet-gn/README.md", "card"), ("releases/convnet-gn/model.safetensors", "weights")]
    notes = {os.path.relpath(s.file, EXAMPLES): s.note for s in report.files}
    assert notes["releases/convnet-gn/model.safetensors"].startswith(
        "declaration untouched/train/train-transform/ema-m0.1 (no BatchNorm layers: channel absent); digests match")


def test_broken_examples_report_every_problem() -> None:
    report = _validate(EXAMPLES / "broken")
    assert report.exit_code == 1
    card_diff = ["/convention/accumulation/batch_size", "/convention/accumulation/momentum",
                 "/convention/accumulation/num_batches", "/convention/accumulation/precision",
                 "/convention/accumulation/rule", "/convention/buffer_update_mode", "/convention/data/dataset/revision",
                 "/convention/data/ids_sha256", "/convention/data/record_count", "/convention/data/role",
                 "/convention/data/sampling_seed", "/convention/data/subset", "/convention/name"]
    assert _triples(report, EXAMPLES / "broken") == [
        *[("card-header-disagree/README.md", "release.card_header_mismatch", p) for p in card_diff],
        ("digest-mismatch/model.safetensors", "digests.layer_mismatch", "/deployed_state/0/layers/0/running_sha256"),
        ("digest-mismatch/model.safetensors", "digests.layer_mismatch", "/deployed_state/0/layers/1/running_sha256"),
        ("digest-mismatch/model.safetensors", "digests.running_mismatch", "/digests/running_sha256"),
        ("undeclared/model.safetensors", "declaration.missing", ""),
    ]
    assert [i.severity for i in report.issues][-1] == "warning"


def test_require_declaration_makes_missing_an_error() -> None:
    assert _validate(EXAMPLES / "broken" / "undeclared").exit_code == 0
    report = _validate(EXAMPLES / "broken" / "undeclared", require_declaration=True)
    assert [(i.code, i.severity) for i in report.issues] == [("declaration.missing", "error")]
    assert report.exit_code == 1


def test_fixture_releases() -> None:
    report = _validate(FIXTURES)
    assert _triples(report, FIXTURES) == [
        # a header without the record its card declares is named (a warning), with the restoring command
        ("card-only/model.safetensors", "release.header_missing_record", ""),
        ("layer-mismatch/README.md", "record.running_digest_inconsistent", "/digests/running_sha256"),
        ("layer-mismatch/model.safetensors", "layers.undeclared", "/deployed_state/0/layers"),
        ("layer-mismatch/model.safetensors", "layers.num_features_mismatch", "/deployed_state/0/layers/0/num_features"),
        ("layer-mismatch/model.safetensors", "digests.running_mismatch", "/digests/running_sha256"),
        ("layer-mismatch/model.safetensors", "record.running_digest_inconsistent", "/digests/running_sha256"),
        ("layer-mismatch/model.safetensors", "digests.trainable_mismatch", "/digests/trainable_sha256"),
    ]
    notes = {os.path.relpath(s.file, FIXTURES): s.note for s in report.files}
    assert notes["card-only/model.safetensors"].endswith("card-only/README.md; digests match the tensors")
    assert notes["annotated/bnconvention/refit-704ef37d920d.json"].startswith("refit annotation of model.safetensors")


def test_a_stale_card_record_fails_the_card_and_no_ok_line_reports_a_mismatch(tmp_path: Path) -> None:
    # Regression: "ok .../model.safetensors: ... digests do not match the tensors" when the record with
    # the wrong digest is the card's: the mismatch is the card's issue, the weights' own line must not report it
    release = tmp_path / "card-only"
    shutil.copytree(FIXTURES / "card-only", release)
    card = release / "README.md"
    stale = read_card_record(card.read_text(), source=str(card))["deployed_state"][0]["layers"][0]["running_sha256"]
    card.write_text(card.read_text().replace(stale, "ab" * 32))
    report = _validate(release)
    assert ("README.md", "digests.layer_mismatch", "/deployed_state/0/layers/0/running_sha256") in _triples(
        report, release)
    text = render(report, "text")
    assert any(line.startswith("FAIL") and line.endswith("README.md: declaration "
                                                         "train/train/train-transform/ema-m0.1 (2 BatchNorm layers)")
               for line in text.splitlines()), text
    assert [line for line in text.splitlines() if line.startswith("ok") and "not match" in line] == []
    notes = {os.path.relpath(s.file, release): s.note for s in report.files}
    assert notes["model.safetensors"].endswith("README.md; checked there (see its issues)")


def test_validator_does_not_import_torch() -> None:
    code = ("import sys; from bnconvention.validation import validate_paths; "
            "r = validate_paths(['examples/releases', 'examples/broken']); "
            "assert r.exit_code == 1, r.exit_code; assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert result.returncode == 0, result.stderr


# --- routing ----------------------------------------------------------------------------------------------------------


def test_named_weights_file_is_checked_with_its_card() -> None:
    report = _validate(EXAMPLES / "broken" / "card-header-disagree" / "model.safetensors")
    assert {i.code for i in report.issues} == {"release.card_header_mismatch"}


def test_named_card_is_checked_with_its_weights() -> None:
    report = _validate(EXAMPLES / "broken" / "digest-mismatch" / "README.md")
    assert {i.code for i in report.issues} == {"digests.layer_mismatch", "digests.running_mismatch"}


def test_missing_path_does_not_stop_the_others(tmp_path: Path) -> None:
    report = _validate(tmp_path / "nope.json", BN)
    assert [(i.code, i.file) for i in report.issues] == [("input.unreadable", (tmp_path / "nope.json").as_posix())]
    assert report.exit_code == 2
    assert len(report.files) == 2  # the release was still validated


def test_unsupported_and_empty(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    hidden = tmp_path / "empty" / ".git"
    hidden.mkdir()
    shutil.copy(BN / "model.safetensors", hidden / "model.safetensors")
    report = _validate(tmp_path / "notes.txt", tmp_path / "empty")
    assert [i.code for i in report.issues] == ["input.nothing_to_validate", "input.unsupported"]
    assert report.exit_code == 2


def test_folder_json_only_when_it_claims_to_be_a_record(release: Path) -> None:
    (release / "config.json").write_text('{"architectures": ["TinyNet"]}')
    (release / "results.json").write_text("[1, 2")  # not even JSON: not a record, left alone
    (release / "record.json").write_text(json.dumps({"spec_version": "1.0", "kind": "declaration"}))
    # the claim is read from the content, so a record cut short still fails; another document of the
    # standard (an audit spec) and a "kind" of something else are not records
    (release / "cut.json").write_text('{"spec_version": "1.0", "kind": "declaration", "conv')
    (release / "spec.json").write_text(json.dumps({"spec_version": "1.0", "kind": "audit_spec"}))
    (release / "manifest.json").write_text(json.dumps({"kind": "Deployment", "items": [{"kind": "declaration"}]}))
    report = _validate(release)
    assert {(os.path.basename(i.file), i.code) for i in report.issues} == {("record.json", "schema.required"),
                                                                          ("cut.json", "json.invalid")}


# --- bad input ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "code"), [
    pytest.param(b'{"spec_version": "1.0", ', "json.invalid", id="malformed"),
    pytest.param(b'{"kind": "declaration", "kind": "declaration"}', "json.duplicate_key", id="duplicate-key"),
    pytest.param(b'{"kind": "d\xe9claration"}', "json.not_utf8", id="not-utf8"),
    pytest.param(b'{"x": Infinity}', "json.invalid", id="infinity"),
])
def test_bad_json_record(tmp_path: Path, content: bytes, code: str) -> None:
    path = tmp_path / "record.json"
    path.write_bytes(content)
    report = _validate(path)
    assert [(i.code, i.path) for i in report.issues] == [(code, "")]
    assert report.issues[0].message.startswith(path.as_posix())
    assert report.exit_code == 2


# Billion laughs: 9 ** 9 strings. (A small expansion is valid YAML and accepted: only the expanded size is bounded.)
BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.parametrize(("card", "code", "exit_code"), [
    pytest.param(f"---\n{BOMB}---\n".encode(), "card.invalid_yaml", 2, id="alias-bomb"),
    pytest.param(b"---\nlicense: mit\nlicense: apache-2.0\n---\n", "card.invalid_yaml", 2, id="duplicate-key"),
    pytest.param(b"---\nlicense: [mit\n---\n", "card.invalid_yaml", 2, id="malformed-yaml"),
    pytest.param(b"---\nlicense: m\xeft\n---\n", "card.not_utf8", 2, id="not-utf8"),
    pytest.param(b"---\n- a\n- b\n---\n", "card.front_matter_not_mapping", 2, id="front-matter-list"),
    pytest.param(b"---\nbnconvention: [declaration]\n---\n", "card.block_not_mapping", 1, id="block-list"),
    pytest.param(b"---\nbnconvention: declared\n---\n", "card.block_not_mapping", 1, id="block-string"),
    pytest.param(b"---\nbnconvention:\n  kind: declaration\n  date: 2024-01-01\n---\n", "card.non_json_value", 1,
                 id="block-date"),
])
def test_bad_card(release: Path, card: bytes, code: str, exit_code: int) -> None:
    _write_with_metadata(release / "model.safetensors", None)  # the card is the only possible declaration
    (release / "README.md").write_bytes(card)
    report = _validate(release)
    codes = [i.code for i in report.issues]
    assert code in codes
    assert set(codes) <= {code, "declaration.missing"}
    assert report.exit_code == exit_code


def test_a_card_with_anchors_and_merge_keys_validates(release: Path) -> None:
    # Regression: valid YAML anchors made the card unreadable (exit 2)
    text = (release / "README.md").read_text(encoding="utf-8")
    front = text.index("---\n", 3)
    anchored = ("---\nbase: &base\n  license: mit\n  library_name: pytorch\nmodel:\n  <<: *base\n  name: x\n"
                + text[4:front] + "copy: *base\n" + text[front:])
    (release / "README.md").write_text(anchored, encoding="utf-8")
    report = _validate(release)
    assert (report.issues, report.exit_code) == ([], 0)


def test_card_with_hand_written_exponent(release: Path) -> None:
    text = (release / "README.md").read_text(encoding="utf-8").replace("eps: 1.0e-05", "eps: 1e-5", 1)
    (release / "README.md").write_text(text, encoding="utf-8")
    report = _validate(release)
    [schema_issue] = [i for i in report.issues if i.code == "schema.type"]
    assert schema_issue.path == "/deployed_state/0/layers/0/eps"
    assert "YAML 1.1 reads a number such as 1e-5 as a string" in schema_issue.message
    assert report.exit_code == 1


@pytest.mark.parametrize(("mutate", "code"), [
    pytest.param(lambda b: b[:5], "safetensors.truncated", id="shorter-than-length-field"),
    pytest.param(lambda b: b[:200], "safetensors.truncated", id="cut-in-header"),
    pytest.param(lambda b: struct.pack("<Q", len(b) * 2) + b[8:], "safetensors.truncated", id="length-beyond-file"),
    pytest.param(lambda b: b[:-16], "safetensors.invalid_header", id="cut-in-data"),
    pytest.param(lambda b: b[:8] + b"[" + b[9:], "safetensors.invalid_header", id="header-not-json"),
])
def test_bad_safetensors(release: Path, mutate: Any, code: str) -> None:
    path = release / "model.safetensors"
    path.write_bytes(mutate(path.read_bytes()))
    report = _validate(release)
    assert [(os.path.basename(i.file), i.code) for i in report.issues] == [("model.safetensors", code)]
    assert report.exit_code == 2


def test_metadata_with_non_string_values(release: Path) -> None:
    _write_with_metadata(release / "model.safetensors", {"format": "pt", SAFETENSORS_METADATA_KEY: _record()})
    report = _validate(release)
    [issue] = report.issues
    assert issue.code == "safetensors.invalid_header"
    assert "metadata values must be strings" in issue.message
    assert report.exit_code == 2


def test_header_length_over_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", MAX_HEADER_BYTES + 8))
        handle.truncate(MAX_HEADER_BYTES + 64)  # sparse: nothing is written or read
    report = validate_paths([str(path)])  # not _validate: hashing 100 MB twice would be the slowest part
    assert [i.code for i in report.issues] == ["safetensors.header_too_large"]
    assert report.exit_code == 2
    assert path.stat().st_size == MAX_HEADER_BYTES + 64
    with open(path, "rb") as handle:
        assert handle.read(8) == struct.pack("<Q", MAX_HEADER_BYTES + 8)


@pytest.mark.parametrize(("text", "code", "exit_code"), [
    pytest.param("{not json", "safetensors.record_not_json", 1, id="not-json"),
    pytest.param('{"kind": "declaration", "kind": "x"}', "safetensors.record_not_json", 1, id="duplicate-key"),
    pytest.param(None, "safetensors.record_not_canonical", 0, id="pretty-printed"),
])
def test_bad_stamped_record(release: Path, text: str | None, code: str, exit_code: int) -> None:
    record = _record()
    value = json.dumps(record, indent=2) if text is None else text
    _write_with_metadata(release / "model.safetensors", {"format": "pt", SAFETENSORS_METADATA_KEY: value})
    if text is not None:
        (release / "README.md").unlink()  # the card alone would be a valid declaration
    report = _validate(release)
    assert [i.code for i in report.issues] == [code]
    assert report.exit_code == exit_code


def test_refit_annotation_stamped_in_weights(release: Path) -> None:
    annotation = json.loads(next((FIXTURES / "annotated" / "bnconvention").glob("*.json")).read_text())
    _write_with_metadata(release / "model.safetensors",
                         {"format": "pt", SAFETENSORS_METADATA_KEY: canonical_json(annotation)})
    (release / "README.md").unlink()
    report = _validate(release)
    assert [(i.code, i.path) for i in report.issues] == [("location.wrong_kind", "/kind")]


def test_card_missing_record_while_weights_are_stamped(release: Path) -> None:
    (release / "README.md").write_text("---\nlicense: mit\n---\n# card\n")
    report = _validate(release)
    assert [(i.code, i.severity) for i in report.issues] == [("release.card_missing_record", "warning")]


# --- releases with several weights files, annotations ---------------------------------------------------------------


def test_card_binds_to_the_matching_weights_file(tmp_path: Path) -> None:
    target = tmp_path / "multi"
    target.mkdir()
    shutil.copy(BN / "model.safetensors", target / "bn.safetensors")
    shutil.copy(GN / "model.safetensors", target / "gn.safetensors")
    shutil.copy(GN / "README.md", target / "README.md")  # binds to gn.safetensors by the stamped record
    assert _validate(target).issues == []
    _write_with_metadata(target / "gn.safetensors", None, source=GN / "model.safetensors")
    # now bound by the trainable digest; the header that lost the card's record is named (a warning)
    assert [(os.path.basename(i.file), i.code, i.severity) for i in _validate(target).issues] == [
        ("gn.safetensors", "release.header_missing_record", "warning")]
    _write_with_metadata(target / "gn.safetensors", None, source=BN / "model.safetensors")
    report = _validate(target)
    assert [(os.path.basename(i.file), i.code) for i in report.issues] == [
        ("README.md", "release.card_unbound"), ("gn.safetensors", "declaration.missing")]


def _annotated(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    target = tmp_path / "annotated"
    shutil.copytree(FIXTURES / "annotated", target)
    path = next((target / "bnconvention").glob("refit-*.json"))
    return target, path, json.loads(path.read_text())


def test_annotation_subject_checks(tmp_path: Path) -> None:
    target, path, annotation = _annotated(tmp_path)
    assert _validate(target).issues == []
    annotation["subject"]["trainable_sha256"] = "0" * 64
    path.write_text(json.dumps(annotation))
    assert [(i.code, i.path) for i in _validate(target).issues] == [
        ("annotation.filename_mismatch", ""), ("annotation.subject_mismatch", "/subject/trainable_sha256")]
    annotation["subject"]["filename"] = "other.safetensors"
    path.write_text(json.dumps(annotation))
    assert [i.code for i in _validate(target).issues] == ["annotation.filename_mismatch",
                                                         "annotation.subject_missing"]


def test_annotation_of_an_earlier_running_state(tmp_path: Path) -> None:
    target, _, _ = _annotated(tmp_path)
    shutil.copy(EXAMPLES / "broken" / "digest-mismatch" / "model.safetensors", target / "model.safetensors")
    report = _validate(target)
    codes = [(i.code, i.severity) for i in report.issues if i.code.startswith("annotation.")]
    assert codes == [("annotation.subject_running_changed", "warning")]


def test_files_written_by_the_stamping_module_validate(tmp_path: Path) -> None:
    stamp = pytest.importorskip("bnconvention.authoring.stamp",
                                reason="the stamping module is not in this checkout")
    card_stamp = pytest.importorskip("bnconvention.authoring.card_stamp", reason="card stamping is not here")
    target = tmp_path / "stamped"
    shutil.copytree(EXAMPLES / "broken" / "undeclared", target)  # same tensors as convnet-bn, nothing declared
    record = _record()
    stamp.stamp_file(target / "model.safetensors", record)
    card = target / "README.md"
    card.write_text(card_stamp.stamp_card_text(card.read_text(encoding="utf-8"), record), encoding="utf-8")
    report = _validate(target)
    assert report.issues == []
    assert report.exit_code == 0


# --- shard indexes, one rule for validate DIR, validate INDEX and hub validate ----------------------------------

_SHARDS = {"model-00001-of-00002.safetensors": {"a": [2]}, "model-00002-of-00002.safetensors": {"b": [3]}}
_GOOD_INDEX = {"metadata": {"total_size": 20},
               "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}


def _sharded(folder: Path, index: bytes) -> Path:
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for name, tensors in _SHARDS.items():
        save_file({t: torch.ones(shape) for t, shape in tensors.items()}, str(folder / name), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_bytes(index)
    return folder


BAD_INDEXES = [
    pytest.param(b'{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": ', "not valid JSON at line 1",
                 id="truncated-json"),
    pytest.param(b'{"weight_map": {}}', "'weight_map' is missing or empty", id="empty-weight-map"),
    pytest.param(b'{"weight_map": {"a": "../x.safetensors", "b": "model-00002-of-00002.safetensors"}}',
                 "is not a plain path inside the repo", id="path-escapes"),
    pytest.param(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00003-of-00003.safetensors"}}).encode(),
                 "names shard 'model-00003-of-00003.safetensors', which the folder does not hold", id="missing-shard"),
    pytest.param(json.dumps({"weight_map": {"a": "model-00002-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}).encode(),
                 "maps 'a' to model-00002-of-00002.safetensors, but that shard does not hold it", id="misplaced"),
]


@pytest.mark.parametrize(("index", "fragment"), BAD_INDEXES)
def test_a_bad_shard_index_is_unreadable_input_however_it_is_reached(tmp_path: Path, index: bytes,
                                                                      fragment: str) -> None:
    # Regression: validate DIR and hub validate ignored a malformed index (exit 0, "2 files checked: 0 errors")
    folder = _sharded(tmp_path / "release", index)
    for target in (folder, folder / "model.safetensors.index.json"):
        report = _validate(target)
        bad = [i for i in report.issues if i.code == "safetensors.invalid_index"]
        assert report.exit_code == 2 and len(bad) == 1, (target, report.issues)
        assert bad[0].file.endswith("model.safetensors.index.json") and fragment in bad[0].message


def test_a_good_shard_index_agrees_with_its_shards(tmp_path: Path) -> None:
    folder = _sharded(tmp_path / "release", json.dumps(_GOOD_INDEX).encode())
    report = _validate(folder)
    assert (report.issues, report.exit_code) == ([], 0)
    notes = {os.path.basename(s.file): (s.kind, s.note) for s in report.files}
    # the shards are checked as one checkpoint, reported on the index's line
    assert notes == {"model.safetensors.index.json": (
        "index", "index of 2 tensors in 2 shards; agrees with the shards' headers; no BatchNorm running statistics "
                 "(channel absent), nothing to declare")}
    named = _validate(folder / "model.safetensors.index.json")
    assert (named.issues, named.exit_code, [s.kind for s in named.files]) == ([], 0, ["index"])


def test_hub_validate_applies_the_same_index_rule(tmp_path: Path) -> None:
    from bnconvention.hub.client import make_client
    from bnconvention.hub.validate import validate_hub
    from bnconvention.hubserver import LocalHub

    folder = _sharded(tmp_path / "release", BAD_INDEXES[0].values[0])
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    with LocalHub(tmp_path / "hub", tokens={"hf_index_test_token": "alice"}, durable=False) as hub:
        hub.store.commit("lab/sharded", files=files)
        client = make_client(endpoint=hub.endpoint, token="hf_index_test_token")
        result = validate_hub(client, "lab/sharded", work_dir=tmp_path)
    assert result.exit_code == 2
    assert [(i.code, i.file) for i in result.report.issues] == [
        ("safetensors.invalid_index", "lab/sharded/model.safetensors.index.json")]


def test_a_header_safetensors_refuses_does_not_validate(release: Path) -> None:
    # Regression: a lone surrogate escape in a metadata value passed validate with exit 0
    header, data = _header_parts(release / "model.safetensors")
    metadata = {**header.pop("__metadata__"), "note": "\ud800"}
    body = json.dumps({"__metadata__": metadata, **header}).encode()  # ensure_ascii: written as the escape \ud800
    assert b'"\\ud800"' in body
    (release / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + data)
    report = _validate(release / "model.safetensors")
    assert report.exit_code == 2
    assert [(i.code, "lone surrogate escape \\ud800" in i.message) for i in report.issues] == [
        ("safetensors.invalid_header", True)]
