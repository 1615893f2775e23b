"""The census summary: population counts with Benjamini–Yekutieli across the decided checkpoints, per cell, the
controls and sweeps sections and the readings, and one row per checkpoint (deterministic: no timings).

Pure: audit results in, the census model out (:func:`summarize`, :class:`.model.CensusResult`);
:mod:`bnconvention.audit.census.run` runs the audits and writes it, ``hub audit`` summarises an organisation with it.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bnconvention.audit.core.files import ANNOTATION_FILE, SCALES_ANNOTATION_FILE
from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.measure.stats import by_adjust
from bnconvention.audit.population.controls import control_label, controls_table
from bnconvention.audit.population.detection import detection_floor, recalibration_budget
from bnconvention.audit.population.encoder_report import encoder_row
from bnconvention.audit.population.families import family_readings, twin_gaps
from bnconvention.audit.population.ledger import CONTROL, DECIDED, TWIN_ARM, flip_rows, in_ledger_order
from bnconvention.audit.population.margin import resolution_counts, resolution_warnings
from bnconvention.audit.population.model import (
    CENSUS_FORMAT,
    ByReading,
    CellCounts,
    CensusResult,
    Counts,
    Invocation,
    LargestShift,
    Margin,
    MarginDerivation,
    PreregistrationSection,
    Timing,
    VerdictTally,
)
from bnconvention.audit.population.model_readings import MechanismRow
from bnconvention.audit.population.model_rows import (
    CheckpointCell,
    CheckpointRow,
    Flip,
    PopulationPlace,
    StalenessReading,
)
from bnconvention.audit.population.model_sections import Families, TwinGaps
from bnconvention.audit.population.readings import census_readings
from bnconvention.audit.population.scales_report import scales_counts, scales_row
from bnconvention.audit.population.sections import census_sweeps
from bnconvention.audit.run.sweeps import PoolSizeRow
from bnconvention.audit.spec.audit_spec import AuditSpec

CHECKPOINTS_DIR = "checkpoints"


def summarize(results: Sequence[AuditResult], names: Sequence[str], spec: AuditSpec, *,
              annotations: Sequence[str] | None = None, run: CensusRun | None = None,
              org: str | None = None) -> CensusResult:
    """Population counts with Benjamini–Yekutieli across the census, per cell, built once: ``run`` carries what
    only a census run knows (the pool-size sweep, where the margin came from, the preregistration, invocation and
    timing); ``org`` names the organisation a ``hub audit`` summarised.

    ``annotations`` are the paths of the checkpoints' annotation files relative to the output folder (default: the
    census layout, ``checkpoints/<name>/annotation.json``); the summary links them. Only the released checkpoints
    that are eligible (anchored, or with nothing to anchor to) and are neither known-answer controls nor synthetic
    twin arms enter the counts and the multiplicity family; the controls' displacements and flips are the
    background rate printed beside them."""
    if annotations is None:
        annotations = [f"{CHECKPOINTS_DIR}/{name}/{ANNOTATION_FILE}" for name in names]
    metrics = [cell.text for cell in spec.cell_expressions()]
    labels = [control_label(name, result, spec) for name, result in zip(names, results, strict=True)]
    groups = [_group(result, label) for result, label in zip(results, labels, strict=True)]
    eligible = _eligible(results, groups)
    run = run or CensusRun()
    adjusted = {metric: adjusted_p_values(results, eligible, metric) for metric in metrics}
    readings = census_readings(results, names, headline=spec.headline_cell().text)
    rows = [checkpoint_row(result, name, annotation, metrics, fdr_q=spec.fdr_q,
                           by_p_values={metric: adjusted[metric].get(i) for metric in metrics},
                           mechanism=readings.mechanism.per_checkpoint[name], group=groups[i])
            for i, (result, name, annotation) in enumerate(zip(results, names, annotations, strict=True))]
    decided = [results[i] for i in eligible]
    decided_names = [names[i] for i in eligible]
    families, twins = population_sections(results, names, spec, rows=rows, decided=decided_names)
    return CensusResult(
        format=CENSUS_FORMAT,
        spec_name=spec.name,
        spec_sha256=spec.sha256(),
        replicates=spec.replicates,
        margin_pp=spec.margin_pp,
        fdr_q=spec.fdr_q,
        headline=spec.headline_cell().text,
        counts=Counts(**population_counts(results, [i for i, r in enumerate(results) if r.anchored is not False]),
                      controls=sum(label is not None for label in labels), decided=len(eligible),
                      twin_arms=groups.count(TWIN_ARM)),
        cells={metric: cell_counts(decided, metric, [adjusted[metric][i] for i in eligible], fdr_q=spec.fdr_q,
                                   by=by_reading(len(eligible), replicates=spec.replicates, fdr_q=spec.fdr_q))
               for metric in metrics},
        verdicts={criterion.text: verdict_tally(decided, criterion.text) for criterion in spec.criterion_expressions()},
        largest_shift=largest_shift(list(zip(decided_names, decided, strict=True)), metrics),
        margin=margin_section([(names[i], results[i].split_records) for i in eligible], spec, source=run.margin_source,
                              derivation=run.margin_derivation),
        preregistration=run.preregistration,
        identical_weights=identical_weights(results, names),
        flip_ledger=in_ledger_order([row for i, (name, result) in enumerate(zip(names, results, strict=True))
                                     if result.anchored is not False
                                     for row in flip_rows(name, result, spec, group=groups[i], label=labels[i])]),
        checkpoints=rows,
        readings=readings,
        decided=decided_names,
        controls=controls_table(results, names, labels, spec),
        sweeps=census_sweeps(decided, spec, pool_sizes=run.pool_sizes),
        detection_floor=detection_floor(decided, spec),
        recalibration_budget=recalibration_budget(list(zip(decided_names, decided, strict=True)), spec),
        families=families,
        twin_gaps=twins,
        scales=scales_counts(rows),  # only with the spec's quantization section
        invocation=run.invocation,
        timing=run.timing,
        org=org,
    )


@dataclass(frozen=True)
class CensusRun:
    """What a census run adds to the summary of its audits: the pool-size sweep's rows, where the margin came from
    (``margin_source`` and ``margin_derivation``; default: the spec's), the preregistration section, invocation and
    timing."""

    pool_sizes: list[PoolSizeRow] = field(default_factory=list)
    margin_source: str = "spec"
    margin_derivation: MarginDerivation | None = None
    preregistration: PreregistrationSection = PreregistrationSection(preregistered=False)
    invocation: Invocation | None = None
    timing: Timing | None = None


def decided_names(results: Sequence[AuditResult], names: Sequence[str], spec: AuditSpec) -> list[str]:
    """The checkpoints the census decides (anchored or with nothing to anchor to; neither controls nor twin
    arms), in order: the pool-size sweep runs over them before the summary is built."""
    labels = [control_label(name, result, spec) for name, result in zip(names, results, strict=True)]
    groups = [_group(result, label) for result, label in zip(results, labels, strict=True)]
    return [names[i] for i in _eligible(results, groups)]


def _eligible(results: Sequence[AuditResult], groups: Sequence[str]) -> list[int]:
    return [i for i, r in enumerate(results) if r.anchored is not False and groups[i] == DECIDED]


def margin_section(rows: Sequence[tuple[str, Mapping[str, int] | None]], spec: AuditSpec, *, source: str = "spec",
                   derivation: MarginDerivation | None = None) -> Margin:
    """The margin the census decided at and each cell's one-record resolution over the decided checkpoints
    (:mod:`bnconvention.audit.population.margin`); where the margin came from (``source``, ``derivation``) is given by
    the census that fixed it."""
    resolution = resolution_counts(rows, spec.cell_expressions(), margin_pp=spec.margin_pp)
    return Margin(margin_pp=spec.margin_pp, source=source, derivation=derivation, resolution=resolution,
                  warnings=resolution_warnings(resolution, margin_pp=spec.margin_pp))


def identical_weights(results: Sequence[AuditResult], names: Sequence[str]) -> list[list[str]]:
    """The checkpoints that hold the same weights (trainable and running digests) under different names: each is
    its own row, and this says which rows are one weight file."""
    groups: dict[str, list[str]] = {}
    for result, name in zip(results, names, strict=True):
        groups.setdefault(result.weights_key, []).append(name)
    return [members for members in groups.values() if len(members) > 1]


def _group(result: AuditResult, label: str | None) -> str:
    """Where a checkpoint is counted: a control, a synthetic twin arm, or a released checkpoint to decide."""
    if label is not None:
        return CONTROL
    if result.population is not None and result.population.role == "twin":
        return TWIN_ARM
    return DECIDED


def by_reading(m: int, *, replicates: int, fdr_q: float) -> ByReading:
    """How far Benjamini–Yekutieli can bind on one cell. A displaced cell has every replicate beyond the margin, so
    its sign-test p is exactly 0.5**R: all displaced cells share one p, and BY keeps all of them or none. It keeps
    all of them once ``keeps_all_from`` of the m cells are displaced (0.5**R · m · H(m) / k <= q); from there on BY
    cannot remove any, and the raw and adjusted counts agree by construction. None: not even all m displaced
    would survive (too few replicates for this many checkpoints)."""
    smallest = 0.5 ** replicates
    harmonic = math.fsum(1.0 / j for j in range(1, m + 1))
    needed = math.ceil(smallest * m * harmonic / fdr_q - 1e-12) if m else None
    return ByReading(m=m, p_displaced=smallest,
                     keeps_all_from=None if needed is None or needed > m else max(1, needed))


def population_sections(results: Sequence[AuditResult], names: Sequence[str], spec: AuditSpec, *,
                        rows: Sequence[CheckpointRow], decided: Sequence[str]) -> tuple[Families | None,
                                                                                        TwinGaps | None]:
    """``families`` and ``twin_gaps`` (:mod:`bnconvention.audit.population.families`) when the checkpoints' sidecars
    name a family or a twin; neither for a census without population metadata (the digits zoo)."""
    meta = {name: result.population for name, result in zip(names, results, strict=True)}
    if not any(m is not None for m in meta.values()):
        return None, None
    return (family_readings(rows, meta, decided=set(decided), metrics=[cell.text for cell in spec.cell_expressions()],
                            criteria=[c.text for c in spec.criterion_expressions()], margin_pp=spec.margin_pp),
            twin_gaps(rows, meta, headline=spec.headline_cell().text))


def adjusted_p_values(results: Sequence[AuditResult], eligible: Sequence[int], metric: str) -> dict[int, float]:
    """Benjamini–Yekutieli adjusted sign-test p-values of one cell over the eligible checkpoints, by index."""
    p_values = [results[i].sign_tests[metric].p_value for i in eligible]
    return dict(zip(eligible, by_adjust(p_values), strict=True))


def population_counts(results: Sequence[AuditResult], eligible: Sequence[int]) -> dict[str, int]:
    """The first counts of :class:`.model.Counts`: how many checkpoints, anchored, eligible, without BatchNorm,
    beyond the staleness band (the summary adds how it grouped them)."""
    return {
        "checkpoints": len(results),
        "anchoring_checked": sum(r.anchored is not None for r in results),
        "anchored": sum(r.anchored is True for r in results),
        "eligible": len(eligible),
        "channel_absent": sum(r.annotation.channel == "absent" for r in results),
        "staleness_exceeds_band": sum(bool(r.annotation.staleness and r.annotation.staleness.exceeds_band)
                                      for r in results),
    }


def cell_counts(eligible: Sequence[AuditResult], metric: str, by_p_values: Sequence[float], *,
                fdr_q: float, by: ByReading) -> CellCounts:
    """Decisions on one cell over the eligible checkpoints; ``displaced_by`` counts the displaced ones whose
    adjusted p-value (``by_p_values``, one per checkpoint) is at most ``fdr_q``; ``by`` says how far BY can bind."""
    counts = {"displaced": 0, "displaced_by": 0, "equivalent": 0, "undetermined": 0}
    for result, p_by in zip(eligible, by_p_values, strict=True):
        outcome = result.cell(metric).decision.outcome
        counts[outcome] += 1
        if outcome == "displaced" and p_by <= fdr_q:
            counts["displaced_by"] += 1
    return CellCounts(**counts, by=by)


def verdict_tally(eligible: Sequence[AuditResult], criterion: str) -> VerdictTally:
    """Flips of one criterion by direction, and how many flip on every replicate."""
    tally = {"flips": 0, "pass_to_fail": 0, "fail_to_pass": 0, "flips_on_every_replicate": 0}
    for result in eligible:
        verdict = next(v for v in result.annotation.verdicts if v.criterion == criterion)
        if verdict.flipped and verdict.direction is not None:
            tally["flips"] += 1
            tally[verdict.direction] += 1
            every = (verdict.refit_pass_replicates == result.annotation.replicates if verdict.refit
                     else verdict.refit_pass_replicates == 0)
            tally["flips_on_every_replicate"] += int(every)
    return VerdictTally(**tally)


def largest_shift(eligible: Sequence[tuple[str, AuditResult]], metrics: Sequence[str]) -> LargestShift | None:
    """The largest absolute mean shift over the eligible checkpoints and cells (the first one on a tie)."""
    largest: LargestShift | None = None
    for name, result in eligible:
        for metric in metrics:
            shift = result.cell(metric).shift_pp
            if largest is None or abs(shift) > abs(largest.shift_pp):
                largest = LargestShift(checkpoint=name, cell=metric, shift_pp=shift)
    return largest


def checkpoint_row(result: AuditResult, name: str, annotation: str, metrics: Sequence[str], *,
                   by_p_values: Mapping[str, float | None], fdr_q: float, mechanism: MechanismRow,
                   group: str) -> CheckpointRow:
    """One checkpoint's line of the census: its cells with every p-value, flips, staleness, recoverability, its
    mechanism (:func:`.readings.mechanisms`) and the group it is counted in."""
    a = result.annotation
    scales = None
    if result.scales is not None:  # the second deployed state, with the spec's quantization section
        scales_annotation = posixpath.join(posixpath.dirname(annotation), SCALES_ANNOTATION_FILE)
        scales = scales_row(result.scales, annotation=scales_annotation if result.scales.annotation else None)
    return CheckpointRow(
        checkpoint=name,
        file=a.subject.filename,
        path=result.weights_path,
        factory=result.factory,
        trainable_sha256=a.subject.trainable_sha256,
        channel=a.channel,
        anchored=result.anchored,
        cells={metric: _cell_row(result, metric, by_p_values[metric], fdr_q=fdr_q) for metric in metrics},
        flips=[Flip(criterion=v.criterion, direction=v.direction, refit_pass_replicates=v.refit_pass_replicates)
               for v in a.verdicts if v.flipped],
        staleness=None if a.staleness is None else StalenessReading(
            mean_distance=a.staleness.mean_distance, var_distance=a.staleness.var_distance,
            exceeds_band=a.staleness.exceeds_band,
            band_p_value=None if result.staleness_null is None else result.staleness_null.p_value),
        recoverability_shift_pp=None if a.recoverability is None else a.recoverability.shift_pp,
        reporting_line=a.reporting_line,
        annotation=annotation,
        encoder=encoder_row(a),  # the encoder-level diagnostics, only when the spec asked for them
        scales=scales,
        # where it sits in a structured population (the report groups by it)
        population=None if result.population is None else PopulationPlace(**result.population.model_dump()),
        mechanism=mechanism,
        group=group,
    )


def _cell_row(result: AuditResult, metric: str, p_by: float | None, *, fdr_q: float) -> CheckpointCell:
    cell = result.cell(metric)
    sign = result.sign_tests[metric]
    return CheckpointCell(
        shipped=cell.shipped, refit=cell.refit, shift_pp=cell.shift_pp,
        min_shift_pp=min(cell.replicate_shifts_pp), max_shift_pp=max(cell.replicate_shifts_pp),
        outcome=cell.decision.outcome, method=cell.decision.method,
        p_value=cell.decision.p_value, sign_p_value=sign.p_value, sign_beyond=sign.beyond,
        by_p_value=p_by,
        displaced_by=bool(cell.decision.outcome == "displaced" and p_by is not None and p_by <= fdr_q),
    )
