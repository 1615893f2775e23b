"""The consistency core (bnconvention.validation.consistency): one pure rule for a declaration against a checkpoint,
called by validate, the Hub census and publish, plus record equality and card binding."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from bnconvention.formats.digests import DigestSet, file_digests
from bnconvention.formats.safetensors_header import read_header
from bnconvention.standard.models import Declaration, parse_record, to_dict
from bnconvention.validation.consistency import (
    MAX_DIFF_ISSUES,
    RunningDigests,
    StoredRecord,
    bind_record,
    check_consistency,
    declared_record,
    digest_issues,
    location_issues,
    normalized,
    records_equal,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stamp"
TINY = FIXTURES / "tiny.safetensors"
RECORD: dict[str, Any] = json.loads((FIXTURES / "record.json").read_text("utf-8"))
SHAPES = {name: info.shape for name, info in read_header(TINY).tensors.items()}
PACKAGE = Path(__file__).resolve().parent.parent / "bnconvention"


def _stored(data: Any, file: str = "model.safetensors") -> StoredRecord:
    try:
        record = parse_record(data)
    except Exception:  # noqa: BLE001 - an invalid record is stored with no model, as the readers store it
        record = None
    return StoredRecord(data, record, file)


def _edited(change) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    data = copy.deepcopy(RECORD)
    change(data)
    return data


def _digests() -> DigestSet:
    return file_digests(TINY, bn_layers=["1", "4"])


# --- record equality ---------------------------------------------------------------------------------------------


def test_records_are_equal_by_canonical_json() -> None:
    reordered = json.loads(json.dumps(RECORD, sort_keys=True))
    assert records_equal(RECORD, reordered)
    assert records_equal({"x": 1.0}, {"x": 1})  # one number, two spellings
    assert not records_equal(RECORD, _edited(lambda r: r.update(reporting_line="other")))


def test_values_canonical_json_cannot_hold_are_compared_as_they_are() -> None:
    assert records_equal({"x": [1, 2]}, {"x": [1, 2]})
    assert not records_equal({"x": float("nan")}, {"x": float("nan")})  # two NaNs are never equal
    assert records_equal({"x": math.inf}, {"x": math.inf})
    assert not records_equal({"x": math.inf}, {"x": -math.inf})


def test_normalized_form_treats_an_absent_optional_field_as_null() -> None:
    record = parse_record(RECORD)
    with_null = {**RECORD, "observation": None}
    assert normalized(with_null, record) == normalized(RECORD, record) == to_dict(record)
    assert normalized(["not", "a", "record"], None) == ["not", "a", "record"]


# --- binding -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("only", "stored", "tensors", "expected"), [
    pytest.param(True, {}, set(), "a", id="only-checkpoint"),
    pytest.param(False, {"b": [RECORD]}, {"a"}, "b", id="same-record-first"),
    pytest.param(False, {"b": [{"other": 1}]}, {"c"}, "c", id="then-tensors"),
    pytest.param(False, {}, set(), None, id="unbound"),
])
def test_bind_record(only: bool, stored: dict[str, list[Any]], tensors: set[str], expected: str | None) -> None:
    bound = bind_record(RECORD, ["a", "b", "c"], only=only, stored_forms=lambda c: stored.get(c, []),
                        tensors_match=lambda c: c in tensors)
    assert bound == expected


def test_bind_record_without_a_tensor_check_binds_by_record_only() -> None:
    assert bind_record(RECORD, ["a"], only=False, stored_forms=lambda c: []) is None
    assert bind_record(RECORD, [], only=True) is None


# --- the declaration against the checkpoint ---------------------------------------------------------------------


def test_a_matching_declaration_is_consistent() -> None:
    result = check_consistency(header=_stored(RECORD), card=_stored(RECORD, "README.md"), shapes=SHAPES,
                               display="model.safetensors", digests=lambda layers: _digests())
    assert (result.issues, result.agrees, result.declaration_file) == ([], True, "model.safetensors")
    assert isinstance(result.declaration, Declaration)


def test_card_and_header_differences_are_listed_then_counted() -> None:
    card = _edited(lambda r: r.update({f"x{i:02d}": i for i in range(MAX_DIFF_ISSUES + 2)}))
    result = check_consistency(header=_stored(RECORD), card=_stored(card, "README.md"), shapes=SHAPES,
                               display="model.safetensors")
    mismatches = [i for i in result.issues if i.code == "release.card_header_mismatch"]
    assert len(result.differences) == MAX_DIFF_ISSUES + 2 and not result.agrees
    assert [i.path for i in mismatches[:2]] == ["/x00", "/x01"] and mismatches[-1].path == ""
    assert len(mismatches) == MAX_DIFF_ISSUES + 1 and mismatches[-1].message == (
        "2 more differences from model.safetensors not listed")
    assert mismatches[0].file == "README.md"
    assert mismatches[0].message.startswith("0 in the card, absent in the record stamped in model.safetensors")


def test_the_header_declaration_is_checked_even_when_the_card_differs() -> None:
    header = _edited(lambda r: r["deployed_state"][0]["layers"][0].update(num_features=5))
    result = check_consistency(header=_stored(header), card=_stored(RECORD, "README.md"), shapes=SHAPES,
                               display="the header")
    codes = [i.code for i in result.issues]
    assert codes[0] == "release.card_header_mismatch" and "layers.num_features_mismatch" in codes


@pytest.mark.parametrize(("header", "card", "expected"), [
    pytest.param(RECORD, None, "model.safetensors", id="header"),
    pytest.param(None, RECORD, "README.md", id="card-when-the-header-holds-none"),
    pytest.param({"kind": "declaration"}, RECORD, None, id="an-invalid-header-record-is-not-replaced-by-the-card"),
    pytest.param(None, {"kind": "refit_annotation"}, None, id="no-valid-declaration"),
])
def test_which_declaration_is_checked(header: Any, card: Any, expected: str | None) -> None:
    record, file = declared_record(None if header is None else _stored(header),
                                   None if card is None else _stored(card, "README.md"))
    assert (file or None) == expected and (record is not None) == (expected is not None)


@pytest.mark.parametrize(("change", "code", "path"), [
    pytest.param(lambda r: r["deployed_state"][0]["layers"][0].update(name="9"), "layers.missing_in_file",
                 "/deployed_state/0/layers/0", id="renamed"),
    pytest.param(lambda r: r["deployed_state"][0]["layers"][1].update(affine=False), "layers.affine_mismatch",
                 "/deployed_state/0/layers/1/affine", id="affine"),
    pytest.param(lambda r: r["deployed_state"][0]["layers"].pop(), "layers.undeclared", "/deployed_state/0/layers",
                 id="undeclared"),
    pytest.param(lambda r: r["digests"].update(trainable_sha256="0" * 64), "digests.trainable_mismatch",
                 "/digests/trainable_sha256", id="trainable"),
    pytest.param(lambda r: r["deployed_state"][0]["layers"][1].update(running_sha256="2" * 64),
                 "digests.layer_mismatch", "/deployed_state/0/layers/1/running_sha256", id="layer-digest"),
])
def test_the_first_issue_names_what_differs(change, code: str, path: str) -> None:  # type: ignore[no-untyped-def]
    result = check_consistency(header=_stored(_edited(change)), card=None, shapes=SHAPES,
                               display="model.safetensors", digests=lambda layers: _digests())
    assert (result.issues[0].code, result.issues[0].path) == (code, path)


def test_without_digests_only_the_header_is_compared() -> None:
    stale = _edited(lambda r: r["digests"].update(trainable_sha256="0" * 64))
    assert check_consistency(header=_stored(stale), card=None, shapes=SHAPES, display="the header").issues == []


def test_a_census_compares_running_digests_but_never_the_trainable_one() -> None:
    record = parse_record(_edited(lambda r: r["digests"].update(trainable_sha256="0" * 64)))
    assert isinstance(record, Declaration)
    found = _digests()
    running = RunningDigests(running_sha256=found.running_sha256, layer_running_sha256=found.layer_running_sha256)
    assert digest_issues(record, running, display="the running buffers", source="") == []
    stale = RunningDigests(running_sha256="3" * 64, layer_running_sha256=found.layer_running_sha256)
    assert [i.code for i in digest_issues(record, stale, display="x", source="")] == ["digests.running_mismatch"]


def test_a_layer_without_buffers_is_reported_once() -> None:
    renamed = _edited(lambda r: r["deployed_state"][0]["layers"][0].update(name="9"))
    result = check_consistency(header=_stored(renamed), card=None, shapes=SHAPES, display="model.safetensors",
                               digests=lambda layers: file_digests(TINY, bn_layers=layers))
    codes = [i.code for i in result.issues]
    assert "layers.missing_in_file" in codes and "digests.layer_mismatch" not in codes


def test_digests_are_asked_for_the_declared_layers_only_when_there_is_a_declaration() -> None:
    asked: list[list[str]] = []

    def digests(layers: list[str]) -> DigestSet:
        asked.append(layers)
        return _digests()

    check_consistency(header=_stored({"kind": "declaration"}), card=None, shapes=SHAPES, display="m",
                      digests=digests)
    check_consistency(header=_stored(RECORD), card=None, shapes=SHAPES, display="m", digests=digests)
    assert asked == [["1", "4"]]


ANNOTATION = {
    "spec_version": "1.0", "kind": "refit_annotation",
    "subject": {"filename": "model.safetensors", "trainable_sha256": RECORD["digests"]["trainable_sha256"]},
    "convention": RECORD["convention"], "channel": "present", "replicates": 1, "margin_pp": 1.2, "cells": [],
    "producer": {"tool": "bnconvention", "version": "0.1.0"},
    "reporting_line": "shipped state audited; no cell evaluated",
}


@pytest.mark.parametrize(("place", "file", "start"), [
    pytest.param("header", "model.safetensors", '"refit_annotation" is stamped in model.safetensors', id="header"),
    pytest.param("card", "README.md", '"refit_annotation" is the bnconvention block of README.md', id="card"),
])
def test_a_refit_annotation_where_a_declaration_belongs(place, file: str, start: str) -> None:  # type: ignore[no-untyped-def]
    [issue] = location_issues(_stored(ANNOTATION, file), place=place)
    assert (issue.code, issue.path, issue.file) == ("location.wrong_kind", "/kind", file)
    assert issue.message.startswith(start)
    assert location_issues(_stored(RECORD, file), place=place) == []
    result = check_consistency(header=_stored(ANNOTATION), card=None, shapes=SHAPES, display="m")
    assert (result.declaration, result.issues) == (None, [])  # nothing to check against the tensors


# --- rules defined once ------------------------------------------------------------------------------------------


def _assignments(pattern: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if re.match(pattern, line):
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{number}")
    return found


@pytest.mark.parametrize("name", ["CARD_NAME", "MAX_CARD_BYTES", "CARD_BLOCK_KEY"])
def test_card_constants_are_defined_once(name: str) -> None:
    assert [where.split(":")[0] for where in _assignments(rf"{name}\s*=")] == ["formats/card.py"]


def test_one_line_text_has_one_helper() -> None:
    repeated = [f"{p.relative_to(PACKAGE).as_posix()}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
                if p.relative_to(PACKAGE).as_posix() != "formats/text.py"
                for n, line in enumerate(p.read_text("utf-8").splitlines(), 1)
                if re.search(r"""["']\s["']\.join\(.*\.split\(\)\)""", line)]
    assert repeated == [], "use bnconvention.formats.text.one_line (or table_cell)"
