"""The staleness reference band as a null distribution, and a calibrated "exceeds band" decision.

The null: N independent retain refits of one checkpoint under the audit's convention (the R replicate refits,
plus ``staleness_band.refits - R`` more drawn the same way). Every ordered pair (a, b) of them gives a distance
``d(a, b)`` (docs/statistics.md#staleness, ``a`` against the refit ``b``); its layer-averaged mean and variance parts
are combined into one number, their average, so a decision is on one scalar.

The decision is a rank (conformal) test. Each of the N + 1 states (the shipped one and the N refits) gets the
score "median combined distance to the other N"; under the null hypothesis that the shipped state is itself a fresh
retain refit, the N + 1 states are exchangeable, so the shipped score's rank is uniform and

    p = (1 + #{refits whose score >= the shipped score}) / (N + 1)

is an exact p-value: "exceeds the band" (p <= level) fires on at most ``floor(level * (N + 1)) / (N + 1)`` of
never-stale checkpoints, which is the level itself when ``level * (N + 1)`` is an integer. With fewer than
``1 / level - 1`` refits no p can reach the level, and the decision is left undecided (None) with a warning.

The one-pair band it replaces (shipped vs refit 0 against refit 1 vs refit 0, both parts) is kept as a measured
contrast: :func:`one_pair_false_positive_rate` reads its false-positive rate off the null itself, by treating
disjoint triples of refits as (shipped, refit 0, refit 1).

>>> scores = [0.0, 0.1, 0.2, 0.3]
>>> conformal_p(0.25, scores), conformal_p(0.35, scores)
(0.4, 0.2)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bnconvention.audit.core.result import StalenessNull

# The population's readings (the HTML report's torch-free path) read :func:`combined`, so the refit engine's staleness
# distance (torch) is imported inside :func:`pair_distance`: importing this module does not import torch.

StateMap = Mapping[str, Any]  # layer name -> (mean, var, ...): a LayerRunningState


def combined(mean_distance: float, var_distance: float) -> float:
    """The scalar the band decides on: the average of the layer-averaged mean and variance distances."""
    return 0.5 * (mean_distance + var_distance)


def pair_distance(a: StateMap, b: StateMap) -> tuple[float, float]:
    """Layer-averaged ``(mean, var)`` distances of state ``a`` from state ``b`` (``b`` in the refit's place)."""
    from bnconvention.refitting import staleness_distance

    d = staleness_distance(a, b)
    return d.mean_distance, d.var_distance


def distance_matrix(states: Sequence[StateMap]) -> list[list[tuple[float, float]]]:
    """``m[i][j]`` = distances of state i from state j; the diagonal is (0, 0)."""
    n = len(states)
    return [[(0.0, 0.0) if i == j else pair_distance(states[i], states[j]) for j in range(n)] for i in range(n)]


def scores(matrix: Sequence[Sequence[tuple[float, float]]]) -> list[float]:
    """Each state's median combined distance to all the others."""
    n = len(matrix)
    return [statistics.median(combined(*matrix[i][j]) for j in range(n) if j != i) for i in range(n)]


def conformal_p(shipped_score: float, null_scores: Sequence[float]) -> float:
    """``(1 + #{null >= shipped}) / (N + 1)``: the exact rank p-value of the shipped score among N null scores."""
    return (1 + sum(s >= shipped_score for s in null_scores)) / (len(null_scores) + 1)


def smallest_p(refits: int) -> float:
    return 1.0 / (refits + 1)


def exact_level(level: float, refits: int) -> float:
    """The false-positive rate the rank test holds exactly: ``floor(level * (N + 1)) / (N + 1)``."""
    return math.floor(level * (refits + 1) + 1e-9) / (refits + 1)


def quantile(values: Sequence[float], q: float) -> float:
    """The empirical ``q`` quantile (linear interpolation, numpy's default)."""
    return float(np.quantile(np.asarray(values, dtype=float), q))


def one_pair_false_positive_rate(matrix: Sequence[Sequence[tuple[float, float]]]) -> tuple[float | None, int]:
    """The old one-pair rule on the null: disjoint triples (s, r0, r1) of refits, "exceeds" when ``d(s, r0)``
    beats ``d(r1, r0)`` on both parts. Returns the fraction that fired (None without a triple) and the triples."""
    n = len(matrix)
    triples = [(i, i + 1, i + 2) for i in range(0, n - 2, 3)]
    if not triples:
        return None, 0
    fired = sum(all(x > y for x, y in zip(matrix[s][r0], matrix[r1][r0], strict=True)) for s, r0, r1 in triples)
    return fired / len(triples), len(triples)


def band_null(shipped: StateMap, refits: Sequence[StateMap], *, level: float) -> StalenessNull:
    """The null distribution of refit-pair distances, the band (its ``1 - level`` quantiles) and the decision."""
    return band_null_from_matrix(distance_matrix([shipped, *refits]), level=level)


def band_null_from_matrix(matrix: Sequence[Sequence[tuple[float, float]]], *, level: float) -> StalenessNull:
    """:func:`band_null` from the distance matrix of (shipped, refit 1, ..., refit N), state 0 the shipped one."""
    all_scores = scores(matrix)
    null = [row[1:] for row in matrix[1:]]  # the refits among themselves
    n = len(null)
    pairs = [null[i][j] for i in range(n) for j in range(n) if i != j]
    p = conformal_p(all_scores[0], all_scores[1:]) if n else 1.0
    decidable = bool(n) and smallest_p(n) <= level + 1e-12
    fpr, triples = one_pair_false_positive_rate(null)
    return StalenessNull(
        refits=n, pairs=len(pairs), level=level, exact_level=exact_level(level, n),
        shipped_score=all_scores[0], null_scores=all_scores[1:],
        band_mean_distance=quantile([m for m, _ in pairs], 1 - level) if pairs else None,
        band_var_distance=quantile([v for _, v in pairs], 1 - level) if pairs else None,
        band_combined=quantile([combined(*d) for d in pairs], 1 - level) if pairs else None,
        null_median_combined=statistics.median(combined(*d) for d in pairs) if pairs else None,
        p_value=p, exceeds_band=(p <= level + 1e-12) if decidable else None,
        one_pair_false_positive_rate=fpr, one_pair_triples=triples,
    )
