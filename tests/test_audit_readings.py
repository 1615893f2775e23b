"""Census readings (bnconvention.audit.population.readings) and their markdown: band, staleness vs shift, provenance,
recoverability curve, mechanism."""

from __future__ import annotations

import json

import pytest
from audit_support import pattern_census
from census_support import filled, typed_census

from bnconvention.audit.population.model_readings import MechanismCounts, MechanismRow
from bnconvention.audit.population.readings import cluster_spearman, find_base, mechanism_counts, mechanisms, spearman
from bnconvention.audit.render.readings import base_check_reading


def test_spearman_by_hand():
    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]).rho == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]).rho == pytest.approx(-1.0)
    # ranks (1, 2, 3, 4) against (2, 1, 4, 3): 1 - 6 * 4 / (4 * 15) = 0.6
    assert spearman([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 4.0, 3.0]).rho == pytest.approx(0.6)
    assert spearman([1.0, 2.0], [1.0, 2.0]).model_dump() == {"n": 2, "rho": None, "p_value": None}
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]).rho is None  # a constant side


def test_a_cluster_bootstrap_does_not_count_a_weight_file_listed_four_times_as_four_draws():
    # three weight files listed under four removals each (identical rows), and six checkpoints of their own
    x = [5.0] * 4 + [6.0] * 4 + [7.0] * 4 + [1.0, 2.0, 3.0, 4.0, 2.5, 3.5]
    y = [5.5] * 4 + [6.5] * 4 + [7.5] * 4 + [3.0, 1.0, 4.0, 2.0, 2.2, 2.4]
    files = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d", "e", "f", "g", "h", "i"]
    clustered = cluster_spearman(x, y, files)
    independent = cluster_spearman(x, y, [str(i) for i in range(len(x))])
    assert clustered.clusters == 9 and independent.clusters == 18
    assert clustered.rho == independent.rho == pytest.approx(spearman(x, y).rho)
    # measured: the clustered interval is 2.6-3.6 times as wide over bootstrap seeds 0-4; 1.2 leaves room for that
    assert clustered.upper - clustered.lower > 1.2 * (independent.upper - independent.lower)
    assert cluster_spearman(x, y, files) == clustered  # deterministic


def test_a_cluster_bootstrap_needs_three_clusters():
    assert cluster_spearman([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], ["a", "a", "b", "b"]).lower is None
    perfect = cluster_spearman([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0], ["a", "b", "c", "d"])
    assert perfect.rho == pytest.approx(1.0) and perfect.lower == pytest.approx(1.0)


def _counts(counts: dict[str, int]) -> MechanismCounts:
    return MechanismCounts.model_validate(filled(MechanismCounts, counts))


def test_mechanism_counts_leave_channel_absent_out():
    rows = {"a": {"mechanism": "corruption", "evidence": "sidecar", "consistent": True, "base_check": "compared"},
            "b": {"mechanism": None, "evidence": None, "consistent": None, "base_check": "base not in census"},
            "c": {"mechanism": "misalignment", "evidence": "base", "consistent": False, "base_check": "compared"},
            "g": {"mechanism": None, "evidence": "channel absent", "consistent": None, "base_check": "no base named"}}
    rows = {name: MechanismRow(**row, base_comparison=None, reason="", base=None) for name, row in rows.items()}
    assert mechanism_counts(rows).model_dump() == {"corruption": 1, "misalignment": 1, "neither": 0, "undetermined": 1,
                                      "inconsistent": 1, "base_compared": 2, "base_not_found": 1}


def test_a_population_finds_its_base_under_the_removal_prefix():
    names = ["r05-s0-base", "r10-s0-base", "r05-s0-gradascent-eval", "r10-s1-base", "s2-base"]
    assert find_base("r05-s0-gradascent-eval", "s0-base", names) == "r05-s0-base"
    assert find_base("r10-s0-relabel-train", "s0-base", names) == "r10-s0-base"
    assert find_base("x", "s2-base", names) == "s2-base"  # an exact name first
    assert find_base("r05-s0-finetune-train", "s3-base", names) is None
    assert find_base("r05-s0-base", "r05-s0-base", names) is None  # never its own base


def test_a_base_check_that_could_not_run_says_not_run_never_zero_disagree():
    assert base_check_reading(_counts({"inconsistent": 0, "base_compared": 0, "base_not_found": 12})) == (
        "metadata against the base: not run, no checkpoint's base is in the census (12 name a base the census "
        "does not hold)")
    assert base_check_reading(_counts({"inconsistent": 3, "base_compared": 90, "base_not_found": 0})) == (
        "metadata and base disagree on 3 of the 90 compared")


