"""The train-mode rules: statistics written by training-mode BatchNorm forwards, as a training run writes them.

* ``cumulative`` is exactly ``torch.optim.swa_utils.update_bn``: every BatchNorm layer is reset (mean 0, variance
  1, ``num_batches_tracked`` 0), its momentum set to None (cumulative moving average), the whole model put in
  training mode, and each pool batch run through it. Each batch's own (unbiased) variance enters the average with
  weight 1/num_batches, whatever its size, so a short last batch is over-weighted; the engine warns when batch sizes
  differ. Like ``update_bn``, ``model.train()`` also switches dropout (and any other train-time behaviour) on, so
  the statistics depend on the random state when the model has dropout; the record says ``dropout: on``.
* ``ema`` replays a training run's accumulation: the same reset, then training-mode forwards with each layer's own
  momentum. It starts from reset statistics, not from the current ones, so the result depends only on the weights
  and the pool (and the random state when there is dropout), like every other refit.

Both run under ``torch.no_grad()``; the engine restores training flags and momenta afterwards.
"""

from __future__ import annotations

from typing import Literal

import torch
from tqdm import tqdm

from bnconvention.errors import RefitError
from bnconvention.refitting.pool import PoolReader, run_forward
from bnconvention.refitting.state import batchnorm_modules, running_buffers, tracked_layers

TrainRule = Literal["cumulative", "ema"]


def run_train_mode(model: torch.nn.Module, reader: PoolReader, *, rule: TrainRule,
                   progress: bool = False) -> list[str]:
    """Reset and refit every BatchNorm layer with training-mode forwards over ``reader``; returns the layers never
    called by the forward (reset, as in ``update_bn``)."""
    layers = batchnorm_modules(model)
    for module in layers.values():
        module.reset_running_stats()
    model.train()
    if rule == "cumulative":
        for module in layers.values():
            module.momentum = None
    with torch.no_grad():
        for index, x in enumerate(tqdm(reader, desc=f"{rule} refit (train-mode forwards)", unit="batch",
                                       disable=not progress, leave=False)):
            run_forward(model, x, where=f"pool batch {index}")
    if not reader.batch_sizes:
        raise RefitError("the pool yielded no batches; pass at least one batch of inputs")
    never_called = []
    for name, module in tracked_layers(model).items():
        mean, var = running_buffers(module)
        finite = bool(torch.isfinite(mean).all()) and bool(torch.isfinite(var).all())
        if not finite:
            raise RefitError(f"non-finite activations (NaN or inf) reached BatchNorm layer {name!r}: its running "
                             "statistics became NaN/inf; check the pool for NaN/inf inputs and the model for "
                             "overflow. Running statistics and weights are unchanged")
        if module.num_batches_tracked is not None and int(module.num_batches_tracked) == 0:
            never_called.append(name)
    return never_called
