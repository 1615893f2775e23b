"""Audit one checkpoint: shipped cells once, R refit replicates, decisions, verdicts and the diagnostics of seed 003.

The cost is what the design needs and no more: the shipped cells are evaluated once (eval transform, full splits);
each replicate is one refit on its own redrawn retained pool plus one evaluation; the reference band reuses the
running statistics of replicates 0 and 1 (no extra pass); recoverability and the optional provenance contrast add
one and two refits. φ is restored to the shipped state after every refit, and the digest of θ is compared before
and after the whole audit (:class:`~bnconvention.errors.WeightsChangedError` if it moved).

Staleness (seed 003, Eq. 15): the shipped φ against replicate 0's refit, per layer and layer-averaged; the
reference band is the same distance between the refits of replicates 0 and 1, and ``exceeds_band`` holds when both
averaged distances (mean and variance) exceed the band's.

Seeds: replicate ``r`` draws its pool and its augmentation from ``SeedSequence(seed, spawn_key=(0, r))``; the
recoverability images from ``(1,)``; the provenance pool from ``(2,)``. Results depend only on the spec and the
checkpoint, so a census gives the same numbers in one process or in several.

>>> # audit_checkpoint("zoo/bn-badteacher-eval.safetensors", load_spec("examples/audit/digits-zoo.yaml"))
"""

from __future__ import annotations

# torch is imported inside the functions that use it: importing this module does not import torch.
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bnconvention.audit.checkpoint import LoadedCheckpoint, load_checkpoint
from bnconvention.audit.data import AuditData, load_audit_data
from bnconvention.audit.decisions import anchoring, decide_cell, evaluate_cell, reporting_line, verdict
from bnconvention.audit.diagnostics import provenance_contrast, recoverability
from bnconvention.audit.evaluation import (
    BaseCells,
    Refitter,
    base_cells,
    data_split,
    retain_split_description,
    stream,
    torch_seed,
)
from bnconvention.audit.result import AuditResult, ReplicateRecord, SignRecord
from bnconvention.audit.spec import AuditSpec
from bnconvention.authoring.declaration import default_producer, make_convention
from bnconvention.errors import AuditSpecError, WeightsChangedError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.text import plural
from bnconvention.standard.models import (
    SPEC_VERSION,
    AuditedFile,
    Cell,
    FittingConvention,
    LayerStaleness,
    RefitAnnotation,
    Staleness,
    StalenessBand,
)
from bnconvention.standard.naming import record_ids_sha256


@dataclass
class PreparedAudit:
    """A spec, its data and one loaded checkpoint, all checked: running it cannot fail on bad input any more."""

    spec: AuditSpec
    data: AuditData
    checkpoint: LoadedCheckpoint


def check_data_fits(spec: AuditSpec, data: AuditData) -> None:
    """Sizes the spec asks for against the splits it defines (errors name the spec field)."""
    retain = len(data.retain.ids)
    if spec.refit.pool_size > retain:
        raise AuditSpecError(f"refit.pool_size is {spec.refit.pool_size} but the retain split has "
                             f"{plural(retain, 'record')}; draw at most the retain split", field="/refit/pool_size")
    if spec.refit.rule != "exact" and spec.refit.pool_size < 2:
        raise AuditSpecError(f"refit.pool_size {spec.refit.pool_size}: train-mode rules need at least 2 records per "
                             "batch", field="/refit/pool_size")
    if spec.recoverability is not None:
        source = getattr(data, spec.recoverability.source)
        if spec.recoverability.images > len(source.ids):
            raise AuditSpecError(f"recoverability.images is {spec.recoverability.images} but the "
                                 f"{spec.recoverability.source} split has {plural(len(source.ids), 'record')}",
                                 field="/recoverability/images")
        rule = spec.recoverability.rule or spec.refit.rule
        if rule != "exact" and spec.recoverability.images < 2:
            raise AuditSpecError("recoverability with a train-mode rule needs at least 2 images",
                                 field="/recoverability/images")
    if spec.provenance is not None:
        if spec.provenance.pool_size > retain:
            raise AuditSpecError(f"provenance.pool_size is {spec.provenance.pool_size} but the retain split has "
                                 f"{plural(retain, 'record')}", field="/provenance/pool_size")
        if spec.provenance.exchanged > len(data.forget.ids):
            raise AuditSpecError(f"provenance.exchanged is {spec.provenance.exchanged} but the forget split has "
                                 f"{plural(len(data.forget.ids), 'record')}", field="/provenance/exchanged")


