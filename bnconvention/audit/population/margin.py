"""The census margin, derived before any refit, and the resolution of each cell.

**The margin by Shen and Li's rule** (``margin: auto`` in the spec). Shen and Li fixed ±1.2 pp before their refits as
the median of the releases' own seed spread: how far the same recipe lands when only the seed changes. Here the recipe
is a checkpoint's place in the population without its seed (role, family, variant, removal, twin level and arm, from
the sidecars); each recipe released under two or more seeds gives, per cell, the sample standard deviation of its
published values across seeds (pp). The margin is the median of those spreads over recipes and cells. It reads
published cells only, so it is fixed before anything is refit or even evaluated, and the derivation (every spread,
per cell medians, recipes used) is written beside it. Twin arms are synthetic and do not enter it.

**Resolution.** A cell measured on a split of n records moves in steps of 100 / n pp: one record of ``df`` on a
27-record forget set is 3.70 pp. A margin below that step cannot separate "no shift" from "one record flipped", so
the census counts, per cell, the checkpoints whose one-record step exceeds the margin and warns. An expression cell
(``abs(df - dt)``) moves by the coarsest step of the splits it reads.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bnconvention.audit.core.result import PopulationMetadata
from bnconvention.audit.population.model import CellResolution, CellSpread, MarginDerivation, SeedSpread
from bnconvention.audit.spec.expressions import CellExpression
from bnconvention.errors import UsageError

RULE = "median over recipes and cells of the published cell's standard deviation across seeds (pp)"
SPLIT_OF = {"df": "forget", "dr": "retain", "dt": "test"}


@dataclass(frozen=True)
class MarginEntry:
    """What the margin reads of one checkpoint: its place in the population and its published cells."""

    name: str
    population: PopulationMetadata | None
    published: Mapping[str, float] | None


def recipe(population: PopulationMetadata) -> str:
    """A checkpoint's recipe: its place in the population without the seed."""
    parts = (population.role, population.family, population.variant, population.removal,
             None if population.twin_level is None else f"level {population.twin_level}", population.twin_arm)
    return "/".join(str(p) for p in parts if p is not None)


def seed_spread_margin(entries: Sequence[MarginEntry], cells: Sequence[CellExpression]) -> MarginDerivation:
    """The margin by Shen and Li's rule and its derivation (see the module docstring); :class:`UsageError` when no
    recipe is published under two seeds."""
    by_recipe: dict[str, list[MarginEntry]] = {}
    for entry in entries:
        m = entry.population
        if m is None or m.seed is None or m.role == "twin" or not entry.published:
            continue
        by_recipe.setdefault(recipe(m), []).append(entry)
    spreads: list[SeedSpread] = []
    for key, members in sorted(by_recipe.items()):
        for cell in cells:
            values = [v for e in members if e.published is not None and (v := cell.value_in(e.published)) is not None]
            if len(values) >= 2:
                spreads.append(SeedSpread(recipe=key, cell=cell.text, seeds=len(values),
                                          spread_pp=100.0 * statistics.stdev(values)))
    if not spreads:
        raise UsageError("margin: auto needs the seed spread of the population's releases, and no recipe (role, "
                         "family, variant, removal) publishes cells under two or more seeds; give margin_pp a "
                         "number instead")
    per_cell = {cell.text: [s.spread_pp for s in spreads if s.cell == cell.text] for cell in cells}
    return MarginDerivation(rule=RULE, margin_pp=statistics.median(s.spread_pp for s in spreads),
                            recipes=len({s.recipe for s in spreads}), spreads=spreads,
                            per_cell={cell: CellSpread(recipes=len(values), median_pp=statistics.median(values))
                                      for cell, values in per_cell.items() if values})


def resolution_pp(cell: CellExpression, split_records: Mapping[str, int] | None) -> float | None:
    """The one-record step of ``cell`` in pp: 100 / n for a base cell on n records, the coarsest step of the
    splits an expression reads; None when a split's size is unknown."""
    if not split_records:
        return None
    steps = []
    for name in cell.names:
        n = split_records.get(SPLIT_OF.get(name, ""))
        if not n:
            return None
        steps.append(100.0 / n)
    return max(steps) if steps else None


def resolution_counts(rows: Sequence[tuple[str, Mapping[str, int] | None]], cells: Sequence[CellExpression], *,
                      margin_pp: float) -> dict[str, CellResolution]:
    """Per cell over the checkpoints: the coarsest and finest one-record step, and which checkpoints' step is
    larger than the margin (a one-record change would clear it)."""
    out: dict[str, CellResolution] = {}
    for cell in cells:
        steps = [(name, step) for name, records in rows if (step := resolution_pp(cell, records)) is not None]
        coarse = sorted(name for name, step in steps if step > margin_pp)
        out[cell.text] = CellResolution(checkpoints=len(steps), unknown=len(rows) - len(steps),
                                        max_pp=max((s for _, s in steps), default=None),
                                        min_pp=min((s for _, s in steps), default=None),
                                        above_margin=len(coarse), above_margin_checkpoints=coarse)
    return out


def resolution_warnings(counts: Mapping[str, CellResolution], *, margin_pp: float) -> list[str]:
    """One line per cell whose one-record step exceeds the margin on some checkpoint."""
    return [f"margin ±{margin_pp:.3g} pp is below one record of `{cell}` on {c.above_margin} of {c.checkpoints} "
            f"checkpoints (one record is up to {c.max_pp:.2f} pp): a single record flipping there clears the "
            "margin" for cell, c in counts.items() if c.above_margin]


__all__ = ["RULE", "MarginEntry", "recipe", "resolution_counts", "resolution_pp", "resolution_warnings",
           "seed_spread_margin"]
