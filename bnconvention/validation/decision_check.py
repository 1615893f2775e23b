"""An annotation's decisions against its own replicate shifts: the decision rules
(:mod:`bnconvention.standard.decision_rules`) applied to each cell's ``replicate_shifts_pp`` and ``margin_pp`` must
give the outcome, method and p-value the cell states (``record.decision_inconsistent``).

The p-value matches when it is the rules' value, or that value rounded to two significant digits (as reports print
it: 0.00098). Cells the rules do not decide are left alone: ``not-anchored`` ones must only be undetermined, and a
method of another tool (not one of ours) is that tool's business. TOST needs scipy (the ``audit`` extra); without
it a cell whose decision needs TOST is not compared, and everything the exact sign test decides still is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from bnconvention.formats.text import plural
from bnconvention.standard.annotation import Cell
from bnconvention.standard.decision_rules import (
    EXACT_EQUALITY_METHOD,
    NO_METHOD,
    SIGN_METHOD,
    SignTest,
    decide,
    sign_decides,
    sign_test,
)
from bnconvention.standard.models import RefitAnnotation
from bnconvention.validation.issues import Issue, join_pointer, new_issue
from bnconvention.validation.schema_errors import show

CHANNEL_ABSENT_METHOD = "channel-absent"
NOT_ANCHORED_METHOD = "not-anchored"
_TOST = re.compile(r"^tost-(\d{1,2})$")


def _level(method: str) -> float | None:
    """The confidence level a method names (``tost-90`` -> 0.90), the default 0.90 for the other methods of the
    rules, ``None`` for a method the rules do not know."""
    match = _TOST.match(method)
    if match:
        return int(match.group(1)) / 100
    if method in (SIGN_METHOD, EXACT_EQUALITY_METHOD, NO_METHOD, CHANNEL_ABSENT_METHOD):
        return 0.90
    return None


def p_matches(stated: float | None, expected: float | None) -> bool:
    """Whether a stated p-value is the rules' one, exactly (to 1e-9 relative) or rounded to two significant digits.

    >>> p_matches(0.00098, 0.0009765625), p_matches(0.0009765625, 0.0625), p_matches(None, None)
    (True, False, True)
    """
    if stated is None or expected is None:
        return stated is None and expected is None
    return abs(stated - expected) <= 1e-9 * max(abs(expected), 1e-300) or stated == float(f"{expected:.2g}")


def _p(value: float | None) -> str:
    return "none" if value is None else f"{value:.2g}"


@dataclass(frozen=True)
class _Expected:
    """What the rules give for a cell: outcome, method, p-value (None: not known without scipy) and why."""

    outcome: str
    method: str
    p_value: float | None
    evidence: str
    p_known: bool = True


def _sign_evidence(cell: Cell, signs: SignTest) -> str:
    count = len(cell.replicate_shifts_pp)
    return (f"{signs.beyond}/{plural(count, 'replicate')} beyond ±{cell.margin_pp:g}pp, one-sided sign-test p = "
            f"{_p(signs.p_value)}")


def _expected(cell: Cell, *, level: float, channel: str) -> _Expected | None:
    """The rules' decision; without scipy only what the exact sign test settles (None: nothing to compare)."""
    absent = channel == "absent"
    try:
        decision = decide(cell.replicate_shifts_pp, margin_pp=cell.margin_pp, level=level)
    except ModuleNotFoundError:  # TOST without scipy (the core install)
        signs = sign_test(cell.replicate_shifts_pp, margin_pp=cell.margin_pp)
        evidence = _sign_evidence(cell, signs)
        if sign_decides(signs, level=level):
            return _Expected("displaced", CHANNEL_ABSENT_METHOD if absent else SIGN_METHOD, signs.p_value, evidence)
        if cell.decision.outcome == "displaced":  # not displaced; equivalent or undetermined needs TOST
            return _Expected("not displaced", "", None, evidence, p_known=False)
        return None
    evidence = _sign_evidence(cell, decision.sign_test)
    if decision.tost.exact:
        evidence += ", zero spread"
    elif decision.tost.p_value is not None:
        evidence += f", TOST p = {_p(decision.tost.p_value)}"
    method = CHANNEL_ABSENT_METHOD if absent else decision.method
    return _Expected(decision.outcome, method, decision.p_value, evidence)


def cell_decision_issues(cell: Cell, *, channel: str, base: str, source: str) -> Iterator[Issue]:
    """The one contradiction of a cell's decision (outcome first, then method, then p-value), if it has one."""
    stated = cell.decision
    where = join_pointer(base, "decision")
    if stated.method == NOT_ANCHORED_METHOD:
        if stated.outcome != "undetermined":
            yield new_issue("record.decision_inconsistent", file=source, path=join_pointer(where, "outcome"),
                            message=(f"{show(stated.outcome)} is the outcome of cell {show(cell.metric)}, decided "
                                     "'not-anchored': a checkpoint that does not anchor is not decided; write "
                                     "'undetermined'"))
        return
    level = _level(stated.method)
    expected = None if level is None else _expected(cell, level=level, channel=channel)
    if expected is None:
        return
    gives = f"{show(expected.outcome)} ({expected.method}, p = {_p(expected.p_value)})" if expected.p_known \
        else show(expected.outcome)
    rules = f"the rules give {gives} for its {expected.evidence}"
    if stated.outcome != expected.outcome:
        yield new_issue("record.decision_inconsistent", file=source, path=join_pointer(where, "outcome"), message=(
            f"{show(stated.outcome)} is not the decision of cell {show(cell.metric)}: {rules}"))
    elif stated.method != expected.method:
        yield new_issue("record.decision_inconsistent", file=source, path=join_pointer(where, "method"), message=(
            f"{show(stated.method)} is not the method that decides cell {show(cell.metric)}: {rules}"))
    elif not p_matches(stated.p_value, expected.p_value):
        yield new_issue("record.decision_inconsistent", file=source, path=join_pointer(where, "p_value"), message=(
            f"{show(stated.p_value) if stated.p_value is not None else 'no p-value'} is not the p-value of cell "
            f"{show(cell.metric)}: {rules}"))


def decision_issues(record: RefitAnnotation, *, source: str) -> Iterator[Issue]:
    """Every cell's decision against its replicate shifts. Cells already wrong at their shifts are not decided
    again: a replicate count that is not ``replicates`` (``record.replicate_count``), a non-zero shift with channel
    absent (``record.channel_absent_shift``)."""
    for k, cell in enumerate(record.cells):
        if len(cell.replicate_shifts_pp) != record.replicates:
            continue
        if record.channel == "absent" and any(s != 0 for s in cell.replicate_shifts_pp):
            continue
        yield from cell_decision_issues(cell, channel=record.channel, base=join_pointer("", "cells", k),
                                        source=source)


__all__ = ["cell_decision_issues", "decision_issues", "p_matches"]
