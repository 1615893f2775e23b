"""The census figures of the report, drawn from ``census.json`` alone (inline SVG, :mod:`.svg`).

- :func:`forest_plot`: each checkpoint's headline shift with its replicate range, grouped by family and variant
  (then twins and controls), each family closed by its clustered mean and interval, the ±margin band shaded;
- :func:`margin_sweep_plot`: displaced / equivalent / undetermined headline cells at each swept margin;
- :func:`recoverability_plot`: the recoverability curve, mean forget shift per budget and proxy source;
- :func:`twin_gap_plot`: the frozen-twin gap per weight-movement level, pairs and the mean with its interval;
- :func:`staleness_scatter`: staleness of the shipped statistics against |shift|, with the rank correlation.

Each returns ``None`` when the census has no such section, so a report of a census without a population (the
digits zoo) simply has fewer figures. Points carry ``data-point`` attributes naming what they show, for tests and
for anyone reading the SVG.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bnconvention.audit.population import (
    CensusResult,
    CheckpointRow,
    FamilyCell,
    census_group,
    control_labels,
    family_label,
    headline_cell,
)
from bnconvention.formats.text import signed
from bnconvention.report_html.svg import COLOURS, SERIES, Axis, Figure, padded_range

WIDTH = 900
ROW, GROUP_ROW, TOP, BOTTOM, LABELS = 11, 18, 34, 46, 200


def _groups(census: CensusResult, rows: Sequence[CheckpointRow]) -> list[tuple[str, list[CheckpointRow]]]:
    controls = control_labels(census)
    groups: dict[str, list[CheckpointRow]] = {}
    for row in rows:
        groups.setdefault(census_group(row, controls, twin_arms=False), []).append(row)
    families = sorted(name for name in groups if "(" in name)
    return [(name, groups[name]) for name in [*families, *sorted(set(groups) - set(families))]]


def _family_means(census: CensusResult, cell: str) -> dict[str, FamilyCell]:
    families = census.families.families if census.families is not None else []
    return {family_label(f.family, f.variant, f.removal_kind): f.cells[cell] for f in families if cell in f.cells}


def _shift_range(rows: Sequence[CheckpointRow], means: Mapping[str, FamilyCell], cell: str,
                 margin: float) -> tuple[float, float]:
    values = [v for row in rows for v in (row.cells[cell].min_shift_pp, row.cells[cell].max_shift_pp,
                                          row.cells[cell].shift_pp)]
    values += [v for m in means.values() for v in (m.lower_pp, m.upper_pp) if v is not None]
    return padded_range(values, include=(-margin, margin))


def forest_plot(census: CensusResult) -> str | None:
    """Shifts of the headline cell per checkpoint, grouped by family with the family means (None: no rows)."""
    cell = headline_cell(census)
    rows = [r for r in census.checkpoints if cell in r.cells]
    if not rows:
        return None
    groups, means = _groups(census, rows), _family_means(census, cell)
    height = TOP + BOTTOM + sum(GROUP_ROW + ROW * (len(g) + (name in means)) for name, g in groups)
    fig = Figure(WIDTH, height, title=f"Forest plot: refit − shipped shift of {cell} per checkpoint, by family")
    margin = census.margin_pp
    x = Axis(*_shift_range(rows, means, cell, margin), LABELS, WIDTH - 20)
    fig.rect(x(-margin), TOP, x(margin) - x(-margin), height - TOP - BOTTOM, fill=COLOURS["band"])
    fig.x_axis(x, y=height - BOTTOM, top=TOP, label=f"shift of {cell}, pp (refit − shipped; band ±{margin:g})")
    fig.line(x(0.0), TOP, x(0.0), height - BOTTOM, colour=COLOURS["mean"], dash="3 3")
    fig.text(8, 20, f"{cell}: replicate mean (point) and range (bar) per checkpoint; ◆ family mean, "
                    f"{census.families.level if census.families is not None else 0.9:.0%} clustered interval",
             size=11)
    y = float(TOP)
    for name, members in groups:
        y += GROUP_ROW
        fig.text(8, y - 4, name, weight="bold")
        for row in members:
            y += ROW
            _forest_row(fig, x, y - ROW / 2, row, cell)
        if name in means:
            y += ROW
            _mean_row(fig, x, y - ROW / 2, name, means[name])
    return fig.render()


def _forest_row(fig: Figure, x: Axis, y: float, row: CheckpointRow, cell: str) -> None:
    c = row.cells[cell]
    kind = "absent" if row.channel == "absent" else c.outcome
    fig.text(LABELS - 6, y + 3.5, row.checkpoint, anchor="end", size=9)
    fig.line(x(c.min_shift_pp), y, x(c.max_shift_pp), y, colour=COLOURS.get(kind, kind), width=1.5)
    fig.circle(x(c.shift_pp), y, 3, kind=kind, data=f"{row.checkpoint}:{c.shift_pp:.4f}",
               tip=f"{row.checkpoint}: {signed(c.shift_pp)} pp ({kind})")


def _mean_row(fig: Figure, x: Axis, y: float, name: str, mean: FamilyCell) -> None:
    fig.text(LABELS - 6, y + 3.5, f"mean ({mean.displaced_by} displaced)", anchor="end", size=9, weight="bold")
    interval = "no interval"
    if mean.lower_pp is not None and mean.upper_pp is not None:  # an interval has both ends or none
        fig.line(x(mean.lower_pp), y, x(mean.upper_pp), y, colour=COLOURS["mean"], width=2.5)
        interval = f"[{signed(mean.lower_pp)}, {signed(mean.upper_pp)}]"
    fig.diamond(x(mean.mean_shift_pp), y, 5, data=f"{name}:{mean.mean_shift_pp:.4f}",
                tip=f"{name}: mean {signed(mean.mean_shift_pp)} pp {interval}, {mean.outcome} on average")


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], *, x_label: str, y_label: str,
                log_x: bool = False, height: int = 300, colours: Mapping[str, str] | None = None) -> str:
    """An SVG line chart of named series of (x, y) points (x on a log scale with ``log_x``; y always includes 0);
    each point carries its values as ``data`` and a tooltip."""
    xs = [px for points in series.values() for px, _ in points]
    ys = [py for points in series.values() for _, py in points]
    x_lo, x_hi = (min(xs) / 1.2, max(xs) * 1.2) if log_x else padded_range(xs)
    x = Axis(x_lo, x_hi, 60, WIDTH - 160, log=log_x)
    y = Axis(*padded_range(ys, include=(0.0,)), height - 50, 30)
    fig = Figure(WIDTH, height, title=title)
    fig.y_axis(y, x=60, right=WIDTH - 160, label=y_label)
    ticks = sorted(set(xs)) if log_x else None
    fig.x_axis(x, y=height - 50, top=30, label=x_label, ticks=ticks)
    for index, (name, points) in enumerate(series.items()):
        colour = (colours or {}).get(name) or SERIES[index % len(SERIES)]
        fig.polyline([(x(px), y(py)) for px, py in points], colour=colour)
        for px, py in points:
            fig.circle(x(px), y(py), 3, kind=colour, data=f"{name}:{px:g}:{py:.4f}", tip=f"{name}: {px:g} → {py:.4g}")
        fig.text(WIDTH - 150, 40 + 16 * index, name, colour=colour)
    return fig.render()


def margin_sweep_plot(census: CensusResult) -> str | None:
    """Headline cells displaced / equivalent / undetermined at each margin of the sweep (None: no sweep)."""
    cell = headline_cell(census)
    margins = [m for m in census.sweeps.margins if cell in m.cells]
    if len(margins) < 2:
        return None
    series = {outcome: [(m.margin_pp, float(getattr(m.cells[cell], outcome))) for m in margins]
              for outcome in ("displaced", "equivalent", "undetermined")}
    return line_chart(f"Margin sweep of {cell}: decided cells per outcome at each margin", series,
                       x_label="margin, pp", y_label="checkpoints", colours=COLOURS)


def recoverability_plot(census: CensusResult) -> str | None:
    """Mean forget shift after a refit on B proxy images, per source (None: the census measured no curve)."""
    reading = census.readings.recoverability
    if reading is None or not reading.curve:
        return None
    series: dict[str, list[tuple[float, float]]] = {}
    for point in reading.curve:
        series.setdefault(point.source, []).append((float(point.budget), point.mean_shift_pp))
    return line_chart("Recoverability curve: forget-accuracy shift after a refit on B unlabeled proxy images",
                       {k: sorted(v) for k, v in sorted(series.items())}, x_label="budget B (images, log scale)",
                       y_label="mean forget shift, pp", log_x=True)


def twin_gap_plot(census: CensusResult) -> str | None:
    """The frozen-twin gap per level: each pair's gap and the mean with its interval (None: no twins). A twin
    without a weight-movement level has no place on the level axis and is left out."""
    twins = census.twin_gaps
    placed = [(t.level, t) for t in twins.levels if t.level is not None] if twins is not None else []
    if twins is None or not placed:
        return None
    pairs = [(p.level, p) for p in twins.pairs if p.level is not None]
    levels = [level for level, _ in placed]
    gaps = [p.gap_pp for _, p in pairs]
    bounds = [v for _, t in placed for v in (t.lower_pp, t.upper_pp) if v is not None]
    height = 300
    x = Axis(min(levels) - 0.5, max(levels) + 0.5, 60, WIDTH - 160)
    y = Axis(*padded_range(gaps + bounds, include=(0.0,)), height - 50, 30)
    fig = Figure(WIDTH, height, title=f"Frozen-twin gap of {twins.cell} as shipped (online − frozen arm)")
    fig.y_axis(y, x=60, right=WIDTH - 160, label="gap, pp")
    fig.x_axis(x, y=height - 50, top=30, label="weight-movement level (epochs)", ticks=[float(v) for v in levels])
    for level, pair in pairs:
        fig.circle(x(level) - 12, y(pair.gap_pp), 3, kind="control", data=f"{pair.online}:{pair.gap_pp:.4f}",
                   tip=f"seed {pair.seed}: {signed(pair.gap_pp)} pp")
    for level, t in placed:
        if t.lower_pp is not None and t.upper_pp is not None:
            fig.line(x(level), y(t.lower_pp), x(level), y(t.upper_pp), colour=COLOURS["mean"], width=2.5)
        fig.diamond(x(level), y(t.mean_gap_pp), 6, data=f"level {level}:{t.mean_gap_pp:.4f}",
                    tip=f"level {level}: mean {signed(t.mean_gap_pp)} pp over {t.pairs} pairs")
    fig.text(WIDTH - 150, 40, "● pairs", colour=COLOURS["control"])
    fig.text(WIDTH - 150, 56, f"◆ mean, {twins.confidence:.0%} interval")
    return fig.render()


def staleness_scatter(census: CensusResult) -> str | None:
    """Staleness (mean distance to the refit statistics) against |shift| of the headline cell (None: no staleness)."""
    cell = headline_cell(census)
    points = [(r.staleness.mean_distance, abs(r.cells[cell].shift_pp), r)
              for r in census.checkpoints if r.staleness is not None and cell in r.cells]
    points = [p for p in points if p[0] > 0]
    if len(points) < 2:
        return None
    height = 360
    stale = [p[0] for p in points]
    x = Axis(min(stale) / 1.3, max(stale) * 1.3, 60, WIDTH - 160, log=True)
    y = Axis(*padded_range([p[1] for p in points], include=(0.0,)), height - 50, 30)
    fig = Figure(WIDTH, height, title=f"Staleness of the shipped statistics against |shift| of {cell}")
    fig.y_axis(y, x=60, right=WIDTH - 160, label=f"|shift| of {cell}, pp")
    fig.x_axis(x, y=height - 50, top=30, label="staleness: mean distance to the refit statistics (log scale)",
               ticks=_decades(x.lo, x.hi))
    for distance, shift, row in points:
        kind = "displaced" if row.staleness is not None and row.staleness.exceeds_band else "equivalent"
        fig.circle(x(distance), y(shift), 3, kind=kind, data=f"{row.checkpoint}:{distance:.6g}:{shift:.4f}",
                   tip=f"{row.checkpoint}: staleness {distance:.4g}, |shift| {shift:.2f} pp")
    fig.text(WIDTH - 150, 40, "● exceeds band", colour=COLOURS["displaced"])
    fig.text(WIDTH - 150, 56, "● within band", colour=COLOURS["equivalent"])
    rank = census.readings.staleness.staleness_vs_abs_shift
    if rank.rho is not None:
        fig.text(WIDTH - 150, 80, f"Spearman ρ = {rank.rho:.2f}")
        interval = ("no interval" if rank.lower is None or rank.upper is None
                    else f"[{signed(rank.lower)}, {signed(rank.upper)}]")
        fig.text(WIDTH - 150, 96, f"n = {rank.n}, {rank.clusters} clusters")
        fig.text(WIDTH - 150, 112, f"{rank.level:.0%} interval {interval}")
    return fig.render()


def _decades(lo: float, hi: float) -> list[float]:
    return [10.0 ** k for k in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)] or [lo, hi]


__all__ = ["forest_plot", "line_chart", "margin_sweep_plot", "recoverability_plot",
           "staleness_scatter", "twin_gap_plot"]
