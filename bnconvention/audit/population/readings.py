"""Census readings beyond the per-cell counts: the staleness band's null and its false-positive rate, staleness
against displacement (Spearman ρ with a cluster-bootstrap interval), the provenance arms, the recoverability
curve and each checkpoint's mechanism.

Pure functions from audit results to the census's ``readings`` (:class:`.model_readings.Readings`; :mod:`.markdown`
renders them). Only BatchNorm checkpoints (channel present) that are eligible (anchored, or nothing to anchor to) enter
the statistics; the mechanism is given for every checkpoint.
"""

from __future__ import annotations

import math
import posixpath
import statistics
from collections.abc import Mapping, Sequence

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.diagnostics.band import combined
from bnconvention.audit.diagnostics.mechanism import combine, from_base
from bnconvention.audit.population.model_readings import (
    AnchoringReading,
    ClusteredCorrelation,
    MechanismCounts,
    MechanismReading,
    MechanismRow,
    ProvenanceArmReading,
    ProvenanceCheckpoint,
    ProvenanceReadings,
    RankCorrelation,
    Readings,
    RecoverabilityReading,
    RecoveryCurveRow,
    StalenessSummary,
    StalenessVsShift,
)


def _bn(results: Sequence[AuditResult], names: Sequence[str]) -> list[tuple[str, AuditResult]]:
    return [(n, r) for n, r in zip(names, results, strict=True)
            if r.anchored is not False and r.annotation.channel == "present"]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_LEVEL = 0.95


def spearman(x: Sequence[float], y: Sequence[float]) -> RankCorrelation:
    """Spearman's rank correlation with its two-sided p (scipy), or None values when fewer than 3 pairs or a
    constant side make it undefined. The p assumes independent pairs; a census reports :func:`cluster_spearman`."""
    from scipy import stats

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return RankCorrelation(n=len(x), rho=None, p_value=None)
    result = stats.spearmanr(x, y)
    return RankCorrelation(n=len(x), rho=_finite(float(result.statistic)), p_value=_finite(float(result.pvalue)))


def cluster_spearman(x: Sequence[float], y: Sequence[float], clusters: Sequence[str], *,
                     resamples: int = BOOTSTRAP_RESAMPLES, level: float = BOOTSTRAP_LEVEL,
                     seed: int = 0) -> ClusteredCorrelation:
    """Spearman's ρ with a cluster-bootstrap percentile interval: rows that share a cluster (the same weight file
    listed under several removals, say) are resampled together, so repeated rows do not count as independent
    evidence. Deterministic given the inputs (``seed``). Resamples with a constant side are skipped; the interval
    is None when fewer than 3 clusters or no resample is defined."""
    import numpy as np
    from scipy import stats

    point = spearman(x, y)
    keys = sorted(set(clusters))
    out = ClusteredCorrelation(n=len(x), clusters=len(keys), rho=point.rho, lower=None, upper=None, level=level,
                               resamples=resamples)
    if point.rho is None or len(keys) < 3:
        return out
    members = [np.array([i for i, c in enumerate(clusters) if c == key]) for key in keys]
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        rows = np.concatenate([members[k] for k in rng.integers(0, len(keys), len(keys))])
        rx, ry = xs[rows], ys[rows]
        if np.ptp(rx) == 0 or np.ptp(ry) == 0:
            continue
        draws.append(float(stats.spearmanr(rx, ry).statistic))
    if not draws:
        return out
    tail = (1 - level) / 2
    return out.model_copy(update={"lower": float(np.quantile(draws, tail)),
                                  "upper": float(np.quantile(draws, 1 - tail))})


