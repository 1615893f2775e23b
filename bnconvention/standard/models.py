"""The bnconvention standard, version 1, as pydantic v2 models.

These models are the single source of truth: ``schema/v1/bnconvention.schema.json`` is generated from them
(``bnconvention schema --write``) and a test proves the committed file equals the generated one. Constraints live
in the type declarations only (patterns, enums, bounds, discriminated unions), so the JSON Schema and the models
accept exactly the same documents. Rules that need more than one field (a canonical name that must match the other
fields, digests that must match a file) are *semantic* checks in :mod:`bnconvention.validation`.

Serialize with :func:`to_dict` (drops ``None``); parse with :func:`parse_record`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, TypeAdapter

SPEC_VERSION: Final = "1.0"  # Final: typed as the Literal the records declare
SCHEMA_ID = "https://bnconvention.github.io/schema/v1/bnconvention.schema.json"
DIGEST_ALGORITHM: Final = "bnconvention-tensors/1"

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

# The length bounds are not redundant with the pattern: Python's ``re`` (which jsonschema uses) lets ``$`` match
# before a trailing newline, pydantic's regex engine does not; with the lengths both reject "<64 hex>\n".
Sha256Hex = Annotated[
    str, StringConstraints(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$"),
    Field(description="Lowercase hexadecimal sha256 digest (64 characters)."),
]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]


def _integral_float_to_int(value: Any) -> Any:
    # JSON Schema counts 16.0 as an integer (and RFC 8785 writes it as 16); strict pydantic would refuse it.
    # Converting integral floats, and only those, keeps the models and the schema in agreement.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# The bound sits inside the validator so that it is checked on the converted value and reaches the JSON Schema
# as ``minimum`` (outside, pydantic would leak a non-standard ``ge`` keyword into the schema).
Int = Annotated[int, BeforeValidator(_integral_float_to_int)]
Count = Annotated[Annotated[int, Field(ge=0)], BeforeValidator(_integral_float_to_int)]
PositiveInt = Annotated[Annotated[int, Field(ge=1)], BeforeValidator(_integral_float_to_int)]


class _Model(BaseModel):
    # strict: no silent coercion ("1" is not 1), so the models accept what the JSON Schema accepts.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


# --- fitting convention ---------------------------------------------------------------------------------------------


class DatasetRef(_Model):
    """The dataset the fitting pool was drawn from."""

    id: NonEmptyStr = Field(description="Dataset identity, e.g. 'sklearn/digits' or a Hub dataset id.")
    revision: NonEmptyStr | None = Field(default=None, description="Dataset revision (commit sha, version tag).")


class DataSplit(_Model):
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


class Normalization(_Model):
    """Per-channel normalization applied by the transform: (x - mean) / std."""

    mean: list[float] = Field(min_length=1, description="Per-channel mean subtracted by the transform.")
    std: list[Annotated[float, Field(gt=0)]] = Field(min_length=1, description="Per-channel std divided by.")


class TransformDescription(_Model):
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


class Transform(_Model):
    """The input transform in force while the statistics were fitted."""

    mode: TransformMode = Field(description="'train' (with augmentation) or 'eval' transform.")
    reference: NonEmptyStr | None = Field(
        default=None, description="Where the transform is defined, e.g. 'train.py:train_transform'."
    )
    description: TransformDescription = Field(description="Canonical description of the transform.")
    sha256: Sha256Hex = Field(description="sha256 of the canonical JSON of `description`.")


class _AccumulationBase(_Model):
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


class OtherModules(_Model):
    """The mode of modules other than BatchNorm while the statistics were fitted."""

    dropout: DropoutMode = Field(description="Dropout during fitting: 'off', 'on', or 'absent' from the model.")


class FittingConvention(_Model):
    """The named recipe that produced the running statistics."""

    name: NonEmptyStr = Field(description="Canonical name derived from the other fields (see canonical_name).")
    data: DataSplit = Field(description="Which split fitted the statistics.")
    transform: Transform = Field(description="The transform in force during fitting.")
    accumulation: Accumulation = Field(description="How batch statistics were accumulated (tagged by rule).")
    buffer_update_mode: BufferUpdateMode = Field(description="How the buffers were last written.")
    other_modules: OtherModules = Field(description="Mode of the other modules during fitting.")
    distributed: DistributedMode = Field(description="How statistics were combined across processes.")


# --- deployed state ----------------------------------------------------------------------------------------------


class BatchNormLayer(_Model):
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


class BatchNormState(_Model):
    """The BatchNorm deployed state: every BatchNorm layer of the network."""

    kind: Literal["batchnorm"] = Field(description="Deployed-state kind: BatchNorm running statistics.")
    layers: list[BatchNormLayer] = Field(description="Every BatchNorm layer in module order; empty: channel absent.")


# A union of one member in v1; later minor versions add kinds (e.g. activation quantization scales) here.
DeployedState = Annotated[BatchNormState, Field(discriminator="kind")]


class TensorDigests(_Model):
    """Digests binding the record to a weights file's tensors (algorithm bnconvention-tensors/1)."""

    algorithm: Literal["bnconvention-tensors/1"] = Field(description="Digest algorithm (see docs/standard.md).")
    trainable_sha256: Sha256Hex = Field(description="Digest of every tensor except BN running statistics.")
    running_sha256: Sha256Hex | None = Field(
        default=None, description="Digest of all BN running statistics; absent when there are none."
    )


