"""Per-cell decisions, verdicts, anchoring and the reporting line, from measured cells (no model involved).

Cells are fractions; a shift is ``100 * (refit - shipped)`` percentage points per replicate. The decision rules are
:mod:`bnconvention.audit.measure.stats` (exact sign test, TOST); a checkpoint that does not anchor is reported with
``undetermined`` / ``not-anchored`` decisions, and a channel-absent checkpoint's decisions carry the method
``channel-absent``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bnconvention.audit.core.result import SignRecord
from bnconvention.audit.measure.stats import Decision, binomial_tail, decide, sign_test
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.audit.spec.expressions import CellExpression, Criterion, NonFiniteError, parse_cell
from bnconvention.errors import AuditSpecError
from bnconvention.formats.text import plural, signed
from bnconvention.standard.models import AnchorCell, Anchoring, Cell, CellDecision, Verdict

BaseCells = dict[str, float]  # df, dr, dt of one state of the model

CELL_LABELS = {"df": "forget accuracy", "dr": "retain accuracy", "dt": "test accuracy"}


def decide_cell(cell: CellExpression, shipped: float, values: list[float], *, spec: AuditSpec, anchored: bool,
                channel: str, published: float | None) -> tuple[Cell, SignRecord]:
    """The cell record (shipped, replicate values and shifts, decision) and its sign test for the census."""
    shifts = [100.0 * (v - shipped) for v in values]
    decision: Decision = decide(shifts, margin_pp=spec.margin_pp)
    signs = sign_test(shifts, margin_pp=spec.margin_pp)
    if not anchored:
        cell_decision = CellDecision(outcome="undetermined", p_value=None, method="not-anchored")
    elif channel == "absent":
        cell_decision = CellDecision(outcome=decision.outcome, p_value=decision.p_value, method="channel-absent")
    else:
        cell_decision = CellDecision(outcome=decision.outcome, p_value=decision.p_value, method=decision.method)
    record = Cell(
        metric=cell.text,
        split=cell.base_split,  # type: ignore[arg-type]
        shipped=shipped,
        refit=math.fsum(values) / len(values),
        shift_pp=math.fsum(shifts) / len(shifts),
        replicate_values=values,
        replicate_shifts_pp=shifts,
        margin_pp=spec.margin_pp,
        decision=cell_decision,
        published=published,
    )
    return record, SignRecord(p_value=signs.p_value, beyond=signs.beyond, direction=signs.direction)


def cell_field(spec: AuditSpec, index: int, cell: CellExpression) -> tuple[str, str | None]:
    """Where the ``index``-th of :meth:`AuditSpec.cell_expressions` comes from: ``(/cells/i, None)`` for a listed
    cell, ``(/criteria/j, criterion text)`` for an operand of a criterion that is not listed."""
    if index < len(spec.cells):
        return f"/cells/{index}", None
    for position, criterion in enumerate(spec.criterion_expressions()):
        if any(operand.text == cell.text for operand in criterion.operands):
            return f"/criteria/{position}", criterion.text
    return f"/cells/{index}", None


def evaluate_cell(cell: CellExpression, values: Mapping[str, float], field: str,
                  criterion: str | None = None) -> float:
    """A cell's value; a division by zero or an overflow is the spec's problem, reported at ``field`` (naming
    ``criterion`` when the cell is one of its operands: :func:`cell_field`)."""
    try:
        return cell.evaluate(values)
    except ZeroDivisionError as exc:
        raise AuditSpecError(f"cell {cell.text!r} divides by zero on the measured values {dict(values)}; "
                             "rewrite it without that division", field=field) from exc
    except NonFiniteError as exc:
        owner = f"criterion {criterion!r} overflows to inf in the cell" if criterion else "cell"
        part = f" (at {exc.expression!r})" if exc.expression != cell.text else ""
        raise AuditSpecError(f"{owner} {cell.text!r}{part} on the measured values {_shown(values)}; rewrite it "
                             "with smaller factors", field=field) from exc


def _shown(values: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{name}: {value:.4g}" for name, value in values.items()) + "}"


def verdict(criterion: Criterion, shipped: BaseCells, replicates: list[BaseCells], *, field: str) -> Verdict:
    """Shipped vs refit outcome of a criterion; refit uses the mean over replicates of each compared cell."""
    where: tuple[str, Mapping[str, float]] = ("shipped cells", shipped)
    try:
        shipped_pass = criterion.evaluate(shipped)
        per_replicate = []
        for index, cells in enumerate(replicates):
            where = (f"cells of refit replicate {index}", cells)
            per_replicate.append(criterion.evaluate(cells))
        where = ("refit cells (the mean over replicates)", {})
        means = {op.text: math.fsum(op.evaluate(cells) for cells in replicates) / len(replicates)
                 for op in criterion.operands}
        refit_pass = criterion.evaluate_operands(means)
    except ZeroDivisionError as exc:
        raise AuditSpecError(f"criterion {criterion.text!r} divides by zero on the measured cells; rewrite it",
                             field=field) from exc
    except (NonFiniteError, OverflowError) as exc:  # OverflowError: fsum of finite values past the float range
        part = exc.expression if isinstance(exc, NonFiniteError) else " / ".join(op.text for op in criterion.operands)
        label, values = where
        raise AuditSpecError(f"criterion {criterion.text!r} overflows to inf in the cell {part!r} on the {label}"
                             f"{' ' + _shown(values) if values else ''}; rewrite it with smaller factors",
                             field=field) from exc
    flipped = shipped_pass != refit_pass
    direction = None if not flipped else ("pass_to_fail" if shipped_pass else "fail_to_pass")
    return Verdict(criterion=criterion.text, shipped=shipped_pass, refit=refit_pass, flipped=flipped,
                   direction=direction, refit_pass_replicates=sum(per_replicate))  # type: ignore[arg-type]


def anchoring(spec: AuditSpec, *, published: Mapping[str, float] | None, shipped_cells: Mapping[str, float],
              shipped_base: BaseCells) -> Anchoring | None:
    """Shipped vs published cells within the spec's tolerance; None when nothing was published."""
    if not published:
        return None
    cells = []
    for text, value in published.items():
        shipped = shipped_cells.get(text)
        if shipped is None:
            shipped = evaluate_cell(parse_cell(text), shipped_base, field="/published")
        cells.append(AnchorCell(metric=text, published=value, shipped=shipped, abs_diff=abs(shipped - value)))
    anchored = all(c.abs_diff <= spec.anchor_tolerance + 1e-12 for c in cells)  # as the validator checks it
    return Anchoring(tolerance=spec.anchor_tolerance, anchored=anchored, cells=cells)


