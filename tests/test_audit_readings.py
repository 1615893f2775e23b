"""Census readings (bnconvention.audit.readings) and their markdown: band, staleness vs shift, provenance,
recoverability curve, mechanism."""

from __future__ import annotations

import json

import pytest
from audit_support import pattern_census

from bnconvention.audit.readings import mechanism_counts, spearman


def test_spearman_by_hand():
    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0])["rho"] == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0])["rho"] == pytest.approx(-1.0)
    # ranks (1, 2, 3, 4) against (2, 1, 4, 3): 1 - 6 * 4 / (4 * 15) = 0.6
    assert spearman([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 4.0, 3.0])["rho"] == pytest.approx(0.6)
    assert spearman([1.0, 2.0], [1.0, 2.0]) == {"n": 2, "rho": None, "p_value": None}
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["rho"] is None  # a constant side


def test_mechanism_counts_leave_channel_absent_out():
    rows = {"a": {"mechanism": "corruption", "evidence": "sidecar", "consistent": True},
            "b": {"mechanism": None, "evidence": None, "consistent": None},
            "c": {"mechanism": "misalignment", "evidence": "base", "consistent": False},
            "g": {"mechanism": None, "evidence": "channel absent", "consistent": None}}
    assert mechanism_counts(rows) == {"corruption": 1, "misalignment": 1, "neither": 0, "undetermined": 1,
                                      "inconsistent": 1}


@pytest.mark.slow
def test_the_pattern_census_carries_the_readings(zoo, tmp_path_factory):
    outcome = pattern_census(zoo.root, tmp_path_factory)
    readings = json.loads((outcome.out_dir / "census.json").read_text())["readings"]
    band = readings["staleness"]
    assert band["checkpoints"] == 4 and band["band_refits"] == [9] and band["level"] == 0.1
    assert band["exact_level"] == pytest.approx(0.1) and band["decided"] == 4
    assert band["staleness_vs_abs_shift"]["n"] == 4 and band["staleness_vs_abs_shift"]["cell"] == "df"
    deployment = readings["provenance"]["deployment"]
    assert deployment["checkpoints"] == 4 and deployment["draws"] == [2]
    assert set(deployment["per_checkpoint"]) == {"bn-badteacher-eval", "bn-relabel-train", "bn-ga-train",
                                                 "bn-retrain"}
    assert readings["provenance"]["ceiling"]["per_checkpoint"]["bn-ga-train"]["exchanged"] == 135
    assert readings["recoverability"] is None  # no curve in the pattern spec
    mechanism = readings["mechanism"]["per_checkpoint"]
    assert mechanism["bn-ga-train"]["mechanism"] == "corruption"
    assert mechanism["bn-badteacher-eval"]["mechanism"] == "misalignment"
    assert mechanism["bn-retrain"]["mechanism"] == "neither"
    assert mechanism["gn-badteacher-eval"]["evidence"] == "channel absent"
    text = (outcome.out_dir / "census.md").read_text()
    for heading in ("## Staleness and its reference band", "## Provenance contrasts (seed 001, appendix P)",
                    "## Mechanism (seed 003)"):
        assert heading in text
    assert "| bn-badteacher-eval | present | yes |" in text and "misalignment (sidecar)" in text


@pytest.mark.slow
def test_a_curve_is_plotted_and_summarized_only_when_the_audit_ran_one(zoo, tmp_path_factory, tmp_path):
    from bnconvention.audit.outputs import write_audit_outputs
    from bnconvention.audit.plots import recoverability_figure
    from bnconvention.audit.result import RecoverabilityCurve, RecoveryPoint

    result = pattern_census(zoo.root, tmp_path_factory).results[0]
    assert result.recoverability_curve is None and recoverability_figure(result) is None
    point = RecoveryPoint(source="test", budget=10, forget_accuracy=[0.5, 0.7], mean_forget_accuracy=0.6,
                          mean_shift_pp=60.0)
    with_curve = result.model_copy(update={"recoverability_curve": RecoverabilityCurve(
        forget_accuracy_shipped=0.0, rule="exact", seeds=2, points=[point], headline=point)})
    written = write_audit_outputs(with_curve, tmp_path)
    assert written["recoverability.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = written["summary.md"].read_text()
    assert "| B = 10 | 0.6000 |" in summary and "![recoverability](recoverability.png)" in summary
