"""The exact rule with forward hooks: one pass over the pool per BatchNorm layer, for models fx cannot trace.

A first eval forward on the first chunk records the order in which the BatchNorm layers are called. Pass k then
runs the model (in eval mode) over every chunk; a forward pre-hook lets the layers already refit run normally,
accumulates the input of layer k, and stops the forward there (early stop: the rest of the network is not run).
After the pass, layer k's exact statistics are written and pass k + 1 starts. The result equals the traced
layer-major pass; the cost is about half a forward per layer (K layers: ~K/2 forwards), the memory one chunk's
activations.

Refused with :class:`~bnconvention.errors.UnsupportedModelError`: a BatchNorm module called more than once per
forward (its statistics would depend on its own output) and models whose BatchNorm call order depends on the input.
"""

from __future__ import annotations

from typing import Any

import torch
from tqdm import tqdm

from bnconvention.errors import UnsupportedModelError
from bnconvention.refitting.exact import ExactOutcome, commit_layer_stats
from bnconvention.refitting.graph import shared_layer_error
from bnconvention.refitting.moments import ChannelMoments
from bnconvention.refitting.pool import run_forward
from bnconvention.refitting.state import tracked_layers


class _StopForward(Exception):
    """Raised by the hook once the target layer's input is recorded: the rest of the forward is not needed."""


def _order_error(detail: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"the order of BatchNorm layers depends on the input: {detail}; the sequential exact "
                                 "refit needs one forward order")


def _forward(model: torch.nn.Module, chunk: torch.Tensor, index: int) -> bool:
    """Run one forward; True when it ran to the end, False when a hook stopped it."""
    try:
        run_forward(model, chunk, where=f"pool chunk {index}", passthrough=(_StopForward,))
    except _StopForward:
        return False
    return True


def run_hooks(model: torch.nn.Module, chunks: list[torch.Tensor], *, num_batches_tracked: int,
              progress: bool = False) -> ExactOutcome:
    """Refit every BatchNorm layer with running statistics that the forward calls, one pass per layer."""
    layers = tracked_layers(model)
    names: dict[torch.nn.Module, str] = {module: name for name, module in layers.items()}
    calls: list[str] = []
    state: dict[str, Any] = {"target": None, "moments": None, "finalized": set(), "discovering": True}

    def pre_hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        name = names[module]
        if name in calls:
            raise shared_layer_error(name)
        calls.append(name)
        if state["discovering"] or name in state["finalized"]:
            return
        if name != state["target"]:
            raise _order_error(f"a pool chunk reached {name!r} before {state['target']!r}, unlike the first chunk")
        state["moments"].update(args[0])
        raise _StopForward

    handles = [module.register_forward_pre_hook(pre_hook) for module in layers.values()]
    try:
        with torch.no_grad():
            _forward(model, chunks[0], 0)
            order = list(calls)
            state["discovering"] = False
            with tqdm(total=len(order), desc="exact refit (per-layer passes)", unit="layer", disable=not progress,
                      leave=False) as bar:
                for target in order:
                    state["target"], state["moments"] = target, ChannelMoments()
                    for index, chunk in enumerate(chunks):
                        calls.clear()
                        if _forward(model, chunk, index):
                            raise _order_error(f"pool chunk {index} never reached {target!r}, which the first "
                                               "chunk reached")
                    commit_layer_stats(target, layers[target], state["moments"],
                                       num_batches_tracked=num_batches_tracked)
                    state["finalized"].add(target)
                    bar.update(1)
    finally:
        for handle in handles:
            handle.remove()
    return ExactOutcome(order=order, passes=len(order), path="hooks")
