"""The bnconvention standard, version 1, as pydantic v2 models.

These models are the single source of truth: ``schema/v1/bnconvention.schema.json`` is generated from them
(``bnconvention schema --write``) and a test proves the committed file equals the generated one. Constraints live
in the type declarations only (patterns, enums, bounds, discriminated unions), so the JSON Schema and the models
accept exactly the same documents. Rules that need more than one field (a canonical name that must match the other
fields, digests that must match a file) are *semantic* checks in :mod:`bnconvention.validation`.

Each object is one model holding the fields of every spec version; a field a later version added carries
``since(...)`` (:mod:`.versions`, with the table of versions), and a record is checked to hold only its own
version's fields. This module is the standard's one import point: the two record kinds and their union live here,
their parts in modules by object, all re-exported: :mod:`.versions`, :mod:`.fields` (vocabularies, constrained
types), :mod:`.convention` (the fitting convention), :mod:`.deployed` (deployed state, digests, producer),
:mod:`.quantization` (the activation-scales deployed-state kind), :mod:`.evidence` (recorder observation,
staleness, refit details), :mod:`.declaration`, :mod:`.annotation` (the refit annotation), :mod:`.cells`,
:mod:`.census` (the census instrument's parts) and :mod:`.diagnostics` (encoder-level diagnostics).

Serialize with :func:`to_dict` (drops ``None``); parse with :func:`parse_record`.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import BaseModel, Field, TypeAdapter

from bnconvention.standard.annotation import (
    AnchorCell,
    Anchoring,
    AuditedFile,
    ProvenanceContrast,
    Recoverability,
    RefitAnnotation,
    Verdict,
)
from bnconvention.standard.cells import Cell, CellDecision
from bnconvention.standard.census import (
    CheckpointFamily,
    NullBand,
    ProvenanceArm,
    RecoverabilityCurve,
    RecoverabilityPoint,
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
from bnconvention.standard.declaration import Declaration
from bnconvention.standard.deployed import BatchNormLayer, BatchNormState, Producer, TensorDigests
from bnconvention.standard.evidence import (
    Contradiction,
    LayerNameMapping,
    LayerObservation,
    LayerStaleness,
    ModeOverride,
    Observation,
    RefitDetails,
    SplitMatching,
    SplitShare,
    Staleness,
    StalenessBand,
)
from bnconvention.standard.fields import (
    DIGEST_ALGORITHM,
    SCHEMA_ID,
    STRICT_VERSIONS,
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
    VersionedRecord,
)
from bnconvention.standard.quantization import (
    SCALES_FILENAME,
    ActivationScalesRefit,
    ActivationScalesState,
    ActivationSite,
    BatchNormRefit,
    DeployedState,
    ObserverType,
    QScheme,
    QuantDtype,
    RefitState,
)
from bnconvention.standard.versions import (
    LATEST_SPEC_VERSION,
    SPEC_VERSION,
    SPEC_VERSIONS,
    VERSIONS,
    SpecVersion,
    Version,
    added_in,
    models_in,
    since,
)

# --- record kinds ---------------------------------------------------------------------------------------------------

RECORD_KINDS: tuple[type[VersionedRecord], ...] = (Declaration, RefitAnnotation)
Record = Annotated[Declaration | RefitAnnotation, Field(discriminator="kind")]
RECORD_ADAPTER: TypeAdapter[Declaration | RefitAnnotation] = TypeAdapter(Record)


def fields_added_in(version: SpecVersion) -> dict[str, tuple[str, ...]]:
    """For each object (by its schema title) the property names ``version`` adds to it, objects in the order a
    reader meets them (an annotation, its cells and their decisions, then a declaration's observation).

    >>> fields_added_in("1.1")["CellDecision"]
    ('by_p_value', 'by_family_size')
    """
    return added_in(version, (RefitAnnotation, Declaration))


def deployed_state_kinds() -> dict[str, SpecVersion]:
    """Each deployed-state kind, with the version that added it."""
    return {get_args(model.model_fields["kind"].annotation)[0]: version for model, version in models_in(DeployedState)}


def to_dict(model: BaseModel) -> dict[str, Any]:
    """JSON-ready dict of a model, without ``None`` fields (absent and null mean the same in the standard)."""
    return model.model_dump(mode="json", exclude_none=True)


def parse_record(data: Any) -> Declaration | RefitAnnotation:
    """Validate a decoded JSON value as a record; raises ``pydantic.ValidationError``."""
    return RECORD_ADAPTER.validate_python(data, context={STRICT_VERSIONS: True})


__all__ = [
    "DIGEST_ALGORITHM",
    "LATEST_SPEC_VERSION",
    "RECORD_ADAPTER",
    "SCHEMA_ID",
    "SPEC_VERSION",
    "SPEC_VERSIONS",
    "RECORD_KINDS",
    "SCALES_FILENAME",
    "VERSIONS",
    "RefitState",
    "SpecVersion",
    "Version",
    "VersionedRecord",
    "deployed_state_kinds",
    "fields_added_in",
    "since",
    "ActivationScalesRefit",
    "ActivationScalesState",
    "ActivationSite",
    "BatchNormRefit",
    "ObserverType",
    "QScheme",
    "QuantDtype",
    "CheckpointFamily",
    "NullBand",
    "ProvenanceArm",
    "RecoverabilityCurve",
    "RecoverabilityPoint",
    "TwinReference",
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
