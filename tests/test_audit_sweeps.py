"""Sweeps from stored replicates, controls outside the BY family, the detection floor and the recalibration budget
(docs/statistics.md#sweeps-from-stored-replicates, #detection-floor-planted-effects)."""

from __future__ import annotations

import json

import pytest
from audit_support import PATTERN_SPEC, checkpoint_paths, fake_result

from bnconvention.audit.census.run import run_census, summarize
from bnconvention.audit.measure import evaluation
from bnconvention.audit.population import CensusResult
from bnconvention.audit.population.detection import (
    detection_floor,
    pair_budget_pp,
    plant,
    recalibration_budget,
    threshold_pp,
)
from bnconvention.audit.run.sweeps import margin_sweep, measurement_sha256
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.errors import AuditSpecError

BY_C12 = sum(1 / i for i in range(1, 13))


def _spec(**extra):
    return parse_spec({**PATTERN_SPEC, "cells": ["df"], "criteria": ["df <= 0.05"], "replicates": 10, **extra})


def _absent(name):
    result = fake_result(name, [0.0] * 10)
    return result.model_copy(update={"annotation": result.annotation.model_copy(update={"channel": "absent"})})


def test_margin_and_q_are_not_part_of_the_measurement_key():
    base = _spec()
    assert measurement_sha256(base) == measurement_sha256(_spec(margin_pp=2.0, fdr_q=0.1, name="other",
                                                                sweeps={"margins_pp": [3.0]},
                                                                controls={"planted_pp": [1.0]}))
    assert measurement_sha256(base) != measurement_sha256(_spec(refit={"pool_size": 128}))
    # a rule that does not match a checkpoint does not change how it is measured (local_spec applies the rules)
    rule = {"match": {"repo": "elsewhere/*"}, "provenance": {"pool_size": 64, "draws": 1}}
    assert measurement_sha256(base) == measurement_sha256(_spec(rules=[rule]))
    assert measurement_sha256(base) != measurement_sha256(_spec(seed=1))


def test_margin_sweep_recounts_from_stored_shifts():
    results = [fake_result(f"m{i}", [1.3, 1.9] * 5) for i in range(3)] + [fake_result("s", [0.0] * 10)]
    rows = {row.margin_pp: row.cells["df"] for row in margin_sweep(results, _spec())}
    assert sorted(rows) == [1.0, 1.2, 1.5, 2.0]
    assert rows[1.2].displaced == 3 and rows[1.2].displaced_by["0.05"] == 3
    assert rows[1.5].displaced == 0 and rows[1.5].undetermined == 3 and rows[1.5].equivalent == 1
    assert rows[2.0].equivalent == 4  # mean 1.6 pp, 90 % interval inside +-2 pp


def test_controls_are_outside_the_benjamini_yekutieli_family():
    # Regression: the channel-absent twins sat inside the family and doubled m
    results = [fake_result(f"moved{i}", [2.0] * 10, direction="pass_to_fail") for i in range(3)]
    results += [fake_result(f"still{i}", [0.0] * 10) for i in range(9)]
    results += [_absent(f"gn{i}") for i in range(6)] + [fake_result("bn-retrain", [0.0] * 10)]
    spec = _spec(controls={"checkpoints": {"*-retrain": "retrain reference"}})
    summary = summarize(results, [r.checkpoint for r in results], spec).to_json()
    assert summary["counts"]["controls"] == 7 and summary["counts"]["decided"] == 12
    assert summary["checkpoints"][0]["cells"]["df"]["by_p_value"] == pytest.approx(0.5 ** 10 * 12 * BY_C12 / 3)
    assert all(row["cells"]["df"]["by_p_value"] is None for row in summary["checkpoints"][12:])
    assert summary["cells"]["df"]["equivalent"] == 9
    controls = summary["controls"]
    assert (controls["controls"], controls["as_expected"]) == (7, 7)
    assert {row["label"] for row in controls["rows"]} == {"channel absent", "retrain reference"}
    assert "## Controls" in __import__("bnconvention.audit.render.census", fromlist=["x"]).census_sections_markdown(
        CensusResult.model_validate(json.loads(json.dumps(summary))))


def test_a_displaced_control_does_not_hold():
    results = [fake_result("bn-base", [3.0] * 10), fake_result("x", [0.0] * 10)]
    spec = _spec(controls={"checkpoints": {"bn-base": "no-removal base"}})
    summary = summarize(results, ["bn-base", "x"], spec).to_json()
    assert summary["controls"]["as_expected"] == 0 and summary["controls"]["rows"][0]["holds"] is False


