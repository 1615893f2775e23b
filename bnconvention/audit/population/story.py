"""What a census found, in sentences: a headline fixed before the data, then the readings that support it.

The demo and the HTML report tell a population's story from ``census.json`` alone; nothing here is written for one
population, and nothing picks the strongest finding. The rule, fixed before any refit:

1. the headline is always the spec's headline cell: how many of the released checkpoints decided are displaced
   beyond the margin after Benjamini–Yekutieli, with the known-answer controls' rate beside it (the background:
   what the instrument reports where there is nothing to find);
2. then, for each criterion, how many verdicts flip, again with the controls' flips beside it;
3. then the supporting readings, each only when its section exists: the family reading (a family equivalent on
   average that still holds displaced checkpoints, the paper's "per checkpoint, not per method", or that none
   does), the per-variant contrast, the frozen twins, staleness, the controls, the detection floor and whether BY
   could bind.

Synthetic twin arms are never counted as released checkpoints; they are read in the twins' own line. Every function
reads the census model (:class:`.model.CensusResult`, :meth:`.model.CensusResult.read` parses a ``census.json``): a
census of 4 decided checkpoints none displaced on ``df`` opens with 'No released checkpoint decided is displaced on
`df` (0 of 4, ±1.2 pp, BY q = 0.05): the shipped statistics held.'
"""

from __future__ import annotations

from bnconvention.audit.population.families import family_label
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_readings import ProvenanceArmReading, StalenessVsShift
from bnconvention.audit.population.model_sections import BackgroundRate, FamilyCell, FamilyRow
from bnconvention.formats.text import signed


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _interval(cell: FamilyCell) -> str:
    if cell.lower_pp is None or cell.upper_pp is None:
        return "no interval"
    return f"90 % interval [{signed(cell.lower_pp)}, {signed(cell.upper_pp)}] pp"


def headline_cell(census: CensusResult) -> str:
    """The census's headline cell."""
    return census.headline


def _families(census: CensusResult) -> list[FamilyRow]:
    return [] if census.families is None else census.families.families


def _equivalent_yet_displaced(census: CensusResult, cell: str) -> str | None:
    found = [(f, f.cells[cell]) for f in _families(census)
             if cell in f.cells and f.cells[cell].outcome == "equivalent" and f.cells[cell].displaced_by > 0]
    if not found:
        return None
    family, c = max(found, key=lambda pair: pair[1].displaced_by)
    return (f"Family {_family_label(family)} is equivalent to zero on average on `{cell}` "
            f"(mean {signed(c.mean_shift_pp)} pp, {_interval(c)}) yet {_plural(c.displaced_by, 'checkpoint')} "
            f"of its {family.checkpoints} are displaced: per checkpoint, not per method.")


def _family_label(family: FamilyRow) -> str:
    return family_label(family.family, family.variant, family.removal_kind)


def background_text(census: CensusResult, *, cell: str | None = None, criterion: str | None = None) -> str:
    """The controls' rate for a headline count: displaced on ``cell`` or flipping ``criterion``, in all and per
    label; 'no BatchNorm control in this census' when there is none to give a rate."""
    back = census.controls.background
    if not back.checkpoints:
        return "background rate: not measured, no BatchNorm control in this census"

    def count(rates: BackgroundRate) -> int:
        return rates.displaced.get(cell, 0) if cell is not None else rates.flips.get(criterion or "", 0)

    parts = [f"{label} {count(r)} of {r.checkpoints}" for label, r in sorted(back.by_label.items())]
    what = "displaced" if cell is not None else "flip it"
    return (f"background: {count(back)} of {back.checkpoints} known-answer controls {what}"
            + (f" ({'; '.join(parts)})" if len(parts) > 1 else ""))


def _twin_note(census: CensusResult) -> str:
    twins = census.counts.twin_arms
    return f"; {_plural(twins, 'synthetic twin arm')} read apart" if twins else ""


