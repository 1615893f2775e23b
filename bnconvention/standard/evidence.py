"""Measured evidence a declaration can carry: the recorder's observation of a run, and a refit's details with the
staleness of the statistics it replaced (docs/statistics.md#staleness)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from bnconvention.standard.fields import (
    AccumulationRule,
    BufferUpdateMode,
    Count,
    DropoutMode,
    NonEmptyStr,
    Precision,
    Sha256Hex,
    StrictModel,
)
from bnconvention.standard.versions import since

# --- recorder evidence ------------------------------------------------------------------------------------------


class LayerObservation(StrictModel):
    name: NonEmptyStr
    train_forwards: Count = Field(description="Forwards in training mode.")
    eval_forwards: Count = Field(description="Forwards in eval mode (evaluation and frozen steps).")
    buffer_updates: Count = Field(description="Forwards that updated the running buffers.")
    momenta: list[Annotated[float, Field(gt=0, le=1)] | None] = Field(
        default_factory=list, description="Distinct momenta in force during updates (null = cumulative)."
    )
    buffers_changed: bool = Field(description="Whether the buffers differ between start and end of the run.")
    frozen_forwards: Count | None = Field(
        default=None,
        description="Eval-mode forwards with autograd enabled: training steps that left the buffers frozen.",
    )
    refits: Count | None = Field(default=None, description="Refits that replaced this layer's buffers.")
    mode: BufferUpdateMode | None = Field(
        default=None,
        description="How this layer's buffers were last written, derived from the events; absent for a layer "
                    "that tracks no running statistics.",
    )


class Contradiction(StrictModel):
    code: NonEmptyStr = Field(description="Stable code, e.g. 'declared-frozen-buffers-changed'.")
    message: NonEmptyStr
    layers: list[NonEmptyStr] = Field(default_factory=list, description="BatchNorm layers concerned, if any.")


class ModeOverride(StrictModel):
    """The author's buffer-update mode put in place of the observed one: who said what, beside what was observed.
    The declaration's convention carries ``mode``; the observation keeps its own ``mode`` (the recorder's)."""

    mode: BufferUpdateMode = Field(description="The mode the author declares, used by the convention.")
    observed: BufferUpdateMode = Field(description="The mode the recorder derived from the run's events.")
    by: NonEmptyStr = Field(description="Who overrides the observed mode (a person, a team or a pipeline).")
    reason: NonEmptyStr = Field(description="Why the observed mode does not describe the deployed statistics.")


class LayerNameMapping(StrictModel):
    """How the layer names the recorder saw map onto the weights' (a wrapper around the released network)."""

    observed_prefix: str = Field(description="Prefix of the names in the run, e.g. 'module.' or 'net.' (may be '').")
    weights_prefix: str = Field(description="Prefix of the same layers' names in the weights (may be '').")


class SplitShare(StrictModel):
    """One named split's part in the running statistics, matched by the records' content."""

    split: NonEmptyStr = Field(description="The split's name as the author gave it (e.g. 'retain', 'forget').")
    records: Count = Field(description="Records of this split in the batches that wrote the buffers.")
    share: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Its weight in the final running statistics: each write's fraction of this split's records, "
                    "weighted as the accumulation rule weights that write (ema: momentum times (1 - momentum) per "
                    "later write; cumulative: equally).")


class SplitMatching(StrictModel):
    """Which data the statistics saw, measured by content: the records of the buffer-writing batches matched
    against the splits the author named (digests of each record's input tensor)."""

    splits: list[SplitShare] = Field(min_length=1, description="Every named split, in the order given.")
    unmatched_records: Count = Field(description="Records of buffer-writing batches found in no named split.")
    unmatched_share: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Weight of the unmatched records in the final statistics (augmented or unnamed data).")
    initial_share: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Weight the buffers' values from before the run keep in the final statistics.")


