"""The audit's statistics: the standard's decision rules (re-exported from
:mod:`bnconvention.standard.decision_rules`, where the validator reads them too) and Benjamini–Yekutieli across a
census.

Across a census, the sign-test p-values of one cell are adjusted with Benjamini–Yekutieli
(``scipy.stats.false_discovery_control(..., method="by")``), valid under arbitrary dependence.
"""

from __future__ import annotations

from collections.abc import Sequence

from scipy import stats

from bnconvention.standard.decision_rules import (
    EXACT_EQUALITY_METHOD,
    NO_METHOD,
    SIGN_METHOD,
    Decision,
    Direction,
    SignTest,
    Tost,
    binomial_tail,
    decide,
    sign_decides,
    sign_test,
    tost,
)

__all__ = [
    "EXACT_EQUALITY_METHOD",
    "NO_METHOD",
    "SIGN_METHOD",
    "Decision",
    "Direction",
    "SignTest",
    "Tost",
    "binomial_tail",
    "by_adjust",
    "decide",
    "sign_decides",
    "sign_test",
    "tost",
]


def by_adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Yekutieli adjusted p-values (valid under arbitrary dependence between checkpoints).

    >>> [round(p, 4) for p in by_adjust([0.001, 0.01, 0.04, 0.2])]
    [0.0083, 0.0417, 0.1111, 0.4167]
    """
    if not p_values:
        return []
    return [float(p) for p in stats.false_discovery_control(list(p_values), method="by")]
