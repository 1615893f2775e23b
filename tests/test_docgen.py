"""docs/standard.md is current with the schema and the issue codes; the pre-commit hook is well formed."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bnconvention.standard.schema import generate_schema
from bnconvention.validation import CODES
from bnconvention.validation.docgen import _description, sections, type_text, update_document

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "standard.md"


def test_generated_parts_are_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert update_document(text, sections(ROOT)) == text, (
        "run: .venv/bin/python -m bnconvention.validation.docgen docs/standard.md")


def test_every_field_and_code_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name, definition in generate_schema()["$defs"].items():
        assert f"#### {name}\n" in text
        if name in ("Observation", "ObservationV11", "LayerObservation", "Contradiction"):
            continue  # the recorder's classes describe their own fields
        for prop, sub in definition.get("properties", {}).items():
            assert _description(sub), f"{name}.{prop} has no description in bnconvention/standard/models.py"
    for code in CODES:
        assert f"| `{code}` |" in text
    assert "refit/retain/train-transform/exact" in text  # the canonical-name rule with an example


def test_type_text() -> None:
    assert type_text({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}) == "integer (≥ 1) or null"
    assert type_text({"type": "array", "items": {"$ref": "#/$defs/Cell"}}) == "array of [Cell](#cell)"
    assert type_text({"enum": ["a", "b"]}) == '`"a"` \\| `"b"`'


def test_update_document_refuses_unknown_blocks() -> None:
    text = "<!-- BEGIN GENERATED: nope -->\nx\n<!-- END GENERATED: nope -->\n"
    try:
        update_document(text, {"codes": ""})
    except KeyError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("unknown block accepted")


def test_pre_commit_hook() -> None:
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert (hook["id"], hook["entry"], hook["language"]) == ("bnconvention-validate",
                                                            "bnconvention validate --skip-non-records", "python")
    pattern = re.compile(hook["files"])
    # every .json is passed (records are found by content: tests/test_precommit.py), config.json included
    for name in ("model.safetensors", "README.md", "org/model/README.md", "bnconvention/refit-0123456789ab.json",
                 "run.bnconvention.json", "record.json", "bnconvention-declaration.json", "config.json"):
        assert pattern.search(name), name
    for name in ("docs/notes.md", "README.md.bak", "record.json.bak"):
        assert not pattern.search(name), name