def test_the_mechanism_compares_a_checkpoint_with_its_removals_base():
    from audit_support import fake_result

    from bnconvention.audit.core.result import MechanismEvidence

    def member(name, trainable, running, *, declared, parent):
        result = fake_result(name, [0.0] * 10)
        subject = result.annotation.subject.model_copy(update={"trainable_sha256": trainable,
                                                                "running_sha256": running})
        evidence = MechanismEvidence(mechanism=declared, source="sidecar", reason="declared", base=parent)
        return result.model_copy(update={"annotation": result.annotation.model_copy(update={"subject": subject}),
                                         "mechanism": evidence})

    base = member("r05-s0-base", "a" * 64, "b" * 64, declared="neither", parent=None)
    frozen = member("r05-s0-ga-eval", "c" * 64, "b" * 64, declared="misalignment", parent="s0-base")
    lying = member("r05-s0-ga-train", "d" * 64, "b" * 64, declared="corruption", parent="s0-base")
    rows = mechanisms([base, frozen, lying], ["r05-s0-base", "r05-s0-ga-eval", "r05-s0-ga-train"])
    assert rows["r05-s0-ga-eval"].base == "r05-s0-base" and rows["r05-s0-ga-eval"].consistent is True
    assert rows["r05-s0-ga-train"].base_comparison == "frozen" and rows["r05-s0-ga-train"].consistent is False
    assert mechanism_counts(rows).inconsistent == 1 and mechanism_counts(rows).base_compared == 2


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
    for heading in ("## Staleness and its reference band", "## Provenance contrasts",
                    "## Mechanism"):
        assert heading in text
    assert "| bn-badteacher-eval | present | yes |" in text and "misalignment (sidecar)" in text


@pytest.mark.slow
def test_a_curve_is_plotted_and_summarized_only_when_the_audit_ran_one(zoo, tmp_path_factory, tmp_path):
    from bnconvention.audit.core.result import RecoverabilityMeasurement, RecoveryPoint
    from bnconvention.audit.render.outputs import write_audit_outputs
    from bnconvention.audit.render.plots import recoverability_figure

    result = pattern_census(zoo.root, tmp_path_factory).results[0]
    assert result.recoverability_curve is None and recoverability_figure(result) is None
    point = RecoveryPoint(source="test", budget=10, forget_accuracy=[0.5, 0.7], mean_forget_accuracy=0.6,
                          mean_shift_pp=60.0)
    with_curve = result.model_copy(update={"recoverability_curve": RecoverabilityMeasurement(
        forget_accuracy_shipped=0.0, rule="exact", seeds=2, points=[point], headline=point)})
    written = write_audit_outputs(with_curve, tmp_path)
    assert written["recoverability.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = written["summary.md"].read_text()
    assert "| B = 10 | 0.6000 |" in summary and "![recoverability](recoverability.png)" in summary


def _anchored(name, published, shipped):
    from audit_support import fake_result

    from bnconvention.standard.models import AnchorCell, Anchoring

    result = fake_result(name, [0.0] * 10, shipped=shipped)
    cells = [AnchorCell(metric="df", published=published, shipped=shipped, abs_diff=abs(published - shipped))]
    anchoring = Anchoring(tolerance=0.02, anchored=abs(published - shipped) <= 0.02, cells=cells)
    return result.model_copy(update={"anchored": anchoring.anchored,
                                     "annotation": result.annotation.model_copy(update={"anchoring": anchoring})})


def test_anchoring_that_compares_an_evaluation_with_itself_is_not_called_independent():
    from bnconvention.audit.population.readings import anchoring_reading
    from bnconvention.audit.population.story import anchoring_line

    same = [_anchored(f"c{i}", 0.25 * i, 0.25 * i) for i in range(4)]
    reading = anchoring_reading(same)
    assert reading.independent is False and reading.exactly_equal == 4 and reading.failed == 0
    line = anchoring_line(typed_census({"readings": {"anchoring": reading.model_dump()}}))
    assert line is not None and "equal this evaluation exactly" in line and "not that an independent" in line
    elsewhere = [*same[:3], _anchored("moved", 0.31, 0.25)]  # published by another evaluation: 6 pp apart
    reading = anchoring_reading(elsewhere)
    assert reading.independent is True and reading.failed == 1
    assert reading.max_abs_diff == pytest.approx(0.06)
    line = anchoring_line(typed_census({"readings": {"anchoring": reading.model_dump()}}))
    assert line is not None and line.startswith("Anchoring: 3 of 4 checkpoints reproduce")
    nothing = anchoring_reading([fake_result_plain()])
    assert nothing.cells == 0 and nothing.independent is None
    assert anchoring_line(typed_census({"readings": {"anchoring": nothing.model_dump()}})) == (
        "Anchoring: not run, no checkpoint publishes cells to compare with.")


def fake_result_plain():
    from audit_support import fake_result

    return fake_result("plain", [0.0] * 10, anchored=None)
