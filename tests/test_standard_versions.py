"""The standard's versions as data: the table, the ``since`` marks, the schema of each version generated from the one
set of models, and the record check that agrees with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from bnconvention.authoring.migrate import FROM_VERSIONS, TO_VERSION
from bnconvention.standard.models import (
    LATEST_SPEC_VERSION,
    SPEC_VERSION,
    SPEC_VERSIONS,
    VERSIONS,
    Cell,
    CellDecision,
    Declaration,
    Observation,
    RefitAnnotation,
    deployed_state_kinds,
    parse_record,
)
from bnconvention.standard.schema import changed_in, generate_version_schema, model_at, version_adapter
from bnconvention.standard.versions import SpecVersion, field_since, older_versions, schema_suffix, since
from bnconvention.validation.docgen import EXTENDS

VECTORS = Path(__file__).resolve().parent.parent / "schema" / "tests"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
RECORDS = [e for e in MANIFEST["vectors"] if e["level"] != "parse"]


def _record(entry: dict[str, Any]) -> Any:
    return json.loads((VECTORS / entry["file"]).read_text(encoding="utf-8"))


def test_the_table_orders_the_versions() -> None:
    assert [v.number for v in VERSIONS] == list(SPEC_VERSIONS) == ["1.0", "1.1"]
    assert (SPEC_VERSION, LATEST_SPEC_VERSION) == ("1.0", "1.1")
    assert [schema_suffix(v) for v in SPEC_VERSIONS] == ["", "V11"]
    assert all(v.adds for v in VERSIONS)


def test_since_refuses_a_version_the_table_lacks() -> None:
    with pytest.raises(ValueError, match="not a version of the standard"):
        since(cast(SpecVersion, "1.2"))


def test_migrate_upgrades_every_older_version_to_the_latest() -> None:
    assert older_versions() == FROM_VERSIONS == ("1.0",)
    assert TO_VERSION == LATEST_SPEC_VERSION


def test_marks_say_which_version_added_a_field_or_a_kind() -> None:
    assert field_since(Cell, "metric") == "1.0" and field_since(Cell, "unit") == "1.1"
    assert field_since(Observation, "override") == "1.1"
    assert deployed_state_kinds() == {"batchnorm": "1.0", "activation_scales": "1.1"}


def test_the_objects_1_1_changed_are_the_ones_the_schema_names_twice() -> None:
    models = (Declaration, RefitAnnotation, Cell, CellDecision, Observation)
    assert all(changed_in(model) == {"1.1"} for model in models)
    assert {f"{model.__name__}V11": model.__name__ for model in models} == EXTENDS


def test_a_version_s_model_holds_only_that_version_s_fields() -> None:
    old, new = model_at(CellDecision, "1.0"), model_at(CellDecision, "1.1")
    assert (old.__name__, new.__name__) == ("CellDecision", "CellDecisionV11")
    assert "by_p_value" not in old.model_fields and "by_p_value" in new.model_fields
    assert list(new.model_fields) == list(CellDecision.model_fields)


@pytest.mark.parametrize("version", SPEC_VERSIONS)
def test_each_version_s_schema_is_a_valid_draft_2020_12_schema(version: SpecVersion) -> None:
    schema = generate_version_schema(version)
    Draft202012Validator.check_schema(schema)
    declaration = schema["$defs"][f"Declaration{schema_suffix(version)}"]
    assert declaration["properties"]["spec_version"]["const"] == version
    assert ("by_p_value" in schema["$defs"].get("CellDecisionV11", {}).get("properties", {})) is (version == "1.1")


@pytest.mark.parametrize("entry", [pytest.param(e, id=Path(e["file"]).stem) for e in RECORDS])
def test_the_record_check_agrees_with_the_version_s_generated_models(entry: dict[str, Any]) -> None:
    """parse_record (one model per object, checked against its spec_version) accepts exactly what the models
    generated for that version accept, and what that version's JSON Schema accepts."""
    data = _record(entry)
    for version in SPEC_VERSIONS:
        if not (isinstance(data, dict) and data.get("spec_version") == version):
            continue
        try:
            parse_record(data)
            one_model = True
        except ValidationError:
            one_model = False
        try:
            version_adapter(version).validate_python(data)
            generated = True
        except ValidationError:
            generated = False
        by_schema = Draft202012Validator(generate_version_schema(version)).is_valid(data)
        assert one_model == generated == by_schema == (entry["level"] in (None, "semantic"))


def test_a_1_0_record_holding_a_later_field_is_refused_by_the_models_too() -> None:
    data = _record({"file": "valid/refit-annotation-v11.json"})
    assert isinstance(parse_record(data), RefitAnnotation)
    with pytest.raises(ValidationError, match="is a field of spec version 1.1"):
        parse_record({**data, "spec_version": "1.0"})


def test_a_null_later_field_counts_for_the_standard_s_reading_only() -> None:
    """parse_record refuses a 1.0 record with "unit": null as the 1.0 schema does; a dump of every field (None
    included) of a 1.0 record reads back (a regression: an audit result's annotation round-trips as JSON)."""
    data = _record({"file": "valid/refit-annotation-full.json"})
    record = parse_record(data)
    assert record.spec_version == "1.0"
    with pytest.raises(ValidationError, match="'unit' is a field of spec version 1.1"):
        parse_record({**data, "cells": [{**data["cells"][0], "unit": None}, *data["cells"][1:]]})
    assert RefitAnnotation.model_validate_json(record.model_dump_json()) == record
