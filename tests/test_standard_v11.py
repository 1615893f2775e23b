"""Spec version 1.1: every 1.0 record stays valid and means the same; 1.0 stays strict.

The spec version is a test parameter: each 1.0 conformance vector that is not about the version itself is run as
1.0 and as 1.1, and must give the same issues under both (1.1 only adds optional fields).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bnconvention.standard.models import (
    LATEST_SPEC_VERSION,
    SPEC_VERSIONS,
    Declaration,
    RefitAnnotation,
    fields_added_in,
    parse_record,
)
from bnconvention.validation.records import validate_record

VECTORS = Path(__file__).resolve().parent.parent / "schema" / "tests"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
# Vectors about the version itself: their issues depend on it.
VERSION_VECTORS = {"invalid-spec-version-2", "invalid-spec-version-number", "invalid-v10-family",
                   "invalid-v10-by-p-value", "invalid-v10-cell-unit", "invalid-v10-linear-probe",
                   "invalid-v10-activation-scales", "invalid-v10-refit-state", "invalid-v10-observation-override"}


def _v10_entries() -> list[dict[str, Any]]:
    out = []
    for entry in MANIFEST["vectors"]:
        if entry["level"] == "parse" or Path(entry["file"]).stem in VERSION_VECTORS:
            continue
        data = json.loads((VECTORS / entry["file"]).read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("spec_version") == "1.0" and "kind" in data:
            out.append(entry)
    return out


V10_ENTRIES = _v10_entries()


def _issues(data: Any) -> list[tuple[str, str, str]]:
    return sorted((i.code, i.path, i.severity) for i in validate_record(data))


def test_manifest_names_both_versions() -> None:
    assert MANIFEST["spec_versions"] == list(SPEC_VERSIONS) == ["1.0", "1.1"]
    assert len(V10_ENTRIES) >= 40


@pytest.mark.parametrize("version", SPEC_VERSIONS)
@pytest.mark.parametrize("entry", [pytest.param(e, id=Path(e["file"]).stem) for e in V10_ENTRIES])
def test_a_1_0_vector_gives_the_same_issues_under_every_version(entry: dict[str, Any], version: str) -> None:
    data = json.loads((VECTORS / entry["file"]).read_text(encoding="utf-8"))
    data["spec_version"] = version
    expected = sorted((i["code"], i["path"], i["severity"]) for i in entry["issues"])
    assert _issues(data) == expected


@pytest.mark.parametrize("version", SPEC_VERSIONS)
def test_both_versions_parse_to_the_kind_s_model(version: str) -> None:
    data = json.loads((VECTORS / "valid" / "refit-annotation-full.json").read_text(encoding="utf-8"))
    record = parse_record({**data, "spec_version": version})
    assert isinstance(record, RefitAnnotation)  # a 1.1 annotation is an annotation: callers need not branch
    assert record.spec_version == version  # one model for every version: the record says which
    declaration = json.loads((VECTORS / "valid" / "declaration-v11.json").read_text(encoding="utf-8"))
    parsed = parse_record(declaration)
    assert isinstance(parsed, Declaration) and parsed.spec_version == "1.1"


def _with_field(record: dict[str, Any], owner: str, name: str) -> tuple[dict[str, Any], str]:
    """``record`` with a 1.1 field set on its object ``owner``, and that object's JSON pointer."""
    v11 = json.loads((VECTORS / "valid" / "refit-annotation-v11.json").read_text(encoding="utf-8"))
    encoder = json.loads((VECTORS / "valid" / "refit-annotation-v11-encoder.json").read_text(encoding="utf-8"))
    scales = json.loads((VECTORS / "valid" / "refit-annotation-v11-scales.json").read_text(encoding="utf-8"))
    out = copy.deepcopy(record)
    if owner == "Observation":  # a declaration with the 1.1 observation vectors' field
        observed = [json.loads((VECTORS / "valid" / f"declaration-v11-observation-{name}.json").read_text(
            encoding="utf-8")) for name in ("override", "splits")]
        source = copy.deepcopy(next(v for v in observed if name in v["observation"]))
        for other in fields_added_in("1.1")["Observation"]:
            if other != name:
                source["observation"].pop(other, None)
        return {**source, "spec_version": "1.0"}, "/observation"
    if owner == "RefitAnnotation":
        out[name] = next(source[name] for source in (v11, encoder, scales) if name in source)
        return out, ""
    if owner == "Cell":  # the encoder vector's linear-probe cell carries the cell's 1.1 fields
        out["cells"][0][name] = encoder["cells"][3][name]
        return out, "/cells/0"
    out["cells"][0]["decision"][name] = v11["cells"][0]["decision"][name]
    return out, "/cells/0/decision"


FIELDS_1_1 = [(owner, name) for owner, names in fields_added_in("1.1").items() for name in names]


def test_the_fields_1_1_adds() -> None:
    assert FIELDS_1_1 == [("RefitAnnotation", "family"), ("RefitAnnotation", "provenance_arms"),
                          ("RefitAnnotation", "recoverability_curves"), ("RefitAnnotation", "twin"),
                          ("RefitAnnotation", "linear_probe"), ("RefitAnnotation", "membership_inference"),
                          ("RefitAnnotation", "relearning"), ("RefitAnnotation", "refit_state"),
                          ("Cell", "unit"), ("Cell", "reference"),
                          ("CellDecision", "by_p_value"), ("CellDecision", "by_family_size"),
                          ("Observation", "override"), ("Observation", "name_mapping"),
                          ("Observation", "split_matching")]


@pytest.mark.parametrize(("owner", "name"), FIELDS_1_1, ids=[f"{o}.{n}" for o, n in FIELDS_1_1])
def test_a_1_0_record_with_a_1_1_field_is_invalid_and_the_message_names_the_version(owner: str, name: str) -> None:
    base = json.loads((VECTORS / "valid" / "refit-annotation-full.json").read_text(encoding="utf-8"))
    data, where = _with_field(base, owner, name)
    [issue] = validate_record(data)
    assert (issue.code, issue.path) == ("schema.additional_property", where)
    assert f'"{name}" is a field of spec version {LATEST_SPEC_VERSION}' in issue.message
    assert 'declare "spec_version": "1.1"' in issue.message and "bnconvention migrate" in issue.message
    # the same record, declared 1.1, is valid (an override is reported as a warning)
    assert [i for i in validate_record({**data, "spec_version": "1.1"}) if i.severity == "error"] == []


def test_an_unknown_version_names_the_versions_read() -> None:
    data = json.loads((VECTORS / "valid" / "declaration-ema-train.json").read_text(encoding="utf-8"))
    [issue] = validate_record({**data, "spec_version": "1.2"})
    assert (issue.code, issue.path) == ("schema.spec_version", "/spec_version")
    assert 'it reads versions "1.0" and "1.1"' in issue.message


def test_a_1_1_field_does_not_excuse_a_misspelling() -> None:
    data = json.loads((VECTORS / "valid" / "refit-annotation-v11.json").read_text(encoding="utf-8"))
    data["famly"] = data.pop("family")
    [issue] = validate_record(data)
    assert issue.code == "schema.additional_property"
    assert 'did you mean "family"?' in issue.message
