"""The encoder-level diagnostics stage of an audit: plan, measure, and the 1.1 annotation.

What they measure and how to read them (papers cited by author: docs/statistics.md#references):
docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning.

:func:`plan_encoder` runs with the other checks of :func:`bnconvention.audit.run.runner.prepare_audit`, before any
computation: it resolves and loads the retrain reference, draws the probe's, the attack's and the relearning's
records, and refuses bad input (too few records, a single class, a missing reference) with an error naming the
cell. :func:`run_encoder` then measures the shipped state, the reference, and the state after an *exact* retain
refit on each replicate's pool (``SeedSequence(seed, spawn_key=(0, r))``, as the replicates draw it; Proposition 1
is about the exact operator R*, whatever rule the spec's replicates use). φ is restored after each refit;
relearning fine-tunes copies (:mod:`.relearn`). :func:`with_encoder` writes the results into the annotation, which
becomes spec version 1.1: typed cells ``lp_forget`` (unit fraction) and ``mia_auc`` (unit auc), each with its
reference arm, and the ``linear_probe``, ``membership_inference`` and ``relearning`` sections.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnconvention.audit.diagnostics.membership import (
    MIA_CELL,
    AttackDraw,
    attack_scores,
    auc,
    bootstrap_intervals,
    draw_attack,
)
from bnconvention.audit.diagnostics.probe import (
    LP_CELL,
    ProbeDraw,
    decompose,
    draw_probe,
    feature_layer,
    features_and_logits,
)
from bnconvention.audit.diagnostics.probe import probe_accuracy as fit_probe
from bnconvention.audit.diagnostics.relearn import RelearningTrajectory, draw_relearn, relearn
from bnconvention.audit.measure.checkpoint import LoadedCheckpoint, load_checkpoint
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.measure.evaluation import Refitter, data_split, stream, torch_seed
from bnconvention.audit.measure.stats import decide
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.audit.spec.diagnostics import (
    DiagnosticsSpec,
    LinearProbeSpec,
    MembershipSpec,
    RelearningSpec,
    reference_path,
)
from bnconvention.errors import AuditSpecError, UntrustedInputError
from bnconvention.standard.models import LATEST_SPEC_VERSION, Cell, RefitAnnotation, parse_record, to_dict

Scores = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class EncoderPlan:
    """Everything the diagnostics read, drawn and checked before any computation. A drawn part (probe, attack,
    relearn) is present exactly when its spec section is."""

    spec: DiagnosticsSpec
    layer: str | None = None  # the probe's feature module
    reference: LoadedCheckpoint | None = None
    reference_filename: str | None = None
    probe: ProbeDraw | None = None
    attack: AttackDraw | None = None
    relearn: np.ndarray | None = None


def plan_encoder(spec: AuditSpec, data: AuditData, checkpoint: LoadedCheckpoint) -> EncoderPlan | None:
    """The checked plan, or None when the spec asks for no diagnostic (the audit is then exactly as before)."""
    diagnostics = spec.diagnostics
    if diagnostics is None or not diagnostics.any:
        return None
    layer = probe = attack = relearn = None
    if diagnostics.linear_probe is not None:
        layer, _ = feature_layer(checkpoint.model, diagnostics.linear_probe.feature_layer)
        split = diagnostics.linear_probe.train_split
        probe = draw_probe(getattr(data, split).y.numpy(), data.forget.y.numpy(), diagnostics.linear_probe,
                           seed=spec.seed, train_split=split)
    if diagnostics.membership_inference is not None:
        attack = draw_attack(forget_labels=data.forget.y.numpy(), test_labels=data.test.y.numpy(),
                             spec=diagnostics.membership_inference, seed=spec.seed)
    if diagnostics.relearning is not None:
        relearn = draw_relearn(len(data.forget.ids), diagnostics.relearning, seed=spec.seed)
    reference, filename = _load_reference(spec, checkpoint)
    return EncoderPlan(spec=diagnostics, layer=layer, reference=reference, reference_filename=filename, probe=probe,
                       attack=attack, relearn=relearn)


def reference_file(spec: AuditSpec, weights: Path, *, name: str) -> tuple[Path, str] | None:
    """The retrain reference of the checkpoint ``name`` at ``weights`` (its path, and as the spec names it), checked
    to exist: a census checks every checkpoint's before any audit. A Hub reference (``repo``) has a path only once
    ``hub audit`` has downloaded it (:mod:`bnconvention.hub_audit.reference`); a local audit refuses it."""
    reference = spec.diagnostics.reference if spec.diagnostics is not None and spec.diagnostics.any else None
    if reference is None:
        return None
    if reference.path is None:
        raise AuditSpecError(f"diagnostics.reference names a file of the Hub repo {reference.repo!r}, which only "
                             "bnconvention hub audit downloads; for a local audit give reference.path (relative to "
                             f"the checkpoint's folder) instead", field="/diagnostics/reference/repo")
    relative = reference_path(reference.path, name=name)
    path = (weights.parent / relative).resolve()
    if not path.is_file():
        raise AuditSpecError(f"the retrain reference of {name} ({relative}, {path}) does not exist; the cells "
                             "lp_forget and mia_auc compare with it", field="/diagnostics/reference/path")
    return path, reference.filename or relative


def _load_reference(spec: AuditSpec, checkpoint: LoadedCheckpoint) -> tuple[LoadedCheckpoint | None, str | None]:
    found = reference_file(spec, checkpoint.path, name=checkpoint.name)
    if found is None:
        return None, None
    path, relative = found
    try:
        reference = load_checkpoint(path, spec)
    except (UntrustedInputError, ValueError, OSError) as exc:
        raise AuditSpecError(f"the retrain reference {relative} of {checkpoint.name} cannot be loaded: {exc}",
                             field="/diagnostics/reference/path") from exc
    return reference, relative


# --- measuring ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateMeasure:
    """One state's linear-probe accuracy and attack scores (members, non-members)."""

    lp: float | None
    scores: Scores | None


