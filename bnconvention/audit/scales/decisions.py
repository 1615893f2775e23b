"""The decision of an activation-scales cell from its replicate shifts: the standard's rules (exact sign test, TOST,
the same ``decide`` as every BatchNorm cell), for a freshly measured cell (:mod:`.cells`) and for a stored one
re-decided at another margin (a census rerun, the margin sweep of the population's readings).

Torch-free: the margin sweep reads it on the population's torch-free path (the HTML report).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from bnconvention.audit.measure.stats import decide
from bnconvention.standard.models import Cell, CellDecision

C = TypeVar("C", bound=Cell)


def scales_decision(shifts: Sequence[float], *, margin_pp: float) -> CellDecision:
    """The decision of a scales cell whose replicate shifts (pp) are ``shifts``."""
    decision = decide(list(shifts), margin_pp=margin_pp)
    return CellDecision(outcome=decision.outcome, p_value=decision.p_value, method=decision.method)


def redecide_scales_cell(cell: C, *, margin_pp: float) -> C:
    """``cell`` decided at ``margin_pp`` from its stored replicate shifts alone (the rule of a freshly measured
    scales cell): what a census rerun under another margin gives without a recalibration."""
    decision = scales_decision(cell.replicate_shifts_pp, margin_pp=margin_pp)
    return cell.model_copy(update={"margin_pp": margin_pp,
                                   "decision": type(cell.decision).model_validate(decision.model_dump())})


__all__ = ["redecide_scales_cell", "scales_decision"]
