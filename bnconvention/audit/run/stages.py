"""The stages of one checkpoint's audit, each a function from typed inputs to a typed output.

:func:`bnconvention.audit.run.runner.run_audit` composes them in order: :func:`evaluate_shipped` (cells and anchoring as
shipped) → :func:`run_replicates` (R refits on redrawn retained pools, φ restored after each) → :func:`decide_cells`
(decisions and verdicts, from numbers alone) → :func:`run_band_refits` (the retain refits the band needs beyond the
replicates) → :func:`staleness_with_band` (docs/statistics.md#staleness, against the null band of :mod:`.band`) →
:func:`run_diagnostics` (recoverability and its curve, provenance arms) → :func:`check_theta_after_audit` →
:func:`build_annotation`. The model-free stages (decisions, staleness, annotation) run on any numbers given to them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from bnconvention.audit.core.result import (
    MechanismEvidence,
    PopulationMetadata,
    ProvenanceArmMeasurement,
    RecoverabilityMeasurement,
    ReplicateRecord,
    SignRecord,
    StalenessNull,
    population_metadata,
)
from bnconvention.audit.diagnostics.band import band_null, combined
from bnconvention.audit.diagnostics.mechanism import from_metadata
from bnconvention.audit.diagnostics.provenance import annotation_contrast, provenance_arms
from bnconvention.audit.diagnostics.recoverability import recoverability
from bnconvention.audit.diagnostics.recovery import recoverability_curve
from bnconvention.audit.measure.checkpoint import LoadedCheckpoint, read_sidecar
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.measure.decisions import (
    BaseCells,
    anchoring,
    audit_reporting_line,
    cell_field,
    decide_cell,
    evaluate_cell,
    verdict,
)
from bnconvention.audit.measure.evaluation import (
    Refitter,
    base_cells,
    data_split,
    retain_split_description,
    stream,
    torch_seed,
)
from bnconvention.audit.run.prepared import PreparedAudit
from bnconvention.audit.run.shipped_store import ShippedStore
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.authoring.declaration import default_producer, make_convention
from bnconvention.errors import AuditSpecError, UntrustedInputError, WeightsChangedError
from bnconvention.refitting import running_state, staleness_distance
from bnconvention.refitting.result import RefitReport
from bnconvention.refitting.state import LayerRunningState
from bnconvention.standard.locations import record_from_header
from bnconvention.standard.models import (
    SPEC_VERSION,
    Anchoring,
    AuditedFile,
    Cell,
    Channel,
    FittingConvention,
    LayerStaleness,
    ProvenanceContrast,
    Recoverability,
    RefitAnnotation,
    Staleness,
    StalenessBand,
    Verdict,
)
from bnconvention.standard.naming import record_ids_sha256

RunningState = dict[str, "LayerRunningState"]


# --- shipped ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShippedCells:
    """The checkpoint as shipped: df/dr/dt, each spec cell, and anchoring against the published cells (if any)."""

    base: BaseCells
    cells: dict[str, float]
    anchoring: Anchoring | None
    seconds: float  # the shipped evaluation alone

    @property
    def anchored(self) -> bool:
        """Whether decisions may be made: no published cells to anchor to counts as anchored."""
        return self.anchoring.anchored if self.anchoring is not None else True


def evaluate_shipped(prepared: PreparedAudit, *, store: ShippedStore | None = None) -> ShippedCells:
    """One evaluation of the shipped state (eval transform, full splits), then the cells and anchoring from it.
    With a ``store`` the base cells come from it when an audit sharing the weights, architecture and splits already
    evaluated them (``seconds`` is then 0.0), and are put there otherwise."""
    spec, checkpoint = prepared.spec, prepared.checkpoint
    start = time.perf_counter()
    key = store.key(prepared) if store is not None else None
    stored = store.get(key) if store is not None and key is not None else None
    base = stored if stored is not None else base_cells(checkpoint.model, prepared.data,
                                                         batch_size=spec.eval_batch_size)
    if store is not None and key is not None and stored is None:
        store.put(key, base)
    seconds = 0.0 if stored is not None else time.perf_counter() - start
    cells = {c.text: evaluate_cell(c, base, *cell_field(spec, i, c)) for i, c in enumerate(spec.cell_expressions())}
    anchors = anchoring(spec, published=checkpoint.published, shipped_cells=cells, shipped_base=base)
    return ShippedCells(base=base, cells=cells, anchoring=anchors, seconds=seconds)


# --- replicates -----------------------------------------------------------------------------------------------------


@dataclass
class Replicates:
    """R refits on independently redrawn retained pools, each evaluated; φ is back to the shipped state after."""

    records: list[ReplicateRecord]
    base: list[BaseCells]
    kept_states: list[RunningState]  # the refit φ of every replicate when the spec asks for staleness
    first_report: RefitReport
    channel: Channel
    transform_mode: str  # of the refit transform: "train" or "eval"
    warnings: list[str] = field(default_factory=list)  # replicate 0's refit warnings, prefixed "refit: "


def run_replicates(prepared: PreparedAudit, refitter: Refitter, *, progress: bool = False,
                   on_replicate: Callable[[int], None] | None = None) -> Replicates:
    """Replicate ``r`` draws its pool and augmentation seed from ``SeedSequence(seed, spawn_key=(0, r))``, refits,
    evaluates and restores; φ is restored also when a replicate fails."""
    spec, data = prepared.spec, prepared.data
    describe_pool = retain_split_description(pool_size=spec.refit.pool_size, seed=spec.seed, data=data)
    transform = data.transform(spec.refit.transform)
    records: list[ReplicateRecord] = []
    base: list[BaseCells] = []
    kept: list[RunningState] = []
    reports: list[RefitReport] = []
    bar = tqdm(range(spec.replicates), desc=f"audit {prepared.checkpoint.name}", unit="replicate",
               disable=not progress, leave=False)
    try:
        for r in bar:
            record, cells, report, state = _replicate(prepared, refitter, r, transform=transform,
                                                      describe_pool=describe_pool, keep_state=spec.staleness)
            records.append(record)
            base.append(cells)
            reports.append(report)
            if state is not None:
                kept.append(state)
            if on_replicate is not None:
                on_replicate(r)
    finally:
        bar.close()
        refitter.restore()
    first = reports[0]
    return Replicates(records=records, base=base, kept_states=kept, first_report=first, channel=reports[-1].channel,
                      transform_mode=transform.mode, warnings=[f"refit: {w}" for w in first.warnings])


def replicate_record(prepared: PreparedAudit, refitter: Refitter, r: int) -> ReplicateRecord:
    """Replicate ``r`` on its own, the same draw, refit and evaluation as inside :func:`run_replicates` (a sweep's
    missing replicate); φ is restored after it."""
    spec, data = prepared.spec, prepared.data
    describe_pool = retain_split_description(pool_size=spec.refit.pool_size, seed=spec.seed, data=data)
    try:
        record, _, _, _ = _replicate(prepared, refitter, r, transform=data.transform(spec.refit.transform),
                                     describe_pool=describe_pool, keep_state=False)
    finally:
        refitter.restore()
    return record


def _replicate(prepared: PreparedAudit, refitter: Refitter, r: int, *, transform: Any, describe_pool: str,
               keep_state: bool) -> tuple[ReplicateRecord, BaseCells, RefitReport, RunningState | None]:
    """One replicate: draw, refit, keep φ if asked, evaluate, restore."""
    spec, data = prepared.spec, prepared.data
    start = time.perf_counter()
    rng = stream(spec.seed, 0, r)
    chosen = np.sort(rng.choice(len(data.retain.ids), size=spec.refit.pool_size, replace=False))
    augmentation_seed = torch_seed(rng)
    ids = data.retain.ids[chosen]
    report = refitter.run(
        data.retain.x[torch.from_numpy(chosen)], rule=spec.refit.rule, transform=transform,
        seed=augmentation_seed, batch_size=spec.refit.batch_size,
        data_split=data_split(data, role="retain", subset=describe_pool, ids=ids, count=spec.refit.pool_size,
                              seed=spec.seed))
    state = running_state(refitter.model) if keep_state else None
    cells = base_cells(refitter.model, data, batch_size=spec.eval_batch_size)
    refitter.restore()
    record = ReplicateRecord(index=r, pool_ids_sha256=record_ids_sha256([int(i) for i in ids]),
                             augmentation_seed=augmentation_seed, base_cells=cells,
                             seconds=time.perf_counter() - start)
    return record, cells, report, state


def band_refit_count(spec: AuditSpec) -> int:
    """Retain refits the band needs beyond the replicates (0 by default: the replicates are the null)."""
    if not spec.staleness or spec.staleness_band.refits is None:
        return 0
    return max(0, spec.staleness_band.refits - spec.replicates)


def run_band_refits(prepared: PreparedAudit, refitter: Refitter) -> list[RunningState]:
    """Refits ``R .. N-1`` of the null, drawn exactly like replicates (``SeedSequence(seed, spawn_key=(0, r))``) but
    neither evaluated nor counted as replicates; φ is restored after each."""
    spec, data = prepared.spec, prepared.data
    transform = data.transform(spec.refit.transform)
    states: list[RunningState] = []
    try:
        for r in range(spec.replicates, spec.replicates + band_refit_count(spec)):
            rng = stream(spec.seed, 0, r)
            chosen = np.sort(rng.choice(len(data.retain.ids), size=spec.refit.pool_size, replace=False))
            ids = data.retain.ids[chosen]
            refitter.run(data.retain.x[torch.from_numpy(chosen)], rule=spec.refit.rule, transform=transform,
                         seed=torch_seed(rng), batch_size=spec.refit.batch_size,
                         data_split=data_split(data, role="retain", subset=f"reference band refit {r}", ids=ids,
                                               count=spec.refit.pool_size, seed=spec.seed))
            states.append(running_state(refitter.model))
            refitter.restore()
    finally:
        refitter.restore()
    return states


# --- decisions ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decisions:
    """Per cell its record and sign test (for Benjamini–Yekutieli across a census), and the criteria's verdicts."""

    cells: list[Cell]
    signs: dict[str, SignRecord]
    verdicts: list[Verdict]


