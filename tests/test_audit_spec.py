"""The audit spec: defaults, the committed JSON Schema, and every invalid spec naming its field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from bnconvention.audit.measure.data import load_audit_data
from bnconvention.audit.run.runner import check_data_fits
from bnconvention.audit.spec.audit_spec import (
    REPO_AUDIT_SCHEMA_PATH,
    audit_spec_schema_text,
    generate_audit_spec_schema,
    load_spec,
    parse_spec,
)
from bnconvention.errors import AuditSpecError

SPECS = Path(__file__).parent / "fixtures" / "audit" / "specs"
EXPECTED = json.loads((SPECS / "expected.json").read_text())["cases"]
MINIMAL = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}}


def test_committed_schema_is_the_generated_one(repo_root):
    path = repo_root / REPO_AUDIT_SCHEMA_PATH
    if os.environ.get("BNC_REGEN_GOLDEN"):
        path.write_text(audit_spec_schema_text(), encoding="utf-8")
    # regenerate: BNC_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_audit_spec.py
    assert path.read_text(encoding="utf-8") == audit_spec_schema_text()
    Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


def test_defaults_are_the_papers_design():
    spec = parse_spec(MINIMAL)
    assert (spec.margin_pp, spec.replicates, spec.anchor_tolerance, spec.fdr_q) == (1.2, 10, 0.02, 0.05)
    assert (spec.refit.rule, spec.refit.transform, spec.refit.pool_size) == ("exact", "train", 512)
    assert spec.recoverability is not None
    assert (spec.recoverability.images, spec.recoverability.source, spec.recoverability.transform) == (10, "test",
                                                                                                       "eval")
    assert spec.provenance is None and spec.staleness is True
    assert [c.text for c in spec.cell_expressions()] == ["df", "dr", "dt"]


def test_criterion_operands_become_cells():
    spec = parse_spec({**MINIMAL, "cells": ["df"], "criteria": ["abs(df-dt) <= 0.05", "dr >= 0.95"]})
    assert [c.text for c in spec.cell_expressions()] == ["df", "abs(df - dt)", "dr"]


@pytest.mark.parametrize("name", sorted(p.name for p in (SPECS / "valid").iterdir()))
def test_valid_specs_load_and_satisfy_the_schema(name):
    path = SPECS / "valid" / name
    spec = load_spec(path)
    assert spec.kind == "audit_spec"
    document = json.loads(path.read_text()) if name.endswith(".json") else yaml.safe_load(path.read_text())
    assert list(Draft202012Validator(generate_audit_spec_schema()).iter_errors(document)) == []


def test_valid_index_file_spec_fits_its_data():
    spec = load_spec(SPECS / "valid" / "index-files.yaml")
    data = load_audit_data(spec)
    check_data_fits(spec, data)
    assert (len(data.forget.ids), len(data.retain.ids), len(data.test.ids)) == (40, 600, 463)
    # relative paths are resolved against the spec file's folder
    assert Path(spec.splits.forget_index).is_absolute()


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_invalid_specs_name_the_field(case):
    expected = EXPECTED[case]
    path = SPECS / case
    with pytest.raises(AuditSpecError) as caught:
        spec = load_spec(path)
        check_data_fits(spec, load_audit_data(spec))
    assert caught.value.field == expected["field"], str(caught.value)
    if expected["level"] in ("schema", "semantic"):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        schema_errors = list(Draft202012Validator(generate_audit_spec_schema()).iter_errors(document))
        # schema-level cases are rejected by the JSON Schema too; semantic ones only by the spec's own checks
        assert bool(schema_errors) is (expected["level"] == "schema")
    if expected["level"] == "data":
        load_spec(path)  # the spec itself is valid: only its data does not fit


def test_every_invalid_fixture_has_an_expectation():
    files = {f"{d.name}/{p.name}" for d in (SPECS / "invalid", SPECS / "invalid-data") for p in d.iterdir()}
    assert files == set(EXPECTED)


def test_error_message_says_what_where_and_found():
    with pytest.raises(AuditSpecError) as caught:
        load_spec(SPECS / "invalid" / "replicates-zero.yaml")
    assert str(caught.value) == (f"{SPECS / 'invalid' / 'replicates-zero.yaml'}: 1 problem: /replicates: a decision "
                                 "needs at least 2 replicates (found 0): one refit reaches no sign-test level and "
                                 "gives no TOST interval; the papers use 10")


def test_one_replicate_is_refused_naming_the_field():
    # Regression: R = 1 was accepted and decided cells from a single refit
    with pytest.raises(AuditSpecError) as caught:
        load_spec(SPECS / "valid" / "minimal.yaml", replicates=1)
    assert caught.value.field == "/replicates"
    assert "at least 2 replicates (found 1)" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_yaml_errors_do_not_speak_of_front_matter():
    with pytest.raises(AuditSpecError) as caught:
        load_spec(SPECS / "invalid" / "yaml-alias.yaml")
    assert "invalid YAML at line 3 column 9" in str(caught.value)
    assert "front matter" not in str(caught.value)


def test_replicates_override_is_validated_like_the_file():
    assert load_spec(SPECS / "valid" / "minimal.yaml", replicates=3).replicates == 3
    with pytest.raises(AuditSpecError) as caught:
        load_spec(SPECS / "valid" / "minimal.yaml", replicates=0)
    assert caught.value.field == "/replicates"


@pytest.mark.parametrize(("extra", "pointer", "bound"), [
    pytest.param("replicates: 1000000000000", "/replicates", "200", id="replicates"),
    pytest.param("refit: {pool_size: 1000000000000}", "/refit/pool_size", "2,000,000", id="pool-size"),
    pytest.param("refit: {batch_size: 100000000}", "/refit/batch_size", "65,536", id="batch-size"),
    pytest.param("eval_batch_size: 100000000", "/eval_batch_size", "65,536", id="eval-batch-size"),
    pytest.param("staleness_band: {refits: 5000}", "/staleness_band/refits", "200", id="band-refits"),
    pytest.param("recoverability: {images: 10000000}", "/recoverability/images", "2,000,000", id="images"),
    pytest.param("recoverability: {curve: {seeds: 1000000}}", "/recoverability/curve/seeds", "200",
                 id="curve-seeds"),
    pytest.param("provenance: {pool_size: 100, draws: 1000000}", "/provenance/draws", "200", id="draws"),
    pytest.param("quantization: {replicates: 1000000}", "/quantization/replicates", "200", id="scales"),
    pytest.param("diagnostics: {relearning: {target_forget_accuracy: 0.9, max_steps: 10000000}}",
                 "/diagnostics/relearning/max_steps", "100,000", id="relearn-steps"),
    pytest.param("diagnostics: {membership_inference: {bootstrap: 10000000}}",
                 "/diagnostics/membership_inference/bootstrap", "100,000", id="bootstrap"),
])
def test_counts_past_their_bound_are_refused_naming_file_and_field(tmp_path, extra, pointer, bound):
    # Regression: replicates: 1000000000000 was accepted and the audit ran forever
    path = tmp_path / "spec.yaml"
    path.write_text('spec_version: "1.0"\nkind: audit_spec\nsplits: {forget_classes: [3]}\n' + extra + "\n",
                    encoding="utf-8")
    with pytest.raises(AuditSpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert caught.value.field == pointer
    assert message.startswith(f"{path}: 1 problem: {pointer}: ")
    assert f"is over the upper bound of {bound} " in message
    assert "\n" not in message


def test_lists_that_multiply_refits_are_bounded():
    with pytest.raises(AuditSpecError) as caught:
        parse_spec({**MINIMAL, "sweeps": {"pool_sizes": list(range(1, 41))}})
    assert caught.value.field == "/sweeps/pool_sizes"
    assert "at most 32 items" in str(caught.value)


def test_the_bounds_are_in_the_schema():
    schema = audit_spec_schema_text()
    for bound in ('"maximum": 200', '"maximum": 2000000', '"maximum": 65536', '"maxItems": 32'):
        assert bound in schema


def test_a_replicates_override_past_the_bound_is_refused():
    with pytest.raises(AuditSpecError) as caught:
        load_spec(SPECS / "valid" / "minimal.yaml", replicates=10**12)
    assert caught.value.field == "/replicates"


@pytest.mark.parametrize(("path", "message"), [
    pytest.param("nowhere.yaml", "does not exist", id="missing"),
    pytest.param(".", "is a directory", id="directory"),
])
def test_unreadable_spec_paths(tmp_path, path, message):
    with pytest.raises(AuditSpecError, match=message):
        load_spec(tmp_path / path)


def test_spec_digest_follows_the_effective_spec():
    base = parse_spec(MINIMAL)
    assert base.sha256() == parse_spec({**MINIMAL, "replicates": 10, "margin_pp": 1.2}).sha256()
    assert base.sha256() != parse_spec({**MINIMAL, "replicates": 9}).sha256()


def test_published_cells_are_canonicalised():
    spec = parse_spec({**MINIMAL, "published": {"abs( df-dt )": 0.04, "df": 0.01},
                       "published_by_checkpoint": {"bn-base": {"dr": 0.99}}})
    assert spec.published_for("other") == {"abs(df - dt)": 0.04, "df": 0.01}
    assert spec.published_for("bn-base") == {"dr": 0.99}


@pytest.mark.parametrize(("extra", "pointer", "suggestion"), [
    ({"replicate": 3}, "/replicate", "'replicates'"),
    ({"refit": {"pol_size": 128}}, "/refit/pol_size", "'pool_size'"),
    ({"splits": {"forget_clases": [3]}}, "/splits/forget_clases", "'forget_classes'"),
    ({"rules": [{"match": {"repo": "a/*"}, "provenanse": {"pool_size": 8}}]}, "/rules/0/provenanse", "'provenance'"),
])
def test_a_misspelt_field_gets_the_field_it_was_meant_to_be(extra, pointer, suggestion):
    with pytest.raises(AuditSpecError) as caught:
        parse_spec({"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}, **extra})
    assert f"{pointer}: unknown field" in str(caught.value) and f"did you mean {suggestion}?" in str(caught.value)


def test_a_field_like_no_other_gets_no_guess():
    with pytest.raises(AuditSpecError, match="check the spelling against the schema") as caught:
        parse_spec({"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}, "zzz": 1})
    assert "did you mean" not in str(caught.value)
