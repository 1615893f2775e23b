"""The stages of one checkpoint's audit (bnconvention.audit.run.stages), each on its own.

The model-free stages (decisions, staleness) run on numbers made up here; the others on one digits-zoo checkpoint
with a small spec (R = 2, pools of 64), so they stay quick.
"""

from __future__ import annotations

import math

import pytest
import torch
from audit_support import PATTERN_SPEC
from scipy import stats

from bnconvention.audit.measure.evaluation import Refitter
from bnconvention.audit.run.runner import prepare_audit, run_audit
from bnconvention.audit.run.stages import (
    ShippedCells,
    build_annotation,
    check_theta_after_audit,
    decide_cells,
    evaluate_shipped,
    run_band_refits,
    run_diagnostics,
    run_replicates,
    staleness_with_band,
)
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.errors import WeightsChangedError
from bnconvention.refitting import running_state, staleness_distance
from bnconvention.refitting.state import LayerRunningState
from bnconvention.standard.models import to_dict
from bnconvention.standard.schema import schema_validator

SMALL = {**PATTERN_SPEC, "replicates": 2, "refit": {"pool_size": 64}, "provenance": None}


def small_spec(**changes):
    return parse_spec({**SMALL, **changes})


@pytest.fixture()
def prepared(zoo):
    return prepare_audit(zoo.root / "bn-badteacher-eval.safetensors", small_spec())


def same_state(a: dict[str, LayerRunningState], b: dict[str, LayerRunningState]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].mean, b[k].mean) and torch.equal(a[k].var, b[k].var)
                                        for k in a)


# --- shipped --------------------------------------------------------------------------------------------------------


def test_evaluate_shipped_gives_the_cells_and_anchoring_and_leaves_phi_alone(prepared):
    before = running_state(prepared.checkpoint.model)
    shipped = evaluate_shipped(prepared)
    assert same_state(running_state(prepared.checkpoint.model), before)
    assert shipped.cells == {"df": shipped.base["df"], "dr": shipped.base["dr"], "dt": shipped.base["dt"]}
    assert shipped.anchoring is not None and shipped.anchored  # the zoo's sidecar publishes the shipped cells
    assert {c.metric for c in shipped.anchoring.cells} == {"df", "dr", "dt"}


def test_nothing_published_counts_as_anchored():
    shipped = ShippedCells(base={"df": 0.1, "dr": 0.9, "dt": 0.8}, cells={}, anchoring=None, seconds=0.0)
    assert shipped.anchored is True


# --- replicates -----------------------------------------------------------------------------------------------------


def test_run_replicates_redraws_each_pool_and_restores_phi(prepared):
    model = prepared.checkpoint.model
    shipped = running_state(model)
    refitter = Refitter(model)
    seen: list[int] = []
    replicates = run_replicates(prepared, refitter, on_replicate=seen.append)
    assert seen == [0, 1] and refitter.count == 2
    assert [r.index for r in replicates.records] == [0, 1]
    assert len({r.pool_ids_sha256 for r in replicates.records}) == 2
    assert [r.base_cells for r in replicates.records] == replicates.base
    assert len(replicates.kept_states) == 2 and not same_state(replicates.kept_states[0], shipped)
    assert (replicates.channel, replicates.transform_mode) == ("present", "train")
    assert replicates.first_report.declaration.convention.data.record_count == 64
    assert same_state(running_state(model), shipped)
    again = run_replicates(prepared, Refitter(model))  # seeded from the spec: the same pools and seeds
    assert [(r.pool_ids_sha256, r.augmentation_seed) for r in again.records] == [
        (r.pool_ids_sha256, r.augmentation_seed) for r in replicates.records]


def test_run_replicates_keeps_no_states_without_staleness(zoo):
    prepared = prepare_audit(zoo.root / "bn-badteacher-eval.safetensors", small_spec(staleness=False))
    assert run_replicates(prepared, Refitter(prepared.checkpoint.model)).kept_states == []


