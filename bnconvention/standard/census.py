"""The census instrument's parts of a refit annotation (spec version 1.1; docs/population.md): the family a
checkpoint belongs to, provenance arms with their draws and null band, recoverability curves, and a twin with
bit-identical trainable tensors. Every object here is reached only through a field marked ``since("1.1")``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

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

Fraction = Annotated[float, Field(ge=0, le=1)]


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
    """One arm of the provenance contrast (docs/statistics.md#provenance-contrast), over several pool draws."""

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


__all__ = [
    "CheckpointFamily",
    "NullBand",
    "ProvenanceArm",
    "RecoverabilityCurve",
    "RecoverabilityPoint",
    "TwinReference",
]
