"""The census numbers of docs/ come from committed extracts (scripts/docs_census.py): the pages agree with them,
a number edited by hand is caught, and an extract records the run it came from."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "scripts" / "docs_census.py"


def _script():
    spec = importlib.util.spec_from_file_location("docs_census", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_region_of_the_docs_matches_its_committed_extract():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    pages = [p for p in (REPO_ROOT / "docs").glob("*.md") if "begin generated: " in p.read_text("utf-8")]
    assert {p.name for p in pages} >= {"population.md", "statistics.md"}


def test_a_number_edited_by_hand_in_a_region_is_caught():
    docs = _script()
    page = (REPO_ROOT / "docs" / "statistics.md").read_text("utf-8")
    match = next(docs.REGION.finditer(page))
    body = match.group("body")
    digit = next(i for i, ch in enumerate(body) if ch.isdigit())
    edited = page.replace(body, body[:digit] + str((int(body[digit]) + 1) % 10) + body[digit + 1:], 1)
    assert docs.render(page) == page and docs.render(edited) != edited


def test_an_unknown_part_is_refused():
    docs = _script()
    text = ("<!-- begin generated: population/nothing (scripts/docs_census.py; do not edit by hand) -->\n"
            "<!-- end generated -->")
    with pytest.raises(SystemExit, match="unknown generated part 'nothing'"):
        docs.render(text)


def test_the_committed_extract_names_its_run_and_leaves_out_the_rows():
    data = json.loads((REPO_ROOT / "docs" / "data" / "population.json").read_text("utf-8"))
    source = data["source"]
    assert len(source["commit"]) == 40 and source["command"] and source["machine"]["cores"]
    assert data["census"]["counts"]["checkpoints"] == 114
    assert all(("encoder" in row or "scales" in row) and "cells" not in row for row in data["census"]["checkpoints"])
    assert "per_checkpoint" not in json.dumps(data["census"]["readings"])


def test_an_extract_keeps_what_the_story_reads():
    docs = _script()
    from bnconvention.audit.population.story import population_story

    census = json.loads((REPO_ROOT / "docs" / "data" / "population.json").read_text("utf-8"))["census"]
    full = {**census, "checkpoints": [{"checkpoint": "x", "cells": {}}, *census["checkpoints"]]}
    again = docs.extract(full, command="test")["census"]
    assert population_story(docs.census_of(again)) == population_story(docs.census_of(census))
    assert [row["checkpoint"] for row in again["checkpoints"]] == [row["checkpoint"] for row in census["checkpoints"]]
