"""Build records of the standard from keyword arguments and a model: the one production builder.

>>> transform = make_transform(mode="train", reference="train.py:train_transform", augmentations=["shift 1px"])
>>> convention = make_convention(buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits",
...                              subset="all classes except 3", transform=transform, rule="exact")
>>> convention.name
'refit/retain/train-transform/exact'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from bnconvention._version import __version__
from bnconvention.authoring.deployed_state import batchnorm_state, tensor_digests
from bnconvention.errors import RecordError
from bnconvention.formats.digests import DigestSet, model_digests
from bnconvention.standard.models import (
    LATEST_SPEC_VERSION,
    SPEC_VERSION,
    AccumulationRule,
    BatchNormState,
    BufferUpdateMode,
    CumulativeAccumulation,
    DatasetRef,
    DataSplit,
    Declaration,
    DistributedMode,
    DropoutMode,
    EmaAccumulation,
    ExactAccumulation,
    FittingConvention,
    Normalization,
    Observation,
    OtherModules,
    Precision,
    Producer,
    RefitDetails,
    SplitRole,
    TensorDigests,
    Transform,
    TransformDescription,
    TransformMode,
    VarianceEstimator,
    fields_added_in,
)
from bnconvention.standard.naming import canonical_name, transform_sha256

if TYPE_CHECKING:
    import torch


class _AccumulationFields(TypedDict):
    """The fields every accumulation rule has (a typed ``**`` for the three models)."""

    batch_size: int | None
    num_batches: int | None
    variance_estimator: VarianceEstimator
    precision: Precision


def default_producer() -> Producer:
    return Producer(tool="bnconvention", version=__version__)


def make_transform(*, mode: TransformMode, reference: str | None = None, resize: str | None = None,
                   crop: str | None = None, augmentations: Sequence[str] = (),
                   normalize_mean: Sequence[float] | None = None,
                   normalize_std: Sequence[float] | None = None, steps: Sequence[str] | None = None) -> Transform:
    """A transform with its canonical description and the description's sha256.

    For a transform you describe yourself (a custom function, another library): ``mode`` is ``train`` for the
    transform with augmentation, ``eval`` without; ``reference`` says where it is defined
    (``train.py:train_transform``);
    ``resize``, ``crop`` and each of ``augmentations`` are short free texts (``"16x16 bilinear"``, ``"random 32 pad
    4"``, ``"hflip p=0.5"``); ``normalize_mean``/``normalize_std`` the per-channel normalization; ``steps`` every step
    in order, when you can spell them (:func:`bnconvention.describe_transform` writes them for torchvision
    pipelines). Everything given enters the sha256, so the same texts must be used for the same transform.
    """
    if (normalize_mean is None) != (normalize_std is None):
        raise RecordError("normalize_mean and normalize_std go together: give both or neither")
    normalize = None
    if normalize_mean is not None and normalize_std is not None:
        normalize = Normalization(mean=[float(v) for v in normalize_mean], std=[float(v) for v in normalize_std])
    description = TransformDescription(resize=resize, crop=crop, augmentations=list(augmentations),
                                       normalize=normalize, steps=None if steps is None else list(steps))
    return Transform(mode=mode, reference=reference, description=description,
                     sha256=transform_sha256(description))


def make_convention(*, buffer_update_mode: BufferUpdateMode, role: SplitRole, dataset_id: str, subset: str,
                    transform: Transform, rule: AccumulationRule, momentum: float | None = None,
                    batch_size: int | None = None, num_batches: int | None = None,
                    variance_estimator: VarianceEstimator = "unbiased", precision: Precision | None = None,
                    dropout: DropoutMode = "off", distributed: DistributedMode = "none",
                    record_count: int | None = None, ids_sha256: str | None = None,
                    sampling_seed: int | None = None, dataset_revision: str | None = None) -> FittingConvention:
    """A fitting convention whose ``name`` is derived from its fields.

    ``precision`` defaults to float64 for ``exact`` (our accumulator) and float32 for the train-mode rules.
    """
    common: _AccumulationFields = {
        "batch_size": batch_size,
        "num_batches": num_batches,
        "variance_estimator": variance_estimator,
        "precision": precision or ("float64" if rule == "exact" else "float32"),
    }
    if rule == "ema":
        if momentum is None:
            raise RecordError("the ema rule needs a momentum (e.g. 0.1, PyTorch's default)")
        accumulation: EmaAccumulation | CumulativeAccumulation | ExactAccumulation = EmaAccumulation(
            rule="ema", momentum=float(momentum), **common)
    elif momentum is not None:
        raise RecordError(f"momentum is only meaningful for the ema rule, not {rule!r}")
    elif rule == "cumulative":
        accumulation = CumulativeAccumulation(rule="cumulative", **common)
    elif rule == "exact":
        accumulation = ExactAccumulation(rule="exact", **common)
    else:
        raise RecordError(f"unknown accumulation rule {rule!r}; expected ema, cumulative or exact")
    data = DataSplit(role=role, dataset=DatasetRef(id=dataset_id, revision=dataset_revision), subset=subset,
                     record_count=record_count, ids_sha256=ids_sha256, sampling_seed=sampling_seed)
    name = canonical_name({
        "buffer_update_mode": buffer_update_mode,
        "data": {"role": role},
        "transform": {"mode": transform.mode},
        "accumulation": accumulation.model_dump(),
    })
    return FittingConvention(name=name, data=data, transform=transform, accumulation=accumulation,
                             buffer_update_mode=buffer_update_mode, other_modules=OtherModules(dropout=dropout),
                             distributed=distributed)


def declare(model: torch.nn.Module, convention: FittingConvention, *, reporting_line: str | None = None,
            observation: Observation | None = None, refit: RefitDetails | None = None,
            digests: DigestSet | None = None, producer: Producer | None = None) -> Declaration:
    """A declaration of ``model``'s deployed state under ``convention``, bound to its tensors by digests."""
    digests = digests or model_digests(model)
    return declare_state(convention, deployed_state=batchnorm_state(model, digests), digests=tensor_digests(digests),
                         reporting_line=reporting_line, observation=observation, refit=refit, producer=producer)


def declare_state(convention: FittingConvention, *, deployed_state: BatchNormState, digests: TensorDigests,
                  reporting_line: str | None = None, observation: Observation | None = None,
                  refit: RefitDetails | None = None, producer: Producer | None = None) -> Declaration:
    """The declaration of a deployed state already described (a saved observation's layers and digests): what
    :func:`declare` builds once it has read them off the model. Spec version 1.0 unless the observation fills a
    field 1.1 added (an override, a layer-name mapping, splits matched by content): then 1.1."""
    added = fields_added_in(LATEST_SPEC_VERSION)["Observation"]
    later = observation is not None and any(getattr(observation, name, None) is not None for name in added)
    if observation is not None and not later:
        observation = Observation.model_validate(observation.model_dump(exclude=set(added)))
    return Declaration.model_validate({
        "spec_version": LATEST_SPEC_VERSION if later else SPEC_VERSION, "kind": "declaration", "convention": convention,
        "deployed_state": [deployed_state], "digests": digests, "producer": producer or default_producer(),
        "reporting_line": reporting_line, "observation": observation, "refit": refit})