def measure_state(model: torch.nn.Module, plan: EncoderPlan, data: AuditData, *, batch_size: int) -> StateMeasure:
    """The probe and the attack on ``model`` as it is now (eval transform, eval mode)."""
    layer = None if plan.layer is None else feature_layer(model, plan.layer)[1]
    forget_features, forget_logits = features_and_logits(model, data.forget.x, transform=data.eval_transform,
                                                         layer=layer, batch_size=batch_size)
    lp = scores = None
    probe_spec = plan.spec.linear_probe
    if plan.probe is not None and probe_spec is not None and forget_features is not None:
        split = getattr(data, probe_spec.train_split)
        index = _tensor_index(plan.probe.train)
        train_features, _ = features_and_logits(model, split.x[index], transform=data.eval_transform, layer=layer,
                                                batch_size=batch_size)
        test = plan.probe.test
        lp = fit_probe(np.asarray(train_features), split.y[index].numpy(), forget_features[test],
                       data.forget.y.numpy()[test], spec=probe_spec)
    attack_spec = plan.spec.membership_inference
    if plan.attack is not None and attack_spec is not None:
        members, nonmembers = _tensor_index(plan.attack.members), _tensor_index(plan.attack.nonmembers)
        _, test_logits = features_and_logits(model, data.test.x[nonmembers], transform=data.eval_transform,
                                             layer=None, batch_size=batch_size)
        scores = (attack_scores(forget_logits[members], data.forget.y[members], attack=attack_spec.attack),
                  attack_scores(test_logits, data.test.y[nonmembers], attack=attack_spec.attack))
    return StateMeasure(lp=lp, scores=scores)


def _tensor_index(indices: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(indices, dtype=np.int64))


def _relearn(model: torch.nn.Module, records: np.ndarray, spec: RelearningSpec, data: AuditData
             ) -> RelearningTrajectory:
    index = _tensor_index(records)
    return relearn(model, train_x=data.forget.x[index], train_y=data.forget.y[index], eval_x=data.forget.x,
                   eval_y=data.forget.y, spec=spec, transform=data.eval_transform)


@dataclass(frozen=True)
class EncoderOutcome:
    shipped: StateMeasure
    refits: list[StateMeasure]
    reference: StateMeasure | None
    relearn_shipped: RelearningTrajectory | None = None
    relearn_refit: list[RelearningTrajectory] | None = None


