"""The activation scales (second deployed state) in reports: the census row's columns, the census counts, census.md's
table and the audit summary's section.

Pure functions over a :class:`~bnconvention.audit.core.result.ScalesResult` or the census model. A scales cell's
decision is the standard's (exact sign test over the recalibrations, TOST for equivalence), made per checkpoint: the
scales cells stay outside the census's Benjamini–Yekutieli family, which is the BatchNorm cells'. A checkpoint is
*displaced on its scales* when any of its scales cells is displaced.
"""

from __future__ import annotations

from collections.abc import Sequence

from bnconvention.audit.core.result import ScalesResult
from bnconvention.audit.population.families import census_group, control_labels
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_rows import CheckpointRow, ScalesCell, ScalesColumns
from bnconvention.audit.population.model_sections import ScalesCounts
from bnconvention.formats.text import markdown_table, plural, signed

HEADING = "Activation scales (second deployed state)"
CELLS = ("df", "dr", "dt")


def scales_row(scales: ScalesResult, *, annotation: str | None) -> ScalesColumns:
    """The census row's ``scales`` entry: the status and, when audited, each cell's shift and decision."""
    if scales.annotation is None:
        return ScalesColumns(status=scales.status, reason=scales.reason)
    cells = {c.metric: c for c in scales.annotation.cells}
    return ScalesColumns(
        status=scales.status, reason=scales.reason,
        observer=scales.observer, sites=scales.sites, replicates=scales.annotation.replicates,
        calibration_size=scales.calibration_size,
        cells={m: ScalesCell(shipped=c.shipped, refit=c.refit, shift_pp=c.shift_pp,
                             min_shift_pp=min(c.replicate_shifts_pp), max_shift_pp=max(c.replicate_shifts_pp),
                             outcome=c.decision.outcome, p_value=c.decision.p_value) for m, c in cells.items()},
        displaced=any(c.decision.outcome == "displaced" for c in cells.values()),
        median_abs_log_ratio=scales.median_abs_log_ratio, max_abs_log_ratio=scales.max_abs_log_ratio,
        annotation=annotation,
    )


def scales_counts(rows: Sequence[CheckpointRow]) -> ScalesCounts | None:
    """census.json's ``scales`` section (None when no row has a scales entry)."""
    entries = [row.scales for row in rows if row.scales is not None]
    if not entries:
        return None
    audited = [e for e in entries if e.status == "audited"]
    return ScalesCounts(
        quantized=len(audited), not_quantized=len(entries) - len(audited),
        displaced=sum(bool(e.displaced) for e in audited),
        cells={m: {o: sum(e.cells is not None and m in e.cells and e.cells[m].outcome == o for e in audited)
                   for o in ("displaced", "equivalent", "undetermined")} for m in CELLS},
    )


def reading(census: CensusResult) -> str:
    """The table's one line: how many quantized checkpoints are displaced on their scales."""
    counts = census.scales
    if counts is None:
        return ""
    line = (f"{counts.displaced} of {plural(counts.quantized, 'quantized checkpoint')} displaced on their "
            f"activation scales (any of df/dr/dt beyond ±{census.margin_pp:g} pp on every recalibration; per "
            "checkpoint, outside the Benjamini–Yekutieli family)")
    if counts.not_quantized:
        line += f"; {plural(counts.not_quantized, 'checkpoint')} not quantized"
    return line + ". Shifts are at recalibrated minus shipped scales, weights and BatchNorm buffers bit-identical."


def _shift(cell: ScalesCell | None) -> str:
    return "—" if cell is None else f"{signed(cell.shift_pp)}"


def _audited(census: CensusResult) -> list[tuple[CheckpointRow, ScalesColumns, dict[str, ScalesCell]]]:
    """The rows whose scales were audited, with their scales entry and its cells."""
    return [(entry, entry.scales, entry.scales.cells or {}) for entry in census.checkpoints
            if entry.scales is not None and entry.scales.status == "audited"]


def scales_census_markdown(census: CensusResult) -> str:
    """census.md's table of the scales per quantized checkpoint; empty when no checkpoint is quantized."""
    if census.scales is None or not census.scales.quantized:
        return ""
    rows = []
    for entry, row, cells in _audited(census):
        outcomes = "/".join(cells[m].outcome if m in cells else "—" for m in CELLS)
        rows.append([entry.checkpoint, str(row.observer), str(row.sites),
                     *(_shift(cells.get(m)) for m in CELLS), outcomes,
                     f"{row.median_abs_log_ratio:.4f}", f"{row.max_abs_log_ratio:.4f}"])
    lines = ["", f"## {HEADING}", "", reading(census), ""]
    lines += markdown_table(["checkpoint", "observer", "sites", "Δdf pp", "Δdr pp", "Δdt pp", "df/dr/dt decision",
                             "median abs ln ratio", "max abs ln ratio"], rows)
    lines += scales_groups_markdown(census)
    return "\n".join(lines) + "\n"


def _group_row(label: str, rows: Sequence[ScalesColumns]) -> list[str]:
    df = [r.cells["df"].shift_pp for r in rows if r.cells is not None and "df" in r.cells]
    ratios = sorted(r.median_abs_log_ratio or 0.0 for r in rows)
    spread = f"{signed(sum(df) / len(df))} [{signed(min(df))}, {signed(max(df))}]" if df else "—"
    return [label, str(len(rows)), spread, str(sum(bool(r.displaced) for r in rows)),
            f"{ratios[len(ratios) // 2]:.4f}", f"{max(r.max_abs_log_ratio or 0.0 for r in rows):.4f}"]


def scales_groups_markdown(census: CensusResult) -> list[str]:
    """The scales summarised per group (control label, family and variant, twin arm; as the encoder table): the
    mean and range of Δdf, how many are displaced, the median of the checkpoints' median |ln ratio| and the largest
    ratio; groups in first-seen order."""
    controls = control_labels(census)
    groups: dict[str, list[ScalesColumns]] = {}
    for entry, row, _ in _audited(census):
        groups.setdefault(census_group(entry, controls), []).append(row)
    if not groups:
        return []
    return ["", "### Per group", ""] + markdown_table(
        ["group", "n", "Δdf pp mean [min, max]", "displaced", "median abs ln ratio", "max abs ln ratio"],
        [_group_row(label, rows) for label, rows in groups.items()])


def scales_lines(scales: ScalesResult | None) -> list[str]:
    """The audit summary's section (nothing without the spec's quantization section)."""
    if scales is None:
        return []
    lines = ["", f"## {HEADING}", ""]
    if scales.annotation is None:
        return [*lines, scales.reason + "."]
    lines += [f"{scales.reason}. Median |ln(refit / shipped scale)| {scales.median_abs_log_ratio:.4f} over "
              f"{plural(scales.sites or 0, 'site')} (largest {scales.max_abs_log_ratio:.4f}).", ""]
    lines += markdown_table(["cell", "shipped", "refit", "shift pp", "decision"], [
        [c.metric, f"{c.shipped:.4f}", f"{c.refit:.4f}", signed(c.shift_pp), c.decision.outcome]
        for c in scales.annotation.cells])
    return lines


__all__ = ["HEADING", "reading", "scales_census_markdown", "scales_counts", "scales_groups_markdown", "scales_lines",
           "scales_row"]
