"""Report formats (bnconvention.validation.rendering) against golden files.

Regenerate the golden files after an intended change of messages or format, then review the diff:

    BNC_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_validation_report.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bnconvention.validation import render, validate_paths
from bnconvention.validation.issues import Issue
from bnconvention.validation.rendering import format_github_issue

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "fixtures" / "validation"
REGEN = os.environ.get("BNC_REGEN_GOLDEN") == "1"


@pytest.mark.parametrize(("fmt", "golden"), [
    pytest.param("text", "examples.txt", id="text"),
    pytest.param("json", "examples.json", id="json"),
    pytest.param("github", "examples.github.txt", id="github"),
])
def test_report_matches_golden(monkeypatch: pytest.MonkeyPatch, fmt: str, golden: str) -> None:
    monkeypatch.chdir(ROOT)  # relative paths in the report, as a user types them
    report = validate_paths(["examples/releases", "examples/broken"])
    text = render(report, fmt)  # type: ignore[arg-type]
    path = GOLDEN / golden
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), (
        "report changed; if intended: BNC_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_validation_report.py")


def test_json_report_is_the_documented_list() -> None:
    report = validate_paths([str(ROOT / "examples" / "broken" / "undeclared")])
    [item] = json.loads(render(report, "json"))
    assert list(item) == ["file", "path", "code", "severity", "message"]
    assert (item["code"], item["severity"], item["path"]) == ("declaration.missing", "warning", "")


def test_empty_reports() -> None:
    report = validate_paths([str(ROOT / "examples" / "releases" / "convnet-gn")])
    assert render(report, "json") == "[]\n"
    assert render(report, "github") == ""
    assert render(report, "text").endswith("\n2 files checked: 0 errors, 0 warnings\n")


def test_github_escaping() -> None:
    issue = Issue(code="schema.enum", severity="warning", file="dir:x/a,b.json", path="",
                  message="100% wrong\r\nsecond line")
    assert format_github_issue(issue) == (
        "::warning file=dir%3Ax/a%2Cb.json,title=schema.enum::100%25 wrong%0D%0Asecond line")


def test_a_card_yaml_error_is_annotated_on_its_line(tmp_path: Path) -> None:
    card = tmp_path / "README.md"
    card.write_text("---\nlicense: mit\ntags: [a, b\n---\n# body\n", "utf-8")
    report = validate_paths([str(card)])
    [issue] = report.issues
    assert issue.code == "card.invalid_yaml" and issue.line == 3 and "at line 3 column" in issue.message
    assert render(report, "github").startswith(f"::error file={card},line=3,title=card.invalid_yaml::")
    assert json.loads(render(report, "json"))[0]["line"] == 3


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown report format 'xml'"):
        render(validate_paths([str(ROOT / "examples" / "releases")]), "xml")  # type: ignore[arg-type]
