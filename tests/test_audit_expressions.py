"""Cells and criteria: parsed by a whitelist over ``ast``, never evaluated as Python."""

from __future__ import annotations

import pytest

from bnconvention.audit.spec.expressions import MAX_EXPRESSION_CHARS, parse_cell, parse_criterion
from bnconvention.errors import AuditSpecError

VALUES = {"df": 0.0414, "dr": 0.9497, "dt": 0.0828}


@pytest.mark.parametrize(("text", "canonical", "names", "value"), [
    pytest.param("df", "df", ("df",), 0.0414, id="base-cell"),
    pytest.param("abs( df-dt )", "abs(df - dt)", ("df", "dt"), 0.0414, id="gap-normalised"),
    pytest.param("max(df, dt) - min(df, dt)", "max(df, dt) - min(df, dt)", ("df", "dt"), 0.0414, id="max-min"),
    pytest.param("-df + 2 * dr / 4", "-df + 2 * dr / 4", ("df", "dr"), 0.0414 * -1 + 2 * 0.9497 / 4,
                 id="arithmetic"),
    pytest.param("(dr - dt) * 100", "(dr - dt) * 100", ("dr", "dt"), (0.9497 - 0.0828) * 100, id="parentheses"),
])
def test_cells_parse_to_canonical_text_and_evaluate(text, canonical, names, value):
    cell = parse_cell(text)
    assert (cell.text, cell.names) == (canonical, names)
    assert cell.evaluate(VALUES) == value


@pytest.mark.parametrize(("text", "why"), [
    pytest.param('__import__("os")', "only abs, min and max may be called", id="import-call"),
    pytest.param("df ** 2", "operator Pow is not allowed", id="power"),
    pytest.param("df.real", "Attribute is not allowed", id="attribute"),
    pytest.param("[df][0]", "Subscript is not allowed", id="subscript"),
    pytest.param("df if dt else dr", "IfExp is not allowed", id="conditional"),
    pytest.param("(lambda: df)()", "only abs, min and max may be called", id="lambda"),
    pytest.param("abs(df, dt)", "abs() takes 1 argument, found 2", id="abs-arity"),
    pytest.param("min(df)", "min() takes 2 arguments or more, found 1", id="min-arity"),
    pytest.param("max(*[df, dt])", "starred arguments are not allowed", id="starred"),
    pytest.param("abs(x=df)", "abs() takes no keyword arguments", id="keyword"),
    pytest.param("accuracy", "unknown cell 'accuracy'", id="unknown-name"),
    pytest.param("df < 1", "a comparison is not a number here", id="comparison-as-cell"),
    pytest.param("True + df", "only numbers are allowed as constants", id="bool-constant"),
    pytest.param("'a' + df", "only numbers are allowed as constants", id="string-constant"),
    pytest.param("1 + 2", "uses no cell name", id="constant-cell"),
    pytest.param("abs(df", "is not a valid expression", id="syntax"),
    pytest.param("", "is empty", id="empty"),
    pytest.param("-" * 40 + "df", "nested too deeply", id="deep"),
    pytest.param("df" + " + df" * 100, f"over the {MAX_EXPRESSION_CHARS}-character limit", id="too-long"),
])
def test_cells_outside_the_whitelist_are_refused_naming_the_field(text, why):
    with pytest.raises(AuditSpecError) as caught:
        parse_cell(text, field="/cells/2")
    assert why in str(caught.value)
    assert caught.value.field == "/cells/2"


def test_a_cell_that_is_not_a_string_is_refused():
    with pytest.raises(AuditSpecError) as caught:
        parse_cell(0.05, field="/cells/0")
    assert "must be a string" in str(caught.value) and caught.value.field == "/cells/0"


@pytest.mark.parametrize(("text", "canonical", "operands", "result"), [
    pytest.param("abs(df - dt) <= 0.05", "abs(df - dt) <= 0.05", ["abs(df - dt)"], True, id="gap"),
    pytest.param("dr >= 0.95", "dr >= 0.95", ["dr"], False, id="retain-bar"),
    pytest.param("0 <= df < dt", "0 <= df < dt", ["df", "dt"], True, id="chained"),
    pytest.param("dr >= 0.95 or abs(df-dt) <= 0.05", "dr >= 0.95 or abs(df - dt) <= 0.05",
                 ["dr", "abs(df - dt)"], True, id="or"),
    pytest.param("dr >= 0.9 and not df > 0.04", "dr >= 0.9 and (not df > 0.04)", ["dr", "df"], False, id="and-not"),
])
def test_criteria_parse_and_evaluate(text, canonical, operands, result):
    criterion = parse_criterion(text)
    assert criterion.text == canonical
    assert [o.text for o in criterion.operands] == operands
    assert criterion.evaluate(VALUES) is result


def test_criterion_on_operand_values_reads_each_side_from_the_mapping():
    # the refit verdict compares the mean of |df - dt| over replicates, not |mean df - mean dt|
    criterion = parse_criterion("abs(df - dt) <= 0.05")
    assert criterion.evaluate_operands({"abs(df - dt)": 0.0573}) is False
    assert criterion.evaluate_operands({"abs(df - dt)": 0.0414}) is True


@pytest.mark.parametrize(("text", "why"), [
    pytest.param("abs(df - dt)", "a criterion must be a comparison", id="not-a-comparison"),
    pytest.param("1 < 2", "uses no cell name", id="constant"),
    pytest.param("df is None", "comparison Is is not allowed", id="identity"),
    pytest.param("df in [1]", "comparison In is not allowed", id="membership"),
    pytest.param("__import__('os').system('true') == 0", "only abs, min and max may be called", id="call"),
])
def test_criteria_outside_the_whitelist_are_refused(text, why):
    with pytest.raises(AuditSpecError) as caught:
        parse_criterion(text, field="/criteria/0")
    assert why in str(caught.value)
    assert caught.value.field == "/criteria/0"


def test_division_by_zero_is_reported_not_hidden():
    with pytest.raises(ZeroDivisionError, match="division by zero in 'df / dt'"):
        parse_cell("df / dt").evaluate({"df": 0.5, "dt": 0.0})