def staleness_readings(results: Sequence[AuditResult], names: Sequence[str], *, headline: str) -> StalenessSummary:
    """The band's null over the census (how many exceed it, the rate the rank test holds, the one-pair rule's
    measured rate) and Spearman's ρ of the shipped staleness with |shift| of the headline cell."""
    rows = [(n, r) for n, r in _bn(results, names) if r.annotation.staleness is not None]
    nulls = [r.staleness_null for _, r in rows if r.staleness_null is not None]
    triples = sum(n.one_pair_triples for n in nulls)
    fired = sum((n.one_pair_false_positive_rate or 0.0) * n.one_pair_triples for n in nulls)
    staleness = [combined(r.annotation.staleness.mean_distance, r.annotation.staleness.var_distance)
                 for _, r in rows if r.annotation.staleness is not None]
    shifts = [abs(next(c.shift_pp for c in r.annotation.cells if c.metric == headline)) for _, r in rows]
    weights = [f"{r.annotation.subject.trainable_sha256}:{r.annotation.subject.running_sha256}" for _, r in rows]
    decided = [n for n in nulls if n.exceeds_band is not None]
    return StalenessSummary(
        checkpoints=len(rows),
        band_refits=sorted({n.refits for n in nulls}),
        level=nulls[0].level if nulls else None,
        exact_level=max((n.exact_level for n in nulls), default=None),
        decided=len(decided),
        exceeds_band=sum(bool(n.exceeds_band) for n in decided),
        expected_false_positives_if_none_stale=sum(n.exact_level for n in decided),
        one_pair_false_positive_rate=fired / triples if triples else None,
        one_pair_triples=triples,
        # clustered by weight file: a file listed under several removals is one draw, not several
        staleness_vs_abs_shift=StalenessVsShift(cell=headline, clustered_by="weight file",
                                                **cluster_spearman(staleness, shifts, weights).model_dump()),
    )


def provenance_readings(results: Sequence[AuditResult], names: Sequence[str]) -> ProvenanceReadings | None:
    """Per arm: the pooled forget contrast, how many checkpoints clear the null band (distance and shift), and the
    staleness/provenance ratio at the median with its range (Shen and Li, appendix P: 5.43 at the median)."""
    rows = [(n, r) for n, r in _bn(results, names) if r.provenance_arms]
    if not rows:
        return None
    arms: dict[str, ProvenanceArmReading] = {}
    for arm_name in ("deployment", "ceiling"):
        arms_here = [(n, a) for n, r in rows for a in r.provenance_arms or [] if a.arm == arm_name]
        if not arms_here:
            continue
        ratios = [a.staleness_ratio for _, a in arms_here if a.staleness_ratio is not None]
        arms[arm_name] = ProvenanceArmReading(
            checkpoints=len(arms_here),
            draws=sorted({len(a.draws) for _, a in arms_here}),
            pooled_forget_shift_pp=statistics.fmean(a.forget_shift_pp for _, a in arms_here),
            largest_forget_shift_pp=max((a.forget_shift_pp for _, a in arms_here), key=abs),
            median_distance=statistics.median(a.distance for _, a in arms_here),
            median_null_band=statistics.median(a.null_band for _, a in arms_here),
            exceeds_null=sum(a.exceeds_null for _, a in arms_here),
            shift_exceeds_null=sum(a.shift_exceeds_null for _, a in arms_here),
            staleness_ratio_median=statistics.median(ratios) if ratios else None,
            staleness_ratio_range=[min(ratios), max(ratios)] if ratios else None,
            per_checkpoint={n: ProvenanceCheckpoint(
                exchanged=a.exchanged, distance=a.distance, null_band=a.null_band, forget_shift_pp=a.forget_shift_pp,
                null_shift_band_pp=a.null_shift_band_pp, exceeds_null=a.exceeds_null,
                shift_exceeds_null=a.shift_exceeds_null, staleness_ratio=a.staleness_ratio) for n, a in arms_here},
        )
    return ProvenanceReadings(**arms)


def recoverability_readings(results: Sequence[AuditResult], names: Sequence[str]) -> RecoverabilityReading | None:
    """The census curve: per source and budget, the mean over checkpoints of their seed-mean forget shift."""
    rows = [(n, r.recoverability_curve) for n, r in _bn(results, names) if r.recoverability_curve is not None]
    if not rows:
        return None
    by_point: dict[tuple[str, int], list[float]] = {}
    for _, curve in rows:
        for point in curve.points:
            by_point.setdefault((point.source, point.budget), []).append(point.mean_shift_pp)
    curve_rows = [RecoveryCurveRow(source=s, budget=b, checkpoints=len(v), mean_shift_pp=statistics.fmean(v),
                                   min_shift_pp=min(v), max_shift_pp=max(v)) for (s, b), v in sorted(by_point.items())]
    headline = {n: (None if c.headline is None else c.headline.mean_shift_pp) for n, c in rows}
    return RecoverabilityReading(
        checkpoints=len(rows), seeds=sorted({c.seeds for _, c in rows}), curve=curve_rows,
        headline_budget=next((c.headline.budget for _, c in rows if c.headline is not None), None),
        headline_shift_pp=headline)


