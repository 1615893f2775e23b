"""The provenance contrast with both arms over several draws against a null swap
(bnconvention.audit.diagnostics.provenance)."""

from __future__ import annotations

import pytest
import torch
from audit_support import PATTERN_SPEC

from bnconvention.audit.core.result import ProvenanceArmMeasurement, ProvenanceDraw
from bnconvention.audit.diagnostics.provenance import (
    annotation_contrast,
    arm_sizes,
    provenance_arms,
    retained_needed,
    summarize_arm,
)
from bnconvention.audit.measure.evaluation import Refitter
from bnconvention.audit.run.runner import check_data_fits, prepare_audit
from bnconvention.audit.spec.audit_spec import ProvenanceSpec, parse_spec
from bnconvention.errors import AuditSpecError
from bnconvention.refitting import running_state
from bnconvention.standard.models import NullBand, ProvenanceArm


def test_arm_sizes_are_the_deployment_share_and_the_ceiling():
    # digits, class 3 removed: 135 forget and 1199 retained records; 256 * 135 / 1334 = 25.9
    assert arm_sizes(ProvenanceSpec(pool_size=256), forget=135, retain=1199) == [("deployment", 26), ("ceiling", 135)]
    assert arm_sizes(ProvenanceSpec(pool_size=100, exchanged=7, ceiling=False), forget=135, retain=1199) == [
        ("deployment", 7)]
    assert arm_sizes(ProvenanceSpec(pool_size=64), forget=135, retain=1199)[1] == ("ceiling", 64)  # the whole pool
    assert retained_needed(ProvenanceSpec(pool_size=256), forget=135, retain=1199) == 256 + 135


def _draw(d: int, distance: float, shift: float, null: float, null_shift: float) -> ProvenanceDraw:
    return ProvenanceDraw(draw=d, mean_distance=distance, var_distance=distance, forget_shift_pp=shift,
                          null_mean_distance=null, null_var_distance=null, null_forget_shift_pp=null_shift)


def test_an_arm_is_decided_against_the_largest_null_over_its_draws():
    draws = [_draw(0, 0.004, -10.0, 0.002, 0.5), _draw(1, 0.006, -8.0, 0.003, -1.5)]
    arm = summarize_arm("deployment", pool_size=256, exchanged=26, draws=draws, staleness=0.05)
    assert (arm.distance, arm.forget_shift_pp, arm.null_band, arm.null_shift_band_pp) == pytest.approx(
        (0.005, -9.0, 0.003, 1.5))
    assert arm.exceeds_null and arm.shift_exceeds_null and arm.staleness_ratio == pytest.approx(10.0)
    small = summarize_arm("ceiling", pool_size=256, exchanged=135, draws=[_draw(0, 0.001, 0.2, 0.002, 0.4)],
                          staleness=None)
    assert not small.exceeds_null and not small.shift_exceeds_null and small.staleness_ratio is None
    contrast = annotation_contrast([arm, small])
    assert (contrast.exchanged, contrast.mean_distance, contrast.forget_shift_pp) == (26, pytest.approx(0.005), -9.0)


def test_an_arm_measurement_makes_the_standards_arm_and_keeps_its_journal_shape():
    draws = [_draw(0, 0.004, -10.0, 0.002, 0.5), _draw(1, 0.006, -8.0, 0.003, -1.5)]
    arm = summarize_arm("deployment", pool_size=256, exchanged=26, draws=draws, staleness=0.05)
    assert arm.to_record() == ProvenanceArm(arm="deployment", pool_size=256, exchanged=26,
                                            forget_shift_pp=[-10.0, -8.0], null_band=NullBand(lower=-1.5, upper=1.5),
                                            outside_null=True)
    # the census journal stores the measurement as JSON: the same keys as before it had a record to make
    assert list(arm.model_dump()) == ["arm", "pool_size", "exchanged", "draws", "distance", "forget_shift_pp",
                                      "null_band", "null_shift_band_pp", "exceeds_null", "staleness_ratio",
                                      "shift_exceeds_null"]
    assert ProvenanceArmMeasurement.model_validate_json(arm.model_dump_json()) == arm


def test_a_pool_too_large_for_the_null_swaps_is_refused(zoo):
    spec = parse_spec({**PATTERN_SPEC, "provenance": {"pool_size": 1100}})
    prepared = prepare_audit(zoo.root / "bn-ga-train.safetensors", parse_spec(PATTERN_SPEC))
    with pytest.raises(AuditSpecError, match="needs 1,?235 retained records") as caught:
        check_data_fits(spec, prepared.data)
    assert caught.value.field == "/provenance/pool_size"


@pytest.mark.parametrize(("name", "zero"), [("bn-ga-train", False), ("gn-ga-train", True)])
def test_arms_on_the_zoo_restore_phi_and_a_groupnorm_twin_is_exactly_null(zoo, name, zero):
    spec = parse_spec({**PATTERN_SPEC, "provenance": {"pool_size": 64, "draws": 2}})
    prepared = prepare_audit(zoo.root / f"{name}.safetensors", spec)
    refitter = Refitter(prepared.checkpoint.model)
    before = running_state(prepared.checkpoint.model)
    arms = provenance_arms(refitter, spec=spec, data=prepared.data, batch_size=512, staleness=None)
    # 64 * 135 / 1334 = 6.48 rounds to 6; the ceiling is the whole pool of 64
    assert [(a.arm, a.exchanged, len(a.draws)) for a in arms] == [("deployment", 6, 2), ("ceiling", 64, 2)]
    assert refitter.count == 2 * (1 + 2 * 2)
    after = running_state(prepared.checkpoint.model)
    assert all(torch.equal(before[k].mean, after[k].mean) for k in before)
    if zero:  # no running statistics: every distance and shift is exactly 0, nothing exceeds its null
        assert all(a.distance == 0.0 and a.forget_shift_pp == 0.0 and not a.exceeds_null for a in arms)
    else:  # the ceiling pool is all removed records: far beyond a null swap of the same 64 places
        assert arms[1].exceeds_null and arms[1].distance > arms[0].distance
