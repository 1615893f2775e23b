"""The declaration :meth:`BNRecorder.declaration <bnconvention.authoring.recorder.BNRecorder.declaration>` builds:
the recorder's observation, completed by what only the author knows, with no model factory (the recorder holds the
model: its module tree, its BatchNorm layers and its state dict are what the record describes).
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any

from bnconvention.authoring.declaration import declare
from bnconvention.authoring.observation import SPLIT_ROLES, convention_from_observation
from bnconvention.authoring.transforms import as_standard_transform
from bnconvention.errors import RecordError
from bnconvention.standard.models import (
    AccumulationRule,
    BufferUpdateMode,
    Declaration,
    DistributedMode,
    DropoutMode,
    Precision,
    SplitRole,
    Transform,
)

if TYPE_CHECKING:
    from bnconvention.authoring.recorder import BNRecorder

# A model without running statistics follows no accumulation rule; its record names PyTorch's default BatchNorm
# setting (ema, momentum 0.1), as the shipped GroupNorm example does.
CHANNEL_ABSENT_MOMENTUM = 0.1


def _role_of(tag: str) -> SplitRole | None:
    return typing.cast(SplitRole, tag) if tag in SPLIT_ROLES else None


def recorder_declaration(
    recorder: BNRecorder, *, dataset_id: str | None, subset: str | None, transform: Any,
    role: SplitRole | None, declared_mode: BufferUpdateMode | None, rule: AccumulationRule | None,
    momentum: float | None, batch_size: int | None, num_batches: int | None, precision: Precision | None,
    dropout: DropoutMode | None, distributed: DistributedMode | None, record_count: int | None,
    ids_sha256: str | None, sampling_seed: int | None, dataset_revision: str | None, reporting_line: str | None,
    strict: bool,
) -> Declaration:
    """See :meth:`BNRecorder.declaration`; the recorder's private counters are read here, its one other reader."""
    standard_transform = as_standard_transform(transform) if transform is not None else None
    observation = recorder.observation(declared_mode=declared_mode, role=role, rule=rule, momentum=momentum)
    if strict and observation.contradictions:
        listing = "; ".join(f"[{c.code}] {c.message}" for c in observation.contradictions)
        raise RecordError(f"the run contradicts the declaration: {listing}")
    refits = recorder._refit_conventions
    base = refits[-1] if observation.last_write == "refit" and refits else None
    if base is not None:
        dataset_id = dataset_id or base.data.dataset.id
        subset = subset or base.data.subset
        standard_transform = standard_transform or base.transform
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
                                          ("transform", standard_transform)) if value is None]
    if missing:
        raise RecordError(f"declaration needs {', '.join(missing)}: the recorder sees tensors, not which "
                          "dataset, subset and transform fed them")
    if not any(layer.mode is not None for layer in observation.layers):
        # channel absent: no buffers to fit; the convention names the data the run trained on (docs/standard.md)
        role = role or _role_of(recorder.split)
        if rule is None:
            rule, momentum = "ema", CHANNEL_ABSENT_MOMENTUM
    elif observation.mode not in ("train", "refit", "mixed") and rule is None:
        rule, momentum = recorder._configured_rule()
    if distributed is None:
        distributed = "sync_batchnorm" if observation.buffer_updates and any(
            type(e.module).__name__ == "SyncBatchNorm" for e in recorder._layers) else "none"
    convention = convention_from_observation(
        observation, dataset_id=typing.cast(str, dataset_id), subset=typing.cast(str, subset),
        transform=typing.cast(Transform, standard_transform), role=role, rule=rule, momentum=momentum,
        batch_size=batch_size, num_batches=num_batches, precision=precision, dropout=dropout,
        distributed=distributed, record_count=record_count, ids_sha256=ids_sha256, sampling_seed=sampling_seed,
        dataset_revision=dataset_revision,
    )
    refit = recorder._refit_details[-1] if observation.mode == "refit" and recorder._refit_details else None
    return declare(recorder.model, convention, reporting_line=reporting_line, observation=observation, refit=refit)


__all__ = ["CHANNEL_ABSENT_MOMENTUM", "recorder_declaration"]
