"""The readings a census writes into each checkpoint's annotation beside the BY p-values and the family (fields
the standard marks ``since("1.1")``): its recoverability curves (one per proxy source), its provenance arms, and its
frozen twin.

Pure functions from the audit results to JSON-ready annotation fields (:mod:`bnconvention.standard.annotation`); the
census rewrites the annotation with them (:mod:`.annotations`). A field the audit did not measure is left
out, so a checkpoint with none stays 1.0 unless it gains a BY p-value or a family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bnconvention.audit.core.result import AuditResult, ProvenanceArm, RecoverabilityCurve

# The curve's proxy sources as the standard's split roles; noise is out of distribution ("other").
SOURCE_ROLES = {"test": ("test", None), "retain": ("retain", None),
                "noise": ("other", "gaussian noise with the test split's per-pixel mean and standard deviation")}
ARM_MODES = {"online": "train", "frozen": "frozen"}  # how a twin arm's buffers moved


def recoverability_curves(curve: RecoverabilityCurve | None) -> list[dict[str, Any]] | None:
    """One curve per proxy source, budgets ascending, forget accuracy per seed (None: no curve measured)."""
    if curve is None or not curve.points:
        return None
    out = []
    for source in sorted({p.source for p in curve.points}):
        role, description = SOURCE_ROLES[source]
        points = sorted((p for p in curve.points if p.source == source), key=lambda p: p.budget)
        entry: dict[str, Any] = {"source": role, "rule": curve.rule, "seeds": list(range(curve.seeds)),
                                 "forget_accuracy_shipped": curve.forget_accuracy_shipped,
                                 "points": [{"images": p.budget, "forget_accuracy": list(p.forget_accuracy)}
                                            for p in points]}
        if description is not None:
            entry["description"] = description
        out.append(entry)
    return out


def provenance_arms(arms: Sequence[ProvenanceArm] | None) -> list[dict[str, Any]] | None:
    """The provenance arms: each draw's forget shift, decided against the null swaps' band (±largest |null
    shift|)."""
    if not arms:
        return None
    return [{"arm": a.arm, "pool_size": a.pool_size, "exchanged": a.exchanged,
             "forget_shift_pp": [d.forget_shift_pp for d in a.draws],
             "null_band": {"lower": -a.null_shift_band_pp, "upper": a.null_shift_band_pp},
             "outside_null": a.shift_exceeds_null} for a in arms]


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


def annotation_fields(results: Sequence[AuditResult], names: Sequence[str], *, metric: str) -> list[dict[str, Any]]:
    """Per checkpoint (in order), the annotation fields it gains from its own readings and its twin in the census."""
    by_name: Mapping[str, AuditResult] = dict(zip(names, results, strict=True))
    out = []
    for result in results:
        partner_name = result.population.twin_partner if result.population is not None else None
        fields = {"recoverability_curves": recoverability_curves(result.recoverability_curve),
                  "provenance_arms": provenance_arms(result.provenance_arms),
                  "twin": twin_reference(result, by_name.get(partner_name or ""), metric=metric)}
        out.append({key: value for key, value in fields.items() if value is not None})
    return out


__all__ = ["annotation_fields", "provenance_arms", "recoverability_curves", "twin_reference"]
