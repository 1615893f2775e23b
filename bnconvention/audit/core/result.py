"""What one audit returns: the standard's refit annotation plus the working data reports and the census need.

:class:`AuditResult` is also the census journal's entry for a finished checkpoint, so it round-trips through JSON
(``AuditResult.model_validate_json(result.model_dump_json())`` gives an equal object). The annotation inside is the
record of the standard that gets written back; everything else (sign-test p-values for Benjamini–Yekutieli across
a census, the per-layer reference band for the staleness plot, per-replicate pools and timings) stays local.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from bnconvention.standard.models import (
    Cell,
    LayerStaleness,
    NullBand,
    ProvenanceArm,
    RecoverabilityCurve,
    RecoverabilityPoint,
    RefitAnnotation,
)

RESULT_FORMAT: Final = "bnconvention-audit-result/1"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplicateRecord(_Result):
    index: int
    pool_ids_sha256: str = Field(description="record_ids_sha256 of the retained records this replicate refit on.")
    augmentation_seed: int
    base_cells: dict[str, float] = Field(description="df, dr, dt after this replicate's refit.")
    seconds: float


class SignRecord(_Result):
    """The exact sign test of one cell, kept for multiplicity control across a census."""

    p_value: float
    beyond: int
    direction: Literal["up", "down"] | None


class StalenessNull(_Result):
    """The reference band as a null distribution of N independent retain refits
    (:mod:`bnconvention.audit.diagnostics.band`)."""

    refits: int = Field(description="Independent retain refits N forming the null.")
    pairs: int = Field(description="Ordered refit pairs whose distances form the null distribution.")
    level: float = Field(description="Nominal false-positive rate of 'exceeds band'.")
    exact_level: float = Field(description="floor(level * (N + 1)) / (N + 1): the rate the rank test holds.")
    shipped_score: float = Field(description="Median combined distance of the shipped state to the N refits.")
    null_scores: list[float] = Field(description="Each refit's median combined distance to the others.")
    band_mean_distance: float | None = Field(description="1 - level quantile of the null mean distances.")
    band_var_distance: float | None = Field(description="1 - level quantile of the null variance distances.")
    band_combined: float | None = Field(description="1 - level quantile of the null combined distances.")
    null_median_combined: float | None = Field(description="Median combined distance of the null pairs.")
    p_value: float = Field(description="(1 + #{null score >= shipped score}) / (N + 1).")
    exceeds_band: bool | None = Field(description="p <= level; None when N is too small to reach the level.")
    one_pair_false_positive_rate: float | None = Field(description=(
        "How often the one-pair rule (d(s, r0) > d(r1, r0) on both parts) fires on disjoint triples of refits."))
    one_pair_triples: int


class ProvenanceDraw(_Result):
    """One draw of one provenance arm: the exchanged pool against the base pool, and the null swap beside it."""

    draw: int
    mean_distance: float
    var_distance: float
    forget_shift_pp: float
    null_mean_distance: float = Field(description="Same k retained records swapped for k other retained ones.")
    null_var_distance: float
    null_forget_shift_pp: float


class ProvenanceArmMeasurement(_Result):
    """One provenance arm as the audit measured it (:mod:`bnconvention.audit.diagnostics.provenance`): every draw
    with its null swap, the distances and the staleness ratio. The census journal keeps it; the annotation carries
    the standard's :class:`~bnconvention.standard.census.ProvenanceArm` made from it (:meth:`to_record`)."""

    arm: Literal["deployment", "ceiling"] = Field(description=(
        "'deployment': the removed share of the training data; 'ceiling': every removed record in the pool."))
    pool_size: int
    exchanged: int
    draws: list[ProvenanceDraw]
    distance: float = Field(description="Combined distance (mean of the two parts), averaged over draws.")
    forget_shift_pp: float = Field(description="Forget-accuracy contrast averaged over draws.")
    null_band: float = Field(description="Largest combined distance of the null swaps over the draws.")
    null_shift_band_pp: float = Field(description="Largest |forget shift| of the null swaps over the draws.")
    exceeds_null: bool = Field(description="The arm's mean combined distance is above the null band.")
    staleness_ratio: float | None = Field(default=None, description=(
        "Shipped-state staleness (combined) over this arm's distance; None without staleness or at distance 0."))
    shift_exceeds_null: bool = Field(description="The arm's |mean forget shift| is above the null shift band.")

    def to_record(self) -> ProvenanceArm:
        """The standard's provenance arm: each draw's forget shift, decided against the null swaps' band (±largest
        |null shift|)."""
        return ProvenanceArm(arm=self.arm, pool_size=self.pool_size, exchanged=self.exchanged,
                             forget_shift_pp=[d.forget_shift_pp for d in self.draws],
                             null_band=NullBand(lower=-self.null_shift_band_pp, upper=self.null_shift_band_pp),
                             outside_null=self.shift_exceeds_null)


