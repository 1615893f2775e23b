"""The staleness reference band as a null of independent retain refits (bnconvention.audit.diagnostics.band).

The false-positive tests draw never-stale checkpoints: the shipped state is itself a fresh retain refit, so the
rank test must fire at its exact level 1/(N + 1) (N = 19: 0.05) within binomial sampling error, while the one-pair
band it replaces fires far more often (the issue measured 27 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bnconvention.audit.diagnostics.band import (
    band_null,
    band_null_from_matrix,
    combined,
    conformal_p,
    distance_matrix,
    exact_level,
    one_pair_false_positive_rate,
    scores,
)
from bnconvention.refitting.state import LayerRunningState

LEVEL = 0.05
N_REFITS = 19  # exact level floor(0.05 * 20) / 20 = 0.05


def _random_state(rng: np.random.Generator, *, shift: float = 0.0) -> dict[str, LayerRunningState]:
    """A retain refit's statistics with sampling noise: channel means ~ N(shift, 0.05²), variances ~ 1 ± 5 %."""
    return {f"bn{i}": LayerRunningState(torch.tensor(shift + rng.normal(0, 0.05, 8)),
                                        torch.tensor(1 + rng.normal(0, 0.05, 8)).abs(), None) for i in range(3)}


def test_conformal_p_counts_ties_against_the_shipped_state():
    assert conformal_p(0.25, [0.0, 0.1, 0.2, 0.3]) == 2 / 5
    assert conformal_p(0.3, [0.0, 0.1, 0.2, 0.3]) == 2 / 5  # a tie counts as at least as extreme
    assert conformal_p(9.0, [0.0] * 19) == 1 / 20
    assert conformal_p(0.0, [0.0] * 19) == 1.0  # channel absent: every distance 0, never exceeds


def test_exact_level_is_the_largest_attainable_rate_under_the_nominal_one():
    assert exact_level(0.05, 19) == 0.05
    assert exact_level(0.05, 10) == 0.0  # 11 states: the smallest p is 1/11 > 0.05
    assert exact_level(0.1, 10) == 1 / 11


def test_scores_are_each_states_median_distance_to_the_others():
    matrix = [[(0, 0), (1, 3), (2, 2)], [(1, 1), (0, 0), (5, 5)], [(0, 0), (3, 3), (0, 0)]]
    assert scores(matrix) == [(2 + 2) / 2, (1 + 5) / 2, (0 + 3) / 2]
    assert combined(1.0, 3.0) == 2.0


def test_one_pair_rule_reads_disjoint_triples():
    # triple (0, 1, 2): d(0, 1) = (2, 2) beats d(2, 1) = (1, 1) on both parts; triple (3, 4, 5): it does not
    m = [[(0.0, 0.0)] * 7 for _ in range(7)]
    m[0][1], m[2][1] = (2.0, 2.0), (1.0, 1.0)
    m[3][4], m[5][4] = (2.0, 0.5), (1.0, 1.0)
    assert one_pair_false_positive_rate(m) == (0.5, 2)
    assert one_pair_false_positive_rate(m[:2]) == (None, 0)


def test_a_shipped_state_far_from_every_refit_exceeds_and_the_band_is_the_null_quantile():
    rng = np.random.default_rng(0)
    refits = [_random_state(rng) for _ in range(N_REFITS)]
    stale = band_null(_random_state(rng, shift=1.0), refits, level=LEVEL)
    assert (stale.refits, stale.pairs, stale.p_value, stale.exceeds_band) == (19, 19 * 18, 1 / 20, True)
    null = distance_matrix(refits)
    pair_means = [null[i][j][0] for i in range(19) for j in range(19) if i != j]
    assert stale.band_mean_distance == pytest.approx(float(np.quantile(pair_means, 0.95)), rel=1e-12)
    few = band_null(_random_state(rng, shift=1.0), refits[:5], level=LEVEL)
    assert few.exceeds_band is None and few.exact_level == 0.0  # 6 states cannot reach 0.05


def _false_positive_rate(matrix: np.ndarray, *, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """Draw (shipped, N refits) from a bank of independent refits; the rank test's rate and the one-pair rule's."""
    fired = one_pair = 0
    for _ in range(draws):
        chosen = rng.choice(len(matrix), size=N_REFITS + 1, replace=False)
        sub = [[tuple(matrix[i][j]) for j in chosen] for i in chosen]
        fired += bool(band_null_from_matrix(sub, level=LEVEL).exceeds_band)
        (s, r0, r1) = chosen[:3]
        one_pair += all(x > y for x, y in zip(matrix[s][r0], matrix[r1][r0], strict=True))
    return fired / draws, one_pair / draws


def _check_nominal(rate: float, draws: int) -> None:
    # binomial sampling error of the rate at p = 0.05; 3 standard errors either side (a 0.3 % two-sided miss)
    se = math.sqrt(LEVEL * (1 - LEVEL) / draws)
    assert abs(rate - LEVEL) <= 3 * se, (rate, se)


def test_false_positive_rate_on_never_stale_states_is_nominal():
    rng = np.random.default_rng(1)
    bank = [_random_state(rng) for _ in range(40)]
    matrix = np.array(distance_matrix(bank))
    assert band_null_from_matrix(distance_matrix(bank[:20]), level=LEVEL) == band_null(bank[0], bank[1:20],
                                                                                       level=LEVEL)
    rate, one_pair = _false_positive_rate(matrix, draws=600, rng=rng)
    _check_nominal(rate, 600)
    assert one_pair > 2 * LEVEL  # the one-pair band it replaces: about 1/4 on the same null


@pytest.mark.slow
def test_false_positive_rate_on_a_never_stale_zoo_checkpoint_is_nominal(zoo):
    """Real refits: a zoo checkpoint whose shipped state is a fresh retain refit under the audit's convention."""
    from audit_support import PATTERN_SPEC

    from bnconvention.audit.measure.evaluation import Refitter
    from bnconvention.audit.run.runner import prepare_audit
    from bnconvention.audit.run.stages import run_band_refits
    from bnconvention.audit.spec.audit_spec import parse_spec

    spec = parse_spec({**PATTERN_SPEC, "replicates": 2, "refit": {"pool_size": 64},  # a decision needs R >= 2
                       "staleness_band": {"refits": 42, "level": LEVEL}})
    prepared = prepare_audit(zoo.root / "bn-finetune.safetensors", spec)
    refitter = Refitter(prepared.checkpoint.model)
    bank = run_band_refits(prepared, refitter)  # 40 independent retain refits, drawn like replicates
    assert len(bank) == 40 and refitter.count == 40
    matrix = np.array(distance_matrix(bank))
    rate, one_pair = _false_positive_rate(matrix, draws=600, rng=np.random.default_rng(2))
    _check_nominal(rate, 600)
    assert one_pair > 2 * LEVEL
