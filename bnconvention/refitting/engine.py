"""The public :func:`refit`: replace a model's running statistics φ, at bit-identical weights θ, with a report.

The refit is a transaction: φ is snapshotted first and restored on any failure (a bad batch, NaN activations, an
exception raised by the pool itself, Ctrl-C); training flags and BatchNorm momenta are restored in ``finally``;
θ is proven bit-identical before and after (:mod:`.proof`: one digest of a private copy, byte comparisons) and a
difference raises :class:`~bnconvention.errors.WeightsChangedError`
(φ restored). After a successful refit every listener of
:func:`bnconvention.authoring.refit_listeners.notify_refit` is told.

:func:`refit` is the transaction around named stages, each a function of its own: :func:`inspect_model` (dtype,
device, layers, momentum), :func:`run_pass` (the traced/hooks exact pass, the train-mode forwards, or nothing when the
channel is absent), :func:`check_theta_unchanged`, :func:`pool_warnings` (and
:func:`~bnconvention.refitting.finite_batch.batch_size_warning` for the train-mode rules) and :func:`build_report`.

``num_batches_tracked`` (defined per rule in docs/standard.md): the exact rule writes the number of records in the
pool, whatever its batches or ``chunk_size``, so an exact refit of one pool is the same bytes however it is batched
(the record's ``num_batches`` still says how many batches the pool yielded); the train-mode rules leave what
PyTorch's own training-mode forwards write after the reset, one per batch (as ``update_bn`` does).

When ``data`` / ``transform`` are not given, the pool is described honestly as unknown: data role ``other``,
dataset id ``unspecified``, subset ``caller-provided pool``, transform mode ``eval`` with an empty description.
``record_count`` is the number of samples the pool yielded unless ``data`` says otherwise (a mismatch is warned).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, get_args

import torch
from torch.nn.modules.dropout import _DropoutNd

from bnconvention.authoring.declaration import declare, make_convention, make_transform
from bnconvention.authoring.refit_listeners import notify_refit, refit_window
from bnconvention.authoring.transforms import as_standard_transform
from bnconvention.errors import RefitError, UnsupportedModelError, WeightsChangedError
from bnconvention.formats.digests import DigestSet
from bnconvention.refitting.exact import ExactOutcome, Untraceable, run_traced
from bnconvention.refitting.fallback import run_hooks
from bnconvention.refitting.finite_batch import batch_size_warning
from bnconvention.refitting.graph import PlanCache
from bnconvention.refitting.pool import PoolReader, materialize
from bnconvention.refitting.proof import ThetaWitness
from bnconvention.refitting.result import DEFAULT_MEMORY_BUDGET, ExactMethod, RefitPath, RefitReport, reporting_line
from bnconvention.refitting.staleness import staleness_distance
from bnconvention.refitting.state import (
    ModuleModes,
    batchnorm_modules,
    ensure_materialised,
    restore_running_state,
    running_state,
    tracked_layers,
)
from bnconvention.refitting.train_mode import TrainRule, run_train_mode
from bnconvention.standard.models import (
    AccumulationRule,
    Channel,
    DataSplit,
    DropoutMode,
    FittingConvention,
    Precision,
    Producer,
    RefitDetails,
    Transform,
)


def refit(model: torch.nn.Module, pool: Any, *, rule: AccumulationRule = "exact", data: DataSplit | None = None,
          transform: Transform | Any = None, input_key: str = "input", chunk_size: int | None = None,
          progress: bool = False, producer: Producer | None = None, method: ExactMethod = "auto",
          memory_budget: int | None = DEFAULT_MEMORY_BUDGET, theta: ThetaWitness | None = None) -> RefitReport:
    """Refit ``model``'s BatchNorm running statistics on ``pool`` under ``rule``; θ stays bit-identical.

    ``pool``: any iterable of batches (tensors, tuples/lists led by the input, mappings with ``input_key``).
    ``rule``: ``exact`` (sequential layerwise mean and unbiased variance over the whole pool, float64), ``cumulative``
    (exactly ``torch.optim.swa_utils.update_bn``) or ``ema`` (training-mode forwards with each layer's momentum).
    ``transform``: what the pool went through, for the record: a ``Transform`` (:func:`make_transform`), a
    torchvision transform (described by :func:`bnconvention.describe_transform`) or an object with ``standard()``.
    ``chunk_size`` (exact only) re-cuts the pool into chunks of that many samples; by default the pool's own batches
    are the chunks. ``method`` (exact only): ``auto`` runs the layer-major traced pass and falls back to per-layer
    passes when the model cannot be traced or the pass would exceed ``memory_budget`` bytes (None: no limit);
    ``traced`` / ``hooks`` force one path. ``progress`` shows a tqdm bar on stderr. ``theta``: a
    :class:`~bnconvention.refitting.proof.ThetaWitness` of the model, reused across refits so that θ is digested once
    (an audit's refits); by default the refit witnesses θ itself (one copy, one digest overlapped with the pass).

    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    >>> report = refit(model, [torch.randn(8, 3, 6, 6) for _ in range(2)])
    >>> report.channel, report.path, report.declaration.convention.name
    ('present', 'traced', 'refit/other/eval-transform/exact')
    """
    start = time.perf_counter()
    if transform is not None:
        transform = as_standard_transform(transform)
    _check_arguments(model, rule=rule, data=data, transform=transform, chunk_size=chunk_size, method=method,
                     memory_budget=memory_budget, producer=producer)
    if theta is not None and not isinstance(theta, ThetaWitness):
        raise RefitError(f"theta must be a ThetaWitness (bnconvention.refitting) or None, got {type(theta).__name__}")
    setup = inspect_model(model, rule=rule)
    reader = PoolReader(pool, dtype=setup.dtype, input_key=input_key, device=setup.device,
                        min_batch_size=1 if rule == "exact" else 2)
    # the transaction: θ proven bit-identical before and after, φ restored on any failure, flags and momenta always
    witness = theta if theta is not None else ThetaWitness(model)
    setup.plans = witness.plans
    # a witness of our own was taken just now: its digest is needed only after the pass, which it overlaps
    shared_before = witness.digests(model) if theta is not None else None
    shipped = running_state(model)
    modes = ModuleModes.capture(model)
    with refit_window(model):
        try:
            outcome = run_pass(model, reader, setup, rule=rule, chunk_size=chunk_size, method=method,
                               memory_budget=memory_budget, progress=progress, shipped=shipped)
            after = witness.digests(model)
            before = shared_before or witness.initial_digests
            check_theta_unchanged(before.trainable_sha256, after.trainable_sha256)
        except BaseException:
            restore_running_state(model, shipped)
            raise
        finally:
            modes.restore()
    setup.warnings.extend(pool_warnings(rule=rule, sizes=reader.batch_sizes, samples=reader.samples, data=data))
    sensitive = batch_size_warning(rule, reader.batch_sizes, momentum=setup.momentum) if setup.layers else None
    if sensitive is not None:
        setup.warnings.append(sensitive)
    report = build_report(model, setup, outcome, rule=rule, data=data, transform=transform, producer=producer,
                          shipped=shipped, before=before, after=after, reader=reader, started=start)
    notify_refit(model, report)
    return report


# --- stages ---------------------------------------------------------------------------------------------------------


@dataclass
class RefitSetup:
    """What a refit reads from the model before touching it: dtype and device of the pool, the BatchNorm layers that
    hold running statistics, the momentum the record names (ema), and the warnings raised so far."""

    dtype: torch.dtype
    device: torch.device | None
    layers: dict[str, Any]
    momentum: float | None
    warnings: list[str] = field(default_factory=list)
    plans: PlanCache | None = None  # the traced plan, reused by refits sharing a ThetaWitness


@dataclass(frozen=True)
class PassOutcome:
    """What one computation of φ did: which path ran, how many passes over the pool, which layers it refit."""

    path: RefitPath
    passes: int
    refit_names: list[str]
    peak_bytes: int | None = None


def inspect_model(model: torch.nn.Module, *, rule: AccumulationRule) -> RefitSetup:
    """Dtype/device checks, the tracked BatchNorm layers (untracked ones warned about) and the ema momentum."""
    ensure_materialised(model, what="refit")
    dtype, device = _model_dtype_device(model)
    all_layers = batchnorm_modules(model)
    layers = tracked_layers(model)
    warnings: list[str] = []
    untracked = [name for name in all_layers if name not in layers]
    if untracked:
        warnings.append(f"BatchNorm layers {untracked} have track_running_stats=False: they store no running "
                        "statistics (nothing to refit) and normalize every batch by its own statistics, also at "
                        "inference")
    momentum = _ema_momentum(layers, warnings) if rule == "ema" else None
    return RefitSetup(dtype=dtype, device=device, layers=layers, momentum=momentum, warnings=warnings)


def run_pass(model: torch.nn.Module, reader: PoolReader, setup: RefitSetup, *, rule: AccumulationRule,
             chunk_size: int | None, method: ExactMethod, memory_budget: int | None, progress: bool,
             shipped: dict[str, Any]) -> PassOutcome:
    """Compute φ by the path the model and the rule call for (runs inside the refit's transaction)."""
    if not setup.layers:
        return _pass_absent(reader, setup.warnings)
    if rule == "exact":
        return _pass_exact(model, reader, setup, chunk_size=chunk_size, method=method, memory_budget=memory_budget,
                           progress=progress, shipped=shipped)
    return _pass_train_mode(model, reader, setup, rule=rule, progress=progress)


def _pass_absent(reader: PoolReader, warnings: list[str]) -> PassOutcome:
    for _ in reader:  # channel absent: nothing to compute, but the pool is still checked and counted
        pass
    if not reader.batch_sizes:
        raise RefitError("the pool yielded no batches; pass at least one batch of inputs")
    warnings.append("channel absent: the model has no BatchNorm running statistics, so the refit is the "
                    "identity and every shift is exactly 0.00")
    return PassOutcome(path="none", passes=0, refit_names=[])


def _pass_exact(model: torch.nn.Module, reader: PoolReader, setup: RefitSetup, *, chunk_size: int | None,
                method: ExactMethod, memory_budget: int | None, progress: bool,
                shipped: dict[str, Any]) -> PassOutcome:
    model.eval()
    chunks = materialize(reader, chunk_size=chunk_size)
    outcome = _run_exact(model, chunks, num_batches_tracked=reader.samples, method=method,
                         memory_budget=memory_budget, progress=progress, shipped=shipped, warnings=setup.warnings,
                         plans=setup.plans)
    del chunks
    skipped = [name for name in setup.layers if name not in outcome.order]
    if skipped:
        setup.warnings.append(f"BatchNorm layers {skipped} were not called by the forward; their running "
                              "statistics were left unchanged")
    return PassOutcome(path=outcome.path, passes=outcome.passes, peak_bytes=outcome.peak_bytes,
                       refit_names=[name for name in setup.layers if name in outcome.order])


def _pass_train_mode(model: torch.nn.Module, reader: PoolReader, setup: RefitSetup, *, rule: TrainRule,
                     progress: bool) -> PassOutcome:
    never_called = run_train_mode(model, reader, rule=rule, progress=progress)
    if never_called:
        setup.warnings.append(f"BatchNorm layers {never_called} were not called by the forward; as in update_bn "
                              "their statistics were reset (mean 0, variance 1)")
    return PassOutcome(path="train-mode", passes=1,
                       refit_names=[name for name in setup.layers if name not in never_called])


def check_theta_unchanged(before: str, after: str) -> None:
    """The refit's proof that θ is bit-identical: the trainable digests before and after must be equal."""
    if after != before:
        raise WeightsChangedError(
            f"the trainable tensors changed during the refit (digest {before} became {after}); the model's forward "
            "writes to its own parameters or non-BatchNorm buffers. Running statistics were restored; this refit "
            "cannot be trusted for this model")


def pool_warnings(*, rule: AccumulationRule, sizes: list[int], samples: int, data: DataSplit | None) -> list[str]:
    """What the pool as seen says about the record: unequal batches under a train-mode rule, a record count that
    disagrees with the samples the pool yielded."""
    warnings = []
    if rule != "exact" and len(set(sizes)) > 1:
        counts = ", ".join(f"{count} x {size}" for size, count in sorted(Counter(sizes).items(), reverse=True))
        warnings.append(f"batches of unequal size ({counts}): the {rule} rule weights every batch by its count, not "
                        "its size, so short batches are over-weighted (as in update_bn); drop the short batch "
                        "(DataLoader(drop_last=True)) or use rule='exact'")
    if data is not None and data.record_count is not None and data.record_count != samples:
        warnings.append(f"data.record_count is {data.record_count} but the pool yielded {samples} samples")
    return warnings


def build_report(model: torch.nn.Module, setup: RefitSetup, outcome: PassOutcome, *, rule: AccumulationRule,
                 data: DataSplit | None, transform: Transform | None, producer: Producer | None,
                 shipped: dict[str, Any], before: DigestSet, after: DigestSet, reader: PoolReader,
                 started: float) -> RefitReport:
    """The declaration of the model after the refit (convention, digests, refit details) and the report around it;
    the record's seconds run from ``started`` (a ``time.perf_counter()`` value) to the end of the staleness."""
    refit_state = running_state(model)
    names = outcome.refit_names
    staleness = staleness_distance({name: shipped[name] for name in names},
                                   {name: refit_state[name] for name in names}, warnings=setup.warnings)
    convention = _convention(model, rule=rule, data=data, transform=transform, momentum=setup.momentum,
                             dtype=setup.dtype, sizes=reader.batch_sizes)
    details = RefitDetails(
        trainable_sha256_before=before.trainable_sha256,
        trainable_sha256_after=after.trainable_sha256,
        running_sha256_before=before.running_sha256,
        running_sha256_after=after.running_sha256,
        staleness=staleness,
        seconds=time.perf_counter() - started,
        forward_passes=outcome.passes,
        warnings=setup.warnings,
    )
    channel: Channel = "present" if setup.layers else "absent"
    declaration = declare(model, convention, digests=after, producer=producer, refit=details,
                          reporting_line=reporting_line(convention.name, channel=channel, path=outcome.path,
                                                        samples=reader.samples, staleness=staleness))
    return RefitReport(declaration=declaration, channel=channel, path=outcome.path,
                       peak_activation_bytes=outcome.peak_bytes)


def _convention(model: torch.nn.Module, *, rule: AccumulationRule, data: DataSplit | None,
                transform: Transform | None, momentum: float | None, dtype: torch.dtype,
                sizes: list[int]) -> FittingConvention:
    """The refit's fitting convention: the pool as described by ``data``/``transform`` (or honestly unknown), the
    rule with the batches as seen."""
    return make_convention(
        buffer_update_mode="refit",
        role=data.role if data else "other",
        dataset_id=data.dataset.id if data else "unspecified",
        dataset_revision=data.dataset.revision if data else None,
        subset=data.subset if data else "caller-provided pool",
        record_count=data.record_count if data and data.record_count is not None else sum(sizes),
        ids_sha256=data.ids_sha256 if data else None,
        sampling_seed=data.sampling_seed if data else None,
        transform=transform or make_transform(mode="eval"),
        rule=rule,
        momentum=momentum,
        batch_size=max(sizes),
        num_batches=len(sizes),
        variance_estimator="unbiased",
        precision="float64" if rule == "exact" else _precision(dtype),
        dropout=_dropout_mode(model, rule),
        distributed="none",
    )


def _run_exact(model: torch.nn.Module, chunks: list[torch.Tensor], *, num_batches_tracked: int,
               method: ExactMethod, memory_budget: int | None, progress: bool, shipped: dict[str, Any],
               warnings: list[str], plans: PlanCache | None = None) -> ExactOutcome:
    if method != "hooks":
        try:
            return run_traced(model, chunks, num_batches_tracked=num_batches_tracked, memory_budget=memory_budget,
                              progress=progress, plans=plans)
        except Untraceable as exc:
            if method == "traced":
                raise RefitError(f"the layer-major exact pass cannot run: {exc.reason}; use method='auto' or "
                                 "'hooks' for per-layer passes") from exc
            restore_running_state(model, shipped)
            warnings.append(f"layer-major pass not used: {exc.reason}; fell back to one pass per BatchNorm layer "
                            "(exact, slower)")
    return run_hooks(model, chunks, num_batches_tracked=num_batches_tracked, progress=progress)


def _check_arguments(model: Any, *, rule: Any, data: Any, transform: Any, chunk_size: Any, method: Any,
                     memory_budget: Any, producer: Any) -> None:
    if not isinstance(model, torch.nn.Module):
        raise UnsupportedModelError(f"refit needs a torch.nn.Module, got {type(model).__name__}")
    if rule not in get_args(AccumulationRule):
        raise RefitError(f"unknown rule {rule!r}; expected one of {list(get_args(AccumulationRule))}")
    if method not in get_args(ExactMethod):
        raise RefitError(f"unknown method {method!r}; expected one of {list(get_args(ExactMethod))}")
    if chunk_size is not None:
        if rule != "exact":
            raise RefitError(f"chunk_size only applies to the exact rule; the {rule} rule's result depends on the "
                             "batches, so it uses the pool's own batches: re-batch the pool instead")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise RefitError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int)
                                      or memory_budget < 1):
        raise RefitError(f"memory_budget must be a positive number of bytes or None, got {memory_budget!r}")
    for value, kind, name in ((data, DataSplit, "data"), (transform, Transform, "transform"),
                              (producer, Producer, "producer")):
        if value is not None and not isinstance(value, kind):
            raise RefitError(f"{name} must be a {kind.__name__} (bnconvention.standard.models) or None, got "
                             f"{type(value).__name__}")


def _model_dtype_device(model: torch.nn.Module) -> tuple[torch.dtype, torch.device | None]:
    tensors = [(n, t) for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_floating_point()]
    low = [(n, t.dtype) for n, t in tensors if t.dtype not in (torch.float32, torch.float64)]
    if low:
        name, found = low[0]
        raise UnsupportedModelError(
            f"the model holds {found} tensors (e.g. {name!r}); refit needs float32 or float64 so that statistics "
            "are meaningful: refit a float32 copy (model.float()) and convert afterwards")
    dtypes = sorted({str(t.dtype) for _, t in tensors})
    if len(dtypes) > 1:
        raise UnsupportedModelError(f"the model mixes floating dtypes {dtypes}; convert it to one (model.float())")
    devices = sorted({str(t.device) for _, t in model.named_parameters()} |
                     {str(t.device) for _, t in model.named_buffers()})
    if len(devices) > 1:
        raise UnsupportedModelError(f"the model spans devices {devices}; refit runs on a model on one device")
    dtype = tensors[0][1].dtype if tensors else torch.float32
    return dtype, torch.device(devices[0]) if devices else None


def _ema_momentum(layers: dict[str, Any], warnings: list[str]) -> float:
    if not layers:  # the record needs a momentum; nothing uses it
        warnings.append("no BatchNorm layer holds running statistics, so no momentum was used; the record names "
                        "PyTorch's default 0.1")
        return 0.1
    momenta = Counter(module.momentum for module in layers.values() if module.momentum is not None)
    if not momenta:
        raise RefitError("rule 'ema' uses each layer's own momentum, but every BatchNorm layer has momentum None "
                         "(a cumulative average); use rule='cumulative'")
    momentum, _ = momenta.most_common(1)[0]
    others = [name for name, module in layers.items() if module.momentum != momentum]
    if others:
        warnings.append(f"BatchNorm layers {others} have a momentum other than {momentum}; each layer used its "
                        f"own, the record names the most common one")
    return float(momentum)


def _precision(dtype: torch.dtype) -> Precision:
    return "float64" if str(dtype) == "torch.float64" else "float32"


def _dropout_mode(model: torch.nn.Module, rule: AccumulationRule) -> DropoutMode:
    if not any(isinstance(module, _DropoutNd) for module in model.modules()):
        return "absent"
    return "off" if rule == "exact" else "on"
