"""The ``torch.fx`` graph of a model, cut into stages at its BatchNorm layers, for the layer-major exact pass.

The model is traced with every BatchNorm module kept as one ``call_module`` node. Only the graph prefix up to the
last BatchNorm layer with running statistics is kept (the head cannot influence any statistic). That prefix is cut
into *stages*: stage 0 holds the nodes before the first BatchNorm layer; stage k (k ≥ 1) starts with the k-th
BatchNorm layer and holds the nodes up to the next one. Within a stage a chunk of the pool can run from the first
node to the last without waiting for other chunks; between stages every chunk must have arrived, because the next
layer's statistics are taken over the whole pool.

Refused here: BatchNorm modules called more than once per forward (:class:`~bnconvention.errors.UnsupportedModelError`:
the sequential exact rule is undefined for them); and, as :class:`Untraceable` so the engine can fall back to hooks,
tracing failures (data-dependent control flow), leaf modules that contain BatchNorm layers, reads of running buffers
outside the BatchNorm call, and forwards with more than one required input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx
from torch.nn.modules.batchnorm import _BatchNorm

from bnconvention.errors import UnsupportedModelError
from bnconvention.formats.digests import RUNNING_SUFFIXES
from bnconvention.refitting.state import batchnorm_modules, tracked_layers


class Untraceable(Exception):
    """The layer-major traced pass cannot handle this model or pool; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def shared_layer_error(name: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"BatchNorm layer {name!r} is called more than once per forward; its statistics would depend on its own "
        "output, so the sequential exact refit is undefined: use rule='cumulative' or give each call its own "
        "BatchNorm module")


def trace_model(model: torch.nn.Module) -> torch.fx.Graph:
    """A ``torch.fx`` graph of ``model`` (in its current mode) with every BatchNorm module kept as one node."""
    class _Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
            return isinstance(m, _BatchNorm) or super().is_leaf_module(m, module_qualified_name)

    try:
        return _Tracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - tracing runs the model's own Python; any failure means untraceable
        raise Untraceable(f"torch.fx could not trace the model ({type(exc).__name__}: {exc})") from exc


@dataclass
class Plan:
    """What the layer-major pass runs.

    ``nodes``: the graph prefix, in order. ``bn_nodes``: BatchNorm nodes with running statistics → layer name, in
    forward order. ``stages``: node positions per stage (see the module docstring). ``last_use``: position of each
    node's last user within the prefix (absent: no user). ``per_chunk``: nodes whose value depends on the input.
    """

    nodes: list[torch.fx.Node]
    bn_nodes: dict[torch.fx.Node, str]
    stages: list[list[int]]
    last_use: dict[torch.fx.Node, int]
    per_chunk: set[torch.fx.Node]


def make_plan(graph: torch.fx.Graph, model: torch.nn.Module) -> Plan:
    """Check the traced graph and cut its prefix into stages."""
    modules = dict(model.named_modules())
    all_bn = batchnorm_modules(model)
    tracked = tracked_layers(model)
    buffer_names = {f"{layer}.{suffix}" if layer else suffix for layer in tracked for suffix in RUNNING_SUFFIXES}
    nodes = list(graph.nodes)
    bn_nodes: dict[torch.fx.Node, str] = {}
    for node in nodes:
        if node.op == "get_attr" and str(node.target) in buffer_names:
            raise Untraceable(f"the forward reads the running buffer {node.target!r} outside its BatchNorm module")
        if node.op != "call_module":
            continue
        target = str(node.target)
        if target in tracked:
            if target in bn_nodes.values():
                raise shared_layer_error(target)
            if len(node.args) != 1 or node.kwargs:
                raise Untraceable(f"BatchNorm layer {target!r} is not called on exactly one input")
            bn_nodes[node] = target
        elif target not in all_bn and any(isinstance(m, _BatchNorm) for m in modules[target].modules()):
            raise Untraceable(f"module {target!r} is a leaf of the trace but contains BatchNorm layers")
    if not bn_nodes:
        return Plan(nodes=[], bn_nodes={}, stages=[], last_use={}, per_chunk=set())
    position = {node: index for index, node in enumerate(nodes)}
    prefix = nodes[: max(position[node] for node in bn_nodes) + 1]
    placeholders = [node for node in prefix if node.op == "placeholder"]
    for extra in placeholders[1:]:
        if not extra.args:
            raise Untraceable(f"the forward takes more than one required input ({extra.target!r}); a pool feeds one")
    per_chunk: set[torch.fx.Node] = {placeholders[0]} if placeholders else set()
    last_use: dict[torch.fx.Node, int] = {}
    stages: list[list[int]] = [[]]
    for index, node in enumerate(prefix):
        inputs = node.all_input_nodes
        if any(n in per_chunk for n in inputs):
            per_chunk.add(node)
        for n in inputs:
            last_use[n] = index
        if node in bn_nodes:
            if node.args[0] not in per_chunk:
                raise Untraceable(f"BatchNorm layer {bn_nodes[node]!r} is not applied to an activation of the pool")
            stages.append([])
        stages[-1].append(index)
    return Plan(nodes=prefix, bn_nodes=bn_nodes, stages=stages, last_use=last_use, per_chunk=per_chunk)


def _structure(model: torch.nn.Module) -> tuple[object, ...]:
    """What a trace depends on besides θ: every module object, its class and forward, its training flag and which
    buffers it holds (a layer whose running statistics were removed is no longer refit)."""
    return tuple((name, id(module), type(module), type(module).forward, module.__dict__.get("forward"),
                  module.training, tuple((key, value is None) for key, value in module._buffers.items()))
                 for name, module in model.named_modules())


class PlanCache:
    """The traced plan of one model, reused by later refits while its modules are the same objects with the same
    classes, forwards and training flags (an audit's replicates, its recoverability points and provenance arms:
    tracing ResNet-18 costs about 2 % of an eval forward over 512 images, and more than the forward of a ten-image
    recoverability pool). Any change to the module tree traces again; an untraceable model is never cached."""

    def __init__(self) -> None:
        self._entry: tuple[tuple[object, ...], Plan] | None = None

    def plan(self, model: torch.nn.Module) -> Plan:
        structure = _structure(model)
        if self._entry is not None and self._entry[0] == structure:
            return self._entry[1]
        plan = make_plan(trace_model(model), model)
        self._entry = (structure, plan)
        return plan
