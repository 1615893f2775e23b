"""The bnconvention standard, version 1, as pydantic v2 models.

These models are the single source of truth: ``schema/v1/bnconvention.schema.json`` is generated from them
(``bnconvention schema --write``) and a test proves the committed file equals the generated one. Constraints live
in the type declarations only (patterns, enums, bounds, discriminated unions), so the JSON Schema and the models
accept exactly the same documents. Rules that need more than one field (a canonical name that must match the other
fields, digests that must match a file) are *semantic* checks in :mod:`bnconvention.validation`.

This module is the standard's one import point: the two record kinds (each in versions 1.0 and 1.1) and their
union live here, their parts in
modules by responsibility, all re-exported: :mod:`.fields` (versions, vocabularies, constrained types),
:mod:`.convention` (the fitting convention), :mod:`.deployed` (deployed state, digests, producer), :mod:`.evidence`
(recorder observation, staleness, refit details), :mod:`.annotation` (the refit annotation and its cells),
:mod:`.annotation_v11` (what 1.1 adds to an annotation), :mod:`.quantization` (1.1's activation-scales
deployed-state kind).

Serialize with :func:`to_dict` (drops ``None``); parse with :func:`parse_record`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from bnconvention.standard.annotation import (
    AnchorCell,
    Anchoring,
    AuditedFile,
    Cell,
    CellDecision,
    ProvenanceContrast,
    Recoverability,
    RefitAnnotation,
    Verdict,
)
from bnconvention.standard.annotation_v11 import (
    CellDecisionV11,
    CellV11,
    CheckpointFamily,
    NullBand,
    ProvenanceArm,
    RecoverabilityCurve,
    RecoverabilityPoint,
    RefitAnnotationV11,
    TwinReference,
)
from bnconvention.standard.convention import (
    Accumulation,
    CumulativeAccumulation,
    DatasetRef,
    DataSplit,
    EmaAccumulation,
    ExactAccumulation,
    FittingConvention,
    Normalization,
    OtherModules,
    Transform,
    TransformDescription,
)
from bnconvention.standard.deployed import BatchNormLayer, BatchNormState, DeployedState, Producer, TensorDigests
from bnconvention.standard.evidence import (
    Contradiction,
    LayerNameMapping,
    LayerObservation,
    LayerStaleness,
    ModeOverride,
    Observation,
    ObservationV11,
    RefitDetails,
    SplitMatching,
    SplitShare,
    Staleness,
    StalenessBand,
)
from bnconvention.standard.fields import (
    DIGEST_ALGORITHM,
    LATEST_SPEC_VERSION,
    SCHEMA_ID,
    SPEC_VERSION,
    SPEC_VERSIONS,
    AccumulationRule,
    BufferUpdateMode,
    Channel,
    Count,
    DecisionOutcome,
    DistributedMode,
    DropoutMode,
    FlipDirection,
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
from bnconvention.standard.quantization import (
    SCALES_FILENAME,
    STATE_KINDS_ADDED_IN_1_1,
    ActivationScalesRefit,
    ActivationScalesState,
    ActivationSite,
    BatchNormRefit,
    DeployedStateV11,
    ObserverType,
    QScheme,
    QuantDtype,
)

# --- record kinds ---------------------------------------------------------------------------------------------------


class Declaration(StrictModel):
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


class DeclarationV11(Declaration):
    """A declaration of spec version 1.1: the fields of 1.0; its deployed state may also hold activation scales."""

    spec_version: Literal["1.1"] = Field(  # type: ignore[assignment]
        description="Version of the standard the record follows.")
    deployed_state: list[DeployedStateV11] = Field(  # type: ignore[assignment]
        min_length=1, description="The deployed state, one entry per kind (tagged by kind).")
    observation: ObservationV11 | None = Field(
        default=None, description="Evidence measured by the recorder.")


# Each record kind is a union tagged by spec_version, inside the union tagged by kind (the schema's $defs
# DeclarationRecord and RefitAnnotationRecord, see standard/schema.py).
AnyDeclaration = Annotated[Declaration | DeclarationV11, Field(discriminator="spec_version")]
AnyRefitAnnotation = Annotated[RefitAnnotation | RefitAnnotationV11, Field(discriminator="spec_version")]
Record = Annotated[AnyDeclaration | AnyRefitAnnotation, Field(discriminator="kind")]
RECORD_ADAPTER: TypeAdapter[Declaration | RefitAnnotation] = TypeAdapter(Record)

# The 1.0 model of each object 1.1 extends, and its 1.1 model: the fields 1.1 adds are their difference.
VERSIONED_MODELS: tuple[tuple[type[BaseModel], type[BaseModel]], ...] = (
    (Declaration, DeclarationV11),
    (RefitAnnotation, RefitAnnotationV11),
    (Cell, CellV11),
    (CellDecision, CellDecisionV11),
    (Observation, ObservationV11),
)


def added_in_1_1() -> dict[str, tuple[str, ...]]:
    """For each 1.0 object (by its schema title) the property names 1.1 adds to it.

    >>> added_in_1_1()["CellDecision"]
    ('by_p_value', 'by_family_size')
    """
    return {old.__name__: tuple(f for f in new.model_fields if f not in old.model_fields)
            for old, new in VERSIONED_MODELS}


def to_dict(model: BaseModel) -> dict[str, Any]:
    """JSON-ready dict of a model, without ``None`` fields (absent and null mean the same in the standard)."""
    return model.model_dump(mode="json", exclude_none=True)


def parse_record(data: Any) -> Declaration | RefitAnnotation:
    """Validate a decoded JSON value as a record; raises ``pydantic.ValidationError``."""
    return RECORD_ADAPTER.validate_python(data)


__all__ = [
    "DIGEST_ALGORITHM",
    "LATEST_SPEC_VERSION",
    "RECORD_ADAPTER",
    "SCHEMA_ID",
    "SPEC_VERSION",
    "SPEC_VERSIONS",
    "VERSIONED_MODELS",
    "SCALES_FILENAME",
    "STATE_KINDS_ADDED_IN_1_1",
    "ActivationScalesRefit",
    "ActivationScalesState",
    "ActivationSite",
    "AnyDeclaration",
    "BatchNormRefit",
    "DeployedStateV11",
    "ObserverType",
    "QScheme",
    "QuantDtype",
    "AnyRefitAnnotation",
    "CellDecisionV11",
    "CellV11",
    "CheckpointFamily",
    "DeclarationV11",
    "NullBand",
    "ProvenanceArm",
    "RecoverabilityCurve",
    "RecoverabilityPoint",
    "RefitAnnotationV11",
    "TwinReference",
    "added_in_1_1",
    "Accumulation",
    "AccumulationRule",
    "AnchorCell",
    "Anchoring",
    "AuditedFile",
    "BatchNormLayer",
    "BatchNormState",
    "BufferUpdateMode",
    "Cell",
    "CellDecision",
    "Channel",
    "Contradiction",
    "Count",
    "CumulativeAccumulation",
    "DataSplit",
    "DatasetRef",
    "DecisionOutcome",
    "Declaration",
    "DeployedState",
    "DistributedMode",
    "DropoutMode",
    "EmaAccumulation",
    "ExactAccumulation",
    "FittingConvention",
    "FlipDirection",
    "Int",
    "LayerNameMapping",
    "LayerObservation",
    "ModeOverride",
    "LayerStaleness",
    "NonEmptyStr",
    "Normalization",
    "Observation",
    "ObservationV11",
    "OtherModules",
    "PositiveInt",
    "Precision",
    "Producer",
    "ProvenanceContrast",
    "Record",
    "Recoverability",
    "RefitAnnotation",
    "RefitDetails",
    "Sha256Hex",
    "SplitRole",
    "Staleness",
    "SplitMatching",
    "SplitShare",
    "StalenessBand",
    "StrictModel",
    "TensorDigests",
    "Transform",
    "TransformDescription",
    "TransformMode",
    "VarianceEstimator",
    "Verdict",
    "parse_record",
    "to_dict",
]
