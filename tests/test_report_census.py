"""The census page and its figures (report_html/census_page.py, census_figures.py, svg.py) and the story they tell
(audit/population/story.py), on census documents written by hand with exact numbers."""

from __future__ import annotations

import copy
import doctest
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from census_support import typed_census

from bnconvention.audit.population.story import by_line, detection_floor_pp, headline, population_story
from bnconvention.report_html import census_figures as figures
from bnconvention.report_html import census_page
from bnconvention.report_html.census_page import render_census_page, write_census_html
from bnconvention.report_html.svg import Axis, Figure, nice_ticks, padded_range

SVG = "{http://www.w3.org/2000/svg}"


def _cell(shift: float, outcome: str, *, displaced_by: bool | None = None) -> dict[str, Any]:
    return {"shipped": 0.5, "refit": 0.5 + shift / 100, "shift_pp": shift, "min_shift_pp": shift - 1.0,
            "max_shift_pp": shift + 1.0, "outcome": outcome,
            "displaced_by": outcome == "displaced" if displaced_by is None else displaced_by}


def _row(name: str, shift: float, outcome: str, *, family: str | None = None, variant: str | None = None,
         role: str = "unlearned", staleness: float = 0.01, exceeds: bool = False) -> dict[str, Any]:
    population = {"role": role, **({"family": family, "variant": variant} if family else {})}
    return {"checkpoint": name, "channel": "present", "cells": {"df": _cell(shift, outcome)}, "flips": [],
            "population": population,
            "staleness": {"mean_distance": staleness, "var_distance": staleness, "exceeds_band": exceeds}}


def _family(family: str, variant: str, *, mean: float, lower: float | None, upper: float | None, outcome: str,
            displaced: int, checkpoints: int) -> dict[str, Any]:
    return {"family": family, "variant": variant, "checkpoints": checkpoints,
            "cells": {"df": {"clusters": checkpoints, "mean_shift_pp": mean, "lower_pp": lower, "upper_pp": upper,
                             "outcome": outcome, "displaced_by": displaced, "displaced": displaced,
                             "equivalent": checkpoints - displaced}},
            "statements": [f"Family `{family}` ({variant}) reads {outcome}."]}