def prepare_audit(weights: str | Path, spec: AuditSpec, *, data: AuditData | None = None) -> PreparedAudit:
    """Load and check everything (spec against data, checkpoint against its architecture) before computing."""
    data = data if data is not None else load_audit_data(spec)
    check_data_fits(spec, data)
    checkpoint = load_checkpoint(weights, spec)
    return PreparedAudit(spec=spec, data=data, checkpoint=checkpoint)


def audit_checkpoint(weights: str | Path, spec: AuditSpec, *, data: AuditData | None = None,
                     progress: bool = False) -> AuditResult:
    """Prepare and run the audit of one weights file."""
    return run_audit(prepare_audit(weights, spec, data=data), progress=progress)


# --- the audit ------------------------------------------------------------------------------------------------------


def run_audit(prepared: PreparedAudit, *, progress: bool = False,
              on_replicate: Callable[[int], None] | None = None) -> AuditResult:
    """Compute everything for one prepared checkpoint (see the module docstring for the cost)."""
    import torch
    from tqdm.auto import tqdm

    from bnconvention.formats.digests import model_digests
    from bnconvention.refit import running_state, staleness_distance

    start = time.perf_counter()
    spec, data, checkpoint = prepared.spec, prepared.data, prepared.checkpoint
    model = checkpoint.model
    model.eval()
    theta_before = model_digests(model).trainable_sha256
    batch = spec.eval_batch_size
    cells = spec.cell_expressions()
    warnings = list(checkpoint.warnings)

    eval_start = time.perf_counter()
    shipped_base = base_cells(model, data, batch_size=batch)
    seconds_shipped_eval = time.perf_counter() - eval_start
    shipped_cells = {c.text: evaluate_cell(c, shipped_base, field=f"/cells/{i}") for i, c in enumerate(cells)}
    anchors = anchoring(spec, published=checkpoint.published, shipped_cells=shipped_cells,
                        shipped_base=shipped_base)
    anchored = anchors.anchored if anchors is not None else True

    refitter = Refitter(model)
    describe_pool = retain_split_description(pool_size=spec.refit.pool_size, seed=spec.seed, data=data)
    train_transform = data.transform(spec.refit.transform)
    records: list[ReplicateRecord] = []
    replicate_base: list[BaseCells] = []
    kept_states: list[Any] = []
    first_report: Any = None
    channel = "present"
    bar = tqdm(range(spec.replicates), desc=f"audit {checkpoint.name}", unit="replicate", disable=not progress,
               leave=False)
    try:
        for r in bar:
            t0 = time.perf_counter()
            rng = stream(spec.seed, 0, r)
            chosen = np.sort(rng.choice(len(data.retain.ids), size=spec.refit.pool_size, replace=False))
            augmentation_seed = torch_seed(rng)
            ids = data.retain.ids[chosen]
            report = refitter.run(
                data.retain.x[torch.from_numpy(chosen)], rule=spec.refit.rule, transform=train_transform,
                seed=augmentation_seed, batch_size=spec.refit.batch_size,
                data_split=data_split(data, role="retain", subset=describe_pool, ids=ids,
                                       count=spec.refit.pool_size, seed=spec.seed))
            channel = report.channel
            if first_report is None:
                first_report = report
                warnings.extend(f"refit: {w}" for w in report.warnings)
            if r < 2 and spec.staleness:
                kept_states.append(running_state(model))
            cells_r = base_cells(model, data, batch_size=batch)
            refitter.restore()
            replicate_base.append(cells_r)
            records.append(ReplicateRecord(index=r, pool_ids_sha256=record_ids_sha256([int(i) for i in ids]),
                                           augmentation_seed=augmentation_seed, base_cells=cells_r,
                                           seconds=time.perf_counter() - t0))
            if on_replicate is not None:
                on_replicate(r)
    finally:
        bar.close()
        refitter.restore()

    # cells, decisions, verdicts
    cell_records: list[Cell] = []
    signs: dict[str, SignRecord] = {}
    published = checkpoint.published or {}
    for i, cell in enumerate(cells):
        values = [evaluate_cell(cell, b, field=f"/cells/{i}") for b in replicate_base]
        record, sign = decide_cell(cell, shipped_cells[cell.text], values, spec=spec, anchored=anchored,
                                    channel=channel, published=published.get(cell.text))
        cell_records.append(record)
        signs[cell.text] = sign
    verdicts = [verdict(c, shipped_base, replicate_base, field=f"/criteria/{i}")
                for i, c in enumerate(spec.criterion_expressions())]

    # staleness: shipped vs replicate 0's refit (the report's own staleness), band = replicate 1 vs replicate 0
    staleness: Staleness | None = None
    band_layers: list[LayerStaleness] | None = None
    if spec.staleness:
        staleness = first_report.staleness
        if len(kept_states) >= 2:
            band = staleness_distance(kept_states[1], kept_states[0])
            band_layers = list(band.layers)
            exceeds = (staleness.mean_distance > band.mean_distance and staleness.var_distance > band.var_distance)
            staleness = staleness.model_copy(update={
                "reference_band": StalenessBand(mean_distance=band.mean_distance, var_distance=band.var_distance),
                "exceeds_band": exceeds})
        else:
            warnings.append("reference band not computed: it needs two replicates (R >= 2)")

    recovery = provenance = None
    if spec.recoverability is not None:
        recovery = recoverability(refitter, spec.recoverability, spec=spec, data=data, shipped=shipped_base,
                                  batch_size=batch)
    if spec.provenance is not None:
        provenance = provenance_contrast(refitter, spec.provenance, spec=spec, data=data, batch_size=batch)

    theta_after = model_digests(model).trainable_sha256
    if theta_after != theta_before:
        raise WeightsChangedError(f"{checkpoint.path}: the trainable tensors changed during the audit (digest "
                                  f"{theta_before} became {theta_after}); this is a bug, please report it")

    convention = _annotation_convention(first_report.declaration.convention, spec, data)
    digests = checkpoint.file_digests
    annotation = RefitAnnotation(
        spec_version=SPEC_VERSION,
        kind="refit_annotation",
        subject=AuditedFile(filename=checkpoint.path.name, trainable_sha256=digests.trainable_sha256,
                            running_sha256=digests.running_sha256,
                            declared_convention=checkpoint.declared_convention),
        convention=convention,
        channel=channel,  # type: ignore[arg-type]
        replicates=spec.replicates,
        margin_pp=spec.margin_pp,
        anchoring=anchors,
        cells=cell_records,
        verdicts=verdicts,
        staleness=staleness,
        provenance=provenance,
        recoverability=recovery,
        producer=default_producer(),
        reporting_line=reporting_line(spec=spec, cells=cell_records, signs=signs, channel=channel,
                                      transform_mode=train_transform.mode),
    )
    return AuditResult(
        checkpoint=checkpoint.name,
        weights_path=str(checkpoint.path),
        weights_key=weights_key(digests.trainable_sha256, digests.running_sha256),
        spec_sha256=spec.sha256(),
        factory=checkpoint.choice.factory,
        anchored=None if anchors is None else anchors.anchored,
        annotation=annotation,
        sign_tests=signs,
        band_layers=band_layers,
        replicate_records=records,
        refits_run=refitter.count,
        seconds=time.perf_counter() - start,
        seconds_shipped_eval=seconds_shipped_eval,
        warnings=warnings,
    )


def weights_key(trainable_sha256: str, running_sha256: str | None) -> str:
    """The identity of a weights file for the census journal: its trainable and running digests together."""
    return canonical_sha256({"running_sha256": running_sha256, "trainable_sha256": trainable_sha256})


def _annotation_convention(replicate_convention: FittingConvention, spec: AuditSpec, data: AuditData
                           ) -> FittingConvention:
    """Replicate 0's convention, with the data split describing the redrawn pools rather than one of them."""
    accumulation = replicate_convention.accumulation
    return make_convention(
        buffer_update_mode="refit", role="retain", dataset_id=data.dataset_id,
        subset=retain_split_description(pool_size=spec.refit.pool_size, seed=spec.seed, data=data),
        transform=replicate_convention.transform, dataset_revision=data.dataset_revision,
        rule=accumulation.rule, momentum=getattr(accumulation, "momentum", None),
        batch_size=accumulation.batch_size, num_batches=accumulation.num_batches,
        variance_estimator=accumulation.variance_estimator, precision=accumulation.precision,
        dropout=replicate_convention.other_modules.dropout, distributed=replicate_convention.distributed,
        record_count=spec.refit.pool_size, sampling_seed=spec.seed,
    )


