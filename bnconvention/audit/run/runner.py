"""Audit one checkpoint: shipped cells once, R refit replicates, decisions, verdicts and diagnostics.

The statistics behind each step: docs/statistics.md.

The cost is what the design needs and no more: the shipped cells are evaluated once (eval transform, full splits);
each replicate is one refit on its own redrawn retained pool plus one evaluation; the reference band reuses the
running statistics of replicates 0 and 1 (no extra pass); recoverability and the optional provenance contrast add
one and two refits; the optional encoder-level diagnostics (:mod:`.encoder`) R exact refits and their probes. φ is
restored to the shipped state after every refit, and θ is witnessed once (one digest,
:class:`~bnconvention.refitting.ThetaWitness`) and compared byte for byte in every refit and after the whole audit
(:class:`~bnconvention.errors.WeightsChangedError` if it moved).

Staleness (docs/statistics.md#staleness): the shipped φ against replicate 0's refit, per layer and layer-averaged; the
reference band is the same distance between the refits of replicates 0 and 1, and ``exceeds_band`` holds when both
averaged distances (mean and variance) exceed the band's.

Seeds: replicate ``r`` draws its pool and its augmentation from ``SeedSequence(seed, spawn_key=(0, r))``; the
recoverability images from ``(1,)``; the provenance pool from ``(2,)``. Results depend only on the spec and the
checkpoint, so a census gives the same numbers in one process or in several.

>>> # audit_checkpoint("zoo/bn-badteacher-eval.safetensors", load_spec("examples/audit/digits-zoo.yaml"))
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bnconvention.audit.core.result import AuditResult, ScalesResult
from bnconvention.audit.diagnostics.encoder import plan_encoder, run_encoder, with_encoder
from bnconvention.audit.diagnostics.provenance import retained_needed
from bnconvention.audit.measure.checkpoint import load_checkpoint
from bnconvention.audit.measure.data import AuditData, load_audit_data
from bnconvention.audit.measure.decisions import reach_warning
from bnconvention.audit.measure.evaluation import Refitter
from bnconvention.audit.run.prepared import PreparedAudit
from bnconvention.audit.run.shipped_store import ShippedStore
from bnconvention.audit.run.stages import (
    build_annotation,
    check_theta_after_audit,
    decide_cells,
    evaluate_shipped,
    mechanism_evidence,
    population_evidence,
    run_band_refits,
    run_diagnostics,
    run_replicates,
    staleness_with_band,
)
from bnconvention.audit.run.sweeps import measurement_sha256
from bnconvention.audit.scales.stage import not_quantized, plan_scales, run_scales, unaudited_warning
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.errors import AuditSpecError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.text import plural
from bnconvention.refitting.devices import Device, resolve_device

__all__ = ["PreparedAudit", "audit_checkpoint", "check_data_fits", "prepare_audit", "run_audit", "scales_outcome",
           "weights_key"]


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
        needed = retained_needed(spec.provenance, forget=len(data.forget.ids), retain=retain)
        if needed > retain:
            raise AuditSpecError(f"provenance.pool_size is {spec.provenance.pool_size}: with the records its null "
                                 f"swaps bring in it needs {plural(needed, 'retained record')} but the retain split "
                                 f"has {plural(retain, 'record')}", field="/provenance/pool_size")
        if spec.provenance.exchanged is not None and spec.provenance.exchanged > len(data.forget.ids):
            raise AuditSpecError(f"provenance.exchanged is {spec.provenance.exchanged} but the forget split has "
                                 f"{plural(len(data.forget.ids), 'record')}", field="/provenance/exchanged")


def prepare_audit(weights: str | Path, spec: AuditSpec, *, data: AuditData | None = None,
                  device: Device = "cpu") -> PreparedAudit:
    """Load and check everything (spec against data, checkpoint against its architecture) before computing;
    the model is moved to ``device`` (:mod:`bnconvention.refitting.devices`; the data stays on the CPU and each batch
    follows the model)."""
    if spec.margin == "auto":
        raise AuditSpecError("margin: auto derives the margin from a population's seed spread; audit a population "
                             "with `bnconvention census`, or give margin_pp a number", field="/margin")
    target = resolve_device(device)
    repo_dir = Path(weights).parent  # the model repo's folder: from_repo transforms, index files in the repo
    data = data.for_repo(spec, repo_dir) if data is not None else load_audit_data(spec, repo_dir=repo_dir)
    check_data_fits(spec, data)
    checkpoint = load_checkpoint(weights, spec)
    checkpoint.model.to(target)
    encoder = plan_encoder(spec, data, checkpoint)
    scales = plan_scales(spec, data, checkpoint.path, model=checkpoint.model, digests=checkpoint.file_digests)
    unaudited = None if spec.quantization is not None else unaudited_warning(checkpoint.path)
    if unaudited is not None:
        checkpoint.warnings.append(unaudited)
    return PreparedAudit(spec=spec, data=data, checkpoint=checkpoint, encoder=encoder, scales=scales)


def scales_outcome(prepared: PreparedAudit) -> ScalesResult | None:
    """The second deployed state's result: audited when the checkpoint ships scales, ``not_quantized`` when the
    spec asks and it ships none, None when the spec does not ask."""
    checkpoint = prepared.checkpoint
    if prepared.spec.quantization is None:
        return None
    if prepared.scales is None:
        return not_quantized(checkpoint.path)
    return run_scales(prepared.spec, prepared.data, prepared.scales, weights=checkpoint.path,
                      digests=checkpoint.file_digests,
                      stored=None if checkpoint.weights is None else checkpoint.weights.stored_digests)


def audit_checkpoint(weights: str | Path, spec: AuditSpec, *, data: AuditData | None = None,
                     progress: bool = False, device: Device = "cpu") -> AuditResult:
    """Prepare and run the audit of one weights file."""
    return run_audit(prepare_audit(weights, spec, data=data, device=device), progress=progress)


def run_audit(prepared: PreparedAudit, *, progress: bool = False,
              on_replicate: Callable[[int], None] | None = None,
              shipped_store: ShippedStore | None = None) -> AuditResult:
    """Compute everything for one prepared checkpoint, stage by stage (:mod:`bnconvention.audit.run.stages`; the module
    docstring gives the cost). ``shipped_store`` reuses shipped cells another audit of the same weights,
    architecture and splits evaluated (:mod:`bnconvention.audit.run.shipped_store`)."""
    start = time.perf_counter()
    spec, checkpoint = prepared.spec, prepared.checkpoint
    model = checkpoint.model
    model.eval()
    # θ witnessed before anything runs: one digest for the audit, every refit compares bytes against it
    refitter = Refitter(model, after_refit=checkpoint.weights.round_running if checkpoint.weights else None)
    shipped = evaluate_shipped(prepared, store=shipped_store)
    replicates = run_replicates(prepared, refitter, progress=progress, on_replicate=on_replicate)
    decisions = decide_cells(spec, shipped, replicates.base, channel=replicates.channel,
                             published=checkpoint.published)
    band_states = run_band_refits(prepared, refitter)
    staleness = staleness_with_band(spec, replicates.first_report.staleness, [*replicates.kept_states, *band_states],
                                    shipped_state=refitter.shipped)
    diagnostics = run_diagnostics(prepared, refitter, shipped, staleness=staleness.combined)
    encoder = None if prepared.encoder is None else run_encoder(spec, prepared.data, prepared.encoder, refitter)
    scales = scales_outcome(prepared)
    check_theta_after_audit(checkpoint.path, before=refitter.theta.trainable_sha256,
                          after=refitter.theta.digests(model).trainable_sha256)
    annotation = build_annotation(prepared, shipped, replicates, decisions, staleness, diagnostics)
    if prepared.encoder is not None and encoder is not None:
        annotation = with_encoder(annotation, spec, prepared.encoder, encoder, anchored=shipped.anchored)
    digests = checkpoint.file_digests
    return AuditResult(
        checkpoint=checkpoint.name,
        weights_path=str(checkpoint.path),
        weights_key=weights_key(digests.trainable_sha256, digests.running_sha256),
        spec_sha256=spec.sha256(),
        measurement_sha256=measurement_sha256(spec),
        factory=checkpoint.choice.factory,
        anchored=None if shipped.anchoring is None else shipped.anchoring.anchored,
        annotation=annotation,
        sign_tests=decisions.signs,
        band_layers=staleness.band_layers,
        shipped_base_cells=shipped.base,
        replicate_records=replicates.records,
        refits_run=refitter.count,
        seconds=time.perf_counter() - start,
        seconds_shipped_eval=shipped.seconds,
        warnings=[*checkpoint.warnings, *replicates.warnings, *staleness.warnings,
                  *filter(None, [reach_warning(spec.replicates)])],
        staleness_null=staleness.null,
        provenance_arms=diagnostics.provenance_arms or None,
        recoverability_curve=diagnostics.curve,
        mechanism=mechanism_evidence(checkpoint) if replicates.channel == "present" else None,
        population=population_evidence(checkpoint),
        scales=scales,
        split_records=split_records(prepared.data),
    )


def split_records(data: AuditData) -> dict[str, int]:
    """How many records each split holds: a cell on a split of n records moves in steps of 100 / n pp."""
    return {"forget": len(data.forget.y), "retain": len(data.retain.y), "test": len(data.test.y)}


def weights_key(trainable_sha256: str, running_sha256: str | None) -> str:
    """The identity of a weights file for the census journal: its trainable and running digests together."""
    return canonical_sha256({"running_sha256": running_sha256, "trainable_sha256": trainable_sha256})