def run_encoder(spec: AuditSpec, data: AuditData, plan: EncoderPlan, refitter: Refitter) -> EncoderOutcome:
    """The shipped state, the reference, and R exact retain refits (φ restored after each, also on failure)."""
    model, batch = refitter.model, spec.eval_batch_size
    shipped = measure_state(model, plan, data, batch_size=batch)
    records, relearning = plan.relearn, plan.spec.relearning
    relearn_shipped = None
    if records is not None and relearning is not None:
        relearn_shipped = _relearn(model, records, relearning, data)
    reference = None if plan.reference is None else measure_state(plan.reference.model, plan, data, batch_size=batch)
    transform = data.transform(spec.refit.transform)
    refits: list[StateMeasure] = []
    relearn_refit: list[RelearningTrajectory] = []
    try:
        for r in range(spec.replicates):
            rng = stream(spec.seed, 0, r)
            chosen = np.sort(rng.choice(len(data.retain.ids), size=spec.refit.pool_size, replace=False))
            refitter.run(data.retain.x[torch.from_numpy(chosen)], rule="exact", transform=transform,
                         seed=torch_seed(rng), batch_size=spec.refit.batch_size,
                         data_split=data_split(data, role="retain", subset=f"exact refit {r} of the diagnostics",
                                               ids=data.retain.ids[chosen], count=spec.refit.pool_size,
                                               seed=spec.seed))
            refits.append(measure_state(model, plan, data, batch_size=batch))
            if records is not None and relearning is not None and r < relearning.replicates:
                relearn_refit.append(_relearn(model, records, relearning, data))
            refitter.restore()
    finally:
        refitter.restore()
    return EncoderOutcome(shipped=shipped, refits=refits, reference=reference, relearn_shipped=relearn_shipped,
                          relearn_refit=relearn_refit if relearning is not None else None)


# --- the annotation ---------------------------------------------------------------------------------------------------


def typed_cell(metric: str, shipped: float, values: Sequence[float], *, unit: str, margin_pp: float, anchored: bool,
               channel: str, reference: dict[str, Any] | None) -> dict[str, Any]:
    """A 1.1 cell with its unit and reference arm, decided by the standard's rules like every cell."""
    scale = 1.0 if unit == "pp" else 100.0
    shifts = [scale * (v - shipped) for v in values]
    decision = decide(shifts, margin_pp=margin_pp)
    method = "not-anchored" if not anchored else "channel-absent" if channel == "absent" else decision.method
    outcome = "undetermined" if not anchored else decision.outcome
    p_value = None if not anchored else decision.p_value
    cell: dict[str, Any] = {
        "metric": metric, "split": "forget", "unit": unit, "shipped": shipped,
        "refit": math.fsum(values) / len(values), "shift_pp": math.fsum(shifts) / len(shifts),
        "replicate_values": list(values), "replicate_shifts_pp": shifts, "margin_pp": margin_pp,
        "decision": {"outcome": outcome, "method": method, **({} if p_value is None else {"p_value": p_value})},
    }
    if reference is not None:
        cell["reference"] = reference
    return cell


def redecide_typed_cells(annotation: RefitAnnotation, *, spec_cells: set[str], margin_pp: float, anchored: bool,
                         replicates: int) -> list[Cell]:
    """The diagnostics' typed cells (the annotation's cells outside ``spec_cells``) re-decided at ``margin_pp`` from
    their stored values, for a census that re-decides a journal entry; none when the replicate count changed (a
    pool-size sweep re-decides only the spec's cells)."""
    out = []
    for cell in annotation.cells:
        if cell.metric in spec_cells or len(cell.replicate_values) != replicates:
            continue
        unit = getattr(cell, "unit", None) or "fraction"
        reference = getattr(cell, "reference", None)
        data = typed_cell(cell.metric, cell.shipped, list(cell.replicate_values), unit=unit, margin_pp=margin_pp,
                          anchored=anchored, channel=annotation.channel,
                          reference=None if reference is None else reference.model_dump(mode="json", exclude_none=True))
        out.append(Cell.model_validate({**data, "split": cell.split} if cell.split else data))
    return out


def cells_for(annotation: RefitAnnotation, cells: Sequence[Any]) -> list[Any]:
    """``cells`` as the annotation holds them."""
    if annotation.spec_version == "1.0":
        return list(cells)
    return [c if isinstance(c, Cell) else Cell.model_validate(c.model_dump(mode="json", exclude_none=True))
            for c in cells]


def _reference_arm(plan: EncoderPlan, value: float | None) -> dict[str, Any] | None:
    if plan.reference is None or value is None or plan.reference_filename is None:
        return None
    digests = plan.reference.file_digests
    hub = plan.spec.reference if plan.spec.reference is not None and plan.spec.reference.on_hub else None
    arm = {"arm": "retrain", "filename": plan.reference_filename, "repo": hub and hub.repo,
           "revision": hub and hub.revision, "trainable_sha256": digests.trainable_sha256,
           "running_sha256": digests.running_sha256, "value": value}
    return {k: v for k, v in arm.items() if v is not None}