class Observation(StrictModel):
    """What the recorder measured during a run: forwards, buffer writes and the mode derived from them; since 1.1
    also an author's override beside the observed mode, the mapping of layer names across a wrapper, and the
    splits matched by content."""

    train_forwards: Count
    eval_forwards: Count
    buffer_updates: Count
    buffers_changed: bool
    batch_size_min: Count | None = None
    batch_size_max: Count | None = None
    split_tags: list[NonEmptyStr] = Field(
        default_factory=list, description="Split tags seen during buffer updates, in order of first appearance."
    )
    last_update_split: NonEmptyStr | None = Field(default=None, description="Split tag of the last buffer update.")
    layers: list[LayerObservation] = Field(default_factory=list)
    contradictions: list[Contradiction] = Field(default_factory=list)
    mode: BufferUpdateMode | None = Field(
        default=None, description="Buffer-update mode derived from the events (the recorder's rules)."
    )
    last_write: Literal["update", "refit"] | None = Field(
        default=None, description="What wrote the buffers last: a training-mode 'update' or a 'refit'."
    )
    rule: AccumulationRule | None = Field(
        default=None, description="Accumulation rule of the last buffer write: ema, cumulative, or the refit's."
    )
    momentum: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="Momentum of the last buffer write when the rule is ema."
    )
    frozen_forwards: Count | None = Field(
        default=None, description="Eval-mode forwards with autograd enabled (frozen training steps)."
    )
    refits: Count | None = Field(default=None, description="Refits observed during the run.")
    trainable_changed: bool | None = Field(
        default=None, description="Whether the trainable tensors differ between start and end of the run."
    )
    dropout: DropoutMode | None = Field(
        default=None, description="Dropout during the buffer updates: on, off, or absent from the model."
    )
    precision: Precision | None = Field(default=None, description="Dtype of the running buffers.")
    override: Annotated[ModeOverride | None, since("1.1")] = Field(
        default=None, description="The author's mode in place of the observed one, recorded as an override."
    )
    name_mapping: Annotated[LayerNameMapping | None, since("1.1")] = Field(
        default=None, description="How the layer names of 'layers' map onto the declared weights' layer names."
    )
    split_matching: Annotated[SplitMatching | None, since("1.1")] = Field(
        default=None, description="Which named splits the buffer-writing batches held, and their shares."
    )


# --- staleness and refit details ------------------------------------------------------------------------------------


class LayerStaleness(StrictModel):
    """Staleness distances of one BatchNorm layer."""

    name: NonEmptyStr = Field(description="BatchNorm layer name.")
    mean_distance: Annotated[float, Field(ge=0)] = Field(description="||mu - mu_hat||_2 / ||sigma_hat||_2.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="||var - var_hat||_2 / ||var_hat||_2.")


class StalenessBand(StrictModel):
    """The reference band: the same distances between two independent retain refits."""

    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Layer-averaged mean distance of the two refits.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Layer-averaged variance distance of the refits.")


class Staleness(StrictModel):
    """How far the previous (shipped) statistics are from refit ones (docs/statistics.md#staleness)."""

    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Layer average of the mean distance.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Layer average of the variance distance.")
    layers: list[LayerStaleness] = Field(description="Per-layer distances, in module order.")
    reference_band: StalenessBand | None = Field(
        default=None, description="Same distances between two independent retain refits."
    )
    exceeds_band: bool | None = Field(default=None, description="Whether the distances exceed the reference band.")


class RefitDetails(StrictModel):
    """What a refit did: digests before and after (the weights must not change), staleness, cost."""

    trainable_sha256_before: Sha256Hex = Field(description="Trainable digest before the refit.")
    trainable_sha256_after: Sha256Hex = Field(description="Trainable digest after the refit: equals the one before.")
    running_sha256_before: Sha256Hex | None = Field(default=None, description="Running digest before the refit.")
    running_sha256_after: Sha256Hex | None = Field(default=None, description="Running digest after the refit.")
    staleness: Staleness = Field(description="Distance of the previous statistics from the refit ones.")
    seconds: Annotated[float, Field(ge=0)] = Field(description="Wall-clock seconds the refit took.")
    forward_passes: Count | None = Field(default=None, description="Passes over the pool the rule needed.")
    warnings: list[NonEmptyStr] = Field(default_factory=list, description="Warnings the refit raised, if any.")

