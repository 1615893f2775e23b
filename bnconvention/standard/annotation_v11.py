"""What version 1.1 of the standard adds to a refit annotation, for the census instrument (issue 13).

Every addition is optional and says something 1.0 could not: the Benjamini–Yekutieli adjusted p of each cell, the
family a checkpoint belongs to, several provenance arms with their draws and null band, a recoverability curve,
and a twin with bit-identical trainable tensors. A 1.0 record means the same in 1.1 (``bnconvention migrate`` only
rewrites ``spec_version``); a 1.0 record carrying one of these fields is invalid, since 1.0 objects admit no
property they do not define. The criterion ``|df - dt|`` needs nothing new: it is the 1.0 cell ``abs(df - dt)``
and a verdict on it (docs/standard.md, "What changed in 1.1"). The encoder-level diagnostics of seed 003 (typed
cells with a unit and a reference arm, the linear-probe, attack and relearning protocols) are in
:mod:`.encoder_v11`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from bnconvention.standard.annotation import Cell, CellDecision, RefitAnnotation
from bnconvention.standard.encoder_v11 import (
    CellReference,
    CellUnit,
    LinearProbeDecomposition,
    MembershipInference,
    Relearning,
)
from bnconvention.standard.fields import (
    AccumulationRule,
    BufferUpdateMode,
    Count,
    Int,
    NonEmptyStr,
    PositiveInt,
    Sha256Hex,
    SplitRole,
    StrictModel,
)
from bnconvention.standard.quantization import RefitStateV11

Fraction = Annotated[float, Field(ge=0, le=1)]


class CellDecisionV11(CellDecision):
    """The decision on a cell's shift, with its place in the census's multiplicity family."""

    by_p_value: Fraction | None = Field(default=None, description=(
        "Benjamini-Yekutieli adjusted sign-test p-value of this cell across the census family it was decided in; "
        "absent outside a census and for known-answer controls (they are not in the family)."))
    by_family_size: PositiveInt | None = Field(default=None, description=(
        "Number m of checkpoints in that family (the p-values adjusted together)."))


class CellV11(Cell):
    """One published number on one checkpoint, as shipped and as refit (1.1: the decision may carry by_p_value)."""

    decision: CellDecisionV11 = Field(description="Decision on the shift.")
    unit: CellUnit | None = Field(default=None, description=(
        "Unit of shipped, refit, the replicate values and published: 'fraction' (in [0, 1], the 1.0 meaning, also "
        "when absent) or 'auc' (an attack AUC), both with shifts 100 x (refit - shipped) in pp; 'pp' (a difference "
        "already in pp), shifts refit - shipped."))
    reference: CellReference | None = Field(default=None, description=(
        "The reference arm the cell compares with (the retrain checkpoint), with its value of the cell."))


class CheckpointFamily(StrictModel):
    """Where a checkpoint sits in a structured population: families x procedure variants x removals x seeds."""

    name: NonEmptyStr = Field(description="Unlearning family, e.g. 'gradient-ascent' or 'fine-tune'.")
    variant: NonEmptyStr | None = Field(default=None, description=(
        "Procedure variant, e.g. how BN buffers were treated: 'train-mode', 'eval-mode', 'frozen-buffers'."))
    removal: NonEmptyStr | None = Field(default=None, description=(
        "What was removed, e.g. 'instances 5%' or 'class 3'; 'none' for a no-removal base."))
    seed: Int | None = Field(default=None, description="Training seed of the checkpoint.")


class NullBand(StrictModel):
    """The range a contrast takes when nothing removed is exchanged (retained records for retained ones), in pp."""

    lower: float = Field(description="Lower end of the null band, in pp.")
    upper: float = Field(description="Upper end of the null band, in pp.")
    level: Fraction | None = Field(default=None, description="Coverage of the band, e.g. 0.95.")


class ProvenanceArm(StrictModel):
    """One arm of the provenance contrast (seed 001, appendix P), over several pool draws."""

    arm: NonEmptyStr = Field(description=(
        "'deployment-share' (removed records at their share of the deployment pool) or 'ceiling' (every removed "
        "record in the pool), or another named arm."))
    pool_size: PositiveInt = Field(description="Size of the fitting pool.")
    exchanged: Count = Field(description="Retained records exchanged for removed ones.")
    forget_shift_pp: list[float] = Field(min_length=1, description="Forget-accuracy shift of each draw, in pp.")
    null_band: NullBand | None = Field(default=None, description="The null band the draws are decided against.")
    outside_null: bool | None = Field(default=None, description="Whether the mean shift lies outside the null band.")


class RecoverabilityPoint(StrictModel):
    """Forget accuracy after a refit on a budget of B unlabeled proxy images, one value per seed."""

    images: PositiveInt = Field(description="Budget B: the number of unlabeled images refit on.")
    forget_accuracy: list[Fraction] = Field(min_length=1, description="Forget accuracy after the refit, per seed.")


class RecoverabilityCurve(StrictModel):
    """Recoverability over budgets for one proxy source (the papers' attack is the B = 10 point)."""

    source: SplitRole = Field(description="Split the proxies come from ('other' for out-of-distribution images).")
    description: NonEmptyStr | None = Field(default=None, description="What the proxies are, e.g. 'gaussian noise'.")
    rule: AccumulationRule = Field(description="Accumulation rule of the refits.")
    seeds: list[Int] = Field(min_length=1, description="Seeds of the proxy draws, in the order of the values.")
    forget_accuracy_shipped: Fraction = Field(description="Forget accuracy as shipped.")
    points: list[RecoverabilityPoint] = Field(min_length=1, description="One point per budget, budgets ascending.")


class TwinReference(StrictModel):
    """The frozen-twin intervention: a checkpoint with bit-identical trainable tensors whose buffers took another
    trajectory (one arm updated online, one frozen)."""

    filename: NonEmptyStr = Field(description="Path of the twin's weights file inside its repository.")
    repo: NonEmptyStr | None = Field(default=None, description="The twin's repository id.")
    revision: NonEmptyStr | None = Field(default=None, description="Revision of the twin.")
    trainable_sha256: Sha256Hex = Field(description="Trainable digest of the twin: equal to the subject's.")
    running_sha256: Sha256Hex | None = Field(default=None, description="Digest of the twin's running statistics.")
    buffer_update_mode: BufferUpdateMode | None = Field(default=None, description="How the twin's buffers moved.")
    metric: NonEmptyStr = Field(description="The cell the gap is measured on, e.g. 'df'.")
    gap_pp: float = Field(description="Subject's shipped cell minus the twin's, in pp.")


class RefitAnnotationV11(RefitAnnotation):
    """A refit annotation of spec version 1.1: a 1.0 annotation plus the census instrument's optional fields."""

    spec_version: Literal["1.1"] = Field(  # type: ignore[assignment]
        description="Version of the standard the record follows.")
    cells: list[CellV11] = Field(description="The cells, as shipped and as refit.")  # type: ignore[assignment]
    family: CheckpointFamily | None = Field(default=None, description="The checkpoint's place in its population.")
    provenance_arms: list[ProvenanceArm] | None = Field(default=None, min_length=1, description=(
        "Provenance contrast arms over several draws, each against a null band."))
    recoverability_curves: list[RecoverabilityCurve] | None = Field(default=None, min_length=1, description=(
        "Recoverability over budgets, one curve per proxy source."))
    twin: TwinReference | None = Field(default=None, description="The checkpoint's frozen twin, if it has one.")
    linear_probe: LinearProbeDecomposition | None = Field(default=None, description=(
        "Forget linear probe decomposed into BN- and NC-residual (seed 003, Proposition 1)."))
    membership_inference: MembershipInference | None = Field(default=None, description=(
        "Shadow-free membership attack, shipped and refit."))
    relearning: Relearning | None = Field(default=None, description=(
        "Relearning susceptibility, shipped and refit."))
    refit_state: RefitStateV11 | None = Field(default=None, description=(
        "The deployed state the cells were refit on: 'batchnorm' (the running statistics; also when absent, the "
        "1.0 meaning) or 'activation_scales' (the quantization scales, at bit-identical θ and φ)."))


__all__ = [
    "CellDecisionV11",
    "CellV11",
    "CheckpointFamily",
    "NullBand",
    "ProvenanceArm",
    "RecoverabilityCurve",
    "RecoverabilityPoint",
    "RefitAnnotationV11",
    "TwinReference",
]
