"""Census readings beyond the per-cell counts: the staleness band's null and its false-positive rate, staleness
against displacement, the provenance arms, the recoverability curve and each checkpoint's mechanism.

Pure functions from audit results to JSON-ready dicts (``census.json``'s ``readings``; :mod:`.markdown` renders
them). Only BatchNorm checkpoints (channel present) that are eligible (anchored, or nothing to anchor to) enter
the statistics; the mechanism is given for every checkpoint.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bnconvention.audit.band import combined
from bnconvention.audit.mechanism import combine, from_base
from bnconvention.audit.result import AuditResult


def _bn(results: Sequence[AuditResult], names: Sequence[str]) -> list[tuple[str, AuditResult]]:
    return [(n, r) for n, r in zip(names, results, strict=True)
            if r.anchored is not False and r.annotation.channel == "present"]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Spearman's rank correlation with its two-sided p (scipy), or None values when fewer than 3 pairs or a
    constant side make it undefined."""
    from scipy import stats

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return {"n": len(x), "rho": None, "p_value": None}
    result = stats.spearmanr(x, y)
    return {"n": len(x), "rho": _finite(float(result.statistic)), "p_value": _finite(float(result.pvalue))}


def staleness_readings(results: Sequence[AuditResult], names: Sequence[str], *, headline: str) -> dict[str, Any]:
    """The band's null over the census (how many exceed it, the rate the rank test holds, the one-pair rule's
    measured rate) and Spearman's ρ of the shipped staleness with |shift| of the headline cell."""
    rows = [(n, r) for n, r in _bn(results, names) if r.annotation.staleness is not None]
    nulls = [r.staleness_null for _, r in rows if r.staleness_null is not None]
    triples = sum(n.one_pair_triples for n in nulls)
    fired = sum((n.one_pair_false_positive_rate or 0.0) * n.one_pair_triples for n in nulls)
    staleness = [combined(r.annotation.staleness.mean_distance, r.annotation.staleness.var_distance)
                 for _, r in rows if r.annotation.staleness is not None]
    shifts = [abs(next(c.shift_pp for c in r.annotation.cells if c.metric == headline)) for _, r in rows]
    decided = [n for n in nulls if n.exceeds_band is not None]
    return {
        "checkpoints": len(rows),
        "band_refits": sorted({n.refits for n in nulls}),
        "level": nulls[0].level if nulls else None,
        "exact_level": max((n.exact_level for n in nulls), default=None),
        "decided": len(decided),
        "exceeds_band": sum(bool(n.exceeds_band) for n in decided),
        "expected_false_positives_if_none_stale": sum(n.exact_level for n in decided),
        "one_pair_false_positive_rate": fired / triples if triples else None,
        "one_pair_triples": triples,
        "staleness_vs_abs_shift": {"cell": headline, **spearman(staleness, shifts)},
    }


def provenance_readings(results: Sequence[AuditResult], names: Sequence[str]) -> dict[str, Any] | None:
    """Per arm: the pooled forget contrast, how many checkpoints clear the null band (distance and shift), and the
    staleness/provenance ratio at the median with its range (seed 001, appendix P: 5.43 at the median)."""
    rows = [(n, r) for n, r in _bn(results, names) if r.provenance_arms]
    if not rows:
        return None
    arms: dict[str, Any] = {}
    for arm_name in ("deployment", "ceiling"):
        arms_here = [(n, a) for n, r in rows for a in r.provenance_arms or [] if a.arm == arm_name]
        if not arms_here:
            continue
        ratios = [a.staleness_ratio for _, a in arms_here if a.staleness_ratio is not None]
        arms[arm_name] = {
            "checkpoints": len(arms_here),
            "draws": sorted({len(a.draws) for _, a in arms_here}),
            "pooled_forget_shift_pp": statistics.fmean(a.forget_shift_pp for _, a in arms_here),
            "largest_forget_shift_pp": max((a.forget_shift_pp for _, a in arms_here), key=abs),
            "median_distance": statistics.median(a.distance for _, a in arms_here),
            "median_null_band": statistics.median(a.null_band for _, a in arms_here),
            "exceeds_null": sum(a.exceeds_null for _, a in arms_here),
            "shift_exceeds_null": sum(a.shift_exceeds_null for _, a in arms_here),
            "staleness_ratio_median": statistics.median(ratios) if ratios else None,
            "staleness_ratio_range": [min(ratios), max(ratios)] if ratios else None,
            "per_checkpoint": {n: {"exchanged": a.exchanged, "distance": a.distance, "null_band": a.null_band,
                                   "forget_shift_pp": a.forget_shift_pp, "null_shift_band_pp": a.null_shift_band_pp,
                                   "exceeds_null": a.exceeds_null, "shift_exceeds_null": a.shift_exceeds_null,
                                   "staleness_ratio": a.staleness_ratio} for n, a in arms_here},
        }
    return arms


def recoverability_readings(results: Sequence[AuditResult], names: Sequence[str]) -> dict[str, Any] | None:
    """The census curve: per source and budget, the mean over checkpoints of their seed-mean forget shift."""
    rows = [(n, r.recoverability_curve) for n, r in _bn(results, names) if r.recoverability_curve is not None]
    if not rows:
        return None
    by_point: dict[tuple[str, int], list[float]] = {}
    for _, curve in rows:
        for point in curve.points:
            by_point.setdefault((point.source, point.budget), []).append(point.mean_shift_pp)
    curve_rows = [{"source": s, "budget": b, "checkpoints": len(v), "mean_shift_pp": statistics.fmean(v),
                   "min_shift_pp": min(v), "max_shift_pp": max(v)} for (s, b), v in sorted(by_point.items())]
    headline = {n: (None if c.headline is None else c.headline.mean_shift_pp) for n, c in rows}
    return {"checkpoints": len(rows), "seeds": sorted({c.seeds for _, c in rows}), "curve": curve_rows,
            "headline_budget": next((c.headline.budget for _, c in rows if c.headline is not None), None),
            "headline_shift_pp": headline}


def mechanisms(results: Sequence[AuditResult], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each checkpoint's mechanism from its metadata and, when its base is in the census, the digests."""
    by_name = dict(zip(names, results, strict=True))
    out: dict[str, dict[str, Any]] = {}
    for name, result in by_name.items():
        evidence = result.mechanism
        base = by_name.get(evidence.base) if evidence is not None and evidence.base else None
        comparison = None
        if base is not None and base is not result:
            subject, base_subject = result.annotation.subject, base.annotation.subject
            comparison = from_base(trainable=subject.trainable_sha256, running=subject.running_sha256,
                                   base_trainable=base_subject.trainable_sha256,
                                   base_running=base_subject.running_sha256)
        out[name] = combine(evidence, comparison, channel=result.annotation.channel)
    return out


def mechanism_counts(rows: dict[str, dict[str, Any]]) -> dict[str, int]:
    counts = {"corruption": 0, "misalignment": 0, "neither": 0, "undetermined": 0, "inconsistent": 0}
    for row in rows.values():
        if row["evidence"] == "channel absent":
            continue
        counts[row["mechanism"] or "undetermined"] += 1
        counts["inconsistent"] += int(row["consistent"] is False)
    return counts


def census_readings(results: Sequence[AuditResult], names: Sequence[str], *, headline: str) -> dict[str, Any]:
    rows = mechanisms(results, names)
    return {
        "staleness": staleness_readings(results, names, headline=headline),
        "provenance": provenance_readings(results, names),
        "recoverability": recoverability_readings(results, names),
        "mechanism": {"counts": mechanism_counts(rows), "per_checkpoint": rows},
    }
