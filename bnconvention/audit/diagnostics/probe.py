"""The forget linear probe and its decomposition (Kalani et al., Proposition 1), as pure functions over arrays.

The probe is sklearn's ``LogisticRegression(solver="lbfgs")`` on penultimate features (the input of the classifier
head, or of the module the spec names), trained on ``per_class`` records of each class of the probe's train split
and scored on the forget split: LP, the forget-class linear-probe accuracy. The training draw is one fixed draw
(``SeedSequence(seed, spawn_key=(7,))``) for every state, so the shipped state (LP_M), each refit (LP_Mcal) and
the retrain reference (LP_retr) differ only in their features. Per replicate ``r``::

    BN-residual_r = LP_M - LP_Mcal_r        NC-residual_r = LP_Mcal_r - LP_retr        (in pp)

and each residual's interval is the Student t interval of its mean over the replicates. A negative BN-residual
means the shipped running statistics deflate the probe: the shipped state hides encoder leakage that the refit
reveals; a positive one means the surface probe overstates it. The NC-residual is what the encoder keeps beyond a
model that never saw the removed records.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats

from bnconvention.architectures.outputs import logits
from bnconvention.audit.spec.diagnostics import MIN_PROBE_TEST_RECORDS, LinearProbeSpec
from bnconvention.errors import AuditSpecError
from bnconvention.formats.text import plural
from bnconvention.standard.diagnostics import Interval

# scikit-learn is imported inside probe_accuracy, the one function that fits with it: its import takes seconds, and
# an audit without the linear probe never needs it.

LP_CELL = "lp_forget"
PROBE_STREAM = 7  # SeedSequence(seed, spawn_key=(7,)): the probe's training draw
PROBE_TEST_STREAM = 8  # (8,): the forget records scored, when test_records caps them
INTERVAL_LEVEL = 0.95
FIELD = "/diagnostics/linear_probe"


@dataclass(frozen=True)
class ProbeDraw:
    """Which records the probe trains on (indices into the train split) and is scored on (into the forget split)."""

    train: np.ndarray
    test: np.ndarray
    classes: int


def draw_probe(train_labels: np.ndarray, forget_labels: np.ndarray, spec: LinearProbeSpec, *, seed: int,
               train_split: str) -> ProbeDraw:
    """``per_class`` training records of every class (one seeded draw), and the forget records scored.

    Bad input is refused before anything is computed, naming the cell: a train split with one class, a class
    with fewer records than ``per_class``, too few forget records, a forget label the probe never saw."""
    classes, counts = np.unique(train_labels, return_counts=True)
    if len(classes) < 2:
        raise AuditSpecError(f"cell {LP_CELL}: the probe's train split ({train_split}) has "
                             f"{plural(len(classes), 'class', 'classes')}; a linear probe needs at least 2",
                             field=f"{FIELD}/train_split")
    short = [(int(c), int(n)) for c, n in zip(classes, counts, strict=True) if n < spec.per_class]
    if short:
        listed = ", ".join(f"class {c}: {n}" for c, n in short[:5])
        raise AuditSpecError(f"cell {LP_CELL}: linear_probe.per_class is {spec.per_class} but the {train_split} "
                             f"split has fewer records of {plural(len(short), 'class', 'classes')} ({listed}); lower "
                             "per_class", field=f"{FIELD}/per_class")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE_STREAM,)))
    train = np.sort(np.concatenate([rng.choice(np.flatnonzero(train_labels == c), size=spec.per_class,
                                               replace=False) for c in classes]))
    test = _forget_records(forget_labels, spec, seed=seed)
    unseen = sorted(set(np.unique(forget_labels[test]).tolist()) - set(classes.tolist()))
    if unseen:
        raise AuditSpecError(f"cell {LP_CELL}: forget labels {unseen} do not occur in the probe's train split "
                             f"({train_split}); the probe cannot predict a class it never saw",
                             field=f"{FIELD}/train_split")
    return ProbeDraw(train=train, test=test, classes=len(classes))


def _forget_records(forget_labels: np.ndarray, spec: LinearProbeSpec, *, seed: int) -> np.ndarray:
    available = len(forget_labels)
    wanted = available if spec.test_records is None else spec.test_records
    if wanted > available or available < MIN_PROBE_TEST_RECORDS:
        raise AuditSpecError(f"cell {LP_CELL}: the probe is scored on {plural(wanted, 'forget record')} but the forget "
                             f"split has {plural(available, 'record')} (at least {MIN_PROBE_TEST_RECORDS})",
                             field=f"{FIELD}/test_records")
    if wanted == available:
        return np.arange(available)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE_TEST_STREAM,)))
    return np.sort(rng.choice(available, size=wanted, replace=False))


def probe_accuracy(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, *,
                   spec: LinearProbeSpec) -> float:
    """Accuracy on ``test`` of the lbfgs logistic regression fitted on ``train`` (deterministic: lbfgs has no
    randomness)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    if spec.standardize:
        mean, std = train_x.mean(axis=0), train_x.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    probe = LogisticRegression(solver="lbfgs", max_iter=spec.max_iter, C=spec.inverse_regularization)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the cap is part of the protocol, recorded with it
        probe.fit(train_x, train_y)
    return float(np.mean(probe.predict(test_x) == test_y))


