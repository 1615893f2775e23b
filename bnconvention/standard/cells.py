"""A cell: one published number on one checkpoint, as shipped and as refit, with the decision on its shift
(docs/statistics.md#displaced-the-exact-sign-test)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bnconvention.standard.diagnostics import CellReference, CellUnit
from bnconvention.standard.fields import DecisionOutcome, NonEmptyStr, PositiveInt, SplitRole, StrictModel
from bnconvention.standard.versions import since

Fraction = Annotated[float, Field(ge=0, le=1)]


class CellDecision(StrictModel):
    """The statistical decision on a cell's shift against the margin; in a census, with its place in the
    multiplicity family (docs/statistics.md#across-a-census-benjaminiyekutieli)."""

    outcome: DecisionOutcome = Field(description="displaced, equivalent or undetermined.")
    p_value: Annotated[float, Field(ge=0, le=1)] | None = Field(default=None, description="p-value of the test.")
    method: NonEmptyStr = Field(description="e.g. 'exact-sign-test', 'tost-90', 'channel-absent'.")
    by_p_value: Annotated[Fraction | None, since("1.1")] = Field(default=None, description=(
        "Benjamini-Yekutieli adjusted sign-test p-value of this cell across the census family it was decided in; "
        "absent outside a census and for known-answer controls (they are not in the family)."))
    by_family_size: Annotated[PositiveInt | None, since("1.1")] = Field(default=None, description=(
        "Number m of checkpoints in that family (the p-values adjusted together)."))


class Cell(StrictModel):
    """One published number on one checkpoint, as shipped and as refit."""

    metric: NonEmptyStr = Field(description="'df', 'dr', 'dt', a gap such as 'abs(df - dt)', or a user metric.")
    split: SplitRole | None = Field(default=None, description="Split the metric is computed on, if one.")
    shipped: float = Field(description="Value with the shipped running statistics.")
    refit: float = Field(description="Mean of the replicate values.")
    shift_pp: float = Field(description="Mean of refit minus shipped, in percentage points.")
    replicate_values: list[float] = Field(min_length=1, description="Value after each replicate refit.")
    replicate_shifts_pp: list[float] = Field(min_length=1, description="Shift of each replicate, in pp.")
    margin_pp: Annotated[float, Field(gt=0)] = Field(description="Margin the shift is tested against, in pp.")
    decision: CellDecision = Field(description="Decision on the shift.")
    published: float | None = Field(default=None, description="Value published by the authors, if known.")
    unit: Annotated[CellUnit | None, since("1.1")] = Field(default=None, description=(
        "Unit of shipped, refit, the replicate values and published: 'fraction' (in [0, 1], the 1.0 meaning, also "
        "when absent) or 'auc' (an attack AUC), both with shifts 100 x (refit - shipped) in pp; 'pp' (a difference "
        "already in pp), shifts refit - shipped."))
    reference: Annotated[CellReference | None, since("1.1")] = Field(default=None, description=(
        "The reference arm the cell compares with (the retrain checkpoint), with its value of the cell."))


__all__ = ["Cell", "CellDecision"]