def decide_cells(spec: AuditSpec, shipped: ShippedCells, replicates: Sequence[BaseCells], *, channel: Channel,
                 published: Mapping[str, float] | None) -> Decisions:
    """Each spec cell over the replicates against its shipped value; each criterion on shipped and refit cells."""
    cells: list[Cell] = []
    signs: dict[str, SignRecord] = {}
    published = published or {}
    for i, cell in enumerate(spec.cell_expressions()):
        values = [evaluate_cell(cell, b, *cell_field(spec, i, cell)) for b in replicates]
        record, sign = decide_cell(cell, shipped.cells[cell.text], values, spec=spec, anchored=shipped.anchored,
                                   channel=channel, published=published.get(cell.text))
        cells.append(record)
        signs[cell.text] = sign
    verdicts = [verdict(c, shipped.base, list(replicates), field=f"/criteria/{i}")
                for i, c in enumerate(spec.criterion_expressions())]
    return Decisions(cells=cells, signs=signs, verdicts=verdicts)


# --- staleness ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StalenessOutcome:
    """The annotation's staleness (None when the spec skips it), the band per layer, its null, and warnings."""

    staleness: Staleness | None
    band_layers: list[LayerStaleness] | None
    warnings: list[str] = field(default_factory=list)
    null: StalenessNull | None = None

    @property
    def combined(self) -> float | None:
        """The shipped state's combined distance from replicate 0's refit (the provenance ratio's numerator)."""
        return None if self.staleness is None else combined(self.staleness.mean_distance, self.staleness.var_distance)