class RecoveryPoint(_Result):
    source: Literal["test", "retain", "noise"]
    budget: int
    forget_accuracy: list[float] = Field(description="One per seed.")
    mean_forget_accuracy: float
    mean_shift_pp: float = Field(description="Mean over seeds of (after - shipped) forget accuracy, pp.")


# The curve's proxy sources as the standard's split roles; noise is out of distribution ("other").
SOURCE_ROLES: Final[dict[str, tuple[Literal["test", "retain", "other"], str | None]]] = {
    "test": ("test", None), "retain": ("retain", None),
    "noise": ("other", "gaussian noise with the test split's per-pixel mean and standard deviation")}


class RecoverabilityMeasurement(_Result):
    """The recoverability curve as the audit measured it (:mod:`bnconvention.audit.diagnostics.recovery`): every
    proxy source's points in one list, the skipped budgets and the headline point. The census journal keeps it; the
    annotation carries the standard's :class:`~bnconvention.standard.census.RecoverabilityCurve`, one per proxy
    source, made from it (:meth:`to_records`)."""

    forget_accuracy_shipped: float
    rule: str
    seeds: int
    points: list[RecoveryPoint]
    skipped: list[str] = Field(default_factory=list, description="Budgets not run, and why.")
    headline: RecoveryPoint | None = Field(default=None, description="The B = images point of the spec's source.")

    def to_records(self) -> list[RecoverabilityCurve]:
        """The standard's curves: one per proxy source (sorted), budgets ascending, forget accuracy per seed."""
        out = []
        for source in sorted({p.source for p in self.points}):
            role, description = SOURCE_ROLES[source]
            points = sorted((p for p in self.points if p.source == source), key=lambda p: p.budget)
            out.append(RecoverabilityCurve(
                source=role, description=description, rule=self.rule,  # type: ignore[arg-type]
                seeds=list(range(self.seeds)), forget_accuracy_shipped=self.forget_accuracy_shipped,
                points=[RecoverabilityPoint(images=p.budget, forget_accuracy=list(p.forget_accuracy))
                        for p in points]))
        return out


class MechanismEvidence(_Result):
    """What the checkpoint's own metadata says about how its buffers were treated (:mod:`.mechanism`)."""

    mechanism: Literal["corruption", "misalignment", "neither"] | None
    source: Literal["observation", "declaration", "sidecar"] | None
    reason: str
    base: str | None = Field(default=None, description="The base checkpoint's name, from the sidecar's parent.")


class PopulationMetadata(_Result):
    """Where a checkpoint sits in a structured population, from its sidecar (:mod:`.families`): the family readings
    group by family, variant and removal kind, cluster by seed, and pair twins by arm and level."""

    role: str | None = None
    family: str | None = None
    variant: str | None = None
    removal: str | None = None
    removal_kind: str | None = Field(default=None, description="'instances' or 'class', from the sidecar.")
    seed: int | None = None
    parent: str | None = None
    twin_arm: str | None = None
    twin_level: int | None = None
    twin_partner: str | None = None


