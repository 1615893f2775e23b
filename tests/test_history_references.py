"""The library and the schema explain themselves: no "issue N" or "seed 00N" pointing to documents that are not in
the repository (a tracker's issues, the papers). The point is written out, or a section of docs/ is linked (the papers
are cited by author: docs/statistics.md#references)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the same pattern as scripts/house_figures.py's HISTORY figure
HISTORY = re.compile(r"\b(?:issue\s*#?\s*\d+|seed\s+0\d\d)\b", re.IGNORECASE)
SCANNED = ("bnconvention", "schema")
TEXT_SUFFIXES = {".py", ".pyi", ".json", ".yaml", ".yml", ".md", ".txt", ".html", ".css", ".js", ".toml", ".cfg"}


def _scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                files.append(path)
    return files


def history_references(text: str) -> list[str]:
    return [m.group(0) for m in HISTORY.finditer(text)]


@pytest.mark.parametrize("sample", ["see issue 24", "(issue #11)", "Issue 12, item 4", "issue#3", "issue12",
                                    "the design of seed 001", "Seed 003's diagnostics", "SEED  000"])
def test_the_pattern_finds_history_references(sample: str) -> None:
    assert history_references(sample) != []


@pytest.mark.parametrize("sample", ["validation issues", "issue codes 12", "seed 0", "seed 42", "seed 1234",
                                    "seeds 003", "tissue 12", "reissue 3"])
def test_the_pattern_leaves_ordinary_words_alone(sample: str) -> None:
    assert history_references(sample) == []


def test_the_scan_reads_the_library() -> None:
    scanned = {path.relative_to(REPO).as_posix() for path in _scanned_files()}
    assert any(p.startswith("bnconvention/audit/") and p.endswith(".py") for p in scanned)
    assert "bnconvention/examples/files/audit/digits-zoo.yaml" in scanned
    assert "bnconvention/standard/models.py" in scanned and "schema/v1/bnconvention.schema.json" in scanned


def references_in(text: str) -> list[tuple[int, str]]:
    """(line, reference) of each reference in ``text``, one broken across lines included."""
    return [(text.count("\n", 0, m.start()) + 1, " ".join(m.group(0).split())) for m in HISTORY.finditer(text)]


def test_a_reference_broken_across_lines_is_found() -> None:
    assert references_in("one\nthe failure mode of seed\n003 a method shows") == [(2, "seed 003")]


def test_no_history_references_in_the_library() -> None:
    found = [f"{path.relative_to(REPO).as_posix()}:{number}: {reference}"
             for path in _scanned_files()
             for number, reference in references_in(path.read_text("utf-8", errors="replace"))]
    assert found == [], "explain the point or link a section of docs/ instead:\n" + "\n".join(found)
