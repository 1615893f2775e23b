"""The flip ledger: every verdict that flips in a census, with what an auditor needs to judge it.

A flip is a criterion whose outcome on the shipped cells differs from its outcome on the mean refit cells. One line
of a ledger says, for each cell the criterion compares: the published value (when the census anchored against one),
the shipped value, the mean refit value and the range over replicates, the shift and the recalibration budget
(:func:`bnconvention.audit.population.detection.pair_budget_pp`); and for the criterion: its thresholds, how many
replicates pass it after their own refit, whether the flip clears the budget and whether it holds on every replicate.

Every flip is entered with its group: ``decided`` (a released checkpoint in the multiplicity family), ``control``
(a known-answer control, whose flips are the census's background rate) or ``twin arm`` (a synthetic arm of the
frozen-twin intervention, never counted as a released checkpoint).
"""

from __future__ import annotations

from collections.abc import Sequence

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.population.model_sections import LedgerRow, Operand
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.standard.models import Cell

DECIDED, CONTROL, TWIN_ARM = "decided", "control", "twin arm"
GROUP_ORDER = {DECIDED: 0, CONTROL: 1, TWIN_ARM: 2}  # a ledger lists the released checkpoints first


def pair_budget_pp(values: Sequence[float]) -> float | None:
    """Largest |difference| (pp) between disjoint pairs of independent refits; None with fewer than two."""
    if len(values) < 2:
        return None
    return max(100.0 * abs(values[i] - values[i + 1]) for i in range(0, len(values) - 1, 2))


def flip_rows(name: str, result: AuditResult, spec: AuditSpec, *, group: str = DECIDED,
              label: str | None = None) -> list[LedgerRow]:
    """One ledger line per flipped verdict of one checkpoint."""
    criteria = {c.text: c for c in spec.criterion_expressions()}
    published = _published(result)
    replicates = result.annotation.replicates
    rows = []
    for verdict in result.annotation.verdicts:
        criterion = criteria.get(verdict.criterion)
        if not verdict.flipped or criterion is None:
            continue
        compared = [_operand(result.cell(op.text), op.value_in(published))
                    for op in criterion.operands]
        every = verdict.refit_pass_replicates == (replicates if verdict.refit else 0)
        rows.append(LedgerRow(checkpoint=name, group=group, label=label, criterion=verdict.criterion,
                              thresholds=list(criterion.thresholds), direction=verdict.direction,
                              shipped_pass=verdict.shipped, refit_pass=verdict.refit,
                              replicates_passing=verdict.refit_pass_replicates, replicates=replicates,
                              compared=compared,
                              clears_budget=any(c.budget_pp is not None and abs(c.shift_pp) > c.budget_pp
                                                for c in compared),
                              holds_every_replicate=every))
    return rows


def in_ledger_order(rows: Sequence[LedgerRow]) -> list[LedgerRow]:
    """Ledger lines in the order every rendering shows them: released checkpoints, controls, twin arms; then by
    checkpoint and criterion."""
    return sorted(rows, key=lambda f: (GROUP_ORDER.get(f.group, len(GROUP_ORDER)), f.checkpoint, f.criterion))


def counted_as(row: LedgerRow) -> str:
    """How a ledger line is counted: ``decided``, ``control: retrain reference``, ``twin arm``."""
    return row.group if row.label is None else f"{row.group}: {row.label}"


def _published(result: AuditResult) -> dict[str, float]:
    """The published cells the census anchored against (cell text -> value); empty without anchoring."""
    anchoring = result.annotation.anchoring
    return {} if anchoring is None else {c.metric: c.published for c in anchoring.cells}


def _operand(cell: Cell, published: float | None) -> Operand:
    return Operand(cell=cell.metric, published=published, shipped=cell.shipped, refit=cell.refit,
                   replicate_min=min(cell.replicate_values), replicate_max=max(cell.replicate_values),
                   shift_pp=cell.shift_pp, budget_pp=pair_budget_pp(cell.replicate_values))


__all__ = ["CONTROL", "DECIDED", "GROUP_ORDER", "TWIN_ARM", "counted_as", "flip_rows", "in_ledger_order",
           "pair_budget_pp"]
