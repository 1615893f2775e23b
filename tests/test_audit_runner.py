"""One checkpoint's audit on the digits zoo: the qualitative pattern of Kalani et al., and the
mechanics of Shen and Li's census (docs/statistics.md#references)."""

from __future__ import annotations

import re

import pytest
import torch
from audit_support import PATTERN_SPEC, pattern_census

from bnconvention.architectures.factories import allow_user_factory
from bnconvention.audit.measure.decisions import audit_reporting_line
from bnconvention.audit.run.runner import prepare_audit, run_audit
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.errors import WeightsChangedError
from bnconvention.formats.digests import file_digests
from bnconvention.standard.models import to_dict
from bnconvention.standard.schema import schema_validator


# The pattern census (audit_support.py) takes about 40 s on 2 cores: the tests that use it are marked slow.
@pytest.fixture(scope="module")
def results(zoo, tmp_path_factory):
    outcome = pattern_census(zoo.root, tmp_path_factory)
    return {r.checkpoint: r for r in outcome.results}


def cell(result, metric):
    return next(c for c in result.annotation.cells if c.metric == metric)


@pytest.mark.slow
def test_eval_mode_distillation_forget_accuracy_rebounds_on_every_replicate(results):
    df = cell(results["bn-badteacher-eval"], "df")
    assert df.shipped <= 0.05  # near 0 as shipped
    assert min(df.replicate_values) >= 0.5  # far above it after each retain refit
    assert all(s > df.margin_pp for s in df.replicate_shifts_pp)
    # every one of the three replicates clears the margin, but p = 0.5**3 = 0.125 does not reach 0.05: undetermined,
    # not displaced; ten replicates would give 0.00098
    assert (df.decision.outcome, df.decision.method) == ("undetermined", "none")
    assert results["bn-badteacher-eval"].sign_tests["df"].p_value == 0.125


@pytest.mark.slow
def test_ten_unlabeled_images_recover_most_of_it(results):
    result = results["bn-badteacher-eval"]
    recovery = result.annotation.recoverability
    df = cell(result, "df")
    assert (recovery.images, recovery.source, recovery.rule) == (10, "test", "exact")
    assert recovery.forget_accuracy_shipped == df.shipped
    assert recovery.forget_accuracy_after - df.shipped >= 0.5 * (df.refit - df.shipped)


@pytest.mark.slow
def test_train_mode_methods_move_less(results):
    eval_mode = cell(results["bn-badteacher-eval"], "df").shift_pp
    for name in ("bn-relabel-train", "bn-ga-train"):
        assert cell(results[name], "df").shift_pp < eval_mode, name


@pytest.mark.slow
def test_retrain_reference_is_not_displaced(results):
    df = cell(results["bn-retrain"], "df")
    assert df.decision.outcome != "displaced"
    assert abs(df.shift_pp) < 1.2


@pytest.mark.slow
def test_groupnorm_twin_is_channel_absent_with_exactly_zero_shifts(results):
    result = results["gn-badteacher-eval"]
    a = result.annotation
    assert a.channel == "absent"
    for c in a.cells:
        assert c.replicate_shifts_pp == [0.0, 0.0, 0.0] and c.shift_pp == 0.0
        assert c.replicate_values == [c.shipped] * 3
        assert (c.decision.outcome, c.decision.method) == ("equivalent", "channel-absent")
    assert a.reporting_line == ("deployed state as shipped; no running statistics (channel absent): a refit is the "
                                "identity, every cell moves +0.00pp on 3/3 replicates")
    assert (a.staleness.mean_distance, a.staleness.var_distance, a.staleness.layers) == (0.0, 0.0, [])
    assert a.recoverability.shift_pp == 0.0 and a.provenance.forget_shift_pp == 0.0


@pytest.mark.slow
def test_reporting_line_names_the_convention_and_the_evidence(results):
    line = results["bn-badteacher-eval"].annotation.reporting_line
    assert re.fullmatch(r"deployed state as shipped; refit on the retained split under the training transform "
                        r"\(exact rule\), forget accuracy moves \+\d+\.\d\dpp \(undetermined: 3/3 replicates beyond "
                        r"±1\.2pp; R = 3 cannot reach p <= 0\.05 \(smallest p = 0\.125\)\)", line)  # and says why


@pytest.mark.slow
def test_verdicts_flip_with_direction_and_replicate_count(results):
    verdicts = {v.criterion: v for v in results["bn-badteacher-eval"].annotation.verdicts}
    forget = verdicts["df <= 0.05"]
    assert (forget.shipped, forget.refit, forget.flipped, forget.direction) == (True, False, True, "pass_to_fail")
    assert forget.refit_pass_replicates == 0
    retrain = {v.criterion: v for v in results["bn-retrain"].annotation.verdicts}
    assert not retrain["df <= 0.05"].flipped and retrain["df <= 0.05"].direction is None


