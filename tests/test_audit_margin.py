"""The margin by the population's own seed spread, fixed before any refit, and each cell's one-record resolution
(bnconvention.audit.population.margin): spreads by hand, twins and single-seed recipes left out, a clear refusal without
seeds, and the steps of base and expression cells."""

from __future__ import annotations

import statistics

import pytest

from bnconvention.audit.core.result import PopulationMetadata
from bnconvention.audit.population.margin import (
    MarginEntry,
    recipe,
    resolution_counts,
    resolution_pp,
    resolution_warnings,
    seed_spread_margin,
)
from bnconvention.audit.spec.expressions import parse_cell
from bnconvention.errors import UsageError

DF, DT, GAP = parse_cell("df"), parse_cell("dt"), parse_cell("abs(df - dt)")


def _entry(name, seed, df, dt, *, role="unlearned", family="ga", removal="r05", twin_arm=None):
    meta = PopulationMetadata(role=role, family=family, variant="eval", removal=removal, seed=seed,
                              twin_arm=twin_arm, twin_level=None if twin_arm is None else 1)
    return MarginEntry(name=name, population=meta, published={"df": df, "dt": dt})


def test_the_margin_is_the_median_seed_spread_over_recipes_and_cells():
    entries = [_entry(f"r05-s{s}-ga", s, df, dt) for s, (df, dt) in enumerate([(0.50, 0.80), (0.52, 0.81),
                                                                                 (0.56, 0.79)])]
    entries += [_entry(f"r10-s{s}-ga", s, df, dt, removal="r10") for s, (df, dt) in enumerate([(0.40, 0.70),
                                                                                               (0.40, 0.72)])]
    derived = seed_spread_margin(entries, [DF, DT]).model_dump()
    spreads = [100 * statistics.stdev(v) for v in ([0.50, 0.52, 0.56], [0.80, 0.81, 0.79], [0.40, 0.40],
                                                    [0.70, 0.72])]
    assert derived["recipes"] == 2 and len(derived["spreads"]) == 4
    assert derived["margin_pp"] == pytest.approx(statistics.median(spreads))
    assert derived["per_cell"]["df"]["median_pp"] == pytest.approx(statistics.median([spreads[0], spreads[2]]))
    assert derived["rule"].startswith("median over recipes and cells")


def test_twins_single_seed_recipes_and_expression_cells():
    entries = [_entry(f"s{s}", s, 0.5 + 0.1 * s, 0.8) for s in range(3)]
    entries.append(_entry("lonely", 0, 0.1, 0.1, family="relabel"))  # one seed: no spread
    entries += [_entry(f"t{s}", s, 0.9 * s, 0.0, role="twin", twin_arm="online") for s in range(3)]  # synthetic
    derived = seed_spread_margin(entries, [GAP]).model_dump()
    assert [s["recipe"] for s in derived["spreads"]] == ["unlearned/ga/eval/r05"]
    assert derived["margin_pp"] == pytest.approx(100 * statistics.stdev([0.3, 0.2, 0.1]))  # |df - dt| per seed


def test_no_recipe_under_two_seeds_is_a_clear_refusal():
    with pytest.raises(UsageError, match="no recipe .* publishes cells under two or more seeds"):
        seed_spread_margin([_entry("a", 0, 0.5, 0.5), MarginEntry("b", None, {"df": 0.4})], [DF])


def test_a_recipe_leaves_out_the_seed_only():
    a = PopulationMetadata(role="twin", family="relabel", variant="train", removal="r10", seed=0, twin_level=4,
                           twin_arm="frozen")
    assert recipe(a) == recipe(a.model_copy(update={"seed": 2})) == "twin/relabel/train/r10/level 4/frozen"


def test_one_record_is_one_step_of_its_split():
    records = {"forget": 27, "retain": 1307, "test": 463}
    assert resolution_pp(DF, records) == pytest.approx(100 / 27)  # 3.70 pp
    assert resolution_pp(GAP, records) == pytest.approx(100 / 27)  # the coarser of forget and test
    assert resolution_pp(DT, records) == pytest.approx(100 / 463)
    assert resolution_pp(DF, None) is None and resolution_pp(DF, {"retain": 5}) is None
    counts = resolution_counts([("r02", records), ("r10", {**records, "forget": 133}), ("old", None)], [DF, DT],
                               margin_pp=1.2)
    assert counts["df"].model_dump() == {"checkpoints": 2, "unknown": 1, "max_pp": pytest.approx(100 / 27),
                            "min_pp": pytest.approx(100 / 133), "above_margin": 1,
                            "above_margin_checkpoints": ["r02"]}
    assert counts["dt"].above_margin == 0
    [warning] = resolution_warnings(counts, margin_pp=1.2)
    assert warning.startswith("margin ±1.2 pp is below one record of `df` on 1 of 2 checkpoints (one record is up "
                              "to 3.70 pp)")
    assert resolution_warnings(resolution_counts([("r02", records)], [DF], margin_pp=4.0), margin_pp=4.0) == []