def census_doc() -> dict[str, Any]:
    """A population census: family ft (train) equivalent on average with one displaced member, ga (eval) displaced,
    a base control, a twin pair, a margin sweep, a detection floor and a recoverability curve."""
    rows = [_row("a-ft-train", 4.0, "displaced", family="ft", variant="train", staleness=0.1, exceeds=True),
            _row("b-ft-train", -0.5, "equivalent", family="ft", variant="train"),
            _row("c-ft-train", 0.0, "equivalent", family="ft", variant="train"),
            _row("a-ga-eval", 40.0, "displaced", family="ga", variant="eval", staleness=1.0, exceeds=True),
            _row("b-ga-eval", 20.0, "displaced", family="ga", variant="eval", staleness=0.5, exceeds=True),
            _row("s0-base", 0.25, "equivalent", role="base"),
            _row("s0-twin1-online", 2.0, "undetermined", role="twin"),
            _row("s0-twin1-frozen", 3.0, "undetermined", role="twin")]
    return {
        "format": "bnconvention-census/1", "spec_name": "hand-made", "headline": "df", "replicates": 10,
        "margin_pp": 1.0, "fdr_q": 0.05,
        "counts": {"checkpoints": 8, "decided": 7, "controls": 1, "twin_arms": 0},
        "cells": {"df": {"displaced": 3, "displaced_by": 3, "equivalent": 2, "undetermined": 2}},
        "verdicts": {"df <= 0.05": {"flips": 2, "pass_to_fail": 2, "fail_to_pass": 0, "flips_on_every_replicate": 1}},
        "largest_shift": {"checkpoint": "a-ga-eval", "cell": "df", "shift_pp": 40.0},
        "checkpoints": rows,
        "readings": {
            "staleness": {"decided": 8, "exceeds_band": 3, "expected_false_positives_if_none_stale": 0.8,
                          "staleness_vs_abs_shift": {"cell": "df", "n": 8, "rho": 0.75, "clusters": 8,
                                                     "clustered_by": "weight file", "level": 0.95,
                                                     "lower": 0.2, "upper": 0.9}},
            "recoverability": {"checkpoints": 5, "seeds": [2], "headline_budget": 10, "curve": [
                {"source": s, "budget": b, "checkpoints": 5, "mean_shift_pp": v, "min_shift_pp": v, "max_shift_pp": v}
                for s, pts in (("test", ((1, -40.0), (10, -2.0), (100, 1.0))), ("noise", ((1, -10.0), (10, -5.0))))
                for b, v in pts]}},
        "controls": {"controls": 1, "as_expected": 1, "rows": [
            {"checkpoint": "s0-base", "label": "no-removal base", "channel": "present", "anchored": True,
             "expected": "no cell displaced", "holds": True, "cells": {}, "flips": ["df <= 0.05"]}],
            "background": {"checkpoints": 1, "displaced": {"df": 0}, "flips": {"df <= 0.05": 1}, "by_label": {
                "no-removal base": {"checkpoints": 1, "displaced": {"df": 0}, "flips": {"df <= 0.05": 1}}}}},
        "sweeps": {"margins": [{"margin_pp": m, "cells": {"df": {"displaced": d, "equivalent": e, "undetermined": u}},
                                "flips": {"df <= 0.05": 2}}
                               for m, d, e, u in ((1.0, 3, 2, 2), (1.5, 3, 3, 1), (2.0, 2, 4, 1))]},
        "detection_floor": {"method": "centred replicate residuals", "margin_pp": 1.0, "share": 0.9, "cells": 10,
                            "floor_pp": 1.75,
                            "rows": [{"planted_pp": p, "cells": 10, "recovered": r, "recovered_by": r}
                                     for p, r in ((0.5, 0), (1.0, 0), (2.0, 9), (3.0, 10))]},
        "families": {"level": 0.9, "margin_pp": 1.0, "clustered_by": ["seed", "removal"], "families": [
            _family("ft", "train", mean=0.5, lower=-0.5, upper=0.75, outcome="equivalent", displaced=1, checkpoints=3),
            _family("ga", "eval", mean=30.0, lower=10.0, upper=50.0, outcome="displaced", displaced=2, checkpoints=2)]},
        "twin_gaps": {"cell": "df", "confidence": 0.95, "levels": [
            {"level": 1, "pairs": 1, "seeds": [0], "mean_gap_pp": 1.5, "lower_pp": None, "upper_pp": None,
             "same_theta": True}],
            "pairs": [{"online": "s0-twin1-online", "frozen": "s0-twin1-frozen", "seed": 0, "level": 1,
                       "gap_pp": 1.5, "same_theta": True}]},
    }


def _svg(text: str | None) -> ET.Element:
    assert text is not None
    return ET.fromstring(text)  # well-formed XML, or this raises


def _points(root: ET.Element, attribute: str = "data-point") -> list[str]:
    return [e.get(attribute) for e in root.iter() if e.get(attribute) is not None]  # type: ignore[misc]


# --- svg -----------------------------------------------------------------------------------------------------------

def test_axis_maps_clamps_and_takes_logs() -> None:
    axis = Axis(0.0, 10.0, 100.0, 300.0)
    assert (axis(0.0), axis(5.0), axis(10.0)) == (100.0, 200.0, 300.0)
    assert (axis(-5.0), axis(50.0)) == (100.0, 300.0)  # clamped onto the figure
    inverted = Axis(0.0, 4.0, 250.0, 50.0)  # a y axis: larger values higher up
    assert inverted(4.0) == 50.0 and inverted(1.0) == 200.0
    log = Axis(1.0, 100.0, 0.0, 200.0, log=True)
    assert log(10.0) == 100.0
    with pytest.raises(ValueError, match="lo < hi"):
        Axis(1.0, 1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="log axis"):
        Axis(0.0, 1.0, 0.0, 1.0, log=True)


def test_nice_ticks_and_padded_ranges() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(-12.0, 96.0) == [0.0, 20.0, 40.0, 60.0, 80.0]
    assert nice_ticks(3.0, 3.0) == [3.0]
    assert padded_range([0.0, 10.0], pad=0.1) == (-1.0, 11.0)
    assert padded_range([], include=()) == (0.0, 1.0)
    assert padded_range([5.0]) == (4.75, 5.25)  # one value: a span of its size