def staleness_with_band(spec: AuditSpec, shipped_vs_first: Staleness, kept_states: Sequence[RunningState], *,
                        shipped_state: RunningState) -> StalenessOutcome:
    """Shipped φ against replicate 0's refit (``shipped_vs_first``, the refit's own staleness), decided against the
    null of ``kept_states`` (every independent retain refit: :func:`bnconvention.audit.diagnostics.band.band_null`). The
    annotation's band is the null's ``1 - level`` quantile of each distance; ``exceeds_band`` is the rank test."""
    if not spec.staleness:
        return StalenessOutcome(staleness=None, band_layers=None)
    if len(kept_states) < 2:
        return StalenessOutcome(staleness=shipped_vs_first, band_layers=None,
                                warnings=["reference band not computed: it needs two replicates (R >= 2)"])
    level = spec.staleness_band.level
    null = band_null(shipped_state, kept_states, level=level)
    warnings = [] if null.exceeds_band is not None else [
        f"reference band: {len(kept_states)} refits cannot reach level {level:g} (the smallest p is "
        f"1/{len(kept_states) + 1}); set staleness_band.refits to at least {_refits_for(level)}"]
    band = None if null.band_mean_distance is None or null.band_var_distance is None else StalenessBand(
        mean_distance=null.band_mean_distance, var_distance=null.band_var_distance)
    staleness = shipped_vs_first.model_copy(update={"reference_band": band, "exceeds_band": null.exceeds_band})
    layers = staleness_distance(kept_states[1], kept_states[0]).layers
    return StalenessOutcome(staleness=staleness, band_layers=list(layers), warnings=warnings, null=null)


