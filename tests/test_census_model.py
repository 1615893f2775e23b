"""The census result's model and its JSON Schema: the committed schema is the generated one, a census written by the
census parses and round-trips through the model unchanged, and broken ones are rejected by schema and model alike."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from bnconvention.audit.core.files import json_text
from bnconvention.audit.population import CensusResult
from bnconvention.audit.population.model import REPO_CENSUS_SCHEMA_PATH, census_schema_text, generate_census_schema

VALID = Path(__file__).parent / "fixtures" / "census" / "valid-population.json"


def _valid() -> dict[str, Any]:
    return json.loads(VALID.read_text(encoding="utf-8"))


def test_committed_schema_is_the_generated_one(repo_root: Path) -> None:
    path = repo_root / REPO_CENSUS_SCHEMA_PATH
    if os.environ.get("BNC_REGEN_GOLDEN"):
        path.write_text(census_schema_text(), encoding="utf-8")
    # regenerate: BNC_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_census_model.py
    assert path.read_text(encoding="utf-8") == census_schema_text()
    Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


def test_a_population_census_satisfies_the_schema_and_round_trips_through_the_model() -> None:
    document = _valid()
    assert list(Draft202012Validator(generate_census_schema()).iter_errors(document)) == []
    census = CensusResult.read(VALID)
    assert json_text(census.to_json()) == VALID.read_text(encoding="utf-8")  # same keys, order, values and types
    assert census.counts.decided == document["counts"]["decided"] and census.families is not None


def test_absent_optional_sections_stay_out_of_the_file() -> None:
    document = {key: value for key, value in _valid().items()
                if key not in ("families", "twin_gaps", "invocation", "timing")}
    written = CensusResult.model_validate(document).to_json()
    assert list(written) == list(document)
    assert written["largest_shift"] == document["largest_shift"] and "org" not in written


def _drop_counts(d: dict[str, Any]) -> None:
    del d["counts"]


def _counts_as_text(d: dict[str, Any]) -> None:
    d["counts"]["checkpoints"] = "twelve"


def _misspelt_row_key(d: dict[str, Any]) -> None:
    d["checkpoints"][0]["shiped"] = 1


def _cell_outcome_not_text(d: dict[str, Any]) -> None:
    d["checkpoints"][0]["cells"]["df"]["outcome"] = 3


@pytest.mark.parametrize("breaks", [
    pytest.param(_drop_counts, id="missing-required-section"),
    pytest.param(_counts_as_text, id="wrong-type"),
    pytest.param(_misspelt_row_key, id="unknown-key"),
    pytest.param(_cell_outcome_not_text, id="wrong-type-nested"),
])
def test_a_broken_census_is_rejected_by_schema_and_model(breaks: Callable[[dict[str, Any]], None]) -> None:
    document = copy.deepcopy(_valid())
    breaks(document)
    assert list(Draft202012Validator(generate_census_schema()).iter_errors(document)) != []
    with pytest.raises(ValidationError):
        CensusResult.model_validate(document)
