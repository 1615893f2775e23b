"""Snapshot and restore what a refit touches: the running buffers φ, training flags and BN momenta.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
>>> saved = running_state(model)
>>> sorted(saved), saved["1"].mean.tolist()
(['1'], [0.0, 0.0, 0.0, 0.0])
>>> with torch.no_grad():
...     _ = model[1].running_mean.fill_(5.0)
>>> restore_running_state(model, saved)
>>> model[1].running_mean.tolist()
[0.0, 0.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast

import torch
from torch.nn.modules.batchnorm import _BatchNorm, _LazyNormBase
from torch.nn.modules.lazy import LazyModuleMixin

from bnconvention.errors import RefitError, UnsupportedModelError
from bnconvention.formats.text import elide


class LayerRunningState(NamedTuple):
    """Cloned running buffers of one BatchNorm layer. ``(mean, var)`` lead, so it also works as a staleness pair."""

    mean: torch.Tensor
    var: torch.Tensor
    num_batches_tracked: torch.Tensor | None


def batchnorm_modules(model: torch.nn.Module) -> dict[str, torch.nn.modules.batchnorm._BatchNorm]:
    """Every BatchNorm module (``_BatchNorm`` subclasses, SyncBatchNorm included) by name, in module order."""
    return {name: module for name, module in model.named_modules() if isinstance(module, _BatchNorm)}


def lazy_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The lazy modules (``LazyBatchNorm2d``, ``LazyLinear``, ...) whose parameters or buffers are not materialised
    yet, by name, in module order: their shapes, running statistics included, exist only after one forward."""
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        lazy = isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()  # type: ignore[misc]
        if lazy:
            found.append((name, module))
    return found


def ensure_materialised(model: torch.nn.Module, *, what: str, fix: str = "") -> None:
    """Raise :class:`UnsupportedModelError` naming the layers when ``model`` has lazy layers not materialised yet:
    one line instead of torch's error about an uninitialized parameter deep inside a refit.
    ``what`` starts the message (the model or the factory that built it); ``fix`` ends it."""
    lazy = lazy_layers(model)
    if not lazy:
        return
    batchnorm = [(name, module) for name, module in lazy if isinstance(module, _LazyNormBase)]
    named = batchnorm or lazy
    shown = ", ".join(f"{elide(name or '(the model itself)')!r} ({type(module).__name__})"
                      for name, module in named[:3])
    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
    kind = "lazy BatchNorm layer" if batchnorm else "lazy layer"
    raise UnsupportedModelError(
        f"{what}: {kind}{'s' if len(named) > 1 else ''} {shown}{more} not materialised: lazy "
        f"{'BatchNorm ' if batchnorm else ''}layers must be materialised (one forward with an input of the model's "
        f"shape) before a refit, which needs their num_features{'; ' + fix if fix else ''}")


def has_running_stats(module: torch.nn.Module) -> bool:
    """Whether a BatchNorm module stores running statistics (``track_running_stats=True``)."""
    return getattr(module, "running_mean", None) is not None and getattr(module, "running_var", None) is not None


def tracked_layers(model: torch.nn.Module) -> dict[str, torch.nn.modules.batchnorm._BatchNorm]:
    """The BatchNorm layers that hold running statistics, in module order: the deployed state φ."""
    return {name: module for name, module in batchnorm_modules(model).items() if has_running_stats(module)}


def running_buffers(module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """``(running_mean, running_var)`` of a layer that tracks running statistics, typed as the tensors they are
    (to mypy a module attribute is tensor-or-module, and BatchNorm's buffers are optional)."""
    return cast("torch.Tensor", module.running_mean), cast("torch.Tensor", module.running_var)


def running_state(model: torch.nn.Module) -> dict[str, LayerRunningState]:
    """Cloned running buffers of every BatchNorm layer that tracks them, by layer name, in module order."""
    states = {}
    with torch.no_grad():
        for name, module in tracked_layers(model).items():
            mean, var = running_buffers(module)
            tracked = module.num_batches_tracked
            states[name] = LayerRunningState(mean.detach().clone(), var.detach().clone(),
                                             None if tracked is None else tracked.detach().clone())
    return states


def restore_running_state(model: torch.nn.Module, state: Mapping[str, LayerRunningState]) -> None:
    """Copy saved buffers back in place (the buffer tensors stay the same objects; dtypes and shapes must match)."""
    layers = tracked_layers(model)
    missing = sorted(set(state) - set(layers))
    if missing:
        raise RefitError(f"cannot restore running statistics: the model has no BatchNorm layer with running "
                         f"statistics named {missing}; restore into the model the state was taken from")
    with torch.no_grad():
        for name, saved in state.items():
            module = layers[name]
            mean, var = running_buffers(module)
            mean.copy_(saved.mean)
            var.copy_(saved.var)
            if saved.num_batches_tracked is not None and module.num_batches_tracked is not None:
                module.num_batches_tracked.copy_(saved.num_batches_tracked)


@dataclass
class ModuleModes:
    """Every module's ``training`` flag and every BatchNorm layer's momentum, to restore after a refit."""

    training: dict[torch.nn.Module, bool]
    momenta: dict[torch.nn.modules.batchnorm._BatchNorm, float | None]

    @classmethod
    def capture(cls, model: torch.nn.Module) -> ModuleModes:
        return cls(
            training={module: module.training for module in model.modules()},
            momenta={module: module.momentum for module in batchnorm_modules(model).values()},
        )

    def restore(self) -> None:
        for module, flag in self.training.items():
            module.training = flag
        for module, momentum in self.momenta.items():
            module.momentum = momentum