class ScalesResult(_Result):
    """The second deployed state (spec ``quantization``, :mod:`.scales_stage`): the shipped activation scales'
    cells against retain-only recalibrations, or why there are none."""

    status: Literal["audited", "not_quantized"]
    reason: str = Field(description="One line for the census row: what was audited, or why nothing was.")
    scales_file: str | None = None
    observer: str | None = None
    sites: int | None = Field(default=None, description="Activation sites the scales file holds.")
    calibration_size: int | None = None
    median_abs_log_ratio: float | None = Field(default=None, description=(
        "Median |ln(refit / shipped scale)| over sites and recalibrations."))
    max_abs_log_ratio: float | None = None
    annotation: RefitAnnotation | None = Field(default=None, description=(
        "The 1.1 refit annotation (refit_state activation_scales), subject the audited weights."))
    seconds: float = 0.0


class AuditResult(_Result):
    format: Literal["bnconvention-audit-result/1"] = RESULT_FORMAT
    checkpoint: str = Field(description="File name without .safetensors.")
    weights_path: str
    weights_key: str = Field(description="sha256 over the file's trainable and running digests.")
    spec_sha256: str
    measurement_sha256: str | None = Field(default=None, description=(
        "Digest of the spec without its decision-only fields (margin, q, sweeps, controls): the journal key."))
    factory: str
    anchored: bool | None = Field(description="None when no published cells were given.")
    annotation: RefitAnnotation = Field(description=(
        "1.0, or 1.1 when the spec's diagnostics filled a 1.1 field (audit/diagnostics/encoder.py)."))
    sign_tests: dict[str, SignRecord]
    band_layers: list[LayerStaleness] | None = Field(
        default=None, description=(
            "Per-layer distance between two independent retain refits (replicates 0 and 1), for the plot."))
    shipped_base_cells: dict[str, float] | None = Field(default=None, description=(
        "df, dr, dt as shipped: with the replicate records, what a margin or pool-size sweep re-decides from."))
    replicate_records: list[ReplicateRecord]
    refits_run: Annotated[int, Field(ge=0)] = Field(description="Refit passes this audit ran (replicates and checks).")
    seconds: float
    seconds_shipped_eval: float
    warnings: list[str] = Field(default_factory=list)
    staleness_null: StalenessNull | None = None
    provenance_arms: list[ProvenanceArmMeasurement] | None = None
    recoverability_curve: RecoverabilityMeasurement | None = None
    mechanism: MechanismEvidence | None = None
    population: PopulationMetadata | None = Field(default=None, description=(
        "The sidecar's population metadata (family, variant, removal, seed, role, twin); None without one."))
    scales: ScalesResult | None = Field(default=None, description=(
        "The activation scales audit, when the spec has a quantization section; None without one."))
    split_records: dict[str, int] | None = Field(default=None, description=(
        "Records in the forget, retain and test splits the cells were measured on (their one-record step)."))

    def cell(self, metric: str) -> Cell:
        """The annotation's cell of ``metric`` (a spec cell: every audit of the spec has it)."""
        return next(c for c in self.annotation.cells if c.metric == metric)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def population_metadata(sidecar: Mapping[str, Any] | None) -> PopulationMetadata | None:
    """The population fields of a checkpoint's sidecar, or None when it names neither a family, a twin, nor a role
    with a seed (a digits-zoo sidecar, or none). Fields of the wrong type are left out rather than trusted."""
    if not sidecar:
        return None
    raw_twin = sidecar.get("twin")
    twin: Mapping[str, Any] = raw_twin if isinstance(raw_twin, Mapping) else {}
    family = _text(sidecar.get("family"))
    role, seed = _text(sidecar.get("role")), _int(sidecar.get("seed"))
    if family is None and not twin and (role is None or seed is None):
        return None
    removal = sidecar.get("removal")
    removal_name = _text(removal.get("name")) if isinstance(removal, Mapping) else _text(removal)
    removal_kind = _text(removal.get("kind")) if isinstance(removal, Mapping) else None
    return PopulationMetadata(role=_text(sidecar.get("role")), family=family, variant=_text(sidecar.get("variant")),
                              removal=removal_name, removal_kind=removal_kind, seed=_int(sidecar.get("seed")),
                              parent=_text(sidecar.get("parent")), twin_arm=_text(twin.get("arm")),
                              twin_level=_int(twin.get("level")), twin_partner=_text(twin.get("partner")))
