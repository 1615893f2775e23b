"""The census.md sections of the controls, the flip ledger, the sweeps, the detection floor and the recalibration
budget, from the census model (:mod:`bnconvention.audit.population.model_sections`)."""

from __future__ import annotations

from collections.abc import Sequence

from bnconvention.audit.population.ledger import counted_as
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_sections import LedgerRow
from bnconvention.audit.population.story import floor_reading
from bnconvention.audit.run.sweeps import MarginRow, PoolSizeRow
from bnconvention.formats.text import markdown_table, signed


def _budget(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def census_sections_markdown(census: CensusResult) -> str:
    """Every section, each headed, each a table (an empty section says so)."""
    lines: list[str] = []
    for section in (_controls, _ledger, _margins, _pool_sizes, _detection, _budget_section):
        lines += ["", *section(census)]
    return "\n".join(lines) + "\n"


def _controls(census: CensusResult) -> list[str]:
    controls = census.controls
    lines = ["## Controls", "", f"{controls.as_expected} of {controls.controls} known-answer controls gave "
             "their answer. Controls are outside the Benjamini–Yekutieli family and every count above.", ""]
    if not controls.rows:
        return lines + ["No controls in this census (name them under `controls.checkpoints` in the spec)."]
    rows = []
    for row in controls.rows:
        largest = max(cell.max_abs_shift_pp for cell in row.cells.values())
        outcomes = ", ".join(f"`{m}` {c.outcome}" for m, c in row.cells.items())
        rows.append([row.checkpoint, row.label, row.expected, "yes" if row.holds else "**no**",
                     f"{largest:.2f}", outcomes])
    header = ["checkpoint", "control", "known answer", "holds", "largest |shift| pp", "outcomes"]
    return lines + markdown_table(header, rows)


def _value(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _ledger(census: CensusResult) -> list[str]:
    """Every flip, released checkpoints first, then the controls' (the background) and the twin arms'."""
    return ["## Flip ledger", "", "Every verdict that flips, with the compared cell as published, shipped and refit "
            "(replicate mean and range), the replicates that pass after their own refit, and whether the shift "
            "clears the checkpoint's recalibration budget. Only the released checkpoints decided are counted; the "
            "controls' flips are the background rate, the twin arms are synthetic.", "",
            *ledger_table(census.flip_ledger)]


def ledger_table(ledger: Sequence[LedgerRow]) -> list[str]:
    """The flip ledger as a table, in its order (:func:`bnconvention.audit.population.ledger.in_ledger_order`)."""
    if not ledger:
        return ["No verdict flips."]
    rows = []
    for f in ledger:
        for c in f.compared:
            direction = (f.direction or "").replace("_", " ")
            rows.append([f.checkpoint, counted_as(f), f"`{f.criterion}`", direction, f"`{c.cell}`",
                         _value(c.published), _value(c.shipped), _value(c.refit),
                         f"[{_value(c.replicate_min)}, {_value(c.replicate_max)}]",
                         ", ".join(f"{t:g}" for t in f.thresholds),
                         f"{f.replicates_passing}/{f.replicates}",
                         f"{signed(c.shift_pp)} vs {_budget(c.budget_pp)}"])
    return markdown_table(["checkpoint", "counted as", "criterion", "direction", "cell", "published", "shipped",
                           "refit", "replicate range", "threshold", "replicates pass", "shift pp vs budget pp"], rows)


def _design_rows(rows: Sequence[MarginRow | PoolSizeRow]) -> list[list[str]]:
    table = []
    for row in rows:
        swept = row.margin_pp if isinstance(row, MarginRow) else row.pool_size
        for metric, cell in row.cells.items():
            flips = ", ".join(f"{n}" for n in row.flips.values()) or "—"
            by_q = ", ".join(f"{n} (q={level})" for level, n in cell.displaced_by.items())
            table.append([f"{swept:g}", f"`{metric}`", f"{cell.displaced}", by_q,
                          str(cell.equivalent), str(cell.undetermined), flips])
    return table


def _margins(census: CensusResult) -> list[str]:
    header = ["margin pp", "cell", "displaced", "displaced after BY", "equivalent", "undetermined",
              "flips (" + ", ".join(f"`{c}`" for c in census.verdicts) + ")"]
    return ["## Margin sweep", "", "Re-decided from the stored replicate shifts (no refit). Flips compare criteria "
            "on cell values and do not depend on the margin.", "",
            *markdown_table(header, _design_rows(census.sweeps.margins)),
            *_scales_margins(census.sweeps.margins)]


def _scales_margins(rows: Sequence[MarginRow]) -> list[str]:
    """The activation-scales cells at each margin (only when the census audited scales)."""
    table = [[f"{row.margin_pp:g}", f"`{metric}`", str(counts["displaced"]), str(counts["equivalent"]),
              str(counts["undetermined"])]
             for row in rows for metric, counts in (row.scales or {}).items()]
    if not table:
        return []
    return ["", "Activation-scales cells of the decided quantized checkpoints at each margin, re-decided from the "
            "stored recalibration shifts (per checkpoint, outside the Benjamini–Yekutieli family).", "",
            *markdown_table(["margin pp", "scales cell", "displaced", "equivalent", "undetermined"], table)]


def _pool_sizes(census: CensusResult) -> list[str]:
    rows = census.sweeps.pool_sizes
    lines = ["## Pool-size sweep", ""]
    if not rows:
        return lines + ["No pool sizes swept (list them under `sweeps.pool_sizes` in the spec)."]
    added = ", ".join(f"{row.pool_size}: {row.refits_added}" for row in rows)
    header = ["pool size", "cell", "displaced", "displaced after BY", "equivalent", "undetermined", "flips"]
    return lines + [f"At margin ±{census.margin_pp:g} pp. Refits added by this run per pool size: {added}.", "",
                    *markdown_table(header, _design_rows(rows))]


def _detection(census: CensusResult) -> list[str]:
    floor = census.detection_floor
    rows = [[f"{row.planted_pp:g}", str(row.cells), str(row.recovered), str(row.recovered_by)]
            for row in (floor.rows if floor is not None else [])]
    return ["## Detection floor", "", floor_reading(census) or "No non-displaced cell to plant in.", "",
            f"Decided at the census design (±{census.margin_pp:g} pp, R = {census.replicates}, BY at q = "
            f"{census.fdr_q:g}).", "",
            *markdown_table(["planted pp", "cells planted", "recovered", "recovered after BY"], rows)]


def _budget_section(census: CensusResult) -> list[str]:
    budget = census.recalibration_budget
    cells = [[f"`{metric}`", _budget(None if b is None else b.max_pp), _budget(None if b is None else b.median_pp)]
             for metric, b in budget.cells.items()]
    counts = budget.counts
    lines = ["## Recalibration budget", "", "How far a cell moves between two independent retain refits of the same "
             "checkpoint (largest |difference| over disjoint replicate pairs).", "",
             *markdown_table(["cell", "largest budget pp", "median budget pp"], cells), "",
             f"{counts.flips} flips: {counts.clear_budget} clear their checkpoint's budget, "
             f"{counts.hold_every_replicate} hold on every replicate, {counts.clear_and_hold} both."]
    if budget.flips:
        rows = [[f.checkpoint, f"`{f.criterion}`", (f.direction or "").replace("_", " "),
                 ", ".join(f"`{c.cell}` {signed(c.shift_pp)} vs {_budget(c.budget_pp)}" for c in f.compared),
                 "yes" if f.clears_budget else "no", "yes" if f.holds_every_replicate else "no"]
                for f in budget.flips]
        lines += ["", *markdown_table(["checkpoint", "criterion", "direction", "shift pp vs budget pp", "clears budget",
                               "holds on every replicate"], rows)]
    return lines
