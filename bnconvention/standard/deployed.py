"""The deployed state a record describes, the digests that bind it to a file's tensors, and who wrote it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from bnconvention.standard.fields import NonEmptyStr, PositiveInt, Sha256Hex, StrictModel


class BatchNormLayer(StrictModel):
    """One BatchNorm module as deployed."""

    name: NonEmptyStr = Field(description="Module name; its buffers are '<name>.running_mean' etc.")
    type: NonEmptyStr = Field(description="Module class, e.g. 'BatchNorm2d' or 'SyncBatchNorm'.")
    num_features: PositiveInt = Field(description="Number of channels: the length of each running buffer.")
    eps: Annotated[float, Field(gt=0)] = Field(description="Value added to the variance for numerical stability.")
    momentum: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="Layer momentum; absent means None (cumulative moving average)."
    )
    affine: bool = Field(description="Whether the layer has learnable weight (gamma) and bias (beta).")
    track_running_stats: bool = Field(description="Whether the layer keeps running buffers.")
    running_sha256: Sha256Hex | None = Field(
        default=None, description="Digest of this layer's running buffers; absent when it tracks none."
    )


class BatchNormState(StrictModel):
    """The BatchNorm deployed state: every BatchNorm layer of the network."""

    kind: Literal["batchnorm"] = Field(description="Deployed-state kind: BatchNorm running statistics.")
    layers: list[BatchNormLayer] = Field(description="Every BatchNorm layer in module order; empty: channel absent.")


class TensorDigests(StrictModel):
    """Digests binding the record to a weights file's tensors (algorithm bnconvention-tensors/1)."""

    algorithm: Literal["bnconvention-tensors/1"] = Field(description="Digest algorithm (see docs/standard.md).")
    trainable_sha256: Sha256Hex = Field(description="Digest of every tensor except BN running statistics.")
    running_sha256: Sha256Hex | None = Field(
        default=None, description="Digest of all BN running statistics; absent when there are none."
    )


class Producer(StrictModel):
    """The tool that wrote the record."""

    tool: NonEmptyStr = Field(description="Tool name, e.g. 'bnconvention'.")
    version: NonEmptyStr = Field(description="Tool version.")

