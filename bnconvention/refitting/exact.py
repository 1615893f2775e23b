"""The exact rule, layer-major: one pass over the pool on a ``torch.fx`` graph of the model.

The traced graph is cut into stages at its BatchNorm layers (:mod:`~bnconvention.refitting.graph`). Stage by stage,
every chunk of the pool runs through the stage's nodes (chunk after chunk, so a chunk's intermediate values are
freed as soon as their last user in the stage has run, as in an ordinary forward). At the end of each chunk the
input of the next BatchNorm layer is added to that layer's moments (float64, chunks merged with Chan's formula,
:mod:`~bnconvention.refitting.moments`). When every chunk has arrived, the layer's mean and unbiased variance over all
positions of all pool inputs are written into its buffers, and only then does the next stage apply the layer (in
eval mode) to each chunk. Later layers therefore see earlier layers already refit: the sequential layerwise exact
rule, at the cost of one eval-mode forward pass plus the statistics, and independent of how the pool is cut into
chunks up to floating-point rounding of the convolutions. Nodes after the last BatchNorm layer are not run. Max
pools run on channels-last copies (:mod:`~bnconvention.refitting.kernels`: the same bits, several times faster on CPU).

**Memory bound.** Between stages the pass holds, for every chunk, each value a later stage still needs (the next
layer's input, a residual branch): peak ≈ max over the cuts between stages of (sum of the live activation sizes
per sample) × pool size, plus the pool inputs, plus one chunk's temporaries inside a stage. For a plain chain that
is one activation per cut; for a residual block two. The pass measures the bytes held after every chunk, estimates
each stage's total from its first chunk, and raises :class:`BudgetExceeded` before exceeding ``memory_budget``; the
engine then falls back to per-layer passes (memory: one chunk's activations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
from torch.fx.node import Node, map_arg
from tqdm import tqdm

from bnconvention.errors import RefitError, UnsupportedModelError
from bnconvention.refitting.graph import PlanCache, Untraceable, make_plan, trace_model
from bnconvention.refitting.kernels import exact_fast_module
from bnconvention.refitting.moments import ChannelMoments
from bnconvention.refitting.state import running_buffers

ExactPath = Literal["traced", "hooks"]

__all__ = ["BudgetExceeded", "ExactOutcome", "Untraceable", "commit_layer_stats", "run_traced", "trace_model"]


class BudgetExceeded(Untraceable):
    """The pool inputs and the activations held between stages would exceed the memory budget."""


@dataclass
class ExactOutcome:
    """What an exact pass did: layers refit in forward order, passes over the pool, the path, peak held bytes."""

    order: list[str]
    passes: int
    path: ExactPath
    peak_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)


def commit_layer_stats(name: str, module: torch.nn.Module, moments: ChannelMoments, *,
                       num_batches_tracked: int) -> None:
    """Write a layer's exact mean and unbiased variance into its buffers, and ``num_batches_tracked``.

    The engine passes the number of records in the pool (docs/standard.md, "num_batches_tracked"): a value of the
    pool alone, so that how the pool was batched or chunked changes no byte of an exact refit.

    Raises :class:`RefitError` when a channel saw fewer than two values or a statistic is NaN/inf.
    """
    try:
        mean, var = moments.mean_and_unbiased_var()
    except ValueError:
        raise RefitError(f"BatchNorm layer {name!r} saw {moments.count} value per channel over the whole pool; the "
                         "unbiased variance needs at least 2: refit on a larger pool") from None
    running_mean, running_var = running_buffers(module)
    buffer_dtype = running_mean.dtype
    mean_out, var_out = mean.to(buffer_dtype), var.to(buffer_dtype)
    if not (bool(torch.isfinite(mean_out).all()) and bool(torch.isfinite(var_out).all())):
        raise RefitError(f"non-finite activations (NaN or inf) reached BatchNorm layer {name!r}: its mean or "
                         f"variance over the pool is not finite in {buffer_dtype}; check the pool for NaN/inf "
                         "inputs and the model for overflow. Running statistics and weights are unchanged")
    with torch.no_grad():
        running_mean.copy_(mean_out)
        running_var.copy_(var_out)
        tracked = cast("torch.Tensor | None", module.num_batches_tracked)
        if tracked is not None:
            tracked.fill_(num_batches_tracked)


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class _Meter:
    """Bytes held by the pool inputs and the live per-chunk values, kept up to date as values come and go.

    Storages are counted once however many values (views, in-place results) share them.
    """

    def __init__(self, chunks: list[torch.Tensor], budget: int | None) -> None:
        self.budget = budget
        self.total = sum(int(chunk.shape[0]) for chunk in chunks)
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.held = 0
        for chunk in chunks:
            self.add(chunk)
        self.peak = self.held

    def add(self, value: Any) -> None:
        for tensor in _tensors(value):
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in self.refs:
                self.refs[ptr] += 1
            else:
                self.refs[ptr], self.sizes[ptr] = 1, storage.nbytes()
                self.held += self.sizes[ptr]

    def remove(self, value: Any) -> None:
        for tensor in _tensors(value):
            ptr = tensor.untyped_storage().data_ptr()
            self.refs[ptr] -= 1
            if not self.refs[ptr]:
                del self.refs[ptr]
                self.held -= self.sizes.pop(ptr)

    def after_chunk(self, *, start: int, done: int) -> None:
        """Record the peak after a chunk; after the first chunk of a stage, project the stage's end."""
        self.peak = max(self.peak, self.held)
        projected = self.held if done >= self.total else (
            start + max(self.held - start, 0) * self.total // max(done, 1))
        if self.budget is not None and max(self.held, projected) > self.budget:
            raise BudgetExceeded(f"the layer-major pass would hold about {max(self.held, projected) / 2**20:.1f} "
                                 f"MiB of pool inputs and activations, over the memory budget of "
                                 f"{self.budget / 2**20:.1f} MiB")


def _fetch_attr(model: torch.nn.Module, target: str) -> Any:
    value: Any = model
    for part in target.split("."):
        value = getattr(value, part)
    return value


@dataclass
class _Step:
    """One node of a stage, ready to run on chunk ``k``: ``run(k)`` and the per-chunk values to free after it."""

    node: torch.fx.Node
    run: Callable[[int], Any]
    frees: list[torch.fx.Node]


def _compile(node: torch.fx.Node, *, model: torch.nn.Module, modules: dict[str, torch.nn.Module],
             per_chunk: set[torch.fx.Node], values: dict[torch.fx.Node, list[Any]],
             consts: dict[torch.fx.Node, Any], chunks: list[torch.Tensor]) -> Callable[[int], Any]:
    """``k -> node's value on chunk k``, with its arguments looked up without re-walking the node's structure."""
    if node.op == "placeholder":
        default = node.args[0] if node.args else None
        return (lambda k: chunks[k]) if node in per_chunk else (lambda k: default)
    if node.op == "get_attr":
        target = str(node.target)
        return lambda k: _fetch_attr(model, target)

    def getter(arg: Any) -> Callable[[int], Any]:
        if isinstance(arg, Node):
            return (lambda k: values[arg][k]) if arg in per_chunk else (lambda k: consts[arg])
        nested: list[Node] = []
        map_arg(arg, nested.append)
        if nested:
            return lambda k: map_arg(arg, lambda n: values[n][k] if n in per_chunk else consts[n])
        return lambda k: arg

    args = [getter(a) for a in node.args]
    kwargs = {key: getter(v) for key, v in node.kwargs.items()}
    if node.op == "call_module":
        fn: Callable[..., Any] = exact_fast_module(modules[str(node.target)])
    elif node.op == "call_method":
        method = str(node.target)
        fn = lambda self, *a, **kw: getattr(self, method)(*a, **kw)  # noqa: E731
    else:
        fn = node.target  # type: ignore[assignment]
    if kwargs:
        return lambda k: fn(*[g(k) for g in args], **{key: g(k) for key, g in kwargs.items()})
    return lambda k: fn(*[g(k) for g in args])


def _untraceable(node: torch.fx.Node | None, exc: Exception) -> Untraceable:
    where = f"graph node {node.name!r} ({node.op} {node.target})" if node is not None else "the traced graph"
    return Untraceable(f"running {where} failed ({type(exc).__name__}: {exc})")


def run_traced(model: torch.nn.Module, chunks: list[torch.Tensor], *, num_batches_tracked: int,
               memory_budget: int | None, progress: bool = False, plans: PlanCache | None = None) -> ExactOutcome:
    """Refit every traced BatchNorm layer of ``model`` (already in eval mode) exactly, layer-major, in one pass.

    ``chunks`` are the pool inputs; ``num_batches_tracked`` is written to every refit layer. Raises
    :class:`Untraceable` (including :class:`BudgetExceeded`) when the engine should fall back to per-layer passes;
    running buffers may then be partly written and the caller restores them. ``plans`` reuses the traced plan of an
    earlier refit of the same model (:class:`~bnconvention.refitting.graph.PlanCache`).
    """
    plan = plans.plan(model) if plans is not None else make_plan(trace_model(model), model)
    modules = dict(model.named_modules())
    layers = list(plan.bn_nodes)
    meter = _Meter(chunks, memory_budget)
    samples = [int(chunk.shape[0]) for chunk in chunks]
    values: dict[torch.fx.Node, list[Any]] = {n: [None] * len(chunks) for n in plan.per_chunk}
    consts: dict[torch.fx.Node, Any] = {}
    stages: list[tuple[list[_Step], list[_Step]]] = []  # per stage: constant steps, per-chunk steps
    for stage in plan.stages:
        const_steps: list[_Step] = []
        chunk_steps: list[_Step] = []
        for index in stage:
            node = plan.nodes[index]
            if node in plan.bn_nodes and node not in plan.last_use:
                continue  # the last layer's output is not needed by anything in the prefix
            run = _compile(node, model=model, modules=modules, per_chunk=plan.per_chunk, values=values,
                           consts=consts, chunks=chunks)
            frees = [n for n in dict.fromkeys([*node.all_input_nodes, node])
                     if n in plan.per_chunk and plan.last_use.get(n, -1) <= index]
            (chunk_steps if node in plan.per_chunk else const_steps).append(_Step(node, run, frees))
        stages.append((const_steps, chunk_steps))
    order: list[str] = []
    with torch.no_grad(), tqdm(total=len(stages) * len(chunks), desc="exact refit (layer-major)",
                               unit="chunk-stage", disable=not progress, leave=False) as bar:
        moments = ChannelMoments()
        for stage_index, (const_steps, chunk_steps) in enumerate(stages):
            if stage_index > 0:  # every chunk has arrived: this stage's layer gets its statistics first
                name = plan.bn_nodes[layers[stage_index - 1]]
                commit_layer_stats(name, modules[name], moments, num_batches_tracked=num_batches_tracked)
                order.append(name)
            upcoming = layers[stage_index] if stage_index < len(layers) else None
            moments = ChannelMoments()
            start = meter.held
            current: torch.fx.Node | None = None
            try:
                for step in const_steps:  # in graph order; they depend on constants only
                    current = step.node
                    consts[step.node] = step.run(0)
                for k in range(len(chunks)):
                    for step in chunk_steps:
                        current = step.node
                        value = step.run(k)
                        values[step.node][k] = value
                        meter.add(value)
                        for n in step.frees:
                            meter.remove(values[n][k])
                            values[n][k] = None
                    if upcoming is not None:
                        current = upcoming
                        moments.update(values[upcoming.args[0]][k])  # type: ignore[index]
                    meter.after_chunk(start=start, done=sum(samples[: k + 1]))
                    bar.update(1)
            except (RefitError, UnsupportedModelError, Untraceable):
                raise
            except Exception as exc:  # noqa: BLE001 - a failure of the model's own code on the traced graph
                raise _untraceable(current, exc) from exc
    return ExactOutcome(order=order, passes=1 if order else 0, path="traced", peak_bytes=meter.peak)