def _probe_section(spec: AuditSpec, plan: EncoderPlan, probe: LinearProbeSpec, draw: ProbeDraw, *, shipped: float,
                   refits: Sequence[float], reference: float | None) -> dict[str, Any]:
    parts = decompose(shipped, refits, reference)
    protocol = {"probe": "sklearn-logistic-regression", "solver": "lbfgs", "max_iter": probe.max_iter,
                "inverse_regularization": probe.inverse_regularization, "standardized": probe.standardize,
                "feature_layer": plan.layer or "<model>", "train_split": probe.train_split,
                "per_class": probe.per_class, "classes": draw.classes, "test_split": "forget",
                "test_records": len(draw.test), "seed": spec.seed, "refit_rule": "exact"}
    section: dict[str, Any] = {"metric": LP_CELL, "protocol": protocol,
                               "bn_residual_pp": parts.bn_residual_pp.model_dump(mode="json")}
    if parts.nc_residual_pp is not None:
        section["nc_residual_pp"] = parts.nc_residual_pp.model_dump(mode="json")
    return section


def _attack_section(spec: AuditSpec, attack: MembershipSpec, draw: AttackDraw, *, shipped: Scores,
                    refits: Sequence[Scores]) -> dict[str, Any]:
    intervals = bootstrap_intervals(shipped, refits, spec=attack, seed=spec.seed)
    protocol = {"attack": attack.attack, "members": "forget", "nonmembers": "test",
                "class_matched": attack.class_matched, "records_per_side": len(draw.members), "seed": spec.seed,
                "bootstrap": attack.bootstrap}
    return {"metric": MIA_CELL, "protocol": protocol, "auc_shipped": intervals.shipped.model_dump(mode="json"),
            "auc_refit": intervals.refit.model_dump(mode="json"),
            "shift_pp": intervals.shift_pp.model_dump(mode="json")}


def _relearning_section(spec: AuditSpec, relearning: RelearningSpec, shipped: RelearningTrajectory | None,
                        refits: list[RelearningTrajectory]) -> dict[str, Any]:
    protocol = {"optimizer": "sgd", "learning_rate": relearning.learning_rate, "batch_size": relearning.batch_size,
                "records": relearning.records, "max_steps": relearning.max_steps,
                "target_forget_accuracy": relearning.target_forget_accuracy, "evaluated_on": "forget",
                "batchnorm": "frozen", "seed": spec.seed}
    return {"protocol": protocol, "steps_shipped": None if shipped is None else shipped.steps,
            "steps_refit": [r.steps for r in refits], "area_shipped": None if shipped is None else shipped.area,
            "area_refit": [r.area for r in refits]}


def with_encoder(annotation: RefitAnnotation, spec: AuditSpec, plan: EncoderPlan, outcome: EncoderOutcome, *,
                 anchored: bool) -> RefitAnnotation:
    """``annotation`` as spec version 1.1 with the diagnostics' cells and sections."""
    data = to_dict(annotation)
    data["spec_version"] = LATEST_SPEC_VERSION
    common: dict[str, Any] = {"margin_pp": spec.margin_pp, "anchored": anchored, "channel": annotation.channel}
    reference = outcome.reference
    probe, lp_values = plan.spec.linear_probe, [m.lp for m in outcome.refits if m.lp is not None]
    if plan.probe is not None and probe is not None and outcome.shipped.lp is not None:
        reference_lp = reference.lp if reference is not None else None
        data["cells"].append(typed_cell(LP_CELL, outcome.shipped.lp, lp_values, unit="fraction", **common,
                                        reference=_reference_arm(plan, reference_lp)))
        data["linear_probe"] = _probe_section(spec, plan, probe, plan.probe, shipped=outcome.shipped.lp,
                                              refits=lp_values, reference=reference_lp)
    attack, refit_scores = plan.spec.membership_inference, [m.scores for m in outcome.refits if m.scores is not None]
    if plan.attack is not None and attack is not None and outcome.shipped.scores is not None:
        reference_auc = auc(*reference.scores) if reference is not None and reference.scores is not None else None
        data["cells"].append(typed_cell(MIA_CELL, auc(*outcome.shipped.scores), [auc(*s) for s in refit_scores],
                                        unit="auc", **common, reference=_reference_arm(plan, reference_auc)))
        data["membership_inference"] = _attack_section(spec, attack, plan.attack, shipped=outcome.shipped.scores,
                                                       refits=refit_scores)
    if plan.spec.relearning is not None and outcome.relearn_refit is not None:
        data["relearning"] = _relearning_section(spec, plan.spec.relearning, outcome.relearn_shipped,
                                                 outcome.relearn_refit)
    record = parse_record(data)
    if not isinstance(record, RefitAnnotation):  # a refit_annotation stays one; a guard for the type checker
        raise TypeError("the annotation did not parse as a refit annotation")
    return record


__all__ = ["EncoderOutcome", "EncoderPlan", "StateMeasure", "cells_for", "measure_state", "plan_encoder",
           "redecide_typed_cells", "reference_file", "run_encoder", "typed_cell", "with_encoder"]
