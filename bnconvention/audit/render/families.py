"""The census.md sections of a structured population: per family, and the frozen-twin gap
(:mod:`bnconvention.audit.population.families`). A census without population metadata gets neither section."""

from __future__ import annotations

from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_sections import Families, TwinGaps
from bnconvention.formats.text import markdown_table, signed


def _interval(lower: float | None, upper: float | None) -> str:
    return "—" if lower is None or upper is None else f"[{signed(lower)}, {signed(upper)}]"


def families_markdown(census: CensusResult) -> str:
    """Both sections, or the empty string when the census has neither."""
    lines: list[str] = []
    if census.families is not None:
        lines += ["", *family_lines(census.families)]
    if census.twin_gaps is not None:
        lines += ["", *twin_lines(census.twin_gaps)]
    return "\n".join(lines) + "\n" if lines else ""


def family_lines(f: Families) -> list[str]:
    level = round(f.level * 100)
    lines = ["## Per family", "",
             f"Family mean shift per cell over seed clusters (the checkpoints of one seed share its base weights), "
             f"with a {level} % t-interval across the seeds; class and instance removal apart; equivalent on "
             f"average when the interval lies inside ±{f.margin_pp:g} pp. Displaced "
             "counts the family's decided checkpoints displaced after Benjamini–Yekutieli (raw in brackets).", ""]
    rows, flips = [], []
    for fam in f.families:
        for metric, cell in fam.cells.items():
            rows.append([f"`{fam.family}`", fam.variant, fam.removal_kind or "—", f"`{metric}`",
                         str(fam.checkpoints),
                         str(cell.clusters), f"{signed(cell.mean_shift_pp)} pp",
                         _interval(cell.lower_pp, cell.upper_pp), cell.outcome,
                         f"{cell.displaced_by} ({cell.displaced})"])
        for criterion, tally in fam.flips.items():
            flips.append([f"`{fam.family}`", fam.variant, fam.removal_kind or "—", f"`{criterion}`",
                          str(tally.flips),
                          str(tally.pass_to_fail), str(tally.fail_to_pass)])
    lines += markdown_table(["family", "variant", "removal", "cell", "checkpoints", "seed clusters", "family mean",
                     f"{level} % interval (pp)", "on average", "displaced"], rows)
    lines += ["", *[f"- {text}" for fam in f.families for text in fam.statements]]
    if flips:
        lines += ["", "Criterion flips per family, both directions:", ""]
        lines += markdown_table(["family", "variant", "removal", "criterion", "flips", "pass→fail", "fail→pass"],
                                flips)
    return lines


def twin_lines(t: TwinGaps) -> list[str]:
    confidence = round(t.confidence * 100)
    lines = ["## Frozen twins", "",
             f"Pairs with bit-identical θ whose buffers took different trajectories: the gap is `{t.cell}` as "
             f"shipped, online arm minus frozen arm, with a {confidence} % t-interval across seeds per "
             "weight-movement level.", ""]
    lines += markdown_table(["level", "pairs", "seeds", "mean gap", f"{confidence} % interval (pp)", "θ identical"], [
        ["—" if row.level is None else str(row.level), str(row.pairs), ", ".join(map(str, row.seeds)),
         f"{signed(row.mean_gap_pp)} pp", _interval(row.lower_pp, row.upper_pp),
         "yes" if row.same_theta else "**no**"] for row in t.levels])
    lines += ["", *markdown_table(["online", "frozen", "seed", "level", "online shipped", "frozen shipped", "gap"], [
        [p.online, p.frozen, str(p.seed), str(p.level), f"{p.online_shipped:.4f}",
         f"{p.frozen_shipped:.4f}", f"{signed(p.gap_pp)} pp"] for p in t.pairs])]
    return lines
