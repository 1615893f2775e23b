"""Validating one record (bnconvention.validation.records, schema_errors, semantics, issues)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bnconvention.errors import RecordError
from bnconvention.validation import CODES, Issue, best_issue, ensure_valid_record, sort_issues, validate_record
from bnconvention.validation.issues import make_pointer, new_issue, pointer_tokens

VECTORS = Path(__file__).resolve().parent.parent / "schema" / "tests"


def _load(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


@pytest.fixture
def declaration() -> dict[str, Any]:
    return _load("valid/declaration-ema-train.json")


@pytest.fixture
def annotation() -> dict[str, Any]:
    return _load("valid/refit-annotation-full.json")


def _codes(issues: list[Issue]) -> list[tuple[str, str]]:
    return [(i.code, i.path) for i in issues]


def test_valid_record_has_no_issue(declaration: dict[str, Any]) -> None:
    assert validate_record(declaration, source="d.json") == []


def test_discriminator_selects_the_branch(declaration: dict[str, Any]) -> None:
    # an ema rule with a bad momentum: the ema branch's error only, not "not valid under any of the given schemas"
    declaration["convention"]["accumulation"]["momentum"] = 1.5
    issues = validate_record(declaration, source="d.json")
    assert _codes(issues) == [("schema.range", "/convention/accumulation/momentum")]
    assert issues[0].message == ("1.5 is out of range: /convention/accumulation/momentum must be at most 1")


def test_unknown_discriminator_suggests_a_value(declaration: dict[str, Any]) -> None:
    declaration["convention"]["accumulation"]["rule"] = "exakt"
    [issue] = validate_record(declaration, source="d.json")
    assert issue.code == "schema.discriminator"
    assert issue.message.startswith('"exakt" is not a known rule (did you mean "exact"?)')


def test_discriminator_on_a_non_object(declaration: dict[str, Any]) -> None:
    declaration["deployed_state"] = ["batchnorm"]
    assert _codes(validate_record(declaration, source="d.json")) == [("schema.type", "/deployed_state/0")]


def test_optional_value_reports_its_own_errors(declaration: dict[str, Any]) -> None:
    declaration["deployed_state"][0]["layers"][0]["momentum"] = 0  # anyOf [number in (0, 1], null]
    assert _codes(validate_record(declaration, source="d.json")) == [
        ("schema.range", "/deployed_state/0/layers/0/momentum")]


def test_every_problem_is_reported(declaration: dict[str, Any]) -> None:
    del declaration["producer"]
    declaration["convention"]["distributed"] = "ddp"
    declaration["deployed_state"][0]["layers"][1]["eps"] = "1e-5"
    declaration["digests"]["trainable_sha256"] = "abc"
    issues = validate_record(declaration, source="d.json")
    assert _codes(issues) == [
        ("schema.required", ""),
        ("schema.enum", "/convention/distributed"),
        ("schema.type", "/deployed_state/0/layers/1/eps"),
        ("schema.pattern", "/digests/trainable_sha256"),  # the length error at the same path is shadowed
    ]
    assert issues[0].message == ('"producer" is a required property of Declaration; add it (The tool and version '
                                 'that wrote this record)')
    assert "YAML 1.1 reads a number such as 1e-5 as a string" in issues[2].message
    assert issues[3].message == ('"abc" is not a lowercase hex sha256: /digests/trainable_sha256 must be 64 '
                                 "characters 0-9a-f; found 3 characters")


def test_additional_property_suggests_the_spelling(declaration: dict[str, Any]) -> None:
    declaration["convention"]["data"]["sampling_sed"] = 3
    [issue] = validate_record(declaration, source="d.json")
    assert (issue.code, issue.path) == ("schema.additional_property", "/convention/data")
    assert issue.message.startswith('"sampling_sed" is not a property of DataSplit at /convention/data (did you '
                                    'mean "sampling_seed"?)')


def test_messages_start_with_the_data(declaration: dict[str, Any], annotation: dict[str, Any]) -> None:
    declaration["convention"]["data"]["role"] = "validation"
    annotation["cells"][0]["decision"]["outcome"] = "flipped"
    for record, start in ((declaration, '"validation" is not an allowed value'),
                          (annotation, '"flipped" is not an allowed value')):
        [issue] = validate_record(record, source="r.json")
        assert issue.message.startswith(start)
        assert issue.severity == "error"
        assert issue.file == "r.json"


def test_semantic_checks_run_only_on_schema_valid_records(declaration: dict[str, Any]) -> None:
    declaration["convention"]["name"] = "wrong"
    declaration["convention"]["distributed"] = "ddp"
    assert _codes(validate_record(declaration, source="d.json")) == [("schema.enum", "/convention/distributed")]
    declaration["convention"]["distributed"] = "none"
    [issue] = validate_record(declaration, source="d.json")
    assert issue.code == "record.name_mismatch"
    assert issue.message.startswith('"wrong" is not the canonical name of this convention: its fields give '
                                    '"train/train/train-transform/ema-m0.1"')


def test_means_tolerate_summation_order(annotation: dict[str, Any]) -> None:
    cell = annotation["cells"][0]
    cell["refit"] += 1e-9  # within the documented 1e-6 tolerance
    assert validate_record(annotation, source="a.json") == []
    cell["refit"] += 1e-3
    assert _codes(validate_record(annotation, source="a.json")) == [("record.cell_mean", "/cells/0/refit")]


def test_verdict_direction_checks(annotation: dict[str, Any]) -> None:
    annotation["verdicts"][0]["direction"] = "pass_to_fail"  # not flipped: no direction
    annotation["verdicts"][1]["direction"] = "fail_to_pass"  # shipped True -> refit False is pass_to_fail
    assert _codes(validate_record(annotation, source="a.json")) == [
        ("record.verdict_flip", "/verdicts/0/direction"), ("record.verdict_flip", "/verdicts/1/direction")]


def test_observation_contradictions_are_warnings(declaration: dict[str, Any]) -> None:
    declaration["observation"] = {
        "train_forwards": 3, "eval_forwards": 0, "buffer_updates": 3, "buffers_changed": True,
        "contradictions": [{"code": "declared-frozen-buffers-changed", "message": "buffers changed"}]}
    [issue] = validate_record(declaration, source="d.json")
    assert (issue.code, issue.severity, issue.path) == ("record.observation_contradiction", "warning",
                                                        "/observation/contradictions/0")


def test_integral_float_accepted_by_both(declaration: dict[str, Any]) -> None:
    declaration["deployed_state"][0]["layers"][0]["num_features"] = 8.0
    assert validate_record(declaration, source="d.json") == []
    assert ensure_valid_record(declaration).deployed_state[0].layers[0].num_features == 8


def test_non_json_python_values_do_not_crash(declaration: dict[str, Any]) -> None:
    declaration["reporting_line"] = b"bytes"
    assert _codes(validate_record(declaration, source="d.json")) == [("schema.type", "/reporting_line")]


def test_ensure_valid_record_raises_one_clear_error(declaration: dict[str, Any]) -> None:
    bad = copy.deepcopy(declaration)
    bad["convention"]["buffer_update_mode"] = "trained"
    bad["digests"]["algorithm"] = "sha256"
    with pytest.raises(RecordError) as info:
        ensure_valid_record(bad, source="r.json")
    assert str(info.value).startswith('r.json: schema.enum at /convention/buffer_update_mode: "trained" is not an '
                                      "allowed value")
    assert str(info.value).endswith("(and 1 more)")
    assert [i.code for i in info.value.issues] == ["schema.enum", "schema.const"]
    assert ensure_valid_record(declaration).kind == "declaration"


# --- issues ---------------------------------------------------------------------------------------------------------


def test_pointers_escape_and_sort_numerically() -> None:
    assert make_pointer(["a/b", "~c", 3]) == "/a~1b/~0c/3"
    assert pointer_tokens("/a~1b/~0c/3") == ("a/b", "~c", "3")
    issues = [new_issue("schema.type", file="f", path=f"/layers/{i}", message="m") for i in (10, 9, 2)]
    issues.append(new_issue("record.channel_mode", file="f", path="/layers/2", message="m"))
    issues.append(new_issue("schema.type", file="e", path="/z", message="m"))
    ordered = sort_issues(issues + issues[:1])  # duplicates collapse
    assert [(i.file, i.path, i.severity) for i in ordered] == [
        ("e", "/z", "error"), ("f", "/layers/2", "error"), ("f", "/layers/2", "warning"),
        ("f", "/layers/9", "error"), ("f", "/layers/10", "error")]


def test_best_issue_prefers_unreadable_then_errors_then_shallow() -> None:
    warning = new_issue("declaration.missing", file="a", message="m")
    deep = new_issue("schema.type", file="a", path="/a/b/c", message="m")
    shallow = new_issue("schema.type", file="b", path="/a", message="m")
    unreadable = new_issue("json.invalid", file="z", message="m")
    assert best_issue([warning, deep, shallow]) is shallow
    assert best_issue([warning, deep, shallow, unreadable]) is unreadable
    assert best_issue([warning]) is warning
    assert best_issue([]) is None


def test_codes_registry() -> None:
    with pytest.raises(KeyError, match="unknown issue code"):
        new_issue("no.such-code", file="f", message="m")
    assert new_issue("declaration.missing", file="f", message="m", severity="error").severity == "error"
    for code, info in CODES.items():
        assert code == code.lower() and "." in code
        assert info.severity in ("error", "warning")
        assert info.description.endswith(".")
        assert not (info.unreadable and info.severity == "warning")