def flips_lines(census: CensusResult) -> list[str]:
    """One line per criterion: its flips over the released checkpoints decided, with the controls' flips."""
    decided = census.counts.decided
    lines = []
    for criterion, tally in census.verdicts.items():
        lines.append(f"Refitting the running statistics at bit-identical weights flips the verdict `{criterion}` on "
                     f"{tally.flips} of {decided} released checkpoints decided ({tally.pass_to_fail} "
                     f"pass→fail, {tally.fail_to_pass} fail→pass; {tally.flips_on_every_replicate} on "
                     f"every replicate); {background_text(census, criterion=criterion)}.")
    return lines


def headline(census: CensusResult) -> str:
    """The census's headline: the headline cell's displaced count with its background (the module's rule 1)."""
    cell = headline_cell(census)
    decided = census.counts.decided
    counts = census.cells[cell]
    n = counts.displaced_by
    design = f"±{census.margin_pp:g} pp, BY q = {census.fdr_q:g}"
    background = f"; {background_text(census, cell=cell)}"
    if not n and counts.displaced and counts.by.m and counts.by.keeps_all_from is None:
        return (f"No released checkpoint decided can be certified displaced on `{cell}` by this design: with "
                f"R = {census.replicates} and {counts.by.m} decided, not even all of them displaced would "
                f"survive BY at q = {census.fdr_q:g}; {counts.displaced} are displaced before BY (±"
                f"{census.margin_pp:g} pp{_twin_note(census)}){background}.")
    if not n:
        raw = f"; {counts.displaced} before BY" if counts.displaced else ""
        return (f"No released checkpoint decided is displaced on `{cell}` ({n} of {decided}, {design}{raw}"
                f"{_twin_note(census)}): the shipped statistics held{background}.")
    largest = census.largest_shift
    tail = (f"; the largest shift is {signed(largest.shift_pp)} pp (`{largest.cell}`, {largest.checkpoint})"
            if largest else "")
    return (f"`{cell}` is displaced on {n} of {decided} released checkpoints decided ({design}{_twin_note(census)})"
            f"; {background_text(census, cell=cell)}{tail}.")


def _no_equivalent_family(census: CensusResult, cell: str) -> str | None:
    """Said plainly when the population has families but none shows the per-checkpoint reading."""
    families = [f for f in _families(census) if cell in f.cells]
    if not families or _equivalent_yet_displaced(census, cell) is not None:
        return None
    family = min(families, key=lambda f: abs(f.cells[cell].mean_shift_pp))
    c = family.cells[cell]
    return (f"No family is shown equivalent to zero on average on `{cell}` while containing displaced checkpoints; "
            f"the closest, {_family_label(family)}, averages {signed(c.mean_shift_pp)} pp "
            f"({_interval(c)}, {c.outcome}) and contains {_plural(c.displaced_by, 'displaced checkpoint')}.")


def _variants(census: CensusResult, cell: str) -> str | None:
    families = _families(census)
    if not families:
        return None
    by_variant: dict[str, list[int]] = {}
    for f in families:
        if cell in f.cells:
            counts = by_variant.setdefault(f.variant, [0, 0])
            counts[0] += f.cells[cell].displaced_by
            counts[1] += f.checkpoints
    parts = [f"{variant}: {d} of {n}" for variant, (d, n) in sorted(by_variant.items())]
    return f"Displaced on `{cell}` by how BatchNorm ran while the weights moved — " + "; ".join(parts) + "."


def _twins(census: CensusResult) -> str | None:
    twins = census.twin_gaps
    if twins is None or not twins.levels:
        return None
    parts = [f"{signed(t.mean_gap_pp)} pp at level {t.level}"
             + ("" if t.lower_pp is None or t.upper_pp is None else f" [{signed(t.lower_pp)}, {signed(t.upper_pp)}]")
             for t in twins.levels]
    return (f"Frozen twins (bit-identical weights, different buffer trajectories) differ on `{twins.cell}` as "
            f"shipped by " + ", ".join(parts) + f" ({twins.confidence:.0%} intervals across seeds).")


