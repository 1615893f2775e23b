"""The bnconvention standard, version 1, as pydantic v2 models.

These models are the single source of truth: ``schema/v1/bnconvention.schema.json`` is generated from them
(``bnconvention schema --write``) and a test proves the committed file equals the generated one. Constraints live
in the type declarations only (patterns, enums, bounds, discriminated unions), so the JSON Schema and the models
accept exactly the same documents. Rules that need more than one field (a canonical name that must match the other
fields, digests that must match a file) are *semantic* checks in :mod:`bnconvention.validation`.

Serialize with :func:`to_dict` (drops ``None``); parse with :func:`parse_record`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

SPEC_VERSION = "1.0"
SCHEMA_ID = "https://bnconvention.github.io/schema/v1/bnconvention.schema.json"
DIGEST_ALGORITHM = "bnconvention-tensors/1"

# Literal aliases double as CLI choices (``typing.get_args``).
SplitRole: TypeAlias = Literal["train", "retain", "forget", "test", "proxy", "other"]
TransformMode: TypeAlias = Literal["train", "eval"]
AccumulationRule: TypeAlias = Literal["ema", "cumulative", "exact"]
BufferUpdateMode: TypeAlias = Literal["train", "frozen", "mixed", "refit", "untouched", "unknown"]
DistributedMode: TypeAlias = Literal["none", "sync_batchnorm", "all_reduce", "rank0_broadcast"]
VarianceEstimator: TypeAlias = Literal["unbiased", "biased"]
Precision: TypeAlias = Literal["float16", "bfloat16", "float32", "float64"]
DropoutMode: TypeAlias = Literal["off", "on", "absent"]
DecisionOutcome: TypeAlias = Literal["displaced", "equivalent", "undetermined"]
Channel: TypeAlias = Literal["present", "absent"]
FlipDirection: TypeAlias = Literal["pass_to_fail", "fail_to_pass"]

Sha256Hex = Annotated[
    str, StringConstraints(pattern=r"^[0-9a-f]{64}$"),
    Field(description="Lowercase hexadecimal sha256 digest (64 characters)."),
]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
Count = Annotated[int, Field(ge=0)]


class _Model(BaseModel):
    # strict: no silent coercion ("1" is not 1), so the models accept what the JSON Schema accepts.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


# --- fitting convention ---------------------------------------------------------------------------------------------


class DatasetRef(_Model):
    id: NonEmptyStr = Field(description="Dataset identity, e.g. 'sklearn/digits' or a Hub dataset id.")
    revision: NonEmptyStr | None = Field(default=None, description="Dataset revision (commit sha, version tag).")


class DataSplit(_Model):
    role: SplitRole = Field(description="Which split fitted the statistics.")
    dataset: DatasetRef
    subset: NonEmptyStr = Field(
        description="How the subset is defined, e.g. 'all classes except 3' or 'index file retain_idx.txt'."
    )
    record_count: Count | None = Field(default=None, description="Number of records in the fitting pool.")
    ids_sha256: Sha256Hex | None = Field(
        default=None,
        description="sha256 of the canonical JSON of the sorted list of record ids (see record_ids_sha256).",
    )
    sampling_seed: int | None = Field(default=None, description="Seed used to draw the subset, if any.")


class Normalization(_Model):
    mean: list[float] = Field(min_length=1, description="Per-channel mean subtracted by the transform.")
    std: list[Annotated[float, Field(gt=0)]] = Field(min_length=1, description="Per-channel std divided by.")


class TransformDescription(_Model):
    resize: NonEmptyStr | None = Field(default=None, description="Resize step, e.g. '16x16 bilinear'.")
    crop: NonEmptyStr | None = Field(default=None, description="Crop step, e.g. 'random 32 pad 4'.")
    augmentations: list[NonEmptyStr] = Field(
        default_factory=list, description="Random augmentations in order, e.g. ['hflip p=0.5']; empty for none."
    )
    normalize: Normalization | None = Field(default=None, description="Normalization mean/std, if any.")


class Transform(_Model):
    mode: TransformMode = Field(description="'train' (with augmentation) or 'eval' transform.")
    reference: NonEmptyStr | None = Field(
        default=None, description="Where the transform is defined, e.g. 'train.py:train_transform'."
    )
    description: TransformDescription
    sha256: Sha256Hex = Field(description="sha256 of the canonical JSON of `description`.")


class _AccumulationBase(_Model):
    batch_size: Annotated[int, Field(ge=1)] | None = Field(default=None, description="Batch size of the fitting pass.")
    num_batches: Annotated[int, Field(ge=1)] | None = Field(default=None, description="Number of batches seen.")
    variance_estimator: VarianceEstimator = Field(description="Estimator of the stored running variance.")
    precision: Precision = Field(description="Precision the statistics were accumulated in.")


class EmaAccumulation(_AccumulationBase):
    rule: Literal["ema"]
    momentum: Annotated[float, Field(gt=0, le=1)] = Field(description="EMA momentum (PyTorch convention).")


class CumulativeAccumulation(_AccumulationBase):
    rule: Literal["cumulative"]


class ExactAccumulation(_AccumulationBase):
    rule: Literal["exact"]


Accumulation = Annotated[
    Union[EmaAccumulation, CumulativeAccumulation, ExactAccumulation], Field(discriminator="rule")
]


class OtherModules(_Model):
    dropout: DropoutMode = Field(description="Dropout during fitting: 'off', 'on', or 'absent' from the model.")


class FittingConvention(_Model):
    name: NonEmptyStr = Field(description="Canonical name derived from the other fields (see canonical_name).")
    data: DataSplit
    transform: Transform
    accumulation: Accumulation
    buffer_update_mode: BufferUpdateMode = Field(description="How the buffers were last written.")
    other_modules: OtherModules
    distributed: DistributedMode = Field(description="How statistics were combined across processes.")


# --- deployed state ----------------------------------------------------------------------------------------------


class BatchNormLayer(_Model):
    name: NonEmptyStr = Field(description="Module name; its buffers are '<name>.running_mean' etc.")
    type: NonEmptyStr = Field(description="Module class, e.g. 'BatchNorm2d' or 'SyncBatchNorm'.")
    num_features: Annotated[int, Field(ge=1)]
    eps: Annotated[float, Field(gt=0)]
    momentum: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="Layer momentum; absent means None (cumulative moving average)."
    )
    affine: bool
    track_running_stats: bool
    running_sha256: Sha256Hex | None = Field(
        default=None, description="Digest of this layer's running buffers; absent when it tracks none."
    )


class BatchNormState(_Model):
    kind: Literal["batchnorm"]
    layers: list[BatchNormLayer] = Field(description="Every BatchNorm layer in module order; empty: channel absent.")


# A union of one member in v1; later minor versions add kinds (e.g. activation quantization scales) here.
DeployedState = Annotated[Union[BatchNormState], Field(discriminator="kind")]


class TensorDigests(_Model):
    algorithm: Literal["bnconvention-tensors/1"]
    trainable_sha256: Sha256Hex = Field(description="Digest of every tensor except BN running statistics.")
    running_sha256: Sha256Hex | None = Field(
        default=None, description="Digest of all BN running statistics; absent when there are none."
    )


class Producer(_Model):
    tool: NonEmptyStr
    version: NonEmptyStr


# --- recorder evidence ------------------------------------------------------------------------------------------


class LayerObservation(_Model):
    name: NonEmptyStr
    train_forwards: Count = Field(description="Forwards in training mode.")
    eval_forwards: Count = Field(description="Forwards in eval mode.")
    buffer_updates: Count = Field(description="Forwards that updated the running buffers.")
    momenta: list[Annotated[float, Field(gt=0, le=1)] | None] = Field(
        default_factory=list, description="Distinct momenta in force during updates (null = cumulative)."
    )
    buffers_changed: bool = Field(description="Whether the buffers differ between start and end of the run.")


class Contradiction(_Model):
    code: NonEmptyStr = Field(description="Stable code, e.g. 'declared-frozen-buffers-changed'.")
    message: NonEmptyStr


class Observation(_Model):
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


# --- staleness and refit details ------------------------------------------------------------------------------------


class LayerStaleness(_Model):
    name: NonEmptyStr
    mean_distance: Annotated[float, Field(ge=0)] = Field(description="||mu - mu_hat||_2 / ||sigma_hat||_2.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="||var - var_hat||_2 / ||var_hat||_2.")


class StalenessBand(_Model):
    mean_distance: Annotated[float, Field(ge=0)]
    var_distance: Annotated[float, Field(ge=0)]


class Staleness(_Model):
    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Layer average of the mean distance.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Layer average of the variance distance.")
    layers: list[LayerStaleness]
    reference_band: StalenessBand | None = Field(
        default=None, description="Same distances between two independent retain refits."
    )
    exceeds_band: bool | None = None


class RefitDetails(_Model):
    trainable_sha256_before: Sha256Hex
    trainable_sha256_after: Sha256Hex
    running_sha256_before: Sha256Hex | None = None
    running_sha256_after: Sha256Hex | None = None
    staleness: Staleness = Field(description="Distance of the previous statistics from the refit ones.")
    seconds: Annotated[float, Field(ge=0)]
    forward_passes: Count | None = Field(default=None, description="Passes over the pool the rule needed.")
    warnings: list[NonEmptyStr] = Field(default_factory=list)


# --- record kinds ---------------------------------------------------------------------------------------------------


class Declaration(_Model):
    """How the deployed state of one weights file was fitted, bound to its tensors by digests."""

    spec_version: Literal["1.0"]
    kind: Literal["declaration"]
    convention: FittingConvention
    deployed_state: list[DeployedState] = Field(min_length=1)
    digests: TensorDigests
    producer: Producer
    reporting_line: NonEmptyStr | None = None
    observation: Observation | None = Field(default=None, description="Evidence measured by the recorder.")
    refit: RefitDetails | None = Field(default=None, description="Present when the state was produced by a refit.")


class AuditedFile(_Model):
    filename: NonEmptyStr
    repo: NonEmptyStr | None = None
    revision: NonEmptyStr | None = None
    trainable_sha256: Sha256Hex
    running_sha256: Sha256Hex | None = Field(default=None, description="Digest of the shipped running statistics.")
    declared_convention: NonEmptyStr | None = Field(default=None, description="Canonical name declared, if any.")


class CellDecision(_Model):
    outcome: DecisionOutcome
    p_value: Annotated[float, Field(ge=0, le=1)] | None = None
    method: NonEmptyStr = Field(description="e.g. 'exact-sign-test', 'tost-90', 'channel-absent'.")


class Cell(_Model):
    metric: NonEmptyStr = Field(description="'df', 'dr', 'dt', a gap such as 'abs(df - dt)', or a user metric.")
    split: SplitRole | None = None
    shipped: float
    refit: float = Field(description="Mean of the replicate values.")
    shift_pp: float = Field(description="Mean of refit minus shipped, in percentage points.")
    replicate_values: list[float] = Field(min_length=1)
    replicate_shifts_pp: list[float] = Field(min_length=1)
    margin_pp: Annotated[float, Field(gt=0)]
    decision: CellDecision
    published: float | None = None


class Verdict(_Model):
    criterion: NonEmptyStr = Field(description="e.g. 'abs(df - dt) <= 0.05'.")
    shipped: bool
    refit: bool = Field(description="Outcome on the mean refit cells.")
    flipped: bool
    direction: FlipDirection | None = None
    refit_pass_replicates: Count | None = None


class AnchorCell(_Model):
    metric: NonEmptyStr
    published: float
    shipped: float
    abs_diff: Annotated[float, Field(ge=0)]


class Anchoring(_Model):
    tolerance: Annotated[float, Field(ge=0)]
    anchored: bool
    cells: list[AnchorCell]


class Recoverability(_Model):
    images: Annotated[int, Field(ge=1)]
    source: SplitRole
    rule: AccumulationRule
    forget_accuracy_shipped: Annotated[float, Field(ge=0, le=1)]
    forget_accuracy_after: Annotated[float, Field(ge=0, le=1)]
    shift_pp: float


class ProvenanceContrast(_Model):
    pool_size: Annotated[int, Field(ge=1)]
    exchanged: Count
    mean_distance: Annotated[float, Field(ge=0)]
    var_distance: Annotated[float, Field(ge=0)]
    forget_shift_pp: float | None = None


class RefitAnnotation(_Model):
    """What an auditor writes back: the audited file's cells as shipped and under a named refit convention."""

    spec_version: Literal["1.0"]
    kind: Literal["refit_annotation"]
    subject: AuditedFile
    convention: FittingConvention
    channel: Channel
    replicates: Annotated[int, Field(ge=1)]
    margin_pp: Annotated[float, Field(gt=0)]
    anchoring: Anchoring | None = None
    cells: list[Cell]
    verdicts: list[Verdict] = Field(default_factory=list)
    staleness: Staleness | None = None
    provenance: ProvenanceContrast | None = None
    recoverability: Recoverability | None = None
    producer: Producer
    reporting_line: NonEmptyStr


Record = Annotated[Union[Declaration, RefitAnnotation], Field(discriminator="kind")]
RECORD_ADAPTER: TypeAdapter[Declaration | RefitAnnotation] = TypeAdapter(Record)


def to_dict(model: BaseModel) -> dict[str, Any]:
    """JSON-ready dict of a model, without ``None`` fields (absent and null mean the same in the standard)."""
    return model.model_dump(mode="json", exclude_none=True)


def parse_record(data: Any) -> Declaration | RefitAnnotation:
    """Validate a decoded JSON value as a record; raises ``pydantic.ValidationError``."""
    return RECORD_ADAPTER.validate_python(data)
