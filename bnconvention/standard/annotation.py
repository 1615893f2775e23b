"""The refit annotation an auditor writes back, and its parts: the audited file, verdicts, anchoring,
recoverability and the provenance contrast. Its cells are in :mod:`.cells`; what spec version 1.1 added (each field
marked ``since("1.1")``) comes from :mod:`.census`, :mod:`.diagnostics` and :mod:`.quantization`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from bnconvention.standard.cells import Cell
from bnconvention.standard.census import CheckpointFamily, ProvenanceArm, RecoverabilityCurve, TwinReference
from bnconvention.standard.convention import FittingConvention
from bnconvention.standard.deployed import Producer
from bnconvention.standard.diagnostics import LinearProbeDecomposition, MembershipInference, Relearning
from bnconvention.standard.evidence import Staleness
from bnconvention.standard.fields import (
    AccumulationRule,
    Channel,
    Count,
    FlipDirection,
    NonEmptyStr,
    PositiveInt,
    Sha256Hex,
    SplitRole,
    StrictModel,
    VersionedRecord,
)
from bnconvention.standard.quantization import RefitState
from bnconvention.standard.versions import since


class AuditedFile(StrictModel):
    """The weights file an annotation audited."""

    filename: NonEmptyStr = Field(description="Path of the weights file inside its repository.")
    repo: NonEmptyStr | None = Field(default=None, description="Repository id, e.g. 'org/model'.")
    revision: NonEmptyStr | None = Field(default=None, description="Revision audited (commit sha or branch).")
    trainable_sha256: Sha256Hex = Field(description="Trainable digest of the audited file.")
    running_sha256: Sha256Hex | None = Field(default=None, description="Digest of the shipped running statistics.")
    declared_convention: NonEmptyStr | None = Field(default=None, description="Canonical name declared, if any.")


class Verdict(StrictModel):
    """A declared criterion evaluated on shipped and on refit cells."""

    criterion: NonEmptyStr = Field(description="e.g. 'abs(df - dt) <= 0.05'.")
    shipped: bool = Field(description="Outcome on the shipped cells.")
    refit: bool = Field(description="Outcome on the mean refit cells.")
    flipped: bool = Field(description="Whether the shipped and refit outcomes differ.")
    direction: FlipDirection | None = Field(default=None, description="Direction of a flip.")
    refit_pass_replicates: Count | None = Field(default=None, description="Replicates whose refit cells pass.")


class AnchorCell(StrictModel):
    """One published cell against its shipped reproduction."""

    metric: NonEmptyStr = Field(description="Cell name, e.g. 'df'.")
    published: float = Field(description="Value published by the authors.")
    shipped: float = Field(description="Value reproduced with the shipped state.")
    abs_diff: Annotated[float, Field(ge=0)] = Field(description="|published - shipped|.")


class Anchoring(StrictModel):
    """Whether the shipped cells reproduce the published ones within a tolerance."""

    tolerance: Annotated[float, Field(ge=0)] = Field(description="Largest allowed abs_diff (0.02 in the papers).")
    anchored: bool = Field(description="Whether every cell is within the tolerance.")
    cells: list[AnchorCell] = Field(description="The cells compared.")


class Recoverability(StrictModel):
    """Forget accuracy after a refit on a few unlabeled images (the papers' ten-image attack)."""

    images: PositiveInt = Field(description="Number of unlabeled images refit on (10 in the papers).")
    source: SplitRole = Field(description="Split the images come from.")
    rule: AccumulationRule = Field(description="Accumulation rule of the refit.")
    forget_accuracy_shipped: Annotated[float, Field(ge=0, le=1)] = Field(description="Forget accuracy as shipped.")
    forget_accuracy_after: Annotated[float, Field(ge=0, le=1)] = Field(description="Forget accuracy after the refit.")
    shift_pp: float = Field(description="After minus shipped, in pp.")


class ProvenanceContrast(StrictModel):
    """Exchange retained records for removed ones in a fixed-size fitting pool
    (docs/statistics.md#provenance-contrast)."""

    pool_size: PositiveInt = Field(description="Size of the fitting pool.")
    exchanged: Count = Field(description="Retained records exchanged for removed ones.")
    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Mean distance between the two refits.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Variance distance between the two refits.")
    forget_shift_pp: float | None = Field(default=None, description="Shift of forget accuracy, in pp.")


class RefitAnnotation(VersionedRecord):
    """What an auditor writes back: the audited file's cells as shipped and under a named refit convention."""

    kind: Literal["refit_annotation"] = Field(description="Record kind.")
    subject: AuditedFile = Field(description="The audited weights file.")
    convention: FittingConvention = Field(description="The refit convention applied.")
    channel: Channel = Field(description="'present', or 'absent' for a model without running statistics.")
    replicates: PositiveInt = Field(description="Number of independent refits per cell.")
    margin_pp: Annotated[float, Field(gt=0)] = Field(description="Margin of the decisions, in pp (1.2 in the papers).")
    anchoring: Anchoring | None = Field(default=None, description="Whether the shipped cells reproduce the paper.")
    cells: list[Cell] = Field(description="The cells, as shipped and as refit.")
    verdicts: list[Verdict] = Field(default_factory=list, description="Criteria on shipped and refit cells.")
    staleness: Staleness | None = Field(default=None, description="Distance of the shipped statistics from a refit.")
    provenance: ProvenanceContrast | None = Field(default=None, description="Provenance contrast, if measured.")
    recoverability: Recoverability | None = Field(default=None, description="Recoverability, if measured.")
    producer: Producer = Field(description="The tool that wrote the annotation.")
    reporting_line: NonEmptyStr = Field(description="The one sentence the annotation adds to the release.")
    family: Annotated[CheckpointFamily | None, since("1.1")] = Field(default=None, description=(
        "The checkpoint's place in its population."))
    provenance_arms: Annotated[list[ProvenanceArm] | None, since("1.1")] = Field(
        default=None, min_length=1, description="Provenance contrast arms over several draws, each against a null band."
    )
    recoverability_curves: Annotated[list[RecoverabilityCurve] | None, since("1.1")] = Field(
        default=None, min_length=1, description="Recoverability over budgets, one curve per proxy source.")
    twin: Annotated[TwinReference | None, since("1.1")] = Field(default=None, description=(
        "The checkpoint's frozen twin, if it has one."))
    linear_probe: Annotated[LinearProbeDecomposition | None, since("1.1")] = Field(default=None, description=(
        "Forget linear probe decomposed into BN- and NC-residual "
        "(docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning)."))
    membership_inference: Annotated[MembershipInference | None, since("1.1")] = Field(default=None, description=(
        "Shadow-free membership attack, shipped and refit."))
    relearning: Annotated[Relearning | None, since("1.1")] = Field(default=None, description=(
        "Relearning susceptibility, shipped and refit."))
    refit_state: Annotated[RefitState | None, since("1.1")] = Field(default=None, description=(
        "The deployed state the cells were refit on: 'batchnorm' (the running statistics; also when absent, the "
        "1.0 meaning) or 'activation_scales' (the quantization scales, at bit-identical θ and φ)."))
