"""PNG plots of an audit (matplotlib, Agg backend: no display needed).

* :func:`cells_figure`: each cell as shipped and as refit on every replicate (the spread), and the shifts in pp
  against the ±margin band.
* :func:`staleness_figure`: the per-layer staleness profile (docs/statistics.md#staleness) of the shipped statistics
  against a retain refit, with one pair of independent retain refits (replicates 0 and 1) per layer for scale; the
  band's decision is made on the whole null (:mod:`bnconvention.audit.diagnostics.band`).

* :func:`recoverability_figure`: the recoverability curve, forget accuracy against the budget B per proxy source
  (mean over seeds, the seeds' range shaded), the shipped forget accuracy as a line.

Each function returns PNG bytes, so callers write them atomically.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from bnconvention.audit.core.result import AuditResult
from bnconvention.formats.text import plural

# matplotlib is imported inside the functions that draw: importing the audit does not load it.
if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Any]]:
    from matplotlib.figure import Figure  # the object API needs no pyplot state and no backend switch

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = figure.subplots(1, ncols, squeeze=False)[0]
    return figure, list(axes)


def _png(figure: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    # no timestamp or software version in the file: same figure, same bytes
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def cells_figure(result: AuditResult) -> bytes:
    """Shipped vs refit per cell with the replicate spread, and the shifts against the margin."""
    a = result.annotation
    cells = a.cells
    figure, (values_ax, shifts_ax) = _figure(max(6.0, 1.6 * len(cells) + 3), 4.0, ncols=2)
    positions = list(range(len(cells)))
    for x, cell in zip(positions, cells, strict=True):
        n = len(cell.replicate_values)
        offsets = [(-0.15 + 0.3 * i / max(n - 1, 1)) for i in range(n)]
        values_ax.scatter([x + o for o in offsets], cell.replicate_values, s=14, color="tab:orange", alpha=0.8,
                          label="refit replicates" if x == 0 else None, zorder=3)
        values_ax.hlines(cell.refit, x - 0.25, x + 0.25, color="tab:red", linewidth=2,
                         label="refit mean" if x == 0 else None, zorder=4)
        values_ax.scatter([x], [cell.shipped], marker="D", s=46, color="black", label="shipped" if x == 0 else None,
                          zorder=5)
        if cell.published is not None:
            values_ax.scatter([x], [cell.published], marker="x", s=46, color="tab:blue",
                              label="published" if x == 0 else None, zorder=5)
        shifts_ax.scatter([x + o for o in offsets], cell.replicate_shifts_pp, s=14, color="tab:orange", alpha=0.8,
                          zorder=3)
        shifts_ax.hlines(cell.shift_pp, x - 0.25, x + 0.25, color="tab:red", linewidth=2, zorder=4)
    labels = [c.metric for c in cells]
    values_ax.set_xticks(positions, labels, rotation=20)
    values_ax.set_ylabel("cell value")
    values_ax.set_title("shipped vs refit")
    values_ax.legend(fontsize=8, loc="best")
    shifts_ax.axhspan(-a.margin_pp, a.margin_pp, color="tab:green", alpha=0.15, label=f"±{a.margin_pp:g} pp margin")
    shifts_ax.axhline(0.0, color="grey", linewidth=0.8)
    shifts_ax.set_xticks(positions, [f"{c.metric}\n{c.decision.outcome}" for c in cells], rotation=20)
    shifts_ax.set_ylabel("shift (pp)")
    shifts_ax.set_title(f"refit − shipped, {plural(a.replicates, 'replicate')}")
    shifts_ax.legend(fontsize=8, loc="best")
    absent = " (channel absent: no running statistics, every shift is exactly 0)" if a.channel == "absent" else ""
    figure.suptitle(a.subject.filename + absent, fontsize=10)
    return _png(figure)


def staleness_figure(result: AuditResult) -> bytes:
    """Per-layer staleness of the shipped statistics, with the per-layer reference band."""
    a = result.annotation
    staleness = a.staleness
    figure, (mean_ax, var_ax) = _figure(9.0, 3.8, ncols=2)
    if staleness is None or not staleness.layers:
        reason = ("channel absent: no running statistics" if a.channel == "absent" else "no staleness measured")
        for ax in (mean_ax, var_ax):
            ax.text(0.5, 0.5, reason, ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
    else:
        names = [layer.name for layer in staleness.layers]
        positions = list(range(len(names)))
        band = {layer.name: layer for layer in (result.band_layers or [])}
        for ax, field, title in ((mean_ax, "mean_distance", "mean: ‖µ − µ̂‖ / ‖σ̂‖"),
                                 (var_ax, "var_distance", "variance: ‖σ² − σ̂²‖ / ‖σ̂²‖")):
            shipped = [getattr(layer, field) for layer in staleness.layers]
            reference = [getattr(band[n], field) if n in band else 0.0 for n in names]
            positive = [v for v in shipped + reference if v > 0]
            # log scale: exact zeros (identical statistics) are drawn at a floor a decade below the smallest value
            floor = min(positive) / 10 if positive else 1e-6
            ax.plot(positions, [max(v, floor) for v in shipped], marker="o", color="tab:red",
                    label="shipped vs retain refit")
            if band:
                ax.fill_between(positions, floor, [max(v, floor) for v in reference], color="tab:green",
                                alpha=0.25, label="one refit pair (replicates 0, 1)")
            ax.set_xticks(positions, names, rotation=45, ha="right", fontsize=8)
            ax.set_title(title)
            ax.set_yscale("log")
            ax.set_ylim(bottom=floor)
            ax.legend(fontsize=8, loc="best")
    figure.suptitle(f"staleness per layer: {a.subject.filename}", fontsize=10)
    return _png(figure)


def recoverability_figure(result: AuditResult) -> bytes | None:
    """Forget accuracy after a refit on B proxy images, per source; None when the audit ran no curve."""
    curve = result.recoverability_curve
    if curve is None or not curve.points:
        return None
    figure, (ax,) = _figure(6.0, 3.8)
    for source in sorted({p.source for p in curve.points}):
        points = sorted((p for p in curve.points if p.source == source), key=lambda p: p.budget)
        budgets = [p.budget for p in points]
        ax.plot(budgets, [p.mean_forget_accuracy for p in points], marker="o", label=source)
        ax.fill_between(budgets, [min(p.forget_accuracy) for p in points], [max(p.forget_accuracy) for p in points],
                        alpha=0.2)
    ax.axhline(curve.forget_accuracy_shipped, color="black", linestyle="--", linewidth=1, label="shipped")
    ax.set_xscale("log")
    ax.set_xlabel("proxy images B")
    ax.set_ylabel("forget accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8, loc="best")
    figure.suptitle(f"recoverability ({plural(curve.seeds, 'seed')}): {result.annotation.subject.filename}",
                    fontsize=10)
    return _png(figure)
