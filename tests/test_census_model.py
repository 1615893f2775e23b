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


def _staleness_reading_unknown_key(d: dict[str, Any]) -> None:
    d["readings"]["staleness"]["exceeds"] = 3


def _mechanism_row_consistent_as_text(d: dict[str, Any]) -> None:
    next(iter(d["readings"]["mechanism"]["per_checkpoint"].values()))["consistent"] = "maybe"


def _background_unknown_key(d: dict[str, Any]) -> None:
    d["controls"]["background"]["by_labels"] = {}


def _control_cell_unknown_key(d: dict[str, Any]) -> None:
    d["controls"]["rows"][0]["cells"]["df"]["max_shift_pp"] = 1.0


def _pool_size_row_unknown_key(d: dict[str, Any]) -> None:
    d["sweeps"]["pool_sizes"] = [{"pool_size": 8, "refits_added": 0, "cells": {}, "flips": {}, "refits": 0}]


def _planted_row_cells_as_text(d: dict[str, Any]) -> None:
    d["detection_floor"]["rows"][0]["cells"] = "all"


def _budget_cell_unknown_key(d: dict[str, Any]) -> None:
    d["recalibration_budget"]["cells"]["df"]["mean_pp"] = 1.0


def _family_row_unknown_key(d: dict[str, Any]) -> None:
    d["families"]["families"][0]["seed"] = 0


def _twin_gap_as_text(d: dict[str, Any]) -> None:
    d["twin_gaps"]["pairs"][0]["gap_pp"] = "large"


def _population_place_unknown_key(d: dict[str, Any]) -> None:
    d["checkpoints"][0]["population"]["removals"] = "c3"


def _row_mechanism_unknown_key(d: dict[str, Any]) -> None:
    d["checkpoints"][0]["mechanism"]["evidences"] = "sidecar"


def _derivation_unknown_key(d: dict[str, Any]) -> None:
    d["margin"]["derivation"] = {"rule": "r", "margin_pp": 1.2, "recipes": 0, "spreads": [], "per_cell": {},
                                 "recipe": "r"}


def _encoder_interval_level_as_text(d: dict[str, Any]) -> None:
    d["checkpoints"][0]["encoder"] = {"mia_auc_shipped": {"estimate": 0.5, "lower": 0.4, "upper": 0.6,
                                                          "level": "95 %", "method": "bootstrap-percentile"}}


def _scales_counts_unknown_key(d: dict[str, Any]) -> None:
    d["scales"] = {"quantized": 0, "not_quantized": 1, "displaced": 0, "cells": {}, "audited": 0}


@pytest.mark.parametrize("breaks", [
    pytest.param(_drop_counts, id="missing-required-section"),
    pytest.param(_counts_as_text, id="wrong-type"),
    pytest.param(_misspelt_row_key, id="unknown-key"),
    pytest.param(_cell_outcome_not_text, id="wrong-type-nested"),
    # the sections once written as open mappings are closed too
    pytest.param(_staleness_reading_unknown_key, id="readings-unknown-key"),
    pytest.param(_mechanism_row_consistent_as_text, id="readings-mechanism-wrong-type"),
    pytest.param(_background_unknown_key, id="controls-background-unknown-key"),
    pytest.param(_control_cell_unknown_key, id="control-cell-unknown-key"),
    pytest.param(_pool_size_row_unknown_key, id="sweeps-pool-size-unknown-key"),
    pytest.param(_planted_row_cells_as_text, id="detection-floor-wrong-type"),
    pytest.param(_budget_cell_unknown_key, id="recalibration-budget-unknown-key"),
    pytest.param(_family_row_unknown_key, id="families-unknown-key"),
    pytest.param(_twin_gap_as_text, id="twin-gaps-wrong-type"),
    pytest.param(_population_place_unknown_key, id="row-population-unknown-key"),
    pytest.param(_row_mechanism_unknown_key, id="row-mechanism-unknown-key"),
    pytest.param(_derivation_unknown_key, id="margin-derivation-unknown-key"),
    pytest.param(_encoder_interval_level_as_text, id="row-encoder-wrong-type"),
    pytest.param(_scales_counts_unknown_key, id="scales-unknown-key"),
])
def test_a_broken_census_is_rejected_by_schema_and_model(breaks: Callable[[dict[str, Any]], None]) -> None:
    document = copy.deepcopy(_valid())
    breaks(document)
    assert list(Draft202012Validator(generate_census_schema()).iter_errors(document)) != []
    with pytest.raises(ValidationError):
        CensusResult.model_validate(document)
