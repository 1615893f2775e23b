"""The census page: a population's story, figures and tables from ``census.json`` (``census.html``).

``bnconvention census`` writes it beside ``census.md``; the demo links it from its report. The page opens from disk
(inline CSS and SVG, no scripts). Sections appear only when the census has them: a census of the digits zoo has no
families, twins or curve, and the page says what it has.

>>> from bnconvention.audit.population import CensusResult
>>> census = CensusResult.read(Path("tests/fixtures/census/valid-population.json"))  # from the repository root
>>> html_text = render_census_page(census)
>>> 'id="forest-plot"' in html_text, 'id="twin-gap-plot"' in html_text, 'id="scales"' in html_text
(True, True, False)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from bnconvention.audit.population import SCALES_CELLS as CELLS
from bnconvention.audit.population import SCALES_HEADING as HEADING
from bnconvention.audit.population import CensusResult, counted_as, floor_reading, headline_cell, population_story
from bnconvention.audit.population import scales_reading as reading
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.text import signed
from bnconvention.report_html import census_figures as figures
from bnconvention.report_html.markup import badge, esc, esc_code, page, table

CENSUS_HTML = "census.html"


def _figure(svg: str | None, caption: str, figure_id: str) -> str:
    if svg is None:
        return ""
    return (f'<figure class="chart" id="{esc(figure_id)}">{svg}'
            f'<figcaption class="muted">{esc(caption)}</figcaption></figure>')


def _section(section_id: str, heading: str, content: str) -> str:
    """A headed section, or nothing when the census has nothing to put in it."""
    return f'<h2 id="{esc(section_id)}">{esc(heading)}</h2>\n{content}' if content else ""


def _pp(value: float | None) -> str:
    return "—" if value is None else signed(value)


def _interval(lower: float | None, upper: float | None) -> str:
    return "—" if lower is None or upper is None else f"[{signed(lower)}, {signed(upper)}]"


def _counts(census: CensusResult) -> str:
    back = census.controls.background

    def rate(counts: Mapping[str, int], key: str) -> str:
        return "not measured" if not back.checkpoints else f"{counts.get(key, 0)} of {back.checkpoints}"

    rows = [[f"<code>{esc(cell)}</code>", str(c.displaced_by), str(c.equivalent), str(c.undetermined),
             rate(back.displaced, cell)] for cell, c in census.cells.items()]
    rows += [[f"verdict <code>{esc(v)}</code> flips", str(t.flips), f"{t.pass_to_fail} pass→fail",
              f"{t.fail_to_pass} fail→pass", rate(back.flips, v)] for v, t in census.verdicts.items()]
    return table(["Cell", "Displaced (BY)", "Equivalent", "Undetermined", "Controls (background)"], rows,
                 table_id="census-counts", numeric=(1, 2, 3))


def _ledger(census: CensusResult) -> str:
    if not census.flip_ledger:
        return ""
    rows = []
    for f in census.flip_ledger:
        for c in f.compared:
            rows.append([esc(f.checkpoint), esc(counted_as(f)),
                         f"<code>{esc(f.criterion)}</code>", esc((f.direction or "").replace("_", " ")),
                         _value(c.published), _value(c.shipped), _value(c.refit),
                         f"[{_value(c.replicate_min)}, {_value(c.replicate_max)}]",
                         f"{f.replicates_passing}/{f.replicates}",
                         f"{_pp(c.shift_pp)} / {_budget(c.budget_pp)}"])
    return ('<h2 id="flip-ledger">Flip ledger</h2><p class="muted">Every verdict that flips: released checkpoints '
            "are counted; the controls' flips are the background rate, the twin arms are synthetic.</p>"
            + table(["Checkpoint", "Counted as", "Criterion", "Direction", "Published", "Shipped", "Refit",
                     "Replicate range", "Replicates pass", "Shift / budget, pp"], rows, table_id="flip-ledger-table",
                    numeric=(4, 5, 6, 8)))


def _value(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _budget(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _families(census: CensusResult, cell: str) -> str:
    if census.families is None or not census.families.families:
        return ""
    families = census.families.families
    rows = []
    for f in families:
        c = f.cells[cell]
        rows.append([esc(f.family), esc(f.variant), esc(f.removal_kind or "—"), str(f.checkpoints), str(c.clusters),
                     _pp(c.mean_shift_pp), _interval(c.lower_pp, c.upper_pp), badge(c.outcome, c.outcome),
                     f"{c.displaced_by} of {f.checkpoints}"])
    header = ["Family", "Variant", "Removal", "Checkpoints", "Seed clusters", f"Mean shift of {cell}, pp",
              f"{census.families.level:.0%} interval", "On average", "Displaced checkpoints"]
    statements = "".join(f"<li>{esc_code(s)}</li>" for f in families for s in f.statements[:1])
    return (f"<h3>Families</h3>{table(header, rows, table_id='families', numeric=(3, 4, 5, 6))}"
            f"<ul>{statements}</ul>")


def _sweep_table(census: CensusResult, cell: str) -> str:
    rows = [[f"{m.margin_pp:g}", str(m.cells[cell].displaced), str(m.cells[cell].equivalent),
             str(m.cells[cell].undetermined), "; ".join(f"{esc(k)}: {v}" for k, v in m.flips.items())]
            for m in census.sweeps.margins if cell in m.cells]
    if not rows:
        return ""
    return table(["Margin, pp", "Displaced", "Equivalent", "Undetermined", "Flips"], rows, table_id="margin-sweep",
                 numeric=(0, 1, 2, 3))


def _detection_floor(census: CensusResult) -> str:
    floor = census.detection_floor
    reading = floor_reading(census)
    if floor is None or reading is None:
        return ""
    rows = [[f"{r.planted_pp:g}", str(r.cells), str(r.recovered), str(r.recovered_by),
             "—" if not r.cells else f"{r.recovered_by / r.cells:.0%}"] for r in floor.rows]
    return (f'<h3 id="detection-floor">Detection floor</h3><p class="muted">{esc(reading)}</p>'
            + table(["Planted, pp", "Cells", "Recovered", "Recovered (BY)", "Share"], rows,
                    table_id="detection-floor-table", numeric=(0, 1, 2, 3, 4)))


def _twins_table(census: CensusResult) -> str:
    twins = census.twin_gaps
    if twins is None or not twins.levels:
        return ""
    rows = [[str(t.level), str(t.pairs), _pp(t.mean_gap_pp), _interval(t.lower_pp, t.upper_pp),
             "yes" if t.same_theta else "no"] for t in twins.levels]
    return table(["Level", "Pairs", "Mean gap, pp", f"{twins.confidence:.0%} interval", "θ bit-identical"],
                 rows, table_id="twin-gaps", numeric=(0, 1, 2))


def _controls(census: CensusResult) -> str:
    controls = census.controls
    if not controls.rows:
        return ""
    rows = [[f"<code>{esc(r.checkpoint)}</code>", esc(r.label), esc(r.expected),
             badge("holds", "ok") if r.holds else badge("does not hold", "flag")] for r in controls.rows]
    return (f'<h3 id="controls">Known-answer controls ({controls.as_expected} of {controls.controls} hold)</h3>'
            '<p class="muted">Outside the multiplicity family: they test the instrument, not the releases.</p>'
            + table(["Checkpoint", "Control", "Expected", "Result"], rows, table_id="controls-table"))


def _recoverability_note(census: CensusResult) -> str:
    if census.readings.recoverability is not None:
        return ""
    return ('<p class="muted">No recoverability curve: the spec measured one budget per checkpoint (add '
            "<code>recoverability: {curve: {}}</code> to the spec for the curve).</p>")


def _scales(census: CensusResult) -> str:
    """The activation scales' table (the second deployed state), when the census audited any."""
    if census.scales is None or not census.scales.quantized:
        return ""
    audited = [(e.checkpoint, e.scales, e.scales.cells or {}) for e in census.checkpoints
               if e.scales is not None and e.scales.status == "audited"]
    rows = [[f"<code>{esc(name)}</code>", *(_pp(cells[m].shift_pp) if m in cells else "—" for m in CELLS),
             badge("displaced", "displaced") if scales.displaced else badge("not displaced", "equivalent"),
             f"{scales.median_abs_log_ratio:.4f}"] for name, scales, cells in audited]
    return _section("scales", HEADING, f"<p>{esc(reading(census))}</p>" + table(
        ["Checkpoint", "Δdf pp", "Δdr pp", "Δdt pp", "Scales", "Median |ln ratio|"], rows, table_id="scales",
        numeric=(1, 2, 3, 5)))


