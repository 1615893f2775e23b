"""Markdown of the census readings (:mod:`bnconvention.audit.population.readings`): band, staleness vs shift,
provenance, recoverability curve, mechanism counts; and the same sections of one audit. Pure functions to lines."""

from __future__ import annotations

from collections.abc import Sequence

from bnconvention.audit.core.result import ProvenanceArmMeasurement, RecoverabilityMeasurement, StalenessNull
from bnconvention.audit.population.model_readings import (
    MechanismCounts,
    MechanismReading,
    ProvenanceReadings,
    Readings,
    RecoverabilityReading,
    StalenessSummary,
)
from bnconvention.audit.population.model_rows import CheckpointRow
from bnconvention.audit.population.story import spearman_interval
from bnconvention.formats.text import markdown_table, signed


def _num(value: float | None, digits: int = 5) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def staleness_lines(s: StalenessSummary) -> list[str]:
    corr = s.staleness_vs_abs_shift
    rho = "undefined" if corr.rho is None else f"{signed(corr.rho, 3)} ({spearman_interval(corr)})"
    level = "—" if s.level is None else f"{s.level:g} (exact {s.exact_level:.4f})"
    one_pair = "—" if s.one_pair_false_positive_rate is None else (
        f"{s.one_pair_false_positive_rate:.2f} on {s.one_pair_triples} disjoint refit triples")
    return ["", "## Staleness and its reference band", "",
            "The band is the null distribution of distances between independent retain refits (N per checkpoint); "
            "'exceeds' is an exact rank test at the stated level, so on never-stale checkpoints it fires at that "
            "rate.", ""] + markdown_table(["", ""], [
        ["BatchNorm checkpoints", str(s.checkpoints)],
        ["refits N per band", ", ".join(map(str, s.band_refits)) or "—"],
        ["nominal level", level],
        ["exceed the band (of decided)", f"{s.exceeds_band} of {s.decided} (expected if none were stale: "
                                         f"{s.expected_false_positives_if_none_stale:.2f})"],
        ["one-pair band's false-positive rate, measured on the null", one_pair],
        [f"Spearman ρ, staleness vs |shift| of `{corr.cell}`", f"{rho}, n = {corr.n}"],
    ])


def provenance_lines(p: ProvenanceReadings) -> list[str]:
    rows = []
    for arm, a in (("deployment", p.deployment), ("ceiling", p.ceiling)):
        if a is None:
            continue
        ratio = "—" if a.staleness_ratio_median is None or a.staleness_ratio_range is None else (
            f"{a.staleness_ratio_median:.2f} ({a.staleness_ratio_range[0]:.2f} … "
            f"{a.staleness_ratio_range[1]:.2f})")
        rows.append([arm, str(a.checkpoints), "/".join(map(str, a.draws)),
                     f"{signed(a.pooled_forget_shift_pp)} pp", f"{signed(a.largest_forget_shift_pp)} pp",
                     f"{_num(a.median_distance)} / {_num(a.median_null_band)}",
                     f"{a.exceeds_null} / {a.shift_exceeds_null}", ratio])
    return ["", "## Provenance contrasts", "",
            "Exchanging retained for removed records inside a fixed pool (deployment share; ceiling: every removed "
            "record that fits), against a null that exchanges the same places for other retained records.", ""
            ] + markdown_table(["arm", "checkpoints", "draws", "pooled forget shift", "largest",
                                "median distance / null band", "above null: distance / shift",
                                "staleness ÷ provenance, median (range)"], rows)


def recoverability_lines(r: RecoverabilityReading) -> list[str]:
    sources = sorted({row.source for row in r.curve})
    budgets = sorted({row.budget for row in r.curve})
    cell = {(row.source, row.budget): row for row in r.curve}
    rows = [[f"B = {b}" + (" (headline)" if b == r.headline_budget else "")] + [
        "—" if (s, b) not in cell else f"{signed(cell[(s, b)].mean_shift_pp)}" for s in sources] for b in budgets]
    return ["", "## Recoverability curve", "",
            f"Mean forget-accuracy shift (pp) after a refit on B proxy images, over {r.checkpoints} BatchNorm "
            f"checkpoints and {'/'.join(map(str, r.seeds))} seeds each.", "",
            *markdown_table(["budget", *sources], rows)]