def _refits_for(level: float) -> int:
    return math.ceil(1 / level - 1 - 1e-9)


# --- diagnostics and the θ check ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnostics:
    recoverability: Recoverability | None
    provenance: ProvenanceContrast | None
    curve: RecoverabilityMeasurement | None = None
    provenance_arms: list[ProvenanceArmMeasurement] = field(default_factory=list)


def run_diagnostics(prepared: PreparedAudit, refitter: Refitter, shipped: ShippedCells, *,
                    staleness: float | None = None) -> Diagnostics:
    """Recoverability (one refit) and its curve, and the provenance arms, each when the spec asks for it.
    ``staleness``: the shipped state's combined staleness, for the provenance ratio."""
    spec, data, batch = prepared.spec, prepared.data, prepared.spec.eval_batch_size
    recovery = curve = None
    if spec.recoverability is not None:
        recovery = recoverability(refitter, spec.recoverability, spec=spec, data=data, shipped=shipped.base,
                                  batch_size=batch)
        curve = recoverability_curve(refitter, spec.recoverability, spec=spec, data=data,
                                     shipped_df=shipped.base["df"], batch_size=batch)
    arms = provenance_arms(refitter, spec=spec, data=data, batch_size=batch, staleness=staleness)
    return Diagnostics(recoverability=recovery, provenance=annotation_contrast(arms), curve=curve,
                       provenance_arms=arms)


def mechanism_evidence(checkpoint: LoadedCheckpoint) -> MechanismEvidence:
    """What the checkpoint's stamped record and sidecar say about its buffers (:mod:`.mechanism`); an unreadable
    record or sidecar is no evidence (the checkpoint's loader already warned about it)."""
    try:
        record = record_from_header(checkpoint.header, source=str(checkpoint.path))
    except UntrustedInputError:
        record = None
    return from_metadata(record=record if isinstance(record, dict) else None, sidecar=_sidecar(checkpoint))


def _sidecar(checkpoint: LoadedCheckpoint) -> dict[str, Any] | None:
    try:
        return read_sidecar(checkpoint.path)
    except (UntrustedInputError, AuditSpecError, OSError):
        return None


def population_evidence(checkpoint: LoadedCheckpoint) -> PopulationMetadata | None:
    """The sidecar's population metadata (family, variant, removal, seed, role, twin) for the family readings; an
    unreadable sidecar is none (the checkpoint's loader already warned about it)."""
    return population_metadata(_sidecar(checkpoint))


def check_theta_after_audit(path: Path, *, before: str, after: str) -> None:
    """The audit's proof that θ did not move: the trainable digests before and after the whole audit."""
    if after != before:
        raise WeightsChangedError(f"{path}: the trainable tensors changed during the audit (digest "
                                  f"{before} became {after}); this is a bug, please report it")


# --- annotation -----------------------------------------------------------------------------------------------------


def build_annotation(prepared: PreparedAudit, shipped: ShippedCells, replicates: Replicates, decisions: Decisions,
                     staleness: StalenessOutcome, diagnostics: Diagnostics) -> RefitAnnotation:
    """The record of the standard the audit writes back, bound to the file by its digests."""
    spec, checkpoint = prepared.spec, prepared.checkpoint
    digests = checkpoint.file_digests
    return RefitAnnotation(
        spec_version=SPEC_VERSION,
        kind="refit_annotation",
        subject=AuditedFile(filename=checkpoint.path.name, trainable_sha256=digests.trainable_sha256,
                            running_sha256=digests.running_sha256,
                            declared_convention=checkpoint.declared_convention),
        convention=annotation_convention(replicates.first_report.declaration.convention, spec, prepared.data),
        channel=replicates.channel,
        replicates=spec.replicates,
        margin_pp=spec.margin_pp,
        anchoring=shipped.anchoring,
        cells=decisions.cells,
        verdicts=decisions.verdicts,
        staleness=staleness.staleness,
        provenance=diagnostics.provenance,
        recoverability=diagnostics.recoverability,
        producer=default_producer(),
        reporting_line=audit_reporting_line(spec=spec, cells=decisions.cells, signs=decisions.signs,
                                      channel=replicates.channel, transform_mode=replicates.transform_mode),
    )


def annotation_convention(replicate_convention: FittingConvention, spec: AuditSpec, data: AuditData
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