def render_census_page(census: CensusResult, *, title: str | None = None) -> str:
    """The whole census page (see the module docstring)."""
    cell = headline_cell(census)
    title = title or f"BatchNorm census: {census.spec_name}"
    story = population_story(census)
    counts = census.counts
    body = [
        f"<header><h1>{esc(title)}</h1>",
        f'<p class="muted">{counts.checkpoints} checkpoints, {counts.decided} decided, {counts.controls} '
        f"controls; {census.replicates} replicates per checkpoint, margin ±{census.margin_pp:g} pp, "
        f"Benjamini–Yekutieli at q = {census.fdr_q:g}. Shifts are refit minus shipped, in percentage points.</p>"
        "</header>",
        f'<blockquote id="headline"><strong>{esc_code(story[0])}</strong></blockquote>',
        "<ul>" + "".join(f"<li>{esc_code(line)}</li>" for line in story[1:]) + "</ul>",
        "<h2>Counts</h2>", _counts(census), _ledger(census),
        '<h2 id="forest">Shifts per checkpoint</h2>',
        _figure(figures.forest_plot(census), f"Refit − shipped shift of {cell} per checkpoint, grouped by family "
                "and variant, with each family's clustered mean.", "forest-plot"),
        _families(census, cell),
        '<h2 id="sweeps">Margin sweep</h2>',
        _figure(figures.margin_sweep_plot(census), "Decided checkpoints per outcome at each margin, recounted from "
                "the stored replicates (no refit added).", "margin-sweep-plot"),
        _sweep_table(census, cell),
        _detection_floor(census),
        '<h2 id="recoverability">Recoverability</h2>',
        _figure(figures.recoverability_plot(census), "Mean forget shift after a refit on B unlabeled proxy images, "
                "per proxy source.", "recoverability-plot") or _recoverability_note(census),
        _section("twins", "Frozen twins",
                 _figure(figures.twin_gap_plot(census), "Shipped gap between the twins' arms (bit-identical θ).",
                         "twin-gap-plot") + _twins_table(census)),
        _section("staleness", "Staleness and displacement",
                 _figure(figures.staleness_scatter(census), f"Staleness of the shipped statistics against |shift| of "
                         f"{cell}.", "staleness-scatter")),
        _controls(census),
        _scales(census),
    ]
    return page(title, [part for part in body if part])


def write_census_html(census: CensusResult, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Write the census page to ``path`` atomically and return it."""
    target = Path(path)
    atomic_write_text(target, render_census_page(census, title=title))
    return target


__all__ = ["CENSUS_HTML", "render_census_page", "write_census_html"]
