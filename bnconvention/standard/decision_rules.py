"""The decision rules of the standard (docs/statistics.md#displaced-the-exact-sign-test and the sections after it).

They live with the standard because they define what a cell's decision means: the audit decides with them, the
validator checks an annotation's decisions against them (``record.decision_inconsistent``). The sign test is exact
arithmetic; only TOST needs ``scipy`` (the ``audit`` extra), imported when it runs, so the core install can import
this module.

For one cell of one checkpoint we have R replicate shifts ``s_1..s_R`` (refit minus shipped, in percentage points)
and a margin ``M`` (default 1.2 pp):

* **displaced** — every replicate clears the margin in the same direction *and* the exact sign test reaches the
  level ``alpha = (1 - level) / 2`` (0.05 at the default 90 % level, the same alpha as each one-sided TOST test).
  The test is one-sided in the majority direction: ``p = P(Binom(R, 1/2) >= k)`` for the ``k`` replicates beyond
  the margin in that direction, so ``p = 0.5**R`` when all R agree (R = 10: 0.0009765625, the papers' figure); four
  agreeing replicates give 0.0625 and stay undetermined. The two-sided value (twice that, at most 1) is reported
  beside it.
* **equivalent** — two one-sided t-tests (TOST) at the 90 % level: the 90 % confidence interval of the mean shift
  lies inside ``(-M, +M)``; ``p = max(p_lower, p_upper)``. With zero spread (a GroupNorm model: every shift exactly
  0.00) the t statistic is undefined: the cell is an exact equality (method ``exact-equality``, no p-value), not a
  test with p = 0.
* **undetermined** — neither. One replicate is always undetermined (the audit spec refuses R = 1).

Across a census, the sign-test p-values are adjusted with Benjamini–Yekutieli
(:func:`bnconvention.audit.measure.stats.by_adjust`).

>>> decide([2.0] * 10, margin_pp=1.2).outcome, decide([2.0] * 10, margin_pp=1.2).p_value
('displaced', 0.0009765625)
>>> decide([2.0] * 4, margin_pp=1.2).outcome, decide([2.0] * 4, margin_pp=1.2).p_value
('undetermined', 0.0625)
>>> decide([0.1, -0.1] * 5, margin_pp=1.2).outcome
'equivalent'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from bnconvention.standard.fields import DecisionOutcome

Direction = Literal["up", "down"]
SIGN_METHOD = "exact-sign-test"
EXACT_EQUALITY_METHOD = "exact-equality"
NO_METHOD = "none"


@dataclass(frozen=True)
class SignTest:
    direction: Direction | None  # majority direction beyond the margin, None when no replicate clears it
    beyond: int  # replicates beyond the margin in that direction
    replicates: int
    p_value: float  # one-sided, in the majority direction (0.5**R when all R agree)
    p_two_sided: float  # min(1, 2 * p_value): for readers who ask for a two-sided test


@dataclass(frozen=True)
class Tost:
    mean: float
    lower: float  # 90 % confidence interval of the mean shift
    upper: float
    p_value: float | None  # None when it cannot be computed (a single replicate, or zero spread)
    exact: bool = False  # zero spread: every shift equal, the interval is the point itself


@dataclass(frozen=True)
class Decision:
    outcome: DecisionOutcome
    p_value: float | None
    method: str
    sign_test: SignTest
    tost: Tost

    @property
    def p_two_sided(self) -> float | None:
        """The two-sided sign-test p-value of a displaced cell (None for the other outcomes)."""
        return self.sign_test.p_two_sided if self.method == SIGN_METHOD else None


# A reproduced cell's widening of the annotated replicate range, in the cell's unit (fraction or AUC; x100 for a
# cell in pp): one percentage point, below the papers' 1.2 pp margin and above one record of a 135-record split.
# Replicates are identical on one machine given the seeds; across machines it is not measured yet (statistics.md).
REPRODUCTION_TOLERANCE = 0.01

def _check(shifts_pp: Sequence[float], margin_pp: float) -> list[float]:
    values = [float(s) for s in shifts_pp]
    if not values:
        raise ValueError("at least one replicate shift is needed to decide a cell")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"replicate shifts must be finite numbers, got {values}")
    if not margin_pp > 0:
        raise ValueError(f"margin must be positive (in percentage points), got {margin_pp}")
    return values


def sign_test(shifts_pp: Sequence[float], *, margin_pp: float) -> SignTest:
    """Exact one-sided sign test of 'the shift clears the margin' in the majority direction.

    >>> sign_test([2, 3, -0.5], margin_pp=1.2)
    SignTest(direction='up', beyond=2, replicates=3, p_value=0.5, p_two_sided=1.0)
    """
    values = _check(shifts_pp, margin_pp)
    up = sum(v > margin_pp for v in values)
    down = sum(v < -margin_pp for v in values)
    if up == down == 0:
        return SignTest(direction=None, beyond=0, replicates=len(values), p_value=1.0, p_two_sided=1.0)
    direction: Direction = "up" if up >= down else "down"
    beyond = max(up, down)
    p_value = binomial_tail(beyond, len(values))
    return SignTest(direction=direction, beyond=beyond, replicates=len(values), p_value=p_value,
                    p_two_sided=min(1.0, 2.0 * p_value))


def binomial_tail(k: int, n: int) -> float:
    """``P(Binomial(n, 1/2) >= k)``, exactly (the rational rounded once to a float).

    >>> binomial_tail(10, 10), binomial_tail(8, 10) == 56 / 1024
    (0.0009765625, True)
    """
    return float(Fraction(sum(math.comb(n, j) for j in range(k, n + 1)), 2**n))


def tost(shifts_pp: Sequence[float], *, margin_pp: float, level: float = 0.90) -> Tost:
    """Two one-sided t-tests against ``±margin_pp`` with a ``level`` confidence interval.

    >>> t = tost([0.0] * 10, margin_pp=1.2)
    >>> (t.lower, t.upper, t.p_value, t.exact)
    (0.0, 0.0, None, True)
    """
    values = _check(shifts_pp, margin_pp)
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return Tost(mean=mean, lower=-math.inf, upper=math.inf, p_value=None)
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    se = math.sqrt(variance / n)
    alpha = (1 - level) / 2
    if se == 0:
        return Tost(mean=mean, lower=mean, upper=mean, p_value=None, exact=True)
    from scipy import stats  # the audit extra; the validator skips the TOST comparison without it

    critical = float(stats.t.ppf(1 - alpha, df=n - 1))
    p_lower = float(stats.t.sf((mean + margin_pp) / se, df=n - 1))  # H0: mean <= -margin
    p_upper = float(stats.t.cdf((mean - margin_pp) / se, df=n - 1))  # H0: mean >= +margin
    return Tost(mean=mean, lower=mean - critical * se, upper=mean + critical * se, p_value=max(p_lower, p_upper))


def sign_decides(signs: SignTest, *, level: float = 0.90) -> bool:
    """Whether the sign test displaces a cell: every replicate beyond the margin in one direction, and its
    one-sided p at most ``alpha = (1 - level) / 2``. Exact arithmetic only (the validator uses it without scipy).

    >>> sign_decides(sign_test([2.0] * 4, margin_pp=1.2)), sign_decides(sign_test([2.0] * 5, margin_pp=1.2))
    (False, True)
    """
    return signs.direction is not None and signs.beyond == signs.replicates and signs.p_value <= (1 - level) / 2


def decide(shifts_pp: Sequence[float], *, margin_pp: float = 1.2, level: float = 0.90) -> Decision:
    """Displaced, equivalent or undetermined, with the p-value and method of the rule that decided.

    One level decides both tests: ``alpha = (1 - level) / 2`` is each one-sided TOST test's level and the sign
    test's, so a cell is never displaced on weaker evidence than it would be called equivalent on.
    """
    signs = sign_test(shifts_pp, margin_pp=margin_pp)
    equivalence = tost(shifts_pp, margin_pp=margin_pp, level=level)  # scipy, unless the spread is zero
    alpha = (1 - level) / 2
    if sign_decides(signs, level=level):
        return Decision("displaced", signs.p_value, SIGN_METHOD, signs, equivalence)
    if equivalence.exact and -margin_pp < equivalence.mean < margin_pp:
        return Decision("equivalent", None, EXACT_EQUALITY_METHOD, signs, equivalence)
    if equivalence.p_value is not None and equivalence.p_value < alpha:
        return Decision("equivalent", equivalence.p_value, f"tost-{round(level * 100)}", signs, equivalence)
    p_value = equivalence.p_value if equivalence.p_value is not None else signs.p_value
    return Decision("undetermined", p_value, NO_METHOD, signs, equivalence)
