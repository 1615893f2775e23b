"""The recoverability curve over budgets, seeds and proxy sources (bnconvention.audit.diagnostics.recovery)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from audit_support import PATTERN_SPEC

from bnconvention.audit.core.result import RecoverabilityMeasurement, RecoveryPoint
from bnconvention.audit.diagnostics.recovery import proxy_images, recoverability_curve, skip_reason
from bnconvention.audit.measure.evaluation import Refitter
from bnconvention.audit.run.runner import prepare_audit
from bnconvention.audit.spec.audit_spec import DEFAULT_BUDGETS, parse_spec
from bnconvention.refitting import running_state
from bnconvention.standard.models import RecoverabilityCurve, RecoverabilityPoint


def test_the_default_curve_is_the_papers_budgets_over_three_sources():
    spec = parse_spec({**PATTERN_SPEC, "recoverability": {"curve": {}}})
    curve = spec.recoverability.curve
    assert (curve.budgets, curve.seeds, curve.sources) == ([1, 2, 5, 10, 20, 50, 100], 3, ["test", "retain", "noise"])
    assert DEFAULT_BUDGETS == (1, 2, 5, 10, 20, 50, 100)
    assert parse_spec(PATTERN_SPEC).recoverability.curve is None  # off unless asked: a census stays affordable


@pytest.fixture(scope="module")
def prepared(zoo):
    spec = parse_spec({**PATTERN_SPEC, "recoverability": {
        "images": 10, "curve": {"budgets": [1, 10, 500], "seeds": 2, "sources": ["test", "retain", "noise"]}}})
    return prepare_audit(zoo.root / "bn-badteacher-eval.safetensors", spec)


def test_skips_are_named(prepared):
    data = prepared.data  # test split: 463 records
    assert skip_reason("test", 500, data=data, rule="exact") == "B = 500 from test: the split has 463 records"
    assert skip_reason("noise", 500, data=data, rule="exact") is None  # noise has no size
    assert skip_reason("retain", 1, data=data, rule="ema") == ("B = 1 from retain: a train-mode rule (ema) needs at "
                                                               "least 2 images")
    assert skip_reason("retain", 1, data=data, rule="exact") is None


def test_noise_has_the_test_splits_moments_and_no_record_of_it(prepared):
    x = proxy_images(prepared.data, "noise", 400, np.random.default_rng(0))
    reference = prepared.data.test.x
    assert x.shape == (400, *reference.shape[1:])
    # 400 draws per pixel: the pooled mean matches the test split's to well under a tenth of its spread
    assert abs(float(x.mean() - reference.mean())) < 0.1 * float(reference.std())
    again = proxy_images(prepared.data, "noise", 400, np.random.default_rng(0))
    assert torch.equal(x, again)


@pytest.mark.slow
def test_the_curve_on_an_eval_mode_checkpoint(prepared):
    model = prepared.checkpoint.model
    before = running_state(model)
    refitter = Refitter(model)
    shipped_df = 0.0
    curve = recoverability_curve(refitter, prepared.spec.recoverability, spec=prepared.spec, data=prepared.data,
                                 shipped_df=shipped_df, batch_size=512)
    assert [(p.source, p.budget) for p in curve.points] == [
        ("test", 1), ("test", 10), ("retain", 1), ("retain", 10), ("retain", 500), ("noise", 1), ("noise", 10),
        ("noise", 500)]
    assert curve.skipped == ["B = 500 from test: the split has 463 records"]
    assert refitter.count == 8 * 2 and all(len(p.forget_accuracy) == 2 for p in curve.points)
    assert curve.headline == curve.points[1]  # B = 10 from the test split
    assert all(p.mean_shift_pp == pytest.approx(100 * p.mean_forget_accuracy) for p in curve.points)
    after = running_state(model)
    assert all(torch.equal(before[k].mean, after[k].mean) for k in before)
    # Kalani et al.'s pattern on an eval-mode (misaligned) checkpoint: ten in-distribution images recover forgetting
    assert curve.points[1].mean_forget_accuracy > 0.3


def _point(source: str, budget: int, accuracies: list[float]) -> RecoveryPoint:
    return RecoveryPoint(source=source, budget=budget, forget_accuracy=accuracies,
                         mean_forget_accuracy=sum(accuracies) / 2, mean_shift_pp=0.0)


def test_a_curve_measurement_makes_one_standard_curve_per_source():
    measured = RecoverabilityMeasurement(forget_accuracy_shipped=0.5, rule="exact", seeds=2, points=[
        _point("test", 10, [0.75, 0.5]), _point("noise", 10, [0.25, 0.5]), _point("test", 1, [0.5, 0.5])])
    noise = ("other", "gaussian noise with the test split's per-pixel mean and standard deviation")
    assert measured.to_records() == [
        RecoverabilityCurve(source=noise[0], description=noise[1], rule="exact", seeds=[0, 1],
                            forget_accuracy_shipped=0.5,
                            points=[RecoverabilityPoint(images=10, forget_accuracy=[0.25, 0.5])]),
        RecoverabilityCurve(source="test", rule="exact", seeds=[0, 1], forget_accuracy_shipped=0.5,
                            points=[RecoverabilityPoint(images=1, forget_accuracy=[0.5, 0.5]),
                                    RecoverabilityPoint(images=10, forget_accuracy=[0.75, 0.5])])]
    assert RecoverabilityMeasurement(forget_accuracy_shipped=0.5, rule="exact", seeds=2, points=[]).to_records() == []
