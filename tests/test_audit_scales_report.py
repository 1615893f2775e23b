"""census.md's activation-scales table summarised per group (bnconvention.audit.population.scales_report)."""

from __future__ import annotations

from typing import Any

from census_support import typed_census

from bnconvention.audit.population.scales_report import scales_census_markdown, scales_groups_markdown


def _row(df: float, *, displaced: bool, median: float, largest: float) -> dict[str, Any]:
    cell = {"shift_pp": df, "outcome": "displaced" if displaced else "equivalent"}
    return {"status": "audited", "observer": "minmax", "sites": 9, "displaced": displaced,
            "cells": {"df": cell, "dr": {**cell, "shift_pp": 0.0}, "dt": {**cell, "shift_pp": 0.0}},
            "median_abs_log_ratio": median, "max_abs_log_ratio": largest}


def test_groups_give_the_mean_and_range_of_df_and_the_displaced_count() -> None:
    ft = {"role": "unlearned", "family": "finetune", "variant": "train"}
    census = {
        "margin_pp": 1.2, "scales": {"quantized": 4, "not_quantized": 1, "displaced": 1},
        "controls": {"rows": [{"checkpoint": "r-retrain", "label": "retrain reference"}]},
        "checkpoints": [
            {"checkpoint": "a", "population": ft, "scales": _row(4.0, displaced=True, median=0.03, largest=0.2)},
            {"checkpoint": "b", "population": ft, "scales": _row(-1.0, displaced=False, median=0.01, largest=0.1)},
            {"checkpoint": "c", "population": ft, "scales": _row(0.0, displaced=False, median=0.02, largest=0.3)},
            {"checkpoint": "r-retrain", "scales": _row(0.5, displaced=False, median=0.04, largest=0.05)},
            {"checkpoint": "plain", "scales": {"status": "not_quantized", "reason": "not quantized"}},
        ]}
    table = "\n".join(scales_groups_markdown(typed_census(census)))
    # Δdf mean (4 - 1 + 0) / 3 = +1.00; the median of the medians 0.01, 0.02, 0.03 is 0.02; the largest ratio 0.3
    assert "| finetune (train) | 3 | +1.00 [-1.00, +4.00] | 1 | 0.0200 | 0.3000 |" in table
    assert "| control: retrain reference | 1 | +0.50 [+0.50, +0.50] | 0 | 0.0400 | 0.0500 |" in table
    assert "plain" not in table
    full = scales_census_markdown(typed_census(census))
    assert full.index("| a | minmax | 9 |") < full.index("### Per group")
    assert scales_groups_markdown(typed_census({"checkpoints": [census["checkpoints"][-1]]})) == []
