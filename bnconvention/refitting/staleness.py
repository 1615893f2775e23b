"""Staleness distances between a shipped state and a refit one, per layer and layer-averaged.

Kalani et al., Eq. 15; how it is read: docs/statistics.md#staleness.

For layer ℓ with shipped mean µ and variance σ², and refit mean µ̂ and variance σ̂² (σ̂ = sqrt(σ̂²)):

* mean distance ``‖µ − µ̂‖₂ / ‖σ̂‖₂`` (the mean shift in units of the refit standard deviation),
* variance distance ``‖σ² − σ̂²‖₂ / ‖σ̂²‖₂`` (relative variance error),

computed in float64. The layer average is the plain mean over layers. A model without running statistics has no
layers and both averages are exactly 0.0 (channel absent).

>>> import torch
>>> shipped = {"bn": (torch.tensor([1.0]), torch.tensor([4.0]))}
>>> refit = {"bn": (torch.tensor([0.0]), torch.tensor([1.0]))}
>>> s = staleness_distance(shipped, refit)
>>> s.layers[0].mean_distance, s.layers[0].var_distance
(1.0, 3.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bnconvention.standard.models import LayerStaleness, Staleness

StatsPair = Sequence[Any]  # (mean, var, ...): a tuple, a list or a LayerRunningState


def layer_distances(shipped: StatsPair, refit: StatsPair) -> tuple[float, float] | None:
    """``(mean_distance, var_distance)`` of one layer, or None when undefined (zero refit variance, non-finite)."""
    # on the CPU in float64 whatever device the statistics live on (MPS has no float64; they are small)
    mean, var = (torch.as_tensor(t).to("cpu", torch.float64).reshape(-1) for t in (shipped[0], shipped[1]))
    mean_hat, var_hat = (torch.as_tensor(t).to("cpu", torch.float64).reshape(-1) for t in (refit[0], refit[1]))
    if not (mean.shape == var.shape == mean_hat.shape == var_hat.shape):
        raise ValueError(f"statistics of different shapes: shipped {tuple(mean.shape)}/{tuple(var.shape)}, "
                         f"refit {tuple(mean_hat.shape)}/{tuple(var_hat.shape)}")
    sigma_norm = torch.linalg.vector_norm(var_hat.clamp_min(0.0).sqrt())
    var_norm = torch.linalg.vector_norm(var_hat)
    if not bool(sigma_norm > 0) or not bool(var_norm > 0):
        return None
    mean_distance = float(torch.linalg.vector_norm(mean - mean_hat) / sigma_norm)
    var_distance = float(torch.linalg.vector_norm(var - var_hat) / var_norm)
    if not (_finite(mean_distance) and _finite(var_distance)):
        return None
    return mean_distance, var_distance


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def staleness_distance(shipped: Mapping[str, StatsPair], refit: Mapping[str, StatsPair], *,
                       warnings: list[str] | None = None) -> Staleness:
    """Per-layer and layer-averaged distances of ``shipped`` from ``refit``, in the order of ``refit``.

    Both map a layer name to ``(mean, var)`` (tensors or sequences; a ``LayerRunningState`` works too). Layers
    present on one side only, and layers whose distance is undefined (the refit variance is zero in every channel,
    or a value is NaN/inf), are left out of the result; a sentence saying so is appended to ``warnings`` when given.
    """
    notes: list[str] = []
    layers: list[LayerStaleness] = []
    for name, refit_pair in refit.items():
        if name not in shipped:
            notes.append(f"layer {name!r} has refit statistics but no shipped ones; it is left out of the staleness")
            continue
        distances = layer_distances(shipped[name], refit_pair)
        if distances is None:
            notes.append(f"layer {name!r}: staleness undefined (refit variance zero in every channel, or NaN/inf "
                         "statistics); left out of the layer averages")
            continue
        layers.append(LayerStaleness(name=name, mean_distance=distances[0], var_distance=distances[1]))
    only_shipped = [name for name in shipped if name not in refit]
    if only_shipped:
        notes.append(f"layers {only_shipped} have shipped statistics but were not refit; they are left out of the "
                     "staleness")
    if warnings is not None:
        warnings.extend(notes)
    if not layers:
        return Staleness(mean_distance=0.0, var_distance=0.0, layers=[])
    return Staleness(
        mean_distance=sum(layer.mean_distance for layer in layers) / len(layers),
        var_distance=sum(layer.var_distance for layer in layers) / len(layers),
        layers=layers,
    )
