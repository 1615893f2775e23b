"""Signing (OpenSSF model signing, key-based, offline), verification, stale signatures in validate, and export to
SPDX and CycloneDX. The release is tests/fixtures/releases/annotated: a stamped model, its card and one
refit annotation."""

from __future__ import annotations

import builtins
import copy
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bnconvention.cli.main import main

pytest.importorskip("model_signing")
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "releases" / "annotated"
ANNOTATION = "bnconvention/refit-704ef37d920d.json"
TRAINABLE = "9334371f5ab3fc762be1ea2a6576536d7e4e51cba6f6209f76b7328d813d26bd"
RUNNING = "d7da57142ad7868dc227505a5917bc26be7c8385bf562f742575b8d4ac40c548"


@pytest.fixture
def release(tmp_path: Path) -> Path:
    target = tmp_path / "release"
    shutil.copytree(FIXTURE, target)
    return target


def test_signed_annotation_verifies_then_tampered_fails_naming_the_file(
        release: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    annotation = release / ANNOTATION
    assert main(["sign", str(annotation), "--private-key", str(private)]) == 0
    assert (release / (ANNOTATION + ".sig")).is_file()
    assert main(["verify", str(annotation), "--public-key", str(public)]) == 0
    out = capsys.readouterr().out
    assert f"ok   {annotation}: digests match {release / 'model.safetensors'}" in out
    assert out.endswith(f"{annotation}: verified\n")

    data = json.loads(annotation.read_text(encoding="utf-8"))
    data["reporting_line"] = data["reporting_line"] + " (edited)"
    annotation.write_text(json.dumps(data), encoding="utf-8")
    assert main(["verify", str(annotation), "--public-key", str(public)]) == 1
    captured = capsys.readouterr()
    assert "changed since signing: refit-704ef37d920d.json" in captured.out
    assert captured.err == f"bnconvention: verification failed: {annotation}\n"


def test_wrong_key_is_refused(release: Path, keys: tuple[Path, Path], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = tmp_path / "other.pub"
    other.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert main(["sign", str(release), "--private-key", str(keys[0])]) == 0
    assert main(["verify", str(release), "--public-key", str(other)]) == 1
    assert "bnconvention: signature: " in capsys.readouterr().err


def test_release_weights_whose_digests_differ_are_named(release: Path, keys: tuple[Path, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The signature matches (signed after the change) but the annotation's subject is other weights."""
    from bnconvention.authoring.signing import check_record_digests

    data = json.loads((release / ANNOTATION).read_text(encoding="utf-8"))
    data["subject"]["trainable_sha256"] = "0" * 64
    found = check_record_digests(data, release / "model.safetensors", source="edited")
    assert found.problem is not None and "subject.trainable_sha256" in found.problem


def test_stamp_after_signing_warns_and_signing_again_verifies(
        release: Path, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    weights, card = release / "model.safetensors", release / "README.md"
    assert main(["sign", str(release), "--private-key", str(private)]) == 0
    assert main(["verify", str(release), "--public-key", str(public)]) == 0
    capsys.readouterr()

    # a stamp that changes nothing leaves the signature valid and says nothing about it
    assert main(["stamp", str(weights), "--from-card", str(card)]) == 0
    assert "warning" not in capsys.readouterr().err
    # a stamp that rewrites the header (a new reporting line) invalidates it: warned, with the way to sign again
    from bnconvention.authoring.stamp import read_stamped_record
    from bnconvention.standard.models import to_dict

    record = to_dict(read_stamped_record(weights))
    record["reporting_line"] = "deployed state as shipped; a new reporting line"
    (tmp_path / "record.json").write_text(json.dumps(record), encoding="utf-8")
    assert main(["stamp", str(weights), "--record", str(tmp_path / "record.json")]) == 0
    err = capsys.readouterr().err
    assert err == (f"bnconvention: warning: {release / 'model.sig'} signed {weights} before this stamp changed it; "
                   f"the signature no longer matches: sign again: bnconvention sign {release} --private-key "
                   "KEY.pem\n")
    assert main(["verify", str(release), "--public-key", str(public)]) == 1
    assert "changed since signing: model.safetensors" in capsys.readouterr().out

    assert main(["sign", str(release), "--private-key", str(private)]) == 0
    assert main(["verify", str(release), "--public-key", str(public)]) == 0
    assert capsys.readouterr().out.endswith(f"{release}: verified\n")


def test_validate_warns_on_a_stale_signature(release: Path, keys: tuple[Path, Path]) -> None:
    from bnconvention.validation import validate_paths

    assert main(["sign", str(release), "--private-key", str(keys[0])]) == 0
    report = validate_paths([release])
    assert report.issues == []
    note = {s.file: s.note for s in report.files}[f"{release.as_posix()}/model.sig"]
    assert note.startswith("signature: all 2 signed files match")

    with open(release / "README.md", "a", encoding="utf-8") as handle:
        handle.write("\nA later edit.\n")
    report = validate_paths([release])
    assert [(i.code, i.severity, i.file) for i in report.issues] == [
        ("signature.stale", "warning", f"{release.as_posix()}/model.sig")]
    assert "changed since signing: README.md" in report.issues[0].message
    assert report.exit_code == 0


def test_validate_says_not_run_without_model_signing(release: Path, keys: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from bnconvention.validation import render, validate_paths
    from bnconvention.validation.signatures import NOT_RUN

    assert main(["sign", str(release), "--private-key", str(keys[0])]) == 0
    (release / "README.md").write_text("changed\n", encoding="utf-8")
    real_import = builtins.__import__

    def without_model_signing(name: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.split(".")[0] == "model_signing":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_model_signing)
    report = validate_paths([release])
    assert not [i for i in report.issues if i.code.startswith("signature.")]
    text = render(report)
    assert f"ok    {release.as_posix()}/model.sig: {NOT_RUN}" in text
    assert "0 found" not in text


def _spdx_messages(text: str) -> list[str]:
    from spdx_tools.spdx.parser.json.json_parser import parse_from_file  # noqa: F401 - the parser module exists
    from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    document = JsonLikeDictParser().parse(json.loads(text))
    return [m.validation_message for m in validate_full_spdx_document(document)]


def test_spdx_2_3_export_is_accepted_by_spdx_tools_and_a_broken_one_rejected(
        release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(release), "--format", "spdx-2.3"]) == 0
    text = capsys.readouterr().out
    assert _spdx_messages(text) == []
    data = json.loads(text)
    package = data["packages"][0]
    assert package["checksums"][0]["algorithm"] == "SHA256"
    comments = [a["comment"] for a in package["annotations"]]
    assert any(c.startswith("bnconvention declaration: ") for c in comments)
    assert any(c.startswith("bnconvention refit_annotation: ") for c in comments)

    package["checksums"][0]["checksumValue"] = "not-a-sha256"
    assert _spdx_messages(json.dumps(data))


def _spdx3_read(data: dict[str, Any]) -> Any:
    """Read an SPDX 3 JSON-LD document back with spdx-python-model, the way its own checks run: decoding checks
    each property's type, enumeration and pattern; every reference must resolve (``link`` returns the missing
    ones); serialising again checks the required properties and cardinalities. Raises ``ValueError``,
    ``TypeError`` or ``KeyError`` on a document that breaks the SPDX 3.0.1 shapes."""
    import spdx_python_model

    model, objects = spdx_python_model.load_data(copy.deepcopy(data))
    if missing := objects.link():
        raise ValueError(f"unresolved references: {sorted(missing)}")
    model.JSONLDSerializer().serialize_data(objects)
    return objects


def _graph_node(data: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(node for node in data["@graph"] if node["type"] == kind)


def test_spdx3_export_is_an_ai_package_read_back_by_spdx_python_model(
        release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spdx_python_model import v3_0_1 as spdx

    assert main(["export", str(release), "--format", "spdx"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["@context"] == "https://spdx.org/rdf/3.0.1/spdx-context.jsonld"
    objects = _spdx3_read(data)

    [document] = objects.foreach_type(spdx.SpdxDocument)
    [package] = objects.foreach_type(spdx.ai_AIPackage)
    assert document.creationInfo.specVersion == "3.0.1"
    assert list(document.rootElement) == [package]
    assert package.name == "release/model.safetensors"
    assert package.software_primaryPurpose == spdx.software_SoftwarePurpose.model
    assert {e.key: e.value for e in package.ai_hyperparameter} == {
        "bnconvention:convention": "train/train/train-transform/ema-m0.1"}
    [extension] = package.extension
    properties = {p.extension_cdxPropName: p.extension_cdxPropValue for p in extension.extension_cdxProperty}
    assert properties == {"bnconvention:convention": "train/train/train-transform/ema-m0.1",
                          "bnconvention:trainable_sha256": TRAINABLE, "bnconvention:running_sha256": RUNNING}
    refit = "df forget refit refit/retain/train-transform/exact"
    assert {e.key: e.value for e in package.ai_metric} == {
        "df forget shipped": "0.25", refit: "0.5625", f"{refit} replicate range": "[0.5, 0.625]"}

    [contains] = objects.foreach_type(spdx.Relationship)
    [file] = objects.foreach_type(spdx.software_File)
    assert (contains.from_, contains.relationshipType, list(contains.to)) == (
        package, spdx.RelationshipType.contains, [file])
    [digest] = file.verifiedUsing
    assert file.name == "model.safetensors"
    assert digest.algorithm == spdx.HashAlgorithm.sha256
    assert digest.hashValue == hashlib.sha256((release / "model.safetensors").read_bytes()).hexdigest()
    statements = sorted(a.statement.split(": ", 1)[0] for a in objects.foreach_type(spdx.Annotation))
    assert statements == ["bnconvention declaration", "bnconvention refit_annotation"]
    assert all(a.subject is package for a in objects.foreach_type(spdx.Annotation))


def test_spdx3_of_unstamped_weights_says_so_and_names_no_convention() -> None:
    from spdx_python_model import v3_0_1 as spdx

    from bnconvention.authoring.sbom import ReleaseRecord, WeightsEntry
    from bnconvention.authoring.spdx3 import spdx3_json

    release = ReleaseRecord(name="plain release", weights=[WeightsEntry("model.safetensors", "ab" * 32)])
    objects = _spdx3_read(json.loads(spdx3_json(release)))
    [package] = objects.foreach_type(spdx.ai_AIPackage)
    assert package.comment == "no bnconvention declaration stamped"
    assert (package.ai_informationAboutTraining, list(package.ai_hyperparameter), list(package.extension),
            list(package.ai_metric)) == (None, [], [], [])
    assert not list(objects.foreach_type(spdx.Annotation))
    [file] = objects.foreach_type(spdx.software_File)
    assert file.verifiedUsing[0].hashValue == "ab" * 32


@pytest.mark.parametrize("breaking", [
    pytest.param(lambda d: _graph_node(d, "software_File")["verifiedUsing"][0].update(algorithm="sha257"),
                 id="unknown-hash-algorithm"),
    pytest.param(lambda d: _graph_node(d, "software_File")["verifiedUsing"][0].pop("hashValue"),
                 id="hash-without-value"),
    pytest.param(lambda d: _graph_node(d, "ai_AIPackage").pop("creationInfo"), id="package-without-creation-info"),
    pytest.param(lambda d: _graph_node(d, "Relationship").pop("relationshipType"), id="relationship-without-type"),
    pytest.param(lambda d: _graph_node(d, "Relationship").update(to=["urn:bnconvention:nowhere"]),
                 id="dangling-reference"),
])
def test_spdx3_export_broken_is_rejected_by_spdx_python_model(
        release: Path, capsys: pytest.CaptureFixture[str], breaking: Callable[[dict[str, Any]], object]) -> None:
    assert main(["export", str(release), "--format", "spdx"]) == 0
    data = json.loads(capsys.readouterr().out)
    _spdx3_read(data)
    breaking(data)
    with pytest.raises((ValueError, TypeError, KeyError)):
        _spdx3_read(data)


def test_cyclonedx_export_is_accepted_by_its_validator_and_a_broken_one_rejected(
        release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    assert main(["export", str(release), "--format", "cyclonedx"]) == 0
    text = capsys.readouterr().out
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    assert validator.validate_str(text) is None
    component = json.loads(text)["components"][0]
    assert component["type"] == "machine-learning-model"
    properties = {p["name"]: p["value"] for p in component["properties"]}
    assert properties["bnconvention:convention"] == "train/train/train-transform/ema-m0.1"
    metrics = component["modelCard"]["quantitativeAnalysis"]["performanceMetrics"]
    assert {m["slice"] for m in metrics} == {"shipped", "refit refit/retain/train-transform/exact"}

    broken = json.loads(text)
    broken["components"][0]["modelCard"]["quantitativeAnalysis"]["performanceMetrics"][0]["value"] = 0.5
    assert validator.validate_str(json.dumps(broken)) is not None