def find_base(name: str, parent: str, names: Sequence[str]) -> str | None:
    """The census member a checkpoint's sidecar ``parent`` names: the member of that exact name, else the members
    named ``<prefix>-<parent>`` (a population lists its per-seed base once per removal, ``r05-s0-base`` for the
    parent ``s0-base``), the one sharing the longest prefix with the checkpoint's own name (its own removal's
    copy); None when no member matches."""
    if parent in names and parent != name:
        return parent
    suffixed = [n for n in names if n != name and n.endswith(f"-{parent}")]
    if not suffixed:
        return None
    return max(suffixed, key=lambda n: (len(posixpath.commonprefix([n, name])), n))


def mechanisms(results: Sequence[AuditResult], names: Sequence[str]) -> dict[str, MechanismRow]:
    """Each checkpoint's mechanism from its metadata and, when its base is in the census, the digests; whether the
    base comparison ran (``base_check``) is said for each."""
    by_name = dict(zip(names, results, strict=True))
    out: dict[str, MechanismRow] = {}
    for name, result in by_name.items():
        evidence = result.mechanism
        parent = evidence.base if evidence is not None else None
        base_name = find_base(name, parent, names) if parent else None
        comparison = None
        if base_name is not None:
            subject, base_subject = result.annotation.subject, by_name[base_name].annotation.subject
            comparison = from_base(trainable=subject.trainable_sha256, running=subject.running_sha256,
                                   base_trainable=base_subject.trainable_sha256,
                                   base_running=base_subject.running_sha256)
        out[name] = MechanismRow(**combine(evidence, comparison, channel=result.annotation.channel), base=base_name,
                                 base_check=(BASE_COMPARED if base_name is not None else
                                             BASE_NOT_FOUND if parent else BASE_NOT_NAMED))
    return out


BASE_COMPARED, BASE_NOT_FOUND, BASE_NOT_NAMED = "compared", "base not in census", "no base named"


def mechanism_counts(rows: Mapping[str, MechanismRow]) -> MechanismCounts:
    """Mechanisms over the BatchNorm checkpoints, and the base comparison: how many ran it, how many could not
    (their base is not in the census), and on how many the metadata and the base disagree (of those compared)."""
    counts = {"corruption": 0, "misalignment": 0, "neither": 0, "undetermined": 0, "inconsistent": 0,
              "base_compared": 0, "base_not_found": 0}
    for row in rows.values():
        if row.evidence == "channel absent":
            continue
        counts[row.mechanism or "undetermined"] += 1
        counts["inconsistent"] += int(row.consistent is False)
        counts["base_compared"] += int(row.base_check == BASE_COMPARED)
        counts["base_not_found"] += int(row.base_check == BASE_NOT_FOUND)
    return MechanismCounts(**counts)


def anchoring_reading(results: Sequence[AuditResult]) -> AnchoringReading:
    """What anchoring could show. Anchoring compares the shipped cells, evaluated here, with the published ones;
    it is a check of the paper only when the published numbers come from somewhere else. When every published cell
    equals our evaluation to the last bit, the numbers were written by this same evaluation (a build's own card):
    anchoring then confirms that the files match their cards, and ``independent`` is False. A census with no
    published cells says anchoring did not run (``checked`` 0)."""
    diffs = [c.abs_diff for r in results if r.annotation.anchoring is not None for c in r.annotation.anchoring.cells]
    checkpoints = sum(r.anchored is not None for r in results)
    exact = sum(d == 0.0 for d in diffs)
    return AnchoringReading(checked=checkpoints, cells=len(diffs), exactly_equal=exact,
                            max_abs_diff=max(diffs) if diffs else None,
                            failed=sum(r.anchored is False for r in results),
                            tolerance=next((r.annotation.anchoring.tolerance for r in results
                                            if r.annotation.anchoring is not None), None),
                            independent=None if not diffs else exact < len(diffs))


def census_readings(results: Sequence[AuditResult], names: Sequence[str], *, headline: str) -> Readings:
    rows = mechanisms(results, names)
    return Readings(
        anchoring=anchoring_reading(results),
        staleness=staleness_readings(results, names, headline=headline),
        provenance=provenance_readings(results, names),
        recoverability=recoverability_readings(results, names),
        mechanism=MechanismReading(counts=mechanism_counts(rows), per_checkpoint=rows),
    )
