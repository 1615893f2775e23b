"""A shadow-free membership attack, shipped against refit (Kalani et al., appendix O), as pure functions over arrays.

Each record gets one score from the model's logits: minus its cross-entropy loss (``loss-threshold``) or its
largest softmax probability (``confidence-threshold``); a higher score says *member*. Sweeping a threshold over the
scores of members (forget records) and non-members (test records; by default only those of the forget records'
classes, so that a class removal compares membership and not class) traces the attack's ROC curve, and its AUC is the
Mann-Whitney probability that a random member outscores a random non-member (ties count one half). 0.5 is an
attacker who learns nothing.

The records are drawn from ``SeedSequence(seed, spawn_key=(9,))``. The interval is a percentile bootstrap over
records: each resample redraws members and non-members with replacement (``SeedSequence(seed, spawn_key=(9, 1))``)
and recomputes the AUC of the shipped state and the mean AUC of the refit replicates on the *same* records, so the
shift's interval is paired.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata

from bnconvention.audit.spec.diagnostics import MIN_ATTACK_RECORDS, MembershipSpec
from bnconvention.errors import AuditSpecError
from bnconvention.formats.text import plural
from bnconvention.standard.diagnostics import Interval

MIA_CELL = "mia_auc"
ATTACK_STREAM = 9  # SeedSequence(seed, spawn_key=(9,)): the records drawn, then the bootstrap
FIELD = "/diagnostics/membership_inference"


def auc(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """P(member score > non-member score) + P(equal) / 2, from average ranks (Mann-Whitney U / (n_m n_n)).

    >>> auc(np.array([3.0, 2.0]), np.array([1.0, 2.0]))
    0.875
    """
    if len(members) == 0 or len(nonmembers) == 0:
        raise ValueError("an AUC needs at least one member and one non-member score")
    ranks = rankdata(np.concatenate([members, nonmembers]))
    n_m, n_n = len(members), len(nonmembers)
    return float((ranks[:n_m].sum() - n_m * (n_m + 1) / 2) / (n_m * n_n))


def attack_scores(logits: torch.Tensor, labels: torch.Tensor, *, attack: str) -> np.ndarray:
    """One membership score per record: higher means member."""
    logits = logits.double()
    if attack == "loss-threshold":
        return (-torch.nn.functional.cross_entropy(logits, labels.long(), reduction="none")).numpy()
    return torch.softmax(logits, dim=1).max(dim=1).values.numpy()


@dataclass(frozen=True)
class AttackDraw:
    members: np.ndarray  # indices into the forget split
    nonmembers: np.ndarray  # indices into the test split
    seed: int


def draw_attack(*, forget_labels: np.ndarray, test_labels: np.ndarray, spec: MembershipSpec,
                seed: int) -> AttackDraw:
    """``records_per_side`` members and non-members (default: the smaller side), refused below the minimum. With
    ``class_matched`` the non-members come only from test records of the forget split's classes."""
    pool = np.arange(len(test_labels))
    if spec.class_matched:
        pool = np.flatnonzero(np.isin(test_labels, np.unique(forget_labels)))
    forget, test = len(forget_labels), len(pool)
    per_side = spec.records_per_side if spec.records_per_side is not None else min(forget, test)
    if per_side > min(forget, test) or per_side < MIN_ATTACK_RECORDS:
        matched = " of the forget classes" if spec.class_matched else ""
        raise AuditSpecError(f"cell {MIA_CELL}: the attack draws {plural(per_side, 'record')} per side from forget "
                             f"({plural(forget, 'record')}) and test{matched} ({plural(test, 'record')}); it needs at "
                             f"least {MIN_ATTACK_RECORDS} per side and at most the smaller side",
                             field=f"{FIELD}/records_per_side")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(ATTACK_STREAM,)))
    members = np.sort(rng.choice(forget, size=per_side, replace=False))
    nonmembers = np.sort(rng.choice(pool, size=per_side, replace=False))
    return AttackDraw(members=members, nonmembers=nonmembers, seed=seed)


@dataclass(frozen=True)
class AttackIntervals:
    shipped: Interval
    refit: Interval
    shift_pp: Interval


def _percentile(estimate: float, draws: np.ndarray, level: float) -> Interval:
    lower, upper = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(estimate=estimate, lower=float(lower), upper=float(upper), level=level,
                    method="bootstrap-percentile")


def bootstrap_intervals(shipped: tuple[np.ndarray, np.ndarray], refits: Sequence[tuple[np.ndarray, np.ndarray]], *,
                        spec: MembershipSpec, seed: int) -> AttackIntervals:
    """Shipped AUC, mean refit AUC and their difference (pp), each with its paired percentile bootstrap interval.
    ``shipped`` and each refit are (member scores, non-member scores) over the same records."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(ATTACK_STREAM, 1)))
    n_m, n_n = len(shipped[0]), len(shipped[1])
    draws = np.empty((spec.bootstrap, 2))
    for b in range(spec.bootstrap):
        m, n = rng.integers(0, n_m, n_m), rng.integers(0, n_n, n_n)
        draws[b] = (auc(shipped[0][m], shipped[1][n]), float(np.mean([auc(r[0][m], r[1][n]) for r in refits])))
    shipped_auc = auc(*shipped)
    refit_auc = float(np.mean([auc(*r) for r in refits]))
    return AttackIntervals(shipped=_percentile(shipped_auc, draws[:, 0], spec.level),
                           refit=_percentile(refit_auc, draws[:, 1], spec.level),
                           shift_pp=_percentile(100.0 * (refit_auc - shipped_auc), 100.0 * (draws[:, 1] - draws[:, 0]),
                                                spec.level))


__all__ = ["MIA_CELL", "AttackDraw", "AttackIntervals", "attack_scores", "auc", "bootstrap_intervals", "draw_attack"]
