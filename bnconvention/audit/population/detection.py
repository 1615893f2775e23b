"""What the census design can see: the planted-effect detection floor and the recalibration budget.

**Detection floor** (Shen and Li, appendix C; docs/statistics.md#detection-floor-planted-effects), calibrated on a null.
For every decided checkpoint and cell that is *not* displaced, the replicate shifts are centred on their own mean (each
replicate's residual: what a second retain refit of this checkpoint moves by, with no effect at all), a shift of known
size δ is added to every residual, and the cell is decided again by the census rules: the margin, the exact sign test
and Benjamini–Yekutieli at q across the census (the planted cells' p-values replace theirs in the family; the
displaced cells keep theirs). ``recovered`` counts planted cells decided displaced, ``recovered_by`` those that also
survive BY. Centred residuals have mean zero, so one of them is at most zero and a δ at or below the margin can
never put every replicate beyond it: nothing is recovered, by construction. Planting on the raw shifts instead (δ
added to each cell's own shift, in the direction of its mean) is circular: a near miss already shifted 1.1 pp is
"recovered" by a 0.5 pp plant, although the design cannot see 0.5 pp at all.

Per cell, the plant is recovered (by the sign test, before BY) exactly when δ > margin − min(residual) and the
replicates can reach the test's level at all; ``floor_pp`` is the ``share`` quantile of that threshold over the
planted cells (recovered on at least ``share`` of them for every δ above it), ``None`` when the replicates can
never reach the level.

**Recalibration budget** (docs/statistics.md#recalibration-budget). How far a cell moves between two independent retain
refits of the same checkpoint: the largest |difference| between the disjoint replicate pairs (0, 1), (2, 3), … in pp. A
verdict flip *clears the budget* when the shift of some compared cell exceeds that checkpoint's budget for it (a second
refit alone would not move it that far), and *holds on every replicate* when every replicate's refit cells give the
flipped outcome.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.measure.decisions import unreachable
from bnconvention.audit.measure.stats import by_adjust, decide
from bnconvention.audit.population.ledger import flip_rows, pair_budget_pp
from bnconvention.audit.population.model_sections import (
    BudgetCell,
    BudgetCounts,
    DetectionFloor,
    PlantedRow,
    RecalibrationBudget,
)
from bnconvention.audit.spec.audit_spec import AuditSpec

SHARE = 0.9  # the detection floor: the smallest plant recovered on at least this share of the cells
NULL_METHOD = "centred replicate residuals"


def residuals(shifts_pp: Sequence[float]) -> list[float]:
    """Each replicate shift minus their mean: the cell's replicate noise, with no effect left in it."""
    mean = math.fsum(shifts_pp) / len(shifts_pp)
    return [s - mean for s in shifts_pp]


def plant(shifts_pp: Sequence[float], size_pp: float) -> list[float]:
    """The cell's centred replicate shifts with ``size_pp`` added to each (a known effect on the null)."""
    return [r + size_pp for r in residuals(shifts_pp)]


def threshold_pp(shifts_pp: Sequence[float], *, margin_pp: float, level: float = 0.90) -> float:
    """The plant above which this cell is recovered by the sign test (inf when R replicates cannot reach the
    level: ``0.5**R > (1 - level) / 2``)."""
    if unreachable(len(shifts_pp), level=level):
        return math.inf
    return margin_pp - min(residuals(shifts_pp))


def detection_floor(decided: Sequence[AuditResult], spec: AuditSpec) -> DetectionFloor:
    """The planted rows (one per size: cells planted, recovered, recovered after BY) and the exact floor."""
    metrics = [c.text for c in spec.cell_expressions()]
    thresholds = [threshold_pp(r.cell(m).replicate_shifts_pp, margin_pp=spec.margin_pp)
                  for m in metrics for r in decided if r.cell(m).decision.outcome != "displaced"]
    return DetectionFloor(method=NULL_METHOD, margin_pp=spec.margin_pp, share=SHARE, cells=len(thresholds),
                          floor_pp=floor_pp(thresholds, share=SHARE),
                          rows=[_planted_row(decided, metrics, size, spec) for size in spec.controls.planted_pp])


def floor_pp(thresholds: Sequence[float], *, share: float) -> float | None:
    """The ``share`` quantile of the cells' thresholds: every plant above it is recovered on at least ``share`` of
    the cells (None without cells, or when that many cells can never be recovered)."""
    if not thresholds:
        return None
    needed = math.ceil(share * len(thresholds))
    value = sorted(thresholds)[needed - 1]
    return None if math.isinf(value) else value


def _planted_row(decided: Sequence[AuditResult], metrics: Sequence[str], size: float,
                 spec: AuditSpec) -> PlantedRow:
    planted = recovered = recovered_by = 0
    for metric in metrics:
        p_values: list[float] = []
        targets: list[bool] = []  # planted and decided displaced
        for result in decided:
            cell = result.cell(metric)
            if cell.decision.outcome == "displaced":
                p_values.append(result.sign_tests[metric].p_value)
                targets.append(False)
                continue
            decision = decide(plant(cell.replicate_shifts_pp, size), margin_pp=spec.margin_pp)
            p_values.append(decision.sign_test.p_value)
            targets.append(decision.outcome == "displaced")
            planted += 1
            recovered += decision.outcome == "displaced"
        adjusted = by_adjust(p_values)
        recovered_by += sum(hit and p <= spec.fdr_q for hit, p in zip(targets, adjusted, strict=True))
    return PlantedRow(planted_pp=size, cells=planted, recovered=recovered, recovered_by=recovered_by)


def recalibration_budget(decided: Sequence[tuple[str, AuditResult]], spec: AuditSpec) -> RecalibrationBudget:
    """The budget per cell over the decided checkpoints, and each verdict flip against its checkpoint's budget."""
    per_cell: dict[str, BudgetCell | None] = {}
    for expression in spec.cell_expressions():
        budgets = [b for _, r in decided if (b := pair_budget_pp(r.cell(expression.text).replicate_values))
                   is not None]
        per_cell[expression.text] = None if not budgets else BudgetCell(max_pp=max(budgets),
                                                                        median_pp=statistics.median(budgets))
    flips = [row for name, result in decided for row in flip_rows(name, result, spec)]
    return RecalibrationBudget(
        cells=per_cell,
        flips=flips,
        counts=BudgetCounts(flips=len(flips), clear_budget=sum(f.clears_budget for f in flips),
                            hold_every_replicate=sum(bool(f.holds_every_replicate) for f in flips),
                            clear_and_hold=sum(f.clears_budget and bool(f.holds_every_replicate) for f in flips)),
    )
