"""What a census found, in sentences chosen by its data: the headline first, then the readings that support it.

The demo and the HTML report tell a population's story from ``census.json`` alone; nothing here is written for one
population. The headline is the strongest finding the data holds, in this order: a family equivalent to zero on
average that still contains displaced checkpoints (the paper's "per checkpoint, not per method"), verdicts that
flip, displaced headline cells, or, when there are none, that the shipped statistics held. The supporting lines
(per-variant contrast, frozen twins, staleness, controls, detection floor) appear only when their section exists.

>>> census = {"headline": "df", "margin_pp": 1.2, "counts": {"decided": 4},
...           "cells": {"df": {"displaced_by": 0}}, "verdicts": {}}
>>> population_story(census)[0]
'No decided checkpoint is displaced on `df` (4 decided, ±1.2 pp): the shipped statistics held.'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bnconvention.formats.text import signed


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _interval(cell: Mapping[str, Any]) -> str:
    if cell.get("lower_pp") is None:
        return "no interval"
    return f"90 % interval [{signed(cell['lower_pp'])}, {signed(cell['upper_pp'])}] pp"


def headline_cell(census: Mapping[str, Any]) -> str:
    """The census's headline cell (older census files without one: the first cell)."""
    return str(census.get("headline") or next(iter(census.get("cells") or {"df": None})))


def _equivalent_yet_displaced(census: Mapping[str, Any], cell: str) -> str | None:
    families = (census.get("families") or {}).get("families") or []
    found = [(f, f["cells"][cell]) for f in families
             if cell in f["cells"] and f["cells"][cell]["outcome"] == "equivalent"
             and f["cells"][cell]["displaced_by"] > 0]
    if not found:
        return None
    family, c = max(found, key=lambda pair: pair[1]["displaced_by"])
    return (f"Family {family['family']} ({family['variant']}) is equivalent to zero on average on `{cell}` "
            f"(mean {signed(c['mean_shift_pp'])} pp, {_interval(c)}) yet {_plural(c['displaced_by'], 'checkpoint')} "
            f"of its {family['checkpoints']} are displaced: per checkpoint, not per method.")


def _flips(census: Mapping[str, Any]) -> str | None:
    verdicts = census.get("verdicts") or {}
    flipped = [(criterion, tally) for criterion, tally in verdicts.items() if tally.get("flips")]
    if not flipped:
        return None
    criterion, tally = max(flipped, key=lambda pair: pair[1]["flips"])
    decided = census["counts"]["decided"]
    return (f"Refitting the running statistics at bit-identical weights flips the verdict `{criterion}` on "
            f"{tally['flips']} of {decided} decided checkpoints ({tally['pass_to_fail']} pass→fail, "
            f"{tally['fail_to_pass']} fail→pass; {tally.get('flips_on_every_replicate', 0)} on every replicate).")


def _displaced(census: Mapping[str, Any], cell: str) -> str:
    decided = census["counts"]["decided"]
    n = census["cells"][cell]["displaced_by"]
    if not n:
        return (f"No decided checkpoint is displaced on `{cell}` ({decided} decided, ±{census['margin_pp']:g} pp): "
                "the shipped statistics held.")
    largest = census.get("largest_shift") or {}
    tail = (f"; the largest shift is {signed(largest['shift_pp'])} pp (`{largest['cell']}`, {largest['checkpoint']})"
            if largest else "")
    return (f"`{cell}` is displaced on {n} of {decided} decided checkpoints beyond ±{census['margin_pp']:g} pp "
            f"after Benjamini–Yekutieli{tail}.")


def headline(census: Mapping[str, Any]) -> str:
    """The census's headline sentence, the strongest finding its data holds (see the module docstring)."""
    cell = headline_cell(census)
    return _equivalent_yet_displaced(census, cell) or _flips(census) or _displaced(census, cell)


def _no_equivalent_family(census: Mapping[str, Any], cell: str) -> str | None:
    """Said plainly when the population has families but none shows the per-checkpoint reading."""
    families = [f for f in (census.get("families") or {}).get("families") or [] if cell in f["cells"]]
    if not families or _equivalent_yet_displaced(census, cell) is not None:
        return None
    family = min(families, key=lambda f: abs(f["cells"][cell]["mean_shift_pp"]))
    c = family["cells"][cell]
    return (f"No family is shown equivalent to zero on average on `{cell}` while containing displaced checkpoints; "
            f"the closest, {family['family']} ({family['variant']}), averages {signed(c['mean_shift_pp'])} pp "
            f"({_interval(c)}, {c['outcome']}) and contains {_plural(c['displaced_by'], 'displaced checkpoint')}.")