def test_detection_floor_recovers_large_planted_effects_and_not_zeros():
    decided = [fake_result(f"c{i}", [0.0] * 10) for i in range(6)]
    decided += [fake_result(f"n{i}", [0.3, -0.3] * 5) for i in range(6)]
    floor = detection_floor(decided, _spec(controls={"planted_pp": [0.0, 0.5, 1.4, 3.0]})).model_dump()
    rows = {row["planted_pp"]: row for row in floor["rows"]}
    assert rows[0.0] == {"planted_pp": 0.0, "cells": 12, "recovered": 0, "recovered_by": 0}
    assert rows[0.5]["recovered"] == 0  # below the 1.2 pp margin
    # 1.4 pp clears the margin on the zero-spread cells; on the others 1.4 - 0.3 does not, on half the replicates
    assert rows[1.4]["recovered"] == 6
    assert rows[3.0] == {"planted_pp": 3.0, "cells": 12, "recovered": 12, "recovered_by": 12}
    # thresholds: 1.2 on the six flat cells, 1.5 on the others; 90 % of 12 cells is 11 of them
    assert floor["cells"] == 12 and floor["floor_pp"] == pytest.approx(1.5)


def test_a_planted_null_on_near_misses_recovers_nothing():
    """Planting on the raw shifts "recovered" a 0.5 pp plant on cells already shifted 1.1 pp (circular): on the
    centred residuals no plant at or below the margin can put every replicate beyond it."""
    near_misses = [fake_result(f"near{i}", [1.1 + 0.01 * k for k in range(10)]) for i in range(5)]
    assert all(r.annotation.cells[0].decision.outcome != "displaced" for r in near_misses)
    floor = detection_floor(near_misses, _spec(controls={"planted_pp": [0.5, 1.0, 1.2]})).model_dump()
    assert [row["recovered"] for row in floor["rows"]] == [0, 0, 0]
    old_way = [1.1 + 0.01 * k + 0.5 for k in range(10)]  # the raw-shift plant the census used to make
    assert all(s > 1.2 for s in old_way)


@pytest.mark.parametrize("replicates", [5, 10])
def test_every_plant_above_a_cells_threshold_is_recovered_and_none_below(replicates):
    spreads = [0.0, 0.2, 0.7, 1.9, 4.0]
    decided = [fake_result(f"n{i}", [s * ((k % 3) - 1) for k in range(replicates)]) for i, s in enumerate(spreads)]
    thresholds = sorted(threshold_pp(r.annotation.cells[0].replicate_shifts_pp, margin_pp=1.2) for r in decided)
    sizes = [t + d for t in thresholds for d in (-1e-6, 1e-6)]
    floor = detection_floor(decided, _spec(replicates=replicates, controls={"planted_pp": sizes})).model_dump()
    for row in floor["rows"]:
        assert row["recovered"] == sum(t < row["planted_pp"] for t in thresholds)
    assert floor["floor_pp"] == thresholds[-1]  # 90 % of five cells is all five


def test_too_few_replicates_can_never_be_recovered():
    decided = [fake_result("short", [0.0] * 4)]
    floor = detection_floor(decided, _spec(replicates=4, controls={"planted_pp": [50.0]})).model_dump()
    assert floor["rows"][0]["recovered"] == 0 and floor["floor_pp"] is None
    assert threshold_pp([0.0] * 4, margin_pp=1.2) == float("inf")


def test_detection_floor_leaves_displaced_cells_out():
    decided = [fake_result("moved", [2.0] * 10), fake_result("still", [0.0] * 10)]
    floor = detection_floor(decided, _spec(controls={"planted_pp": [3.0]})).model_dump()
    assert floor["rows"] == [{"planted_pp": 3.0, "cells": 1, "recovered": 1, "recovered_by": 1}]
    assert plant([-1.0, 0.0], 2.0) == [1.5, 2.5] and plant([0.0], 1.5) == [1.5]