def _staleness(census: CensusResult) -> str | None:
    staleness = census.readings.staleness
    rank = staleness.staleness_vs_abs_shift
    if rank.rho is None:
        return None
    tracks = rank.rho > 0 and rank.lower is not None and rank.lower > 0
    reading = "Staleness tracks displacement" if tracks else "Staleness is not shown to track displacement here"
    return (f"{reading}: Spearman ρ = {rank.rho:.2f} between staleness and |shift| of `{rank.cell}` over "
            f"{rank.n} checkpoints ({spearman_interval(rank)}); {staleness.exceeds_band} of "
            f"{staleness.decided} exceed the reference band (about "
            f"{staleness.expected_false_positives_if_none_stale:.1f} expected if none were stale).")


def spearman_interval(rank: StalenessVsShift) -> str:
    """``95% cluster-bootstrap interval [+0.52, +0.79] over 103 weight files`` (or why there is none)."""
    if rank.lower is None or rank.upper is None:
        return f"no interval: {rank.clusters} clusters"
    return (f"{rank.level:.0%} cluster-bootstrap interval [{signed(rank.lower)}, {signed(rank.upper)}] "
            f"over {rank.clusters} {rank.clustered_by}s")


def provenance_line(census: CensusResult) -> str | None:
    """The provenance contrast against staleness: whether exchanging kept records for removed ones in the fitting
    pool moves the cell, and how far the shipped state's staleness exceeds that exchange's distance."""
    arms = census.readings.provenance
    deployment = None if arms is None else arms.deployment
    if arms is None or deployment is None:
        return None

    def moves(a: ProvenanceArmReading) -> str:
        return (f"forget accuracy by {signed(a.pooled_forget_shift_pp)} pp pooled (largest "
                f"{signed(a.largest_forget_shift_pp)}; beyond its null swap on {a.shift_exceeds_null} of "
                f"{a.checkpoints}) and φ beyond its null band on {a.exceeds_null} of {a.checkpoints}")

    line = (f"Provenance on {_plural(deployment.checkpoints, 'checkpoint')} "
            f"({'/'.join(map(str, deployment.draws))} draws per arm): "
            f"exchanging the removed share of the fitting pool moves {moves(deployment)}")
    if arms.ceiling is not None:
        line += f"; every removed record in the pool moves {moves(arms.ceiling)}"
    ratio = deployment.staleness_ratio_median
    if ratio is not None and deployment.staleness_ratio_range is not None:
        low, high = deployment.staleness_ratio_range
        line += (f"; the shipped statistics' staleness is {ratio:.2f}× the deployment exchange's distance at the "
                 f"median ({low:.2f} … {high:.2f})")
    return line + "."


def _controls(census: CensusResult) -> str | None:
    controls = census.controls
    if not controls.controls:
        return None
    failed = sorted({row.label for row in controls.rows if not row.holds})
    tail = f"; where they do not: {', '.join(failed)}" if failed else ""
    return (f"Known-answer controls: {controls.as_expected} of {controls.controls} hold{tail} (outside the "
            "multiplicity family).")


def margin_line(census: CensusResult) -> str:
    """Where the margin came from, whether it was preregistered, and the cells it cannot resolve."""
    margin = census.margin
    derivation = margin.derivation
    if margin.source == "auto" and derivation is not None:
        how = (f"derived before any refit as the median seed spread of the population's releases "
               f"({len(derivation.spreads)} spreads over {derivation.recipes} recipes")
        per_cell = ", ".join(f"`{c}` {v.median_pp:.2f}" for c, v in derivation.per_cell.items())
        how += f"; per cell {per_cell})" if per_cell else ")"
    else:
        how = "fixed by the spec"
    prereg = census.preregistration
    if prereg.preregistered:
        amended = len(prereg.amendments or [])
        fixed = f"; preregistered {prereg.created}" + (f", amended {amended}×" if amended else "")
    else:
        fixed = "; not preregistered"
    coarse = [f"`{cell}` on {c.above_margin} (up to {c.max_pp:.2f} pp)"
              for cell, c in margin.resolution.items() if c.above_margin and c.max_pp is not None]
    tail = ("; one record moves more than the margin on: " + ", ".join(coarse)) if coarse else ""
    return f"Margin ±{margin.margin_pp:.3g} pp, {how}{fixed}{tail}."


