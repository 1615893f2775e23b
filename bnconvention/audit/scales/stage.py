"""The audit's second deployed state: a checkpoint's shipped activation scales against retain-only recalibrations.

A checkpoint ships activation scales when a 1.1 declaration beside it has an ``activation_scales`` deployed state
(read from the folder's ``declaration.json``, the weights header or the model card, in that order:
:mod:`bnconvention.authoring.scales_sources`), or when ``activation_scales.safetensors`` (the standard's stored form)
lies beside its weights. With the spec's ``quantization`` section (:mod:`.scales_spec`) such a checkpoint is audited
on that state too:

* :func:`check_shipped_scales` (before any computation; the census's preflight runs it on every checkpoint): the
  declaration valid, the same in every place that declares it, and binding these weights (its digests are the
  file's), the scales file (the state's ``filename`` beside the weights) parsed (no NaN, zero or
  negative scale), its sites, values and digest those declared, and every site an observer of the architecture
  prepared with the declared observer (:func:`bnconvention.refitting.observers.prepare_static`). Any failure is a
  :class:`~bnconvention.errors.QuantizationError` naming the checkpoint;
* :func:`run_scales`: R retain-only calibration pools of ``calibration_size`` records (eval transform), pool r drawn
  from ``SeedSequence(seed, spawn_key=(5, r))``; :func:`bnconvention.audit.scales.cells.scales_cells` measures
  df/dr/dt with activations fake-quantized at the shipped scales and at each recalibration, decided by the same
  rules as every BatchNorm cell, on a prepared copy of the model (θ and φ proven bit-identical by digests, and
  equal to the file's: :func:`bnconvention.audit.scales.annotation.scales_annotation` refuses other weights).

Without the section a checkpoint that ships scales is audited as before, with a warning naming the section; under it
a checkpoint without scales gets a ``not_quantized`` result, which the census row states.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnconvention.audit.core.result import ScalesResult
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.measure.evaluation import model_device, stream
from bnconvention.audit.scales.annotation import redecide_scales_annotation, scales_annotation
from bnconvention.audit.scales.cells import scales_cells
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.audit.spec.scales import SCALES_STREAM
from bnconvention.authoring.scales_sources import declares_scales_beside, read_quantized_release
from bnconvention.errors import AuditSpecError, DigestMismatchError, QuantizationError, RecordError, UntrustedInputError
from bnconvention.formats.digests import DigestSet
from bnconvention.formats.text import plural
from bnconvention.refitting.observers import prepare_static
from bnconvention.refitting.scales import ScaleSet, observer_sites
from bnconvention.standard.models import SCALES_FILENAME, AuditedFile, DatasetRef, DataSplit, Declaration


@dataclass
class ScalesPlan:
    """A checked scales audit: the declaration, the shipped scales and the model prepared with their observer."""

    scales_file: Path
    declaration: Declaration
    shipped: ScaleSet
    model: torch.nn.Module


def ships_scales(weights: Path) -> bool:
    """Whether a checkpoint ships activation scales: declared in a place beside it, or the default file there (the
    declaration is checked later: this never raises)."""
    return (weights.parent / SCALES_FILENAME).is_file() or declares_scales_beside(weights)


def unaudited_warning(weights: Path) -> str | None:
    """The warning of a checkpoint that ships scales under a spec without the quantization section."""
    if not ships_scales(weights):
        return None
    return (f"{weights.name} ships activation scales that this audit does not cover: add a "
            "'quantization' section to the spec (e.g. quantization: {calibration_size: 256}) to audit them as a "
            "second deployed state")


def check_shipped_scales(weights: Path, *, model: torch.nn.Module, digests: DigestSet) -> ScalesPlan:
    """The checked plan of a checkpoint that ships scales (see the module docstring); ``model`` is not changed."""
    try:
        found, shipped = read_quantized_release(weights)
        declaration = found.record
        bound = (declaration.digests.trainable_sha256, declaration.digests.running_sha256)
        if bound != (digests.trainable_sha256, digests.running_sha256):
            raise QuantizationError(f"{found.source} declares other weights (digests differ from the file's)",
                                    site=None)
        prepared = prepare_static(model, shipped.spec)
        sites = set(observer_sites(prepared))
        missing = sorted(set(shipped.sites) - sites)
        if missing:
            raise QuantizationError(f"scales site {missing[0]!r} has no observer in the architecture prepared with "
                                    f"the declared {shipped.spec.observer} observer", site=missing[0])
    except (QuantizationError, DigestMismatchError, RecordError, UntrustedInputError, OSError) as exc:
        raise QuantizationError(f"checkpoint {weights}: its activation scales cannot be audited: {exc}; nothing "
                                "was written", site=getattr(exc, "site", None)) from exc
    return ScalesPlan(scales_file=found.scales_path, declaration=declaration, shipped=shipped, model=prepared)


def plan_scales(spec: AuditSpec, data: AuditData, weights: Path, *, model: torch.nn.Module,
                digests: DigestSet) -> ScalesPlan | None:
    """The scales audit of one checkpoint when the spec asks for it and the checkpoint ships scales."""
    if spec.quantization is None or not ships_scales(weights):
        return None
    size = spec.quantization.calibration_size
    if size > len(data.retain.ids):
        raise AuditSpecError(f"quantization.calibration_size is {size} but the retain split has "
                             f"{plural(len(data.retain.ids), 'record')}", field="/quantization/calibration_size")
    return check_shipped_scales(weights, model=model, digests=digests)


def not_quantized(weights: Path) -> ScalesResult:
    return ScalesResult(status="not_quantized",
                        reason=f"not quantized: no activation scales declared or stored beside {weights.name}")


def redecide_scales(scales: ScalesResult | None, *, margin_pp: float) -> ScalesResult | None:
    """A journaled scales result re-decided at ``margin_pp`` from its stored replicate shifts (no recalibration):
    its cells, annotation and reporting line as a fresh audit at that margin gives them."""
    if scales is None or scales.annotation is None or scales.annotation.margin_pp == margin_pp:
        return scales
    annotation = redecide_scales_annotation(scales.annotation, margin_pp=margin_pp)
    return scales.model_copy(update={"annotation": annotation, "reason": annotation.reporting_line or ""})


def _inputs(x: torch.Tensor, data: AuditData, *, batch_size: int, device: Any) -> list[torch.Tensor]:
    return [data.eval_transform(chunk, generator=None).to(device) for chunk in x.split(batch_size)]


def run_scales(spec: AuditSpec, data: AuditData, plan: ScalesPlan, *, weights: Path, digests: DigestSet,
               stored: Callable[[torch.nn.Module], DigestSet] | None = None) -> ScalesResult:
    """Measure the scales cells (see the module docstring) and their 1.1 refit annotation.

    ``stored``: the digests of a model as its file stores it (the file's names and dtypes,
    :meth:`bnconvention.refitting.weights.LoadedWeights.stored_digests`): a half-precision file is audited upcast, and
    its annotation is bound by the digests of the bytes the file holds; None: the model's own tensors are the file's.
    """
    settings = spec.quantization
    if settings is None:
        raise AuditSpecError("the spec has no quantization section", field="/quantization")
    start = time.perf_counter()
    replicates = settings.replicates or spec.replicates
    seed = spec.seed if settings.seed is None else settings.seed
    device, batch = model_device(plan.model), spec.eval_batch_size
    splits = {split.role: (torch.cat(_inputs(split.x, data, batch_size=batch, device=device)), split.y.to(device))
              for split in (data.forget, data.retain, data.test)}
    pools = []
    for r in range(replicates):
        chosen = np.sort(stream(seed, SCALES_STREAM, r).choice(len(data.retain.ids), size=settings.calibration_size,
                                                               replace=False))
        pools.append(_inputs(data.retain.x[torch.from_numpy(chosen)], data, batch_size=batch, device=device))
    audit = scales_cells(plan.model, splits=splits, calibration_pools=pools, margin_pp=spec.margin_pp,
                         shipped=plan.shipped)
    if stored is not None:  # θ, φ proven bit-identical in memory by each recalibration; bound as the file stores them
        kept = stored(plan.model)
        audit = replace(audit, trainable_sha256=kept.trainable_sha256, running_sha256=kept.running_sha256)
    calibration = DataSplit(role="retain", dataset=DatasetRef(id=data.dataset_id, revision=data.dataset_revision),
                            subset=f"{settings.calibration_size} records of the retain split per recalibration, "
                                   f"drawn from SeedSequence({seed}, spawn_key=({SCALES_STREAM}, r)), r < "
                                   f"{replicates}", record_count=settings.calibration_size)
    subject = AuditedFile(filename=weights.name, trainable_sha256=digests.trainable_sha256,
                          running_sha256=digests.running_sha256,
                          declared_convention=plan.declaration.convention.name)
    annotation = scales_annotation(audit, subject=subject, convention=plan.declaration.convention,
                                   calibration=calibration, margin_pp=spec.margin_pp)
    ratios = [abs(v) for run in audit.log_ratios for v in run.values()]
    return ScalesResult(status="audited", reason=annotation.reporting_line or "", scales_file=plan.scales_file.name,
                        observer=plan.shipped.spec.observer, sites=len(plan.shipped.sites),
                        calibration_size=settings.calibration_size,
                        median_abs_log_ratio=statistics.median(ratios), max_abs_log_ratio=max(ratios),
                        annotation=annotation, seconds=time.perf_counter() - start)


__all__ = ["ScalesPlan", "check_shipped_scales", "not_quantized", "plan_scales",
           "redecide_scales", "run_scales", "ships_scales", "unaudited_warning"]