def mechanism_lines(m: MechanismReading) -> list[str]:
    c = m.counts
    return ["", "## Mechanism", "",
            f"Corruption {c.corruption}, misalignment {c.misalignment}, neither {c.neither}, undetermined "
            f"{c.undetermined}; {base_check_reading(c)}."]


def base_check_reading(c: MechanismCounts) -> str:
    """Whether the metadata was checked against each checkpoint's base: 'not run' when no base was found."""
    compared, missing = c.base_compared, c.base_not_found
    absent = f" ({missing} name a base the census does not hold)" if missing else ""
    if not compared:
        return f"metadata against the base: not run, no checkpoint's base is in the census{absent}"
    return f"metadata and base disagree on {c.inconsistent} of the {compared} compared{absent}"


def readings_lines(readings: Readings) -> list[str]:
    lines = staleness_lines(readings.staleness)
    if readings.provenance is not None and (readings.provenance.deployment or readings.provenance.ceiling):
        lines += provenance_lines(readings.provenance)
    if readings.recoverability is not None:
        lines += recoverability_lines(readings.recoverability)
    return lines + mechanism_lines(readings.mechanism)


def mechanism_cell(entry: CheckpointRow) -> str:
    m = entry.mechanism
    if m.mechanism is None:
        return "—"
    flag = "" if m.consistent is not False else " (base disagrees)"
    return f"{m.mechanism} ({m.evidence}){flag}"


# --- one audit -------------------------------------------------------------------------------------------------------


def null_lines(null: StalenessNull | None) -> list[str]:
    if null is None:
        return []
    one_pair = ("—" if null.one_pair_false_positive_rate is None
                else f"{null.one_pair_false_positive_rate:.2f} on {null.one_pair_triples} disjoint triples")
    return ["", f"Null of {null.refits} independent retain refits ({null.pairs} ordered pairs): median combined "
                f"distance {_num(null.null_median_combined)}, band (1 − {null.level:g} quantile) "
                f"{_num(null.band_combined)}; the shipped state's score {null.shipped_score:.5f}, rank p = "
                f"{null.p_value:.4f} (exact level {null.exact_level:.4f}). The one-pair band fires on the null at "
                f"{one_pair}."]


def arms_lines(arms: Sequence[ProvenanceArmMeasurement] | None) -> list[str]:
    if not arms:
        return []
    rows = [[a.arm, f"{a.exchanged} of {a.pool_size}", str(len(a.draws)), f"{a.distance:.5f}", f"{a.null_band:.5f}",
             f"{signed(a.forget_shift_pp)} pp", f"{a.null_shift_band_pp:.2f} pp",
             "yes" if a.exceeds_null else "no", "—" if a.staleness_ratio is None else f"{a.staleness_ratio:.2f}"]
            for a in arms]
    return ["", "## Provenance arms", ""] + markdown_table(
        ["arm", "exchanged", "draws", "distance", "null band", "forget shift", "null |shift| band", "above null",
         "staleness ÷ distance"], rows)


def curve_lines(curve: RecoverabilityMeasurement | None) -> list[str]:
    if curve is None:
        return []
    sources = sorted({p.source for p in curve.points})
    budgets = sorted({p.budget for p in curve.points})
    cell = {(p.source, p.budget): p for p in curve.points}
    rows = [[f"B = {b}"] + ["—" if (s, b) not in cell else f"{cell[(s, b)].mean_forget_accuracy:.4f}"
                            for s in sources] for b in budgets]
    lines = ["", "## Recoverability curve", "",
             f"Forget accuracy (shipped {curve.forget_accuracy_shipped:.4f}) after a refit ({curve.rule}) on B proxy "
             f"images, mean over {curve.seeds} seeds.", ""] + markdown_table(["budget", *sources], rows)
    return lines + ([""] + [f"- skipped: {reason}" for reason in curve.skipped] if curve.skipped else [])
