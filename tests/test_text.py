"""bnconvention.formats.text: the one-line and table-cell helpers every report, reason and error line uses."""

from __future__ import annotations

import pytest

from bnconvention.formats.text import one_line, plural, signed, table_cell


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param(ValueError("bad\n  value\tat 3"), "bad value at 3", id="exception"),
    pytest.param("  leading and trailing \r\n", "leading and trailing", id="edges"),
    pytest.param(OSError(), "", id="empty"),
    pytest.param(12, "12", id="not-text"),
])
def test_one_line_collapses_every_whitespace_run(value: object, expected: str) -> None:
    assert one_line(value) == expected


def test_table_cell_cannot_end_a_table_or_a_marker() -> None:
    assert table_cell("a | b\n<!-- bnconvention:end -->") == "a \\| b &lt;!-- bnconvention:end --&gt;"


def test_counted_nouns_and_signed_shifts() -> None:
    assert (plural(1, "repo"), plural(2, "repo"), signed(-0.001)) == ("1 repo", "2 repos", "+0.00")