def test_figure_escapes_what_it_is_given() -> None:
    fig = Figure(100, 50, title='<script>alert("t")</script>')
    fig.text(1, 1, "<b>x</b>")
    fig.circle(1, 1, 1, kind="displaced", tip="a & b", data='"q"')
    text = fig.render()
    assert "<script>" not in text and "<b>" not in text
    root = _svg(text)
    assert root.get("aria-label") == '<script>alert("t")</script>'
    assert _points(root) == ['"q"']


# --- the story -----------------------------------------------------------------------------------------------------

def test_the_headline_is_the_headline_cell_with_its_background_whatever_else_the_data_holds() -> None:
    census = typed_census(census_doc())
    assert headline(census) == ("`df` is displaced on 3 of 7 released checkpoints decided (±1 pp, BY q = 0.05); "
                                "background: 0 of 1 known-answer controls displaced; the largest shift is +40.00 pp "
                                "(`df`, a-ga-eval).")
    story = population_story(census)
    assert story[1] == ("Refitting the running statistics at bit-identical weights flips the verdict `df <= 0.05` on "
                        "2 of 7 released checkpoints decided (2 pass→fail, 0 fail→pass; 1 on every replicate); "
                        "background: 1 of 1 known-answer controls flip it.")
    # the family reading is a supporting line, not a headline chosen because it is the strongest
    assert story[2].startswith("Family ft (train) is equivalent to zero on average on `df` (mean +0.50 pp, "
                               "90 % interval [-0.50, +0.75] pp) yet 1 checkpoint of its 3 are displaced")
    assert "Displaced on `df` by how BatchNorm ran while the weights moved — eval: 2 of 2; train: 1 of 3." in story


def test_the_headline_does_not_change_with_the_findings_it_does_not_count() -> None:
    census = census_doc()
    first = headline(typed_census(census))
    census["families"]["families"][0]["cells"]["df"]["displaced_by"] = 0
    census["verdicts"] = {}
    assert headline(typed_census(census)) == first
    assert any(line.startswith("No family is shown equivalent to zero on average on `df` while containing "
                               "displaced checkpoints; the closest, ft (train)")
               for line in population_story(typed_census(census)))
    census["cells"]["df"].update(displaced_by=0, displaced=1)
    assert headline(typed_census(census)) == (
        "No released checkpoint decided is displaced on `df` (0 of 7, ±1 pp, BY q = 0.05; "
        "1 before BY): the shipped statistics held; background: 0 of 1 known-answer controls "
        "displaced.")


def test_a_design_that_cannot_survive_by_does_not_say_the_statistics_held() -> None:
    census = census_doc()
    census["replicates"] = 5
    census["cells"]["df"].update(displaced_by=0, displaced=4,
                                 by={"m": 7, "p_displaced": 0.5 ** 5, "keeps_all_from": None})
    line = headline(typed_census(census))
    assert line.startswith("No released checkpoint decided can be certified displaced on `df` by this design: with "
                           "R = 5 and 7 decided, not even all of them displaced would survive BY at q = 0.05; 4 are "
                           "displaced before BY")
    assert "held" not in line


def test_a_census_without_bn_controls_says_its_background_was_not_measured() -> None:
    census = census_doc()
    del census["controls"]
    assert "background rate: not measured, no BatchNorm control in this census" in headline(typed_census(census))
    census["counts"]["twin_arms"] = 6
    assert "(±1 pp, BY q = 0.05; 6 synthetic twin arms read apart)" in headline(typed_census(census))


def test_by_is_said_to_bind_or_not_from_the_displaced_count() -> None:
    census = census_doc()
    census["cells"]["df"]["by"] = {"m": 7, "p_displaced": 0.5 ** 10, "keeps_all_from": 1}
    line = by_line(typed_census(census), "df")
    assert line is not None and line.endswith("all once 1 of the 7 are displaced; 3 are, so it could not bind here "
                                              "(removed 0).")
    census["cells"]["df"]["by"] = {"m": 7, "p_displaced": 0.5 ** 3, "keeps_all_from": None}
    line = by_line(typed_census(census), "df")
    assert line is not None and line.endswith(
        "with 7 checkpoints decided not even all of them displaced would survive.")


