"""The readings a census writes into each checkpoint's annotation beside the BY p-values and the family (fields
the standard marks ``since("1.1")``): its recoverability curves (one per proxy source), its provenance arms, and its
frozen twin.

Pure functions from the audit results to JSON-ready annotation fields (:mod:`bnconvention.standard.annotation`); the
curves and arms are the records the audit's measurements make of themselves
(:meth:`~bnconvention.audit.core.result.RecoverabilityMeasurement.to_records`,
:meth:`~bnconvention.audit.core.result.ProvenanceArmMeasurement.to_record`). The census rewrites the annotation with
them (:mod:`.annotations`). A field the audit did not measure is left
out, so a checkpoint with none stays 1.0 unless it gains a BY p-value or a family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from bnconvention.audit.core.result import AuditResult

ARM_MODES = {"online": "train", "frozen": "frozen"}  # how a twin arm's buffers moved


def twin_reference(result: AuditResult, partner: AuditResult | None, *, metric: str) -> dict[str, Any] | None:
    """The 1.1 ``twin`` of one arm of a frozen-twin pair: the partner's file, digests and buffer mode, and the
    shipped gap of ``metric`` (this arm minus the partner, pp). None when the checkpoint has no twin in the census."""
    population = result.population
    if partner is None or population is None or population.twin_arm is None:
        return None
    own = next((c for c in result.annotation.cells if c.metric == metric), None)
    theirs = next((c for c in partner.annotation.cells if c.metric == metric), None)
    if own is None or theirs is None:
        return None
    subject = partner.annotation.subject
    twin: dict[str, Any] = {"filename": subject.filename, "trainable_sha256": subject.trainable_sha256,
                            "running_sha256": subject.running_sha256, "metric": metric,
                            "gap_pp": (own.shipped - theirs.shipped) * 100.0}
    partner_arm = partner.population.twin_arm if partner.population is not None else None
    if partner_arm in ARM_MODES:
        twin["buffer_update_mode"] = ARM_MODES[partner_arm]
    return {key: value for key, value in twin.items() if value is not None}


def _json(records: Sequence[BaseModel] | None) -> list[dict[str, Any]] | None:
    """The standard's records as JSON-ready objects (None: nothing measured)."""
    return [r.model_dump(mode="json", exclude_none=True) for r in records] if records else None


def annotation_fields(results: Sequence[AuditResult], names: Sequence[str], *, metric: str) -> list[dict[str, Any]]:
    """Per checkpoint (in order), the annotation fields it gains from its own readings and its twin in the census."""
    by_name: Mapping[str, AuditResult] = dict(zip(names, results, strict=True))
    out = []
    for result in results:
        partner_name = result.population.twin_partner if result.population is not None else None
        curve, arms = result.recoverability_curve, result.provenance_arms
        fields = {"recoverability_curves": _json(curve.to_records() if curve is not None else None),
                  "provenance_arms": _json([a.to_record() for a in arms] if arms else None),
                  "twin": twin_reference(result, by_name.get(partner_name or ""), metric=metric)}
        out.append({key: value for key, value in fields.items() if value is not None})
    return out


__all__ = ["annotation_fields", "twin_reference"]