class Producer(_Model):
    """The tool that wrote the record."""

    tool: NonEmptyStr = Field(description="Tool name, e.g. 'bnconvention'.")
    version: NonEmptyStr = Field(description="Tool version.")


# --- recorder evidence ------------------------------------------------------------------------------------------


class LayerObservation(_Model):
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


class Contradiction(_Model):
    code: NonEmptyStr = Field(description="Stable code, e.g. 'declared-frozen-buffers-changed'.")
    message: NonEmptyStr
    layers: list[NonEmptyStr] = Field(default_factory=list, description="BatchNorm layers concerned, if any.")


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


# --- staleness and refit details ------------------------------------------------------------------------------------


class LayerStaleness(_Model):
    """Staleness distances of one BatchNorm layer."""

    name: NonEmptyStr = Field(description="BatchNorm layer name.")
    mean_distance: Annotated[float, Field(ge=0)] = Field(description="||mu - mu_hat||_2 / ||sigma_hat||_2.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="||var - var_hat||_2 / ||var_hat||_2.")


class StalenessBand(_Model):
    """The reference band: the same distances between two independent retain refits."""

    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Layer-averaged mean distance of the two refits.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Layer-averaged variance distance of the refits.")


class Staleness(_Model):
    """How far the previous (shipped) statistics are from refit ones (seed 003, Eq. 15)."""

    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Layer average of the mean distance.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Layer average of the variance distance.")
    layers: list[LayerStaleness] = Field(description="Per-layer distances, in module order.")
    reference_band: StalenessBand | None = Field(
        default=None, description="Same distances between two independent retain refits."
    )
    exceeds_band: bool | None = Field(default=None, description="Whether the distances exceed the reference band.")


class RefitDetails(_Model):
    """What a refit did: digests before and after (the weights must not change), staleness, cost."""

    trainable_sha256_before: Sha256Hex = Field(description="Trainable digest before the refit.")
    trainable_sha256_after: Sha256Hex = Field(description="Trainable digest after the refit: equals the one before.")
    running_sha256_before: Sha256Hex | None = Field(default=None, description="Running digest before the refit.")
    running_sha256_after: Sha256Hex | None = Field(default=None, description="Running digest after the refit.")
    staleness: Staleness = Field(description="Distance of the previous statistics from the refit ones.")
    seconds: Annotated[float, Field(ge=0)] = Field(description="Wall-clock seconds the refit took.")
    forward_passes: Count | None = Field(default=None, description="Passes over the pool the rule needed.")
    warnings: list[NonEmptyStr] = Field(default_factory=list, description="Warnings the refit raised, if any.")


# --- record kinds ---------------------------------------------------------------------------------------------------


class Declaration(_Model):
    """How the deployed state of one weights file was fitted, bound to its tensors by digests."""

    spec_version: Literal["1.0"] = Field(description="Version of the standard the record follows.")
    kind: Literal["declaration"] = Field(description="Record kind.")
    convention: FittingConvention = Field(description="How the running statistics were fitted.")
    deployed_state: list[DeployedState] = Field(
        min_length=1, description="The deployed state, one entry per kind (tagged by kind)."
    )
    digests: TensorDigests = Field(description="Digests binding the record to the file's tensors.")
    producer: Producer = Field(description="The tool and version that wrote this record.")
    reporting_line: NonEmptyStr | None = Field(
        default=None, description="The one sentence a release adds, e.g. 'deployed state as shipped; ...'."
    )
    observation: Observation | None = Field(default=None, description="Evidence measured by the recorder.")
    refit: RefitDetails | None = Field(default=None, description="Present when the state was produced by a refit.")


class AuditedFile(_Model):
    """The weights file an annotation audited."""

    filename: NonEmptyStr = Field(description="Path of the weights file inside its repository.")
    repo: NonEmptyStr | None = Field(default=None, description="Repository id, e.g. 'org/model'.")
    revision: NonEmptyStr | None = Field(default=None, description="Revision audited (commit sha or branch).")
    trainable_sha256: Sha256Hex = Field(description="Trainable digest of the audited file.")
    running_sha256: Sha256Hex | None = Field(default=None, description="Digest of the shipped running statistics.")
    declared_convention: NonEmptyStr | None = Field(default=None, description="Canonical name declared, if any.")


class CellDecision(_Model):
    """The statistical decision on a cell's shift against the margin."""

    outcome: DecisionOutcome = Field(description="displaced, equivalent or undetermined.")
    p_value: Annotated[float, Field(ge=0, le=1)] | None = Field(default=None, description="p-value of the test.")
    method: NonEmptyStr = Field(description="e.g. 'exact-sign-test', 'tost-90', 'channel-absent'.")


class Cell(_Model):
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


class Verdict(_Model):
    """A declared criterion evaluated on shipped and on refit cells."""

    criterion: NonEmptyStr = Field(description="e.g. 'abs(df - dt) <= 0.05'.")
    shipped: bool = Field(description="Outcome on the shipped cells.")
    refit: bool = Field(description="Outcome on the mean refit cells.")
    flipped: bool = Field(description="Whether the shipped and refit outcomes differ.")
    direction: FlipDirection | None = Field(default=None, description="Direction of a flip.")
    refit_pass_replicates: Count | None = Field(default=None, description="Replicates whose refit cells pass.")


class AnchorCell(_Model):
    """One published cell against its shipped reproduction."""

    metric: NonEmptyStr = Field(description="Cell name, e.g. 'df'.")
    published: float = Field(description="Value published by the authors.")
    shipped: float = Field(description="Value reproduced with the shipped state.")
    abs_diff: Annotated[float, Field(ge=0)] = Field(description="|published - shipped|.")


class Anchoring(_Model):
    """Whether the shipped cells reproduce the published ones within a tolerance."""

    tolerance: Annotated[float, Field(ge=0)] = Field(description="Largest allowed abs_diff (0.02 in the papers).")
    anchored: bool = Field(description="Whether every cell is within the tolerance.")
    cells: list[AnchorCell] = Field(description="The cells compared.")


class Recoverability(_Model):
    """Forget accuracy after a refit on a few unlabeled images (the papers' ten-image attack)."""

    images: PositiveInt = Field(description="Number of unlabeled images refit on (10 in the papers).")
    source: SplitRole = Field(description="Split the images come from.")
    rule: AccumulationRule = Field(description="Accumulation rule of the refit.")
    forget_accuracy_shipped: Annotated[float, Field(ge=0, le=1)] = Field(description="Forget accuracy as shipped.")
    forget_accuracy_after: Annotated[float, Field(ge=0, le=1)] = Field(description="Forget accuracy after the refit.")
    shift_pp: float = Field(description="After minus shipped, in pp.")


class ProvenanceContrast(_Model):
    """Exchange retained records for removed ones in a fixed-size fitting pool (seed 001, appendix P)."""

    pool_size: PositiveInt = Field(description="Size of the fitting pool.")
    exchanged: Count = Field(description="Retained records exchanged for removed ones.")
    mean_distance: Annotated[float, Field(ge=0)] = Field(description="Mean distance between the two refits.")
    var_distance: Annotated[float, Field(ge=0)] = Field(description="Variance distance between the two refits.")
    forget_shift_pp: float | None = Field(default=None, description="Shift of forget accuracy, in pp.")


class RefitAnnotation(_Model):
    """What an auditor writes back: the audited file's cells as shipped and under a named refit convention."""

    spec_version: Literal["1.0"] = Field(description="Version of the standard the record follows.")
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


Record = Annotated[Declaration | RefitAnnotation, Field(discriminator="kind")]
RECORD_ADAPTER: TypeAdapter[Declaration | RefitAnnotation] = TypeAdapter(Record)


def to_dict(model: BaseModel) -> dict[str, Any]:
    """JSON-ready dict of a model, without ``None`` fields (absent and null mean the same in the standard)."""
    return model.model_dump(mode="json", exclude_none=True)


def parse_record(data: Any) -> Declaration | RefitAnnotation:
    """Validate a decoded JSON value as a record; raises ``pydantic.ValidationError``."""
    return RECORD_ADAPTER.validate_python(data)
