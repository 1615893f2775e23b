"""Per-family readings of a structured population and the frozen-twin gap.

The paper's central reading is "per checkpoint, not per method": a family of unlearning runs (one procedure, one
treatment of the BatchNorm buffers) can be equivalent to zero on average and still contain displaced checkpoints.
To show it the census needs the family's mean shift with an interval that respects how the population was drawn:
every checkpoint of one seed starts from that seed's base weights (and its removals are nested subsets of one
training set), so the unit that is drawn independently is the seed, not the checkpoint or the (seed, removal) pair.
Each seed contributes the mean shift of its checkpoints, and the family mean gets a t-interval over the seeds at the
TOST level of the per-checkpoint decisions (90 %, :func:`bnconvention.audit.measure.stats.tost`), with the number of
seeds (clusters) beside it; the family is equivalent on average when that interval lies inside ±margin, displaced on
average when it lies wholly outside, undetermined otherwise (also with a single seed: no interval). Class removal
and instance removal are different questions, so a family is read per removal kind. Beside it: how many of the
family's decided checkpoints are displaced (after Benjamini–Yekutieli, and raw), and each criterion's flips by
direction.

The frozen twins are pairs with bit-identical θ whose buffers took different trajectories (the ``online`` arm kept
what the run's train-mode BN accumulated, the ``frozen`` arm the base's buffers). Their gap is the headline cell as
shipped, online minus frozen, in pp; per weight-movement level the mean gap over the pairs (one per seed) gets a
95 % t-interval across seeds.

Pure functions: sidecar metadata and census rows in, the census's sections out (:class:`.model_sections.Families`,
:class:`.model_sections.TwinGaps`)
(:func:`bnconvention.audit.core.result.population_metadata` is what the audit keeps of a sidecar;
:mod:`bnconvention.audit.render.families` renders the rest). A census whose checkpoints
carry no family metadata (the digits zoo) has no family section and no twin section.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence

from bnconvention.audit.core.result import PopulationMetadata
from bnconvention.audit.measure.stats import tost
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_rows import CheckpointRow, PopulationPlace
from bnconvention.audit.population.model_sections import (
    Families,
    FamilyCell,
    FamilyRow,
    FlipTally,
    TwinGaps,
    TwinLevel,
    TwinPair,
)

FAMILY_LEVEL = 0.90  # the TOST level of the per-checkpoint decisions (decide's default)
TWIN_LEVEL = 0.95  # a two-sided confidence interval of the twin gap across seeds
ONLINE, FROZEN = "online", "frozen"


def family_label(family: str, variant: str | None, removal_kind: str | None = None) -> str:
    """How a family is named in tables, plots and sentences: ``gradascent (eval, class removal)``."""
    return f"{family} ({variant or '—'}{f', {removal_kind} removal' if removal_kind else ''})"


def census_group(entry: CheckpointRow, controls: Mapping[str, str], *, twin_arms: bool = True) -> str:
    """The group a census row is summarised or plotted in: ``control: <label>`` (``controls`` maps checkpoint names
    to the census's control labels, :func:`control_labels`), ``twin level L (arm)`` (``twins`` with
    ``twin_arms=False``), ``family (variant)``, the population role, or ``checkpoints``."""
    population = entry.population or PopulationPlace()
    if entry.checkpoint in controls:
        return f"control: {controls[entry.checkpoint]}"
    if population.role == "twin":
        return f"twin level {population.twin_level} ({population.twin_arm})" if twin_arms else "twins"
    if population.family:
        return family_label(population.family, population.variant, population.removal_kind)
    return str(population.role or "checkpoints")


def control_labels(census: CensusResult) -> dict[str, str]:
    """Checkpoint name → control label, from census.json's controls table."""
    return {row.checkpoint: row.label for row in census.controls.rows}


def mean_interval(values: Sequence[float], *, level: float) -> tuple[float, float | None, float | None]:
    """The mean and its two-sided ``level`` t-interval (None, None with fewer than 2 values). The interval is
    :func:`tost`'s, which does not depend on the margin it is given."""
    t = tost(values, margin_pp=1.0, level=level)  # mean ± t(1 - (1 - level) / 2) · se
    if not math.isfinite(t.lower):
        return t.mean, None, None
    return t.mean, t.lower, t.upper


def family_cell(rows: Sequence[CheckpointRow], meta: Mapping[str, PopulationMetadata], metric: str, *,
                margin_pp: float, level: float = FAMILY_LEVEL) -> FamilyCell:
    """One cell of one family: the mean shift of each seed (the cluster that shares base weights), the family mean
    with its interval over the seeds and equivalence decision, and the displaced checkpoints in the family."""
    clusters: dict[str, list[float]] = {}
    for row in rows:
        clusters.setdefault(str(meta[row.checkpoint].seed), []).append(row.cells[metric].shift_pp)
    means = [statistics.fmean(clusters[key]) for key in sorted(clusters)]
    t = tost(means, margin_pp=margin_pp, level=level)
    lower, upper = (t.lower, t.upper) if math.isfinite(t.lower) else (None, None)
    if lower is None or upper is None:
        outcome = "undetermined"
    elif -margin_pp < lower and upper < margin_pp:
        outcome = "equivalent"
    elif lower > margin_pp or upper < -margin_pp:
        outcome = "displaced"
    else:
        outcome = "undetermined"
    cells = [row.cells[metric] for row in rows]
    return FamilyCell(clusters=len(means), cluster_means_pp=means, mean_shift_pp=t.mean, lower_pp=lower,
                      upper_pp=upper, tost_p_value=t.p_value, exact=t.exact, outcome=outcome,
                      displaced_by=sum(c.displaced_by for c in cells),
                      displaced=sum(c.outcome == "displaced" for c in cells),
                      equivalent=sum(c.outcome == "equivalent" for c in cells))