def test_staleness_is_said_to_track_displacement_only_when_the_rank_correlation_shows_it() -> None:
    census = census_doc()
    assert any(line.startswith("Staleness tracks displacement: Spearman ρ = 0.75")
               for line in population_story(typed_census(census)))
    for rho, lower in ((0.75, -0.1), (-0.6, 0.01), (0.75, None)):
        census["readings"]["staleness"]["staleness_vs_abs_shift"].update(rho=rho, lower=lower)
        assert any(line.startswith("Staleness is not shown to track displacement here")
                   for line in population_story(typed_census(census)))


def test_the_story_states_the_exact_detection_floor_and_how_it_was_planted() -> None:
    census = census_doc()
    assert detection_floor_pp(typed_census(census)) == 1.75
    line = next(line for line in population_story(typed_census(census)) if line.startswith("Detection floor"))
    assert "centred replicate residuals" in line and "exceed 1.75 pp" in line and "3 pp: 10/10" in line
    census["detection_floor"]["floor_pp"] = None
    line = next(line for line in population_story(typed_census(census)) if line.startswith("Detection floor"))
    assert "no plant is recovered on 90% of the 10 non-displaced cells" in line
    census["detection_floor"]["cells"] = 0
    assert not any(line.startswith("Detection floor")
                   for line in population_story(typed_census(census)))


def test_a_census_without_a_population_tells_only_what_it_has() -> None:
    census = {key: value for key, value in census_doc().items()
              if key not in ("families", "twin_gaps", "controls", "detection_floor", "readings")}
    story = population_story(typed_census(census))
    # every census has its anchoring reading (the model requires it): here it says anchoring did not run
    assert len(story) == 4 and story[0].startswith("`df` is displaced on 3 of 7")
    assert story[1].startswith("Refitting the running statistics")
    assert story[2] == "Anchoring: not run, no checkpoint publishes cells to compare with."
    assert story[3] == "Margin ±1 pp, fixed by the spec; not preregistered."


# --- figures -------------------------------------------------------------------------------------------------------

def test_the_forest_plot_has_every_checkpoint_grouped_with_its_family_mean() -> None:
    census = census_doc()
    root = _svg(figures.forest_plot(typed_census(census)))
    points = _points(root)
    assert sorted(p.split(":")[0] for p in points) == sorted(r["checkpoint"] for r in census["checkpoints"])
    assert "a-ga-eval:40.0000" in points
    assert _points(root, "data-mean") == ["ft (train):0.5000", "ga (eval):30.0000"]
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("font-weight") == "bold"]
    groups = [label for label in labels if label and not label.startswith("mean")]
    assert groups == ["ft (train)", "ga (eval)", "control: no-removal base", "twins"]
    assert "mean (1 displaced)" in labels
    colours = {c.get("class") for c in root.iter(f"{SVG}circle")}
    assert colours == {"displaced", "equivalent", "undetermined"}
    assert figures.forest_plot(typed_census({**census, "checkpoints": []})) is None


def test_the_margin_sweep_draws_one_line_per_outcome_over_the_margins() -> None:
    root = _svg(figures.margin_sweep_plot(typed_census(census_doc())))
    assert len(list(root.iter(f"{SVG}polyline"))) == 3
    assert sorted(_points(root)) == sorted(f"{o}:{m:g}:{v:.4f}" for m, d, e, u in
                                           ((1.0, 3, 2, 2), (1.5, 3, 3, 1), (2.0, 2, 4, 1))
                                           for o, v in (("displaced", d), ("equivalent", e), ("undetermined", u)))
    one = census_doc()
    one["sweeps"]["margins"] = one["sweeps"]["margins"][:1]
    assert figures.margin_sweep_plot(typed_census(one)) is None


def test_the_recoverability_curve_has_each_source_and_budget() -> None:
    root = _svg(figures.recoverability_plot(typed_census(census_doc())))
    assert sorted(_points(root)) == sorted(["noise:1:-10.0000", "noise:10:-5.0000", "test:1:-40.0000",
                                            "test:10:-2.0000", "test:100:1.0000"])
    census = census_doc()
    census["readings"]["recoverability"] = None
    assert figures.recoverability_plot(typed_census(census)) is None


