"""The census's ``readings`` (:mod:`.readings`): anchoring, the staleness band, the provenance arms, the
recoverability curve and each checkpoint's mechanism, each a closed part of :class:`.model.CensusResult`."""

from __future__ import annotations

from bnconvention.audit.core.section import Section


class AnchoringReading(Section):
    """What anchoring could show: how many checkpoints and cells it checked, how many were bit-equal to our
    evaluation, and whether the published numbers are independent of it (:func:`.readings.anchoring_reading`)."""

    checked: int
    cells: int
    exactly_equal: int
    max_abs_diff: float | None
    failed: int
    tolerance: float | None
    independent: bool | None


class RankCorrelation(Section):
    """Spearman's ρ with its two-sided p; None values when undefined (:func:`.readings.spearman`)."""

    n: int
    rho: float | None
    p_value: float | None


class ClusteredCorrelation(Section):
    """Spearman's ρ with a cluster-bootstrap percentile interval (:func:`.readings.cluster_spearman`)."""

    n: int
    clusters: int
    rho: float | None
    lower: float | None
    upper: float | None
    level: float
    resamples: int


class StalenessVsShift(Section):
    """Spearman's ρ of the shipped staleness with |shift| of the headline cell, clustered by weight file."""

    cell: str
    clustered_by: str
    n: int
    clusters: int
    rho: float | None
    lower: float | None
    upper: float | None
    level: float
    resamples: int


class StalenessSummary(Section):
    """The staleness band's null over the census and the one-pair rule's measured rate."""

    checkpoints: int
    band_refits: list[int]
    level: float | None
    exact_level: float | None
    decided: int
    exceeds_band: int
    expected_false_positives_if_none_stale: float | int  # 0, an int, when nothing is decided (as always written)
    one_pair_false_positive_rate: float | None
    one_pair_triples: int
    staleness_vs_abs_shift: StalenessVsShift


class ProvenanceCheckpoint(Section):
    """One checkpoint's provenance arm."""

    exchanged: int
    distance: float
    null_band: float
    forget_shift_pp: float
    null_shift_band_pp: float
    exceeds_null: bool
    shift_exceeds_null: bool
    staleness_ratio: float | None


class ProvenanceArmReading(Section):
    """One provenance arm over the census: the pooled forget contrast, the checkpoints clearing the null band, and
    the staleness/provenance ratio."""

    checkpoints: int
    draws: list[int]
    pooled_forget_shift_pp: float
    largest_forget_shift_pp: float
    median_distance: float
    median_null_band: float
    exceeds_null: int
    shift_exceeds_null: int
    staleness_ratio_median: float | None
    staleness_ratio_range: list[float] | None
    per_checkpoint: dict[str, ProvenanceCheckpoint]


class ProvenanceReadings(Section):
    """The provenance arms the census ran (each left out when no checkpoint ran it)."""

    deployment: ProvenanceArmReading | None = None
    ceiling: ProvenanceArmReading | None = None


class RecoveryCurveRow(Section):
    """One point of the census's recoverability curve: a source and budget, over the checkpoints."""

    source: str
    budget: int
    checkpoints: int
    mean_shift_pp: float
    min_shift_pp: float
    max_shift_pp: float


class RecoverabilityReading(Section):
    """The census's recoverability curve and each checkpoint's headline shift."""

    checkpoints: int
    seeds: list[int]
    curve: list[RecoveryCurveRow]
    headline_budget: int | None
    headline_shift_pp: dict[str, float | None]


class MechanismRow(Section):
    """One checkpoint's mechanism, where it came from, whether the evidence agrees, and the base comparison."""

    mechanism: str | None
    evidence: str | None
    base_comparison: str | None
    consistent: bool | None
    reason: str
    base: str | None
    base_check: str


class MechanismCounts(Section):
    """Mechanisms over the BatchNorm checkpoints, and how the base comparison went."""

    corruption: int
    misalignment: int
    neither: int
    undetermined: int
    inconsistent: int
    base_compared: int
    base_not_found: int


class MechanismReading(Section):
    counts: MechanismCounts
    per_checkpoint: dict[str, MechanismRow]


class Readings(Section):
    """census.json's ``readings``: the census readings beyond the per-cell counts."""

    anchoring: AnchoringReading
    staleness: StalenessSummary
    provenance: ProvenanceReadings | None
    recoverability: RecoverabilityReading | None
    mechanism: MechanismReading


__all__ = ["AnchoringReading", "ClusteredCorrelation", "MechanismCounts", "MechanismReading", "MechanismRow",
           "ProvenanceArmReading", "ProvenanceCheckpoint", "ProvenanceReadings", "RankCorrelation", "Readings",
           "RecoverabilityReading", "RecoveryCurveRow", "StalenessSummary", "StalenessVsShift"]
