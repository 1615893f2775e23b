"""The declaration :meth:`BNRecorder.declaration <bnconvention.authoring.recorder.BNRecorder.declaration>` builds:
the recorder's observation, completed by what only the author knows, with no model factory (the recorder holds the
model: its module tree, its BatchNorm layers and its state dict are what the record describes).

Both routes go through one function: the recorder is first reduced to a
:class:`~bnconvention.authoring.saved_observation.SavedObservation` (the value
:meth:`~bnconvention.authoring.recorder.BNRecorder.save_observation` writes), and :func:`declaration_from_saved`
completes it; ``bnconvention declare
--from-observation`` reads the file and calls the same function, so the two records are equal by construction.
"""

from __future__ import annotations

import typing
from typing import Any

from bnconvention.authoring.declaration import declare_state
from bnconvention.authoring.observation import (
    SPLIT_ROLES,
    WRITTEN_MODES,
    convention_from_observation,
    convention_mode,
    with_author,
)
from bnconvention.authoring.saved_observation import SavedObservation
from bnconvention.errors import RecordError, UsageError
from bnconvention.standard.models import (
    AccumulationRule,
    BufferUpdateMode,
    Declaration,
    DistributedMode,
    DropoutMode,
    Precision,
    SplitRole,
    Transform,
    VarianceEstimator,
)

# A model without running statistics follows no accumulation rule; its record names PyTorch's default BatchNorm
# setting (ema, momentum 0.1), as the shipped GroupNorm example does.
CHANNEL_ABSENT_MOMENTUM = 0.1


def _role_of(tag: str) -> SplitRole | None:
    return typing.cast(SplitRole, tag) if tag in SPLIT_ROLES else None


def released_module(model: Any, released: Any = None) -> tuple[Any, str]:
    """The network whose weights are released, and its name prefix inside the recorded ``model``: ``released``
    when given (a submodule of ``model``: a LightningModule's network, an unlearning library's wrapped model),
    otherwise ``model`` with the wrappers that hold nothing of their own taken off (``DataParallel`` and
    ``DistributedDataParallel``'s ``module.``, ``torch.compile``'s ``_orig_mod.``)."""
    if released is not None:
        for name, module in model.named_modules():
            if module is released:
                return released, f"{name}." if name else ""
        raise UsageError(f"released= must be a submodule of the recorded model; {type(released).__name__} is not")
    prefix = ""
    while True:
        kind = type(model).__name__
        if kind in ("DataParallel", "DistributedDataParallel") and hasattr(model, "module"):
            model, prefix = model.module, prefix + "module."
        elif kind == "OptimizedModule" and hasattr(model, "_orig_mod"):
            model, prefix = model._orig_mod, prefix + "_orig_mod."
        else:
            return model, prefix


def declaration_from_saved(
    saved: SavedObservation, *, dataset_id: str | None, subset: str | None, transform: Transform | None,
    role: SplitRole | None, declared_mode: BufferUpdateMode | None, rule: AccumulationRule | None,
    momentum: float | None, batch_size: int | None, num_batches: int | None, precision: Precision | None,
    dropout: DropoutMode | None, distributed: DistributedMode | None, record_count: int | None,
    ids_sha256: str | None, sampling_seed: int | None, dataset_revision: str | None, reporting_line: str | None,
    strict: bool, variance_estimator: VarianceEstimator = "unbiased", override_by: str | None = None,
    override_reason: str | None = None,
) -> Declaration:
    """The declaration of a saved observation completed by the author's word: the same whether the recorder is
    still in memory (``recorder.declaration``) or only its saved file is (``declare --from-observation``).
    With ``override_reason`` (and ``override_by``), ``declared_mode`` replaces the observed mode in the convention
    and is recorded as an override beside it (:func:`~bnconvention.authoring.observation.with_override`)."""
    observation = with_author(saved.observation, declared_mode=declared_mode, role=role, rule=rule,
                              momentum=momentum, override_by=override_by, override_reason=override_reason)
    if strict and observation.contradictions:
        listing = "; ".join(f"[{c.code}] {c.message}" for c in observation.contradictions)
        raise RecordError(f"the run contradicts the declaration: {listing}")
    base = saved.refit_convention if observation.last_write == "refit" else None
    if base is not None:
        dataset_id = dataset_id or base.data.dataset.id
        subset = subset or base.data.subset
        transform = transform or base.transform
        record_count = record_count if record_count is not None else base.data.record_count
        ids_sha256 = ids_sha256 or base.data.ids_sha256
        sampling_seed = sampling_seed if sampling_seed is not None else base.data.sampling_seed
        dataset_revision = dataset_revision or base.data.dataset.revision
        batch_size = batch_size or base.accumulation.batch_size
        num_batches = num_batches or base.accumulation.num_batches
        precision = precision or base.accumulation.precision
        dropout = dropout or base.other_modules.dropout
        distributed = distributed or base.distributed
    missing = [label for label, value in (("dataset_id", dataset_id), ("subset", subset),
                                          ("transform", transform)) if value is None]
    if missing:
        raise RecordError(f"declaration needs {', '.join(missing)}: the recorder sees tensors, not which "
                          "dataset, subset and transform fed them")
    if not any(layer.mode is not None for layer in observation.layers):
        # channel absent: no buffers to fit; the convention names the data the run trained on (docs/standard.md)
        role = role or _role_of(saved.split)
        if rule is None:
            rule, momentum = "ema", CHANNEL_ABSENT_MOMENTUM
    elif convention_mode(observation) not in WRITTEN_MODES and rule is None:
        rule, momentum = saved.configured_rule, saved.configured_momentum
    if distributed is None:
        distributed = "sync_batchnorm" if observation.buffer_updates and saved.sync_batchnorm else "none"
    convention = convention_from_observation(
        observation, dataset_id=typing.cast(str, dataset_id), subset=typing.cast(str, subset),
        transform=typing.cast(Transform, transform), role=role, rule=rule, momentum=momentum,
        batch_size=batch_size, num_batches=num_batches, precision=precision, variance_estimator=variance_estimator,
        dropout=dropout, distributed=distributed, record_count=record_count, ids_sha256=ids_sha256,
        sampling_seed=sampling_seed, dataset_revision=dataset_revision,
    )
    refit = saved.refit if convention_mode(observation) == "refit" else None
    return declare_state(convention, deployed_state=saved.deployed_state, digests=saved.digests,
                         reporting_line=reporting_line, observation=observation, refit=refit)


__all__ = ["CHANNEL_ABSENT_MOMENTUM", "declaration_from_saved", "released_module"]