def test_the_twin_plot_and_the_staleness_scatter() -> None:
    census = census_doc()
    twins = _svg(figures.twin_gap_plot(typed_census(census)))
    assert _points(twins) == ["s0-twin1-online:1.5000"] and _points(twins, "data-mean") == ["level 1:1.5000"]
    scatter = _svg(figures.staleness_scatter(typed_census(census)))
    assert len(_points(scatter)) == len(census["checkpoints"])
    assert "a-ga-eval:1:40.0000" in _points(scatter)
    assert any(t.text == "Spearman ρ = 0.75" for t in scatter.iter(f"{SVG}text"))
    assert figures.twin_gap_plot(typed_census({**census, "twin_gaps": None})) is None
    no_staleness = copy.deepcopy(census)
    for row in no_staleness["checkpoints"]:
        row["staleness"] = None
    assert figures.staleness_scatter(typed_census(no_staleness)) is None


# --- the page ------------------------------------------------------------------------------------------------------

def _ids(text: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', text))


def test_the_census_page_has_every_section_its_census_has(tmp_path: Path) -> None:
    census = census_doc()
    path = write_census_html(typed_census(census), tmp_path / "census.html")
    text = path.read_text("utf-8")
    assert {"headline", "forest-plot", "families", "margin-sweep-plot", "margin-sweep", "detection-floor-table",
            "recoverability-plot", "twin-gap-plot", "twin-gaps", "staleness-scatter", "controls-table"} <= _ids(text)
    assert "yet 1 checkpoint of its 3 are displaced" in text
    assert "<code>df</code>" in text  # the story's `df` shown as code
    assert "<script" not in text
    bare = {key: value for key, value in census.items() if key not in ("families", "twin_gaps", "readings")}
    text = render_census_page(typed_census(bare))
    assert not {"families", "twins", "twin-gap-plot", "recoverability-plot"} & _ids(text)
    assert {"forest-plot", "staleness-scatter"} <= _ids(text)  # the rows still carry their staleness
    assert "No recoverability curve" in text
    for row in bare["checkpoints"]:
        row["staleness"] = None
    assert not {"staleness", "staleness-scatter"} & _ids(render_census_page(typed_census(bare)))


def test_names_from_the_census_are_escaped_on_the_page() -> None:
    census = census_doc()
    census["checkpoints"][0]["checkpoint"] = "<img src=x onerror=alert(1)>"
    census["spec_name"] = "<b>spec</b>"
    text = render_census_page(typed_census(census))
    assert "<img src=x" not in text and "<b>spec</b>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text


def test_the_provenance_line_reads_both_arms_and_the_staleness_ratio() -> None:
    from bnconvention.audit.population.story import provenance_line

    census = census_doc()
    assert provenance_line(typed_census(census)) is None  # not run: no line, rather than a line of zeros
    arm = {"checkpoints": 24, "draws": [2], "pooled_forget_shift_pp": 0.55, "largest_forget_shift_pp": 1.88,
           "shift_exceeds_null": 9, "exceeds_null": 16, "staleness_ratio_median": 3.89,
           "staleness_ratio_range": [1.99, 14.93]}
    census["readings"]["provenance"] = {"deployment": arm, "ceiling": {**arm, "pooled_forget_shift_pp": 0.36,
                                                                        "staleness_ratio_median": None}}
    line = provenance_line(typed_census(census))
    assert line is not None and line.startswith("Provenance on 24 checkpoints (2 draws per arm): exchanging the "
                                                "removed share of the fitting pool moves forget accuracy by +0.55 pp")
    assert "every removed record in the pool moves forget accuracy by +0.36 pp pooled" in line
    assert line.endswith("staleness is 3.89× the deployment exchange's distance at the median (1.99 … 14.93).")
    assert line in population_story(typed_census(census))


def test_the_census_page_module_example_renders_the_fixture(monkeypatch: pytest.MonkeyPatch, repo_root: Path) -> None:
    monkeypatch.chdir(repo_root)  # the example reads the fixture from the repository root
    failed, tried = doctest.testmod(census_page, raise_on_error=False)
    assert tried == 4 and failed == 0
