"""How a train-mode rule weighs its batches, and the warning every batch-size-sensitive refit carries
(docs/statistics.md#finite-batch-error).

The ``cumulative`` and ``ema`` rules (``torch.optim.swa_utils.update_bn`` and a training run's own accumulation) are
not functions of the pool alone, as the exact rule is: training-mode forwards normalize each batch by its own
statistics, so every layer after the first sees activations that depend on the batch size b, and the statistic
written per batch carries a finite-batch offset of order 1/b (Kalani et al., Appendix B, Eq. 11–13: the error is
O_p(N^-1/2) + O_L(1/b), and more records at a fixed b do not remove the second term). How the batches are
*averaged* adds to it, and that part is exact arithmetic, computed here:

* ``cumulative`` gives every batch the weight 1/K whatever its size, so a short last batch of n records counts as
  1/K of the statistics while holding n/N of the records;
* ``ema`` with momentum m gives batch k of K the weight m(1-m)^(K-k) and leaves (1-m)^K on the reset value
  (mean 0, variance 1) every refit starts from.

Measured against the exact rule by ``benchmarks/finite_batch.py`` (docs/statistics.md, "Finite-batch error").
"""

from __future__ import annotations

from dataclasses import dataclass

from bnconvention.errors import RefitError
from bnconvention.standard.models import AccumulationRule


@dataclass(frozen=True)
class BatchWeights:
    """The weight each batch's statistic has in the running buffers, and the weight left on the reset value."""

    weights: list[float]
    reset_weight: float


def batch_weights(rule: AccumulationRule, sizes: list[int], *, momentum: float | None = None) -> BatchWeights:
    """The weights ``rule`` gives batches of ``sizes`` (in order); the exact rule weighs records, n_k / N.

    >>> batch_weights("cumulative", [4, 4, 2]).weights
    [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
    >>> [round(w, 3) for w in batch_weights("ema", [4, 4], momentum=0.5).weights], batch_weights("ema", [4, 4],
    ...     momentum=0.5).reset_weight
    ([0.25, 0.5], 0.25)
    """
    if not sizes:
        raise RefitError("no batches: a rule weighs at least one batch")
    count = len(sizes)
    if rule == "exact":
        total = sum(sizes)
        return BatchWeights(weights=[size / total for size in sizes], reset_weight=0.0)
    if rule == "cumulative":
        return BatchWeights(weights=[1.0 / count] * count, reset_weight=0.0)
    if momentum is None or not 0 < momentum <= 1:
        raise RefitError(f"the ema rule needs a momentum in (0, 1], got {momentum!r}")
    weights = [momentum * (1 - momentum) ** (count - 1 - k) for k in range(count)]
    return BatchWeights(weights=weights, reset_weight=(1 - momentum) ** count)


def batch_size_warning(rule: AccumulationRule, sizes: list[int], *, momentum: float | None = None) -> str | None:
    """The sentence a refit under a batch-size-sensitive rule carries (None for the exact rule or no batches)."""
    if rule == "exact" or not sizes:
        return None
    batch = max(sizes)
    text = (f"the {rule} rule is batch-size sensitive: training-mode forwards normalize each batch by its own "
            f"statistics, so the refit statistics carry a finite-batch offset of order 1/b against the exact rule "
            f"(b = {batch} here; docs/statistics.md#finite-batch-error) that more records at the same b do not remove")
    weighed = batch_weights(rule, sizes, momentum=momentum)
    total = sum(sizes)
    shortest = min(range(len(sizes)), key=lambda k: (sizes[k], -k))
    if sizes[shortest] < batch:
        share = sizes[shortest] / total
        text += (f"; the batch of {sizes[shortest]} weighs {weighed.weights[shortest]:.2%} of the statistics for "
                 f"{share:.2%} of the records ({weighed.weights[shortest] / share:.1f}x its share)")
    if weighed.reset_weight >= 0.01:
        text += (f"; after {len(sizes)} batches at momentum {momentum:g} the reset value (mean 0, variance 1) still "
                 f"weighs {weighed.reset_weight:.2%}")
    return text + "; rule='exact' is independent of the batches (docs/statistics.md, 'Finite-batch error')"


__all__ = ["BatchWeights", "batch_size_warning", "batch_weights"]