def _variants(census: Mapping[str, Any], cell: str) -> str | None:
    families = (census.get("families") or {}).get("families") or []
    if not families:
        return None
    by_variant: dict[str, list[int]] = {}
    for f in families:
        if cell in f["cells"]:
            counts = by_variant.setdefault(f["variant"], [0, 0])
            counts[0] += f["cells"][cell]["displaced_by"]
            counts[1] += f["checkpoints"]
    parts = [f"{variant}: {d} of {n}" for variant, (d, n) in sorted(by_variant.items())]
    return f"Displaced on `{cell}` by how BatchNorm ran while the weights moved — " + "; ".join(parts) + "."


def _twins(census: Mapping[str, Any]) -> str | None:
    twins = census.get("twin_gaps")
    if not twins or not twins.get("levels"):
        return None
    parts = [f"{signed(t['mean_gap_pp'])} pp at level {t['level']}"
             + ("" if t.get("lower_pp") is None else f" [{signed(t['lower_pp'])}, {signed(t['upper_pp'])}]")
             for t in twins["levels"]]
    return (f"Frozen twins (bit-identical weights, different buffer trajectories) differ on `{twins['cell']}` as "
            f"shipped by " + ", ".join(parts) + f" ({twins['confidence']:.0%} intervals across seeds).")


def _staleness(census: Mapping[str, Any]) -> str | None:
    staleness = (census.get("readings") or {}).get("staleness") or {}
    rank = staleness.get("staleness_vs_abs_shift")
    if not rank or rank.get("rho") is None:
        return None
    tracks = rank["rho"] > 0 and rank["p_value"] is not None and rank["p_value"] < 0.05
    reading = "Staleness tracks displacement" if tracks else "Staleness is not shown to track displacement here"
    return (f"{reading}: Spearman ρ = {rank['rho']:.2f} between staleness and |shift| of "
            f"`{rank['cell']}` over {rank['n']} checkpoints (p = {rank['p_value']:.2g}); "
            f"{staleness.get('exceeds_band', 0)} of {staleness.get('decided', 0)} exceed the reference band "
            f"(about {staleness.get('expected_false_positives_if_none_stale', 0):.1f} expected if none were stale).")


def _controls(census: Mapping[str, Any]) -> str | None:
    controls = census.get("controls") or {}
    if not controls.get("controls"):
        return None
    failed = sorted({row["label"] for row in controls.get("rows", []) if not row["holds"]})
    tail = f"; where they do not: {', '.join(failed)}" if failed else ""
    return (f"Known-answer controls: {controls['as_expected']} of {controls['controls']} hold{tail} (outside the "
            "multiplicity family).")


def detection_floor_pp(census: Mapping[str, Any]) -> float | None:
    """The plant above which the design recovers at least the floor's share of the non-displaced cells (the sign
    test, before BY; :func:`bnconvention.audit.detection.floor_pp`), or None."""
    floor = census.get("detection_floor") or {}
    return floor.get("floor_pp")


def floor_reading(census: Mapping[str, Any]) -> str | None:
    """The detection floor in one sentence: how it was planted, the exact floor, and the planted rows after BY."""
    floor = census.get("detection_floor") or {}
    if not floor or not floor.get("cells"):
        return None
    size = floor.get("floor_pp")
    share = f"{floor['share']:.0%}"
    what = (f"no plant is recovered on {share} of the {floor['cells']} non-displaced cells" if size is None
            else f"a shift must exceed {size:.2f} pp to be recovered on {share} of the {floor['cells']} "
                 "non-displaced cells")
    rows = ", ".join(f"{row['planted_pp']:g} pp: {row['recovered_by']}/{row['cells']}" for row in floor["rows"])
    tail = f" (recovered after BY: {rows})" if rows else ""
    return (f"Detection floor of this design, planted on {floor['method']} at ±{floor['margin_pp']:g} pp "
            f"(a plant at or below the margin recovers nothing by construction): {what}{tail}.")


def population_story(census: Mapping[str, Any]) -> list[str]:
    """The headline, then each supporting reading the census has (see the module docstring)."""
    cell = headline_cell(census)
    lines = [headline(census)]
    supporting = (_no_equivalent_family(census, cell), _variants(census, cell), _twins(census), _staleness(census),
                  _controls(census), floor_reading(census))
    for line in supporting:
        if line is not None:
            lines.append(line)
    return lines


__all__ = ["detection_floor_pp", "floor_reading", "headline", "headline_cell", "population_story"]