@pytest.mark.slow
def test_shipped_cells_anchor_to_the_published_ones(results):
    for result in results.values():
        anchoring = result.annotation.anchoring
        assert anchoring.anchored and anchoring.tolerance == 0.02
        assert {c.metric for c in anchoring.cells} == {"df", "dr", "dt"}
        assert all(c.abs_diff <= 1e-9 for c in anchoring.cells)


@pytest.mark.slow
def test_staleness_of_corrupted_buffers_exceeds_the_reference_band(results):
    staleness = results["bn-relabel-train"].annotation.staleness
    band = staleness.reference_band
    assert staleness.exceeds_band is True
    assert staleness.mean_distance > band.mean_distance and staleness.var_distance > band.var_distance
    band_layers = results["bn-relabel-train"].band_layers
    assert [layer.name for layer in staleness.layers] == [layer.name for layer in band_layers]


@pytest.mark.slow
def test_provenance_contrast_is_small_next_to_the_shipped_state_distance(results):
    # Shen and Li, appendix P: exchanging kept for removed records barely moves the fitted state
    result = results["bn-relabel-train"]
    provenance = result.annotation.provenance
    assert (provenance.pool_size, provenance.exchanged) == (256, 26)
    assert provenance.mean_distance < result.annotation.staleness.mean_distance


@pytest.mark.slow
def test_costs_are_as_designed(results):
    for result in results.values():
        # R replicates + 6 more band refits (N = 9) + recoverability + 2 provenance draws of (base pool, then
        # exchanged and null pools for the deployment and ceiling arms); shipped cells evaluated once
        assert result.refits_run == 3 + 6 + 1 + 2 * (1 + 2 * 2)
        assert len(result.replicate_records) == 3
        assert len({r.pool_ids_sha256 for r in result.replicate_records}) == 3  # independently redrawn pools


@pytest.mark.slow
def test_annotations_are_valid_records_bound_to_the_file(results, zoo):
    for name, result in results.items():
        document = to_dict(result.annotation)
        assert list(schema_validator().iter_errors(document)) == []
        digests = file_digests(zoo.root / f"{name}.safetensors")
        assert result.annotation.subject.trainable_sha256 == digests.trainable_sha256
        assert result.annotation.subject.running_sha256 == digests.running_sha256
        assert result.annotation.convention.name == "refit/retain/train-transform/exact"
        assert result.annotation.convention.data.record_count == 256


def test_not_anchored_cells_are_reported_but_not_decided(zoo):
    spec = parse_spec({**PATTERN_SPEC, "published_source": "spec", "replicates": 2, "staleness": False,
                       "recoverability": None, "provenance": None, "refit": {"pool_size": 64},
                       "published_by_checkpoint": {"bn-badteacher-eval": {"df": 0.5}}})
    result = run_audit(prepare_audit(zoo.root / "bn-badteacher-eval.safetensors", spec))
    a = result.annotation
    assert a.anchoring.anchored is False and result.anchored is False
    assert a.anchoring.cells[0].metric == "df" and a.anchoring.cells[0].abs_diff == pytest.approx(0.5, abs=0.05)
    assert {(c.decision.outcome, c.decision.method) for c in a.cells} == {("undetermined", "not-anchored")}
    assert "not anchored" in a.reporting_line
    assert result.refits_run == 2 and a.staleness is None  # R = 2: the spec refuses R = 1


def _mutating_model():
    """A model whose forward writes into a trainable tensor: the audit must refuse to trust it."""
    class Mutating(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)
            self.head = torch.nn.Linear(4, 10)

        def forward(self, x):
            with torch.no_grad():
                self.head.bias.add_(1.0)
            return self.head(self.bn(self.conv(x)).mean(dim=(2, 3)))

    return Mutating()


def test_weights_that_change_during_the_audit_are_refused(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    from bnconvention.architectures import factories

    monkeypatch.setattr(factories, "_user_allowed", {})
    name = allow_user_factory("test_audit_runner:_mutating_model")
    weights = tmp_path / "mutating.safetensors"
    save_file(_mutating_model().state_dict(), str(weights))
    spec = parse_spec({**PATTERN_SPEC, "model": {"factory": name}, "published_source": "spec", "replicates": 2,
                       "recoverability": None, "provenance": None, "refit": {"pool_size": 32}})
    with pytest.raises(WeightsChangedError):
        run_audit(prepare_audit(weights, spec))


@pytest.mark.slow
def test_reporting_line_for_undetermined_and_equivalent_cells(results):
    spec = parse_spec(PATTERN_SPEC)
    result = results["bn-retrain"]
    cells = result.annotation.cells
    line = audit_reporting_line(spec=spec, cells=cells, signs=result.sign_tests, channel="present",
                          transform_mode="train")
    # zero spread is an exact equality, not TOST with p = 0
    assert line.endswith("(equivalent within ±1.2pp: the same shift on every replicate)") or "undetermined" in line