def format_p(p: float | None) -> str:
    """Two significant digits: 0.0009765625 -> '0.00098'."""
    if p is None:
        return "n/a"
    return f"{p:.2g}"


def audit_reporting_line(*, spec: AuditSpec, cells: Sequence[Cell], signs: Mapping[str, SignRecord], channel: str,
                   transform_mode: str) -> str:
    """The one sentence a release adds, built from the measured headline cell."""
    headline = spec.headline_cell().text
    cell = next(c for c in cells if c.metric == headline)
    label = CELL_LABELS.get(headline, f"cell {headline}")
    where = "training" if transform_mode == "train" else "evaluation"
    prefix = (f"deployed state as shipped; refit on the retained split under the {where} transform "
              f"({spec.refit.rule} rule)")
    replicates = len(cell.replicate_shifts_pp)
    if channel == "absent" and all(s == 0.0 for c in cells for s in c.replicate_shifts_pp):
        return (f"deployed state as shipped; no running statistics (channel absent): a refit is the identity, "
                f"every cell moves +0.00pp on {replicates}/{plural(replicates, 'replicate')}")
    sign = signs[headline]
    if cell.decision.method == "not-anchored":
        detail = "not anchored: shipped cells do not reproduce the published ones, no decision"
    elif cell.decision.outcome == "displaced":
        detail = f"{sign.beyond}/{plural(replicates, 'replicate')}, p = {format_p(cell.decision.p_value)}"
    elif cell.decision.outcome == "equivalent" and cell.decision.p_value is None:
        detail = f"equivalent within ±{spec.margin_pp:g}pp: the same shift on every replicate"
    elif cell.decision.outcome == "equivalent":
        detail = f"equivalent within ±{spec.margin_pp:g}pp, TOST p = {format_p(cell.decision.p_value)}"
    else:
        detail = f"undetermined: {sign.beyond}/{plural(replicates, 'replicate')} beyond ±{spec.margin_pp:g}pp"
        if sign.beyond == replicates and unreachable(replicates):
            detail += f"; {reach_note(replicates)}"
    return f"{prefix}, {label} moves {signed(cell.shift_pp)}pp ({detail})"


def unreachable(replicates: int, *, level: float = 0.90) -> bool:
    """Whether R replicates can never displace a cell: the smallest sign-test p, 0.5**R, is above the level's
    alpha (R <= 4 at the default 90 % level)."""
    return binomial_tail(replicates, replicates) > (1 - level) / 2


def reach_note(replicates: int, *, level: float = 0.90) -> str:
    """``R = 3 cannot reach p <= 0.05 (smallest p = 0.125)``."""
    return (f"R = {replicates} cannot reach p <= {(1 - level) / 2:g} (smallest p = "
            f"{binomial_tail(replicates, replicates):g})")


def reach_warning(replicates: int) -> str | None:
    """The audit's warning when its R can never displace a cell, or None."""
    if not unreachable(replicates):
        return None
    return (f"with {replicates} replicates no cell can be displaced: {reach_note(replicates)}; use at least 5 "
            "replicates (the papers use 10)")