def test_a_failing_replicate_still_restores_phi(prepared):
    model = prepared.checkpoint.model
    shipped = running_state(model)

    def fail(index: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_replicates(prepared, Refitter(model), on_replicate=fail)
    assert same_state(running_state(model), shipped)


# --- decisions ------------------------------------------------------------------------------------------------------

SHIPPED = ShippedCells(base={"df": 0.0, "dr": 0.99, "dt": 0.97}, cells={"df": 0.0, "dr": 0.99, "dt": 0.97},
                       anchoring=None, seconds=0.0)
REBOUND = [{"df": 0.6, "dr": 0.99, "dt": 0.97}, {"df": 0.7, "dr": 0.99, "dt": 0.97},
           {"df": 0.8, "dr": 0.99, "dt": 0.97}]


def test_decide_cells_from_numbers_alone():
    decisions = decide_cells(parse_spec(PATTERN_SPEC), SHIPPED, REBOUND, channel="present", published={"df": 0.0})
    df = decisions.cells[0]
    assert [c.metric for c in decisions.cells] == ["df", "dr", "dt"]
    assert df.replicate_shifts_pp == pytest.approx([60.0, 70.0, 80.0]) and df.shift_pp == pytest.approx(70.0)
    # three agreeing replicates: sign-test p = 0.125 > 0.05, so undetermined, not displaced; its p is TOST's
    assert (df.decision.outcome, df.decision.method) == ("undetermined", "none")
    tost_p = stats.t.cdf((70.0 - 1.2) / (10.0 / math.sqrt(3)), df=2)  # H0 mean >= +M: mean 70, sd 10, R = 3
    assert df.decision.p_value == pytest.approx(tost_p, rel=1e-9) and decisions.signs["df"].p_value == 0.125
    assert [(c.decision.outcome, c.decision.method, c.decision.p_value) for c in decisions.cells[1:]] == [
        ("equivalent", "exact-equality", None)] * 2  # zero spread: an exact equality, not TOST p = 0
    assert df.published == 0.0 and decisions.cells[1].published is None
    assert (decisions.signs["df"].beyond, decisions.signs["df"].direction) == (3, "up")
    forget, retain = decisions.verdicts
    assert (forget.criterion, forget.shipped, forget.refit, forget.direction) == ("df <= 0.05", True, False,
                                                                                   "pass_to_fail")
    assert forget.refit_pass_replicates == 0
    assert (retain.flipped, retain.refit_pass_replicates) == (False, 3)


def test_decide_cells_without_anchoring_or_channel():
    spec = parse_spec(PATTERN_SPEC)
    not_anchored = ShippedCells(base=SHIPPED.base, cells=SHIPPED.cells, seconds=0.0,
                                anchoring=_anchoring(anchored=False))
    decisions = decide_cells(spec, not_anchored, REBOUND, channel="present", published=None)
    assert {(c.decision.outcome, c.decision.method) for c in decisions.cells} == {("undetermined", "not-anchored")}
    flat = [dict(SHIPPED.base)] * 3
    absent = decide_cells(spec, SHIPPED, flat, channel="absent", published=None)
    assert {c.decision.method for c in absent.cells} == {"channel-absent"}


def _anchoring(*, anchored: bool):
    from bnconvention.standard.models import Anchoring

    return Anchoring(tolerance=0.02, anchored=anchored, cells=[])


# --- staleness ------------------------------------------------------------------------------------------------------


def _state(mean: float, var: float) -> dict[str, LayerRunningState]:
    return {"bn": LayerRunningState(torch.full((4,), mean), torch.full((4,), var), None)}


def test_staleness_with_band_decides_against_the_null_of_the_refits():
    # Regression: the band was one pair of refits; it is now the null of every refit, decided by a rank test
    shipped, refits = _state(3.0, 9.0), [_state(0.01 * i, 1.0 + 0.01 * i) for i in range(9)]
    shipped_vs_first = staleness_distance(shipped, refits[0])
    outcome = staleness_with_band(parse_spec(PATTERN_SPEC), shipped_vs_first, refits, shipped_state=shipped)
    assert outcome.warnings == [] and outcome.band_layers == list(staleness_distance(refits[1], refits[0]).layers)
    assert outcome.null.refits == 9 and outcome.null.p_value == 0.1  # the shipped state ranks first of 10
    assert outcome.staleness.reference_band.model_dump() == {"mean_distance": outcome.null.band_mean_distance,
                                                             "var_distance": outcome.null.band_var_distance}
    assert outcome.staleness.exceeds_band is True
    assert outcome.staleness.mean_distance == shipped_vs_first.mean_distance
    inside = staleness_with_band(parse_spec(PATTERN_SPEC), staleness_distance(refits[4], refits[0]), refits,
                                 shipped_state=refits[4])
    assert inside.staleness.exceeds_band is False


def test_staleness_with_band_needs_two_replicates_and_a_spec_that_asks():
    first = _state(0.0, 1.0)
    shipped_vs_first = staleness_distance(_state(3.0, 9.0), first)
    one = staleness_with_band(parse_spec(PATTERN_SPEC), shipped_vs_first, [first], shipped_state=_state(3.0, 9.0))
    assert (one.staleness, one.band_layers) == (shipped_vs_first, None)
    assert one.warnings == ["reference band not computed: it needs two replicates (R >= 2)"]
    skipped = staleness_with_band(parse_spec({**PATTERN_SPEC, "staleness": False}), shipped_vs_first, [first, first],
                                  shipped_state=first)
    assert (skipped.staleness, skipped.band_layers, skipped.warnings) == (None, None, [])
    few = staleness_with_band(parse_spec(PATTERN_SPEC), shipped_vs_first, [first, _state(0.1, 1.1)],
                              shipped_state=_state(3.0, 9.0))
    assert few.staleness.exceeds_band is None
    assert few.warnings == ["reference band: 2 refits cannot reach level 0.1 (the smallest p is 1/3); set "
                            "staleness_band.refits to at least 9"]


# --- diagnostics, θ, annotation ----------------------------------------------------------------------------------


def test_run_diagnostics_runs_what_the_spec_asks_and_restores_phi(prepared):
    model = prepared.checkpoint.model
    shipped_state = running_state(model)
    refitter = Refitter(model)
    diagnostics = run_diagnostics(prepared, refitter, evaluate_shipped(prepared))
    assert diagnostics.provenance is None and diagnostics.recoverability.images == 10
    assert refitter.count == 1 and same_state(running_state(model), shipped_state)


def test_check_theta_unchanged_names_the_file():
    check_theta_after_audit("w.safetensors", before="a" * 64, after="a" * 64)
    with pytest.raises(WeightsChangedError, match="w.safetensors: the trainable tensors changed during the audit"):
        check_theta_after_audit("w.safetensors", before="a" * 64, after="b" * 64)


def test_the_stages_by_hand_give_the_audits_annotation(prepared):
    spec, model = prepared.spec, prepared.checkpoint.model
    model.eval()
    shipped = evaluate_shipped(prepared)
    refitter = Refitter(model)
    replicates = run_replicates(prepared, refitter)
    decisions = decide_cells(spec, shipped, replicates.base, channel=replicates.channel,
                             published=prepared.checkpoint.published)
    band = run_band_refits(prepared, refitter)
    assert len(band) == 9 - 2  # staleness_band.refits beyond the replicates
    staleness = staleness_with_band(spec, replicates.first_report.staleness, [*replicates.kept_states, *band],
                                    shipped_state=refitter.shipped)
    annotation = build_annotation(prepared, shipped, replicates, decisions, staleness,
                                  run_diagnostics(prepared, refitter, shipped))
    assert list(schema_validator().iter_errors(to_dict(annotation))) == []
    assert annotation.convention.data.record_count == 64
    assert annotation.convention.data.subset.startswith("64 records drawn without replacement for each replicate")
    assert annotation == run_audit(prepared).annotation