def flip_tally(rows: Sequence[CheckpointRow], criterion: str) -> FlipTally:
    """A criterion's flips in the family, by direction."""
    flips = [f for row in rows for f in row.flips if f.criterion == criterion]
    return FlipTally(flips=len(flips), pass_to_fail=sum(f.direction == "pass_to_fail" for f in flips),
                     fail_to_pass=sum(f.direction == "fail_to_pass" for f in flips))


def statement(label: str, metric: str, cell: FamilyCell, *, margin_pp: float) -> str:
    """The plain reading of one family's cell, chosen by the data."""
    n = cell.displaced_by
    count = f"{n} displaced checkpoint{'s' if n != 1 else ''}"
    if cell.outcome == "equivalent":
        if n:
            return (f"{label} is equivalent on average on `{metric}` yet contains {count}: per checkpoint, "
                    "not per method.")
        return f"{label} is equivalent on average on `{metric}` and contains no displaced checkpoint."
    if cell.outcome == "displaced":
        return f"{label} is displaced on average on `{metric}` beyond ±{margin_pp:g} pp ({count})."
    why = ("one seed×removal cluster gives no interval" if cell.lower_pp is None
           else f"its interval is not inside ±{margin_pp:g} pp")
    return f"{label} is not shown equivalent on average on `{metric}` ({why}); it contains {count}."


def family_readings(rows: Sequence[CheckpointRow], meta: Mapping[str, PopulationMetadata | None], *,
                    decided: Collection[str], metrics: Sequence[str], criteria: Sequence[str],
                    margin_pp: float) -> Families | None:
    """Per family × variant × removal kind over the decided checkpoints that name a family (twins are read apart):
    each cell's seed-clustered family mean and displaced count, each criterion's flips, and the plain statements.
    None when no decided checkpoint names a family."""
    known = {name: m for name, m in meta.items() if m is not None}
    groups: dict[tuple[str, str, str], list[CheckpointRow]] = {}
    for row in rows:
        m = known.get(row.checkpoint)
        if m is None or m.family is None or m.role == "twin" or row.checkpoint not in decided:
            continue
        groups.setdefault((m.family, m.variant or "—", m.removal_kind or ""), []).append(row)
    if not groups:
        return None
    out = []
    for (family, variant, kind), members in sorted(groups.items()):
        cells = {metric: family_cell(members, known, metric, margin_pp=margin_pp) for metric in metrics}
        label = f"Family `{family}` ({variant}{f', {kind} removal' if kind else ''})"
        out.append(FamilyRow(family=family, variant=variant, removal_kind=kind or None, checkpoints=len(members),
                             seeds=sorted({known[r.checkpoint].seed for r in members}, key=str),
                             removals=sorted({str(known[r.checkpoint].removal) for r in members}),
                             cells=cells, flips={c: flip_tally(members, c) for c in criteria},
                             statements=[statement(label, metric, cell, margin_pp=margin_pp)
                                         for metric, cell in cells.items()]))
    return Families(level=FAMILY_LEVEL, margin_pp=margin_pp, clustered_by=["seed"], families=out)


def twin_pairs(rows: Sequence[CheckpointRow], meta: Mapping[str, PopulationMetadata | None], *,
               headline: str) -> list[TwinPair]:
    """Each online twin with its frozen partner in the census: the headline cell as shipped in both arms and the
    gap (online − frozen, pp), and whether θ is bit-identical as the design says."""
    by_name = {row.checkpoint: row for row in rows if row.anchored is not False}
    pairs = []
    for name, row in sorted(by_name.items()):
        m = meta.get(name)
        if m is None or m.twin_arm != ONLINE or m.twin_partner not in by_name:
            continue
        partner = by_name[m.twin_partner]
        if headline not in row.cells or headline not in partner.cells:
            continue
        online, frozen = row.cells[headline].shipped, partner.cells[headline].shipped
        pairs.append(TwinPair(online=name, frozen=m.twin_partner, seed=m.seed, level=m.twin_level,
                              online_shipped=online, frozen_shipped=frozen, gap_pp=(online - frozen) * 100,
                              same_theta=row.trainable_sha256 == partner.trainable_sha256))
    return pairs


def twin_gaps(rows: Sequence[CheckpointRow], meta: Mapping[str, PopulationMetadata | None], *,
              headline: str) -> TwinGaps | None:
    """The twin pairs and, per weight-movement level (one group when the sidecars name none), the mean gap with
    its confidence interval across seeds. None when the census holds no complete pair."""
    pairs = twin_pairs(rows, meta, headline=headline)
    if not pairs:
        return None
    by_level: dict[int | None, list[TwinPair]] = {}
    for pair in pairs:
        by_level.setdefault(pair.level, []).append(pair)
    levels = []
    for level, members in sorted(by_level.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        mean, lower, upper = mean_interval([p.gap_pp for p in members], level=TWIN_LEVEL)
        levels.append(TwinLevel(level=level, pairs=len(members), seeds=sorted({p.seed for p in members}, key=str),
                                mean_gap_pp=mean, lower_pp=lower, upper_pp=upper,
                                same_theta=all(p.same_theta for p in members)))
    return TwinGaps(cell=headline, confidence=TWIN_LEVEL, levels=levels, pairs=pairs)