def anchoring_line(census: CensusResult) -> str:
    """Whether anchoring was an independent check, said plainly (:func:`bnconvention.audit.population.readings.
    anchoring_reading`); 'not run' when nothing was published."""
    a = census.readings.anchoring
    if not a.cells:
        return "Anchoring: not run, no checkpoint publishes cells to compare with."
    head = (f"Anchoring: {a.checked - a.failed} of {a.checked} checkpoints reproduce their published cells "
            f"within {a.tolerance:g}")
    if not a.independent:
        return (f"{head}, but all {a.cells} published cells equal this evaluation exactly: they were written by "
                "the same evaluation, so anchoring shows the files match their cards, not that an independent "
                "measurement reproduces.")
    return (f"{head}; the published cells are an independent measurement ({a.cells - a.exactly_equal} of "
            f"{a.cells} differ from this evaluation, by at most {a.max_abs_diff:.4f}).")


def detection_floor_pp(census: CensusResult) -> float | None:
    """The plant above which the design recovers at least the floor's share of the non-displaced cells (the sign
    test, before BY; :func:`bnconvention.audit.population.detection.floor_pp`), or None."""
    return None if census.detection_floor is None else census.detection_floor.floor_pp


def floor_reading(census: CensusResult) -> str | None:
    """The detection floor in one sentence: how it was planted, the exact floor, and the planted rows after BY."""
    floor = census.detection_floor
    if floor is None or not floor.cells:
        return None
    size = floor.floor_pp
    share = f"{floor.share:.0%}"
    what = (f"no plant is recovered on {share} of the {floor.cells} non-displaced cells" if size is None
            else f"a shift must exceed {size:.2f} pp to be recovered on {share} of the {floor.cells} "
                 "non-displaced cells")
    rows = ", ".join(f"{row.planted_pp:g} pp: {row.recovered_by}/{row.cells}" for row in floor.rows)
    tail = f" (recovered after BY: {rows})" if rows else ""
    return (f"Detection floor of this design, planted on {floor.method} at ±{floor.margin_pp:g} pp "
            f"(a plant at or below the margin recovers nothing by construction): {what}{tail}.")


def by_line(census: CensusResult, cell: str) -> str | None:
    """Whether Benjamini–Yekutieli could bind on ``cell`` (:func:`bnconvention.audit.population.summary.by_reading`)."""
    counts = census.cells.get(cell)
    if counts is None or not counts.by.m:
        return None
    by = counts.by
    removed = counts.displaced - counts.displaced_by
    head = (f"Benjamini–Yekutieli on `{cell}`: every displaced cell has the same sign-test p = 0.5^"
            f"{census.replicates} = {by.p_displaced:.2g}, so BY keeps all of them or none")
    if by.keeps_all_from is None:
        return f"{head}; with {by.m} checkpoints decided not even all of them displaced would survive."
    could = ("it could not bind here" if counts.displaced >= by.keeps_all_from
             else "it binds here")
    return (f"{head}: all once {by.keeps_all_from} of the {by.m} are displaced; {counts.displaced} are, "
            f"so {could} (removed {removed}).")


def population_story(census: CensusResult) -> list[str]:
    """The headline, the flips, then each supporting reading the census has (the module docstring's rule)."""
    cell = headline_cell(census)
    lines = [headline(census), *flips_lines(census)]
    supporting = (_equivalent_yet_displaced(census, cell) or _no_equivalent_family(census, cell),
                  _variants(census, cell), _twins(census), _staleness(census), provenance_line(census),
                  _controls(census),
                  anchoring_line(census), margin_line(census), floor_reading(census), by_line(census, cell))
    for line in supporting:
        if line is not None:
            lines.append(line)
    return lines


__all__ = ["anchoring_line", "background_text", "by_line", "detection_floor_pp", "flips_lines", "floor_reading",
           "headline", "headline_cell", "margin_line", "population_story", "provenance_line", "spearman_interval"]
