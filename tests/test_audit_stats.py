"""Decision rules on hand-made shift vectors: exact values from the definitions."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from bnconvention.audit.measure.stats import by_adjust, decide, sign_test, tost


def test_ten_positive_shifts_beyond_margin_are_displaced_with_exact_p():
    decision = decide([2.5, 1.3, 4.0, 2.2, 1.9, 3.3, 1.25, 2.0, 5.5, 1.8], margin_pp=1.2)
    assert decision.outcome == "displaced"
    assert decision.p_value == 0.0009765625  # 0.5 ** 10
    assert decision.method == "exact-sign-test"
    assert decision.sign_test.direction == "up"


def test_ten_negative_shifts_are_displaced_downwards():
    decision = decide([-3.0] * 10, margin_pp=1.2)
    assert (decision.outcome, decision.sign_test.direction, decision.p_value) == ("displaced", "down", 0.5**10)


@pytest.mark.parametrize(
    "shifts",
    [
        pytest.param([2.0] * 9 + [-2.0], id="one-replicate-flips-sign"),
        pytest.param([2.0] * 9 + [1.0], id="one-replicate-inside-margin"),
        pytest.param([5.0, -5.0] * 5, id="mixed-signs"),
    ],
)
def test_not_all_replicates_beyond_margin_is_not_displaced(shifts):
    assert decide(shifts, margin_pp=1.2).outcome != "displaced"


def test_mixed_sign_large_shifts_are_undetermined():
    decision = decide([5.0, -5.0] * 5, margin_pp=1.2)
    assert decision.outcome == "undetermined"


def test_small_symmetric_shifts_are_equivalent_by_tost():
    shifts = [0.1, -0.1, 0.2, -0.2, 0.05, -0.05, 0.15, -0.15, 0.0, 0.0]
    decision = decide(shifts, margin_pp=1.2)
    assert decision.outcome == "equivalent"
    assert decision.method == "tost-90"
    # p = max of the two one-sided t-tests against -1.2 and +1.2
    se = stats.tstd(shifts) / math.sqrt(len(shifts))
    expected = stats.t.sf(1.2 / se, df=9)
    assert decision.p_value == pytest.approx(expected, rel=1e-12)
    assert -1.2 < decision.tost.lower < decision.tost.upper < 1.2


def test_exactly_zero_shifts_channel_absent_are_an_exact_equality_not_p_zero():
    # Regression: TOST with zero variance was reported as p = 0.0; the t statistic is undefined there
    decision = decide([0.0] * 10, margin_pp=1.2)
    assert (decision.outcome, decision.method, decision.p_value, decision.tost.lower, decision.tost.upper) == (
        "equivalent", "exact-equality", None, 0.0, 0.0)
    assert tost([0.5] * 3, margin_pp=1.2).exact


def test_zero_spread_beyond_the_margin_is_never_an_exact_equality():
    few = decide([2.0] * 3, margin_pp=1.2)
    assert (few.outcome, few.method, few.p_value) == ("undetermined", "none", 0.125)
    many = decide([2.0] * 10, margin_pp=1.2)
    assert (many.outcome, many.method) == ("displaced", "exact-sign-test")


def test_sign_test_p_value_is_the_binomial_tail():
    result = sign_test([2, 2, 2, 2, 0.0, -0.1, 2, 2, 2, 2], margin_pp=1.2)
    assert (result.direction, result.beyond) == ("up", 8)
    assert result.p_value == pytest.approx(sum(math.comb(10, k) for k in (8, 9, 10)) / 2**10, rel=1e-12)


def test_single_replicate_cannot_be_equivalent():
    decision = decide([0.1], margin_pp=1.2)
    assert decision.outcome == "undetermined"
    assert tost([0.1], margin_pp=1.2).p_value is None


def test_single_replicate_beyond_margin_is_undetermined_not_displaced():
    # Regression: decide([2.0], margin_pp=1.2) was "displaced" with p = 0.5
    decision = decide([2.0], margin_pp=1.2)
    assert (decision.outcome, decision.p_value) == ("undetermined", 0.5)


@pytest.mark.parametrize(
    ("replicates", "outcome", "p_value"),
    [
        pytest.param(4, "undetermined", 0.0625, id="R4-p0.0625-misses-0.05"),
        pytest.param(5, "displaced", 0.03125, id="R5-p0.03125"),
        pytest.param(10, "displaced", 0.5**10, id="R10-papers"),
    ],
)
def test_displaced_needs_the_sign_test_to_reach_the_level(replicates, outcome, p_value):
    decision = decide([-40.0] * replicates, margin_pp=1.2)
    assert (decision.outcome, decision.p_value) == (outcome, p_value)


def test_the_level_of_the_sign_test_follows_the_tost_level():
    # level 0.80: alpha = 0.10 per side, so four agreeing replicates (p = 0.0625) are displaced
    assert decide([3.0] * 4, margin_pp=1.2, level=0.80).outcome == "displaced"


def test_two_sided_p_value_is_offered_beside_the_one_sided_one():
    decision = decide([2.0] * 10, margin_pp=1.2)
    assert (decision.p_value, decision.p_two_sided) == (0.5**10, 0.5**9)
    assert sign_test([2.0, -2.0], margin_pp=1.2).p_two_sided == 1.0
    assert decide([0.1, -0.1] * 5, margin_pp=1.2).p_two_sided is None  # equivalent: no sign-test decision


@pytest.mark.parametrize(
    ("shifts", "margin"),
    [
        pytest.param([], 1.2, id="empty"),
        pytest.param([float("nan")], 1.2, id="nan"),
        pytest.param([1.0], 0.0, id="zero-margin"),
    ],
)
def test_bad_input_raises_value_error(shifts, margin):
    with pytest.raises(ValueError):
        decide(shifts, margin_pp=margin)


def test_benjamini_yekutieli_matches_the_formula():
    p_values = [0.001, 0.01, 0.04, 0.2]
    m = len(p_values)
    c_m = sum(1 / i for i in range(1, m + 1))
    expected = []
    running = 1.0
    for rank in range(m, 0, -1):  # step-up: cumulative minimum from the largest p-value down
        running = min(running, p_values[rank - 1] * m * c_m / rank)
        expected.insert(0, running)
    assert by_adjust(p_values) == pytest.approx(expected, rel=1e-12)
    assert by_adjust([]) == []
