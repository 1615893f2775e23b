"""The activation-scales deployed-state kind of spec 1.1: models, semantic rules, 1.0 strictness and
migration."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bnconvention.authoring.migrate import migrate_record_data
from bnconvention.standard.models import ActivationScalesState, Declaration, parse_record
from bnconvention.validation.records import validate_record
from bnconvention.validation.scales_check import symmetric_zero_point

VECTORS = Path(__file__).resolve().parent.parent / "schema" / "tests"


def _vector(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / "valid" / f"{name}.json").read_text(encoding="utf-8"))


def test_a_1_1_declaration_parses_its_scales_as_their_kind() -> None:
    record = parse_record(_vector("declaration-v11-activation-scales"))
    assert isinstance(record, Declaration) and record.spec_version == "1.1"
    batchnorm, scales = record.deployed_state
    assert batchnorm.kind == "batchnorm" and isinstance(scales, ActivationScalesState)
    assert [(s.name, s.scale, s.zero_point) for s in scales.sites] == [
        ("features.0.activation_post_process", 0.0234375, 113), ("features.1.activation_post_process", 0.015625, 0)]
    assert scales.calibration.record_count == 256


def test_a_1_0_declaration_holding_scales_says_to_declare_1_1() -> None:
    data = _vector("declaration-v11-activation-scales")
    [issue] = validate_record({**data, "spec_version": "1.0"})
    assert (issue.code, issue.path) == ("schema.discriminator", "/deployed_state/1/kind")
    assert '"activation_scales" is a deployed-state kind of spec version 1.1' in issue.message
    assert 'declare "spec_version": "1.1"' in issue.message


def test_migration_round_trip_then_scales_can_be_added() -> None:
    """A 1.0 declaration migrates with its meaning intact; only as 1.1 does it take a scales entry."""
    data = json.loads((VECTORS / "valid" / "declaration-ema-train.json").read_text(encoding="utf-8"))
    migrated = migrate_record_data(copy.deepcopy(data), source="r.json")
    assert {**migrated, "spec_version": "1.0"} == data and list(migrated) == list(data)
    scales = _vector("declaration-v11-activation-scales")["deployed_state"][1]
    migrated["deployed_state"].append(scales)
    assert validate_record(migrated) == []
    assert [i.code for i in validate_record({**migrated, "spec_version": "1.0"})] == ["schema.discriminator"]


@pytest.mark.parametrize(("quant_min", "quant_max", "expected"), [(-128, 127, 0), (0, 255, 128), (0, 127, 64)])
def test_symmetric_zero_point_as_torch_computes_it(quant_min: int, quant_max: int, expected: int) -> None:
    assert symmetric_zero_point(quant_min, quant_max) == expected


def test_a_symmetric_state_with_an_off_centre_zero_point_is_reported() -> None:
    data = _vector("declaration-v11-activation-scales-percentile")
    data["deployed_state"][1]["sites"][1]["zero_point"] = 3
    [issue] = validate_record(data)
    assert (issue.code, issue.path) == ("record.quant_range", "/deployed_state/1/sites/1/zero_point")
    assert "the symmetric scheme fixes it at 0" in issue.message


def test_an_empty_range_and_a_percentile_without_its_observer() -> None:
    data = _vector("declaration-v11-activation-scales")
    data["deployed_state"][1].update(quant_max=0, percentile=99.0)
    codes = sorted((i.code, i.path) for i in validate_record(data))
    assert ("record.quant_range", "/deployed_state/1/quant_max") in codes
    assert ("record.observer_percentile", "/deployed_state/1/percentile") in codes


def test_one_site_s_digest_is_the_combined_digest() -> None:
    data = _vector("declaration-v11-activation-scales")
    state = data["deployed_state"][1]
    state["sites"] = state["sites"][:1]
    [issue] = validate_record(data)
    assert (issue.code, issue.path) == ("record.scales_digest_inconsistent", "/deployed_state/1/scales_sha256")
    state["scales_sha256"] = state["sites"][0]["tensors_sha256"]
    assert validate_record(data) == []