def t_interval(values: Sequence[float], *, level: float = INTERVAL_LEVEL) -> Interval:
    """Mean with the Student t interval over replicates (zero width when they agree; one value: its point)."""
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return Interval(estimate=mean, lower=mean, upper=mean, level=level, method="t-replicates")
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(estimate=mean, lower=mean - half, upper=mean + half, level=level, method="t-replicates")


@dataclass(frozen=True)
class Decomposition:
    """Proposition 1 per replicate, in pp, and the residuals' intervals."""

    bn_residuals_pp: list[float]
    nc_residuals_pp: list[float] | None
    bn_residual_pp: Interval
    nc_residual_pp: Interval | None


def decompose(lp_shipped: float, lp_refit: Sequence[float], lp_reference: float | None) -> Decomposition:
    """BN-residual ``LP_M - LP_Mcal`` and NC-residual ``LP_Mcal - LP_retr`` of each replicate, in pp.

    >>> d = decompose(0.5, [0.75, 0.70], 0.625)
    >>> [round(v, 6) for v in d.bn_residuals_pp], [round(v, 6) for v in d.nc_residuals_pp]
    ([-25.0, -20.0], [12.5, 7.5])
    """
    bn = [100.0 * (lp_shipped - v) for v in lp_refit]
    nc = None if lp_reference is None else [100.0 * (v - lp_reference) for v in lp_refit]
    return Decomposition(bn_residuals_pp=bn, nc_residuals_pp=nc, bn_residual_pp=t_interval(bn),
                         nc_residual_pp=None if nc is None else t_interval(nc))


def feature_layer(model: torch.nn.Module, name: str | None) -> tuple[str, torch.nn.Module]:
    """The module whose input is the feature vector: ``name``, or the last ``torch.nn.Linear``."""
    modules = dict(model.named_modules())
    if name is not None:
        if name not in modules:
            raise AuditSpecError(f"cell {LP_CELL}: the model has no module {name!r} (linear_probe.feature_layer)",
                                 field=f"{FIELD}/feature_layer")
        return name, modules[name]
    linear = [(n, m) for n, m in modules.items() if isinstance(m, torch.nn.Linear)]
    if not linear:
        raise AuditSpecError(f"cell {LP_CELL}: the model has no torch.nn.Linear head; name the module whose input "
                             "is the feature vector in linear_probe.feature_layer", field=f"{FIELD}/feature_layer")
    return linear[-1]


def features_and_logits(model: torch.nn.Module, x: torch.Tensor, *, transform: Any, layer: torch.nn.Module | None,
                        batch_size: int) -> tuple[np.ndarray | None, torch.Tensor]:
    """Eval-mode forwards of ``x`` under ``transform``: the (flattened) input of ``layer`` (None without a layer)
    and the logits."""
    captured: list[torch.Tensor] = []
    handle = None if layer is None else layer.register_forward_pre_hook(
        lambda _m, args: captured.append(args[0].detach().flatten(1)))
    outputs = []
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(x), batch_size):
                outputs.append(logits(model(transform(x[start:start + batch_size], generator=None))).float())
    finally:
        if handle is not None:
            handle.remove()
    features = torch.cat(captured).double().numpy() if captured else None
    return features, torch.cat(outputs)


__all__ = ["LP_CELL", "Decomposition", "ProbeDraw", "decompose", "draw_probe", "feature_layer", "features_and_logits",
           "probe_accuracy", "t_interval"]