def test_recalibration_budget_and_which_flips_clear_it():
    assert pair_budget_pp([0.10, 0.12, 0.20, 0.15]) == pytest.approx(5.0)
    assert pair_budget_pp([0.1]) is None
    # shifts of exactly +2.0 on every replicate: the refits agree, budget 0, the flip clears it and holds
    firm = fake_result("firm", [2.0] * 10, direction="pass_to_fail")
    # replicate values scattered by 8 pp between paired refits: a mean shift of 2 pp does not clear that
    loose = fake_result("loose", [-2.0, 6.0] * 5, direction="pass_to_fail")
    budget = recalibration_budget([("firm", firm), ("loose", loose)], _spec()).model_dump()
    flips = {f["checkpoint"]: f for f in budget["flips"]}
    assert flips["firm"]["clears_budget"] and flips["firm"]["holds_every_replicate"]
    assert not flips["loose"]["clears_budget"]
    assert budget["cells"]["df"]["max_pp"] == pytest.approx(8.0)
    assert budget["counts"] == {"flips": 2, "clear_budget": 1, "hold_every_replicate": 2, "clear_and_hold": 1}


SWEEP_SET = ("bn-badteacher-eval", "bn-retrain", "gn-badteacher-eval")


def _zoo_spec(**extra):
    return parse_spec({**PATTERN_SPEC, "replicates": 2, "refit": {"pool_size": 64}, "recoverability": None,
                       "provenance": None, "staleness_band": {},  # the band from the R replicates: no extra refit
                       "controls": {"checkpoints": {"*-retrain": "retrain reference"}}, **extra})


@pytest.mark.slow
def test_sweeps_add_no_refit_and_a_new_pool_size_only_its_own(zoo, tmp_path, monkeypatch):
    calls = []
    original = evaluation.Refitter.run

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(evaluation.Refitter, "run", counted)
    paths, out = checkpoint_paths(zoo.root, SWEEP_SET), tmp_path / "census"
    first = run_census(paths, _zoo_spec(), out)
    written = first.summary.to_json()
    assert len(calls) == 3 * 2 and written["invocation"]["refits_run"] == 6
    assert written["counts"]["controls"] == 2 and written["decided"] == ["bn-badteacher-eval"]

    calls.clear()
    margin = run_census(paths, _zoo_spec(margin_pp=2.0, fdr_q=0.1, sweeps={"margins_pp": [0.5, 3.0]}), out)
    assert calls == [] and (margin.audits_run, margin.audits_reused) == (0, 3)
    assert [row["margin_pp"] for row in margin.summary.to_json()["sweeps"]["margins"]] == [0.5, 2.0, 3.0]
    assert all(r.annotation.margin_pp == 2.0 for r in margin.results)
    annotation = json.loads((out / "checkpoints" / "bn-badteacher-eval" / "annotation.json").read_text())
    assert annotation["margin_pp"] == 2.0  # the checkpoint's outputs re-decided too

    calls.clear()
    swept = run_census(paths, _zoo_spec(sweeps={"pool_sizes": [32]}), out)
    assert len(calls) == 2  # R replicates at pool size 32 for the one decided checkpoint; 64 was stored
    rows = {row["pool_size"]: row for row in swept.summary.to_json()["sweeps"]["pool_sizes"]}
    assert (rows[32]["refits_added"], rows[64]["refits_added"]) == (2, 0)

    calls.clear()
    more = run_census(paths, _zoo_spec(sweeps={"pool_sizes": [32, 48]}), out)
    assert len(calls) == 2 and [r["refits_added"] for r in more.summary.to_json()["sweeps"]["pool_sizes"]] == [0, 2, 0]
    assert "## Pool-size sweep" in (out / "census.md").read_text()


def test_a_swept_pool_size_larger_than_the_retain_split_is_refused_before_any_audit(zoo, tmp_path):
    with pytest.raises(AuditSpecError, match=r"sweeps.pool_sizes\[0\]") as caught:
        run_census(checkpoint_paths(zoo.root, ("bn-retrain",)), _zoo_spec(sweeps={"pool_sizes": [100000]}),
                   tmp_path / "c")
    assert caught.value.field == "/sweeps/pool_sizes/0" and not (tmp_path / "c" / "journal").exists()


def test_cli_sweep_lists_override_the_spec_and_are_checked():
    import argparse

    from bnconvention.cli.census_cmd import _numbers, _with_sweeps
    from bnconvention.errors import UsageError

    spec = _spec()
    swept = _with_sweeps(spec, argparse.Namespace(margins=_numbers(float)("1,2.5"), pool_sizes=None))
    assert swept.sweeps.margins_pp == [1.0, 2.5] and swept.sweeps.pool_sizes == []
    assert measurement_sha256(swept) == measurement_sha256(spec)
    with pytest.raises(UsageError, match="--margins"):
        _with_sweeps(spec, argparse.Namespace(margins=[0.0], pool_sizes=None))
    with pytest.raises(argparse.ArgumentTypeError):
        _numbers(int)("32,x")
