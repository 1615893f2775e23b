"""The fitting convention: which data, transform, accumulation rule and buffer-update mode produced φ."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from bnconvention.standard.fields import (
    BufferUpdateMode,
    Count,
    DistributedMode,
    DropoutMode,
    Int,
    NonEmptyStr,
    PositiveInt,
    Precision,
    Sha256Hex,
    SplitRole,
    StrictModel,
    TransformMode,
    VarianceEstimator,
)


class DatasetRef(StrictModel):
    """The dataset the fitting pool was drawn from."""

    id: NonEmptyStr = Field(description="Dataset identity, e.g. 'sklearn/digits' or a Hub dataset id.")
    revision: NonEmptyStr | None = Field(default=None, description="Dataset revision (commit sha, version tag).")


class DataSplit(StrictModel):
    """Which records fitted the running statistics."""

    role: SplitRole = Field(description="Which split fitted the statistics.")
    dataset: DatasetRef = Field(description="The dataset the records come from.")
    subset: NonEmptyStr = Field(
        description="How the subset is defined, e.g. 'all classes except 3' or 'index file retain_idx.txt'."
    )
    record_count: Count | None = Field(default=None, description="Number of records in the fitting pool.")
    ids_sha256: Sha256Hex | None = Field(
        default=None,
        description="sha256 of the canonical JSON of the sorted list of record ids (see record_ids_sha256).",
    )
    sampling_seed: Int | None = Field(default=None, description="Seed used to draw the subset, if any.")


class Normalization(StrictModel):
    """Per-channel normalization applied by the transform: (x - mean) / std."""

    mean: list[float] = Field(min_length=1, description="Per-channel mean subtracted by the transform.")
    std: list[Annotated[float, Field(gt=0)]] = Field(min_length=1, description="Per-channel std divided by.")


class TransformDescription(StrictModel):
    """The canonical description of a transform; its canonical JSON is what `Transform.sha256` hashes."""

    resize: NonEmptyStr | None = Field(default=None, description="Resize step, e.g. '16x16 bilinear'.")
    crop: NonEmptyStr | None = Field(default=None, description="Crop step, e.g. 'random 32 pad 4'.")
    augmentations: list[NonEmptyStr] = Field(
        default_factory=list, description="Random augmentations in order, e.g. ['hflip p=0.5']; empty for none."
    )
    normalize: Normalization | None = Field(default=None, description="Normalization mean/std, if any.")
    steps: list[NonEmptyStr] | None = Field(
        default=None, description="Every step of the pipeline in order, 'Class(param=value, ...)' with the values as "
        "canonical JSON; written when the description is derived from a transform object (describe_transform)."
    )


class Transform(StrictModel):
    """The input transform in force while the statistics were fitted."""

    mode: TransformMode = Field(description="'train' (with augmentation) or 'eval' transform.")
    reference: NonEmptyStr | None = Field(
        default=None, description="Where the transform is defined, e.g. 'train.py:train_transform'."
    )
    description: TransformDescription = Field(description="Canonical description of the transform.")
    sha256: Sha256Hex = Field(description="sha256 of the canonical JSON of `description`.")


class _AccumulationBase(StrictModel):
    batch_size: PositiveInt | None = Field(default=None, description="Batch size of the fitting pass.")
    num_batches: PositiveInt | None = Field(default=None, description="Number of batches seen.")
    variance_estimator: VarianceEstimator = Field(description="Estimator of the stored running variance.")
    precision: Precision = Field(description="Precision the statistics were accumulated in.")


class EmaAccumulation(_AccumulationBase):
    """Exponential moving average: running = (1 - momentum) * running + momentum * batch statistic."""

    rule: Literal["ema"] = Field(description="Accumulation rule: exponential moving average.")
    momentum: Annotated[float, Field(gt=0, le=1)] = Field(description="EMA momentum (PyTorch convention).")


class CumulativeAccumulation(_AccumulationBase):
    """Cumulative moving average over the batches (momentum None, as torch.optim.swa_utils.update_bn)."""

    rule: Literal["cumulative"] = Field(description="Accumulation rule: cumulative moving average.")


class ExactAccumulation(_AccumulationBase):
    """Exact mean and variance over the whole pool, computed layer by layer."""

    rule: Literal["exact"] = Field(description="Accumulation rule: exact pool statistics.")


Accumulation = Annotated[
    EmaAccumulation | CumulativeAccumulation | ExactAccumulation, Field(discriminator="rule")
]


class OtherModules(StrictModel):
    """The mode of modules other than BatchNorm while the statistics were fitted."""

    dropout: DropoutMode = Field(description="Dropout during fitting: 'off', 'on', or 'absent' from the model.")


class FittingConvention(StrictModel):
    """The named recipe that produced the running statistics."""

    name: NonEmptyStr = Field(description="Canonical name derived from the other fields (see canonical_name).")
    data: DataSplit = Field(description="Which split fitted the statistics.")
    transform: Transform = Field(description="The transform in force during fitting.")
    accumulation: Accumulation = Field(description="How batch statistics were accumulated (tagged by rule).")
    buffer_update_mode: BufferUpdateMode = Field(description="How the buffers were last written.")
    other_modules: OtherModules = Field(description="Mode of the other modules during fitting.")
    distributed: DistributedMode = Field(description="How statistics were combined across processes.")

