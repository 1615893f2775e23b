"""Observe how a run writes BatchNorm running statistics, and declare the convention it followed as measured.

Wrap a training or unlearning loop in :class:`BNRecorder`; it puts a cheap forward pre-hook on every BatchNorm layer
(``torch.nn.modules.batchnorm._BatchNorm`` subclasses, SyncBatchNorm included) and listens for refits announced by
the refit engine (:mod:`bnconvention.authoring.refit_listeners`). It counts, per layer: training-mode forwards that
update the buffers (with the momentum in force, the batch size and the split tag of the update), eval-mode forwards
with autograd enabled (frozen training steps), evaluation forwards (no autograd), and refits; and it compares the
digests of the buffers and of the trainable tensors at entry and exit. :mod:`bnconvention.authoring.observation`
turns the counts into the standard's buffer-update mode and contradictions; the rules are spelled out there.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
>>> with BNRecorder(model, split="train") as rec:
...     _ = model(torch.randn(8, 4))                 # training mode: buffers updated
...     _ = model.eval()
...     with torch.no_grad():
...         _ = model(torch.randn(8, 4))             # evaluation: ignored for the mode
>>> obs = rec.observation()
>>> obs.mode, obs.rule, obs.momentum, obs.buffer_updates, obs.batch_size_max
('train', 'ema', 0.1, 1, 8)
"""

from __future__ import annotations

import contextlib
import json
import os
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import torch
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from bnconvention.authoring import refit_listeners
from bnconvention.authoring.deployed_state import batchnorm_state, tensor_digests
from bnconvention.authoring.observation import (
    LAYERS_CHANGED,
    combine_modes,
    layer_mode,
    observed_contradictions,
    split_contradictions,
    with_declared,
)
from bnconvention.authoring.recorder_declaration import declaration_from_saved, released_module
from bnconvention.authoring.recorder_events import LayerEvents, check_tag, structure_contradictions
from bnconvention.authoring.saved_observation import FORMAT, SavedObservation
from bnconvention.authoring.split_matching import INPUT_KEYS, ShareTracker, SplitIndex
from bnconvention.authoring.transforms import as_standard_transform
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.digests import DigestSet, model_digests
from bnconvention.standard.models import (
    AccumulationRule,
    BufferUpdateMode,
    Contradiction,
    Declaration,
    DistributedMode,
    DropoutMode,
    FittingConvention,
    LayerNameMapping,
    LayerObservation,
    Observation,
    Precision,
    RefitDetails,
    SplitRole,
    Transform,
    to_dict,
)

__all__ = ["BNRecorder", "MOMENTUM_OUT_OF_RANGE"]

MOMENTUM_OUT_OF_RANGE = "momentum-out-of-range"
_PRECISIONS: dict[str, Precision] = {
    "torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32", "torch.float64": "float64",
}


class TransformSource(Protocol):
    """Anything that can describe itself as a transform of the standard (e.g. the zoo's ``BatchTransform``)."""

    def standard(self) -> Transform: ...


class BNRecorder:
    """Context manager recording how every BatchNorm layer of ``model`` has its buffers written during a run.

    ``split`` is the author's tag for the data being fed; change it between batches with :meth:`set_split` (or the
    :meth:`tagged` block). Tags are free text; when a tag is one of the standard's split roles (``train``,
    ``retain``, ``forget``, ``test``, ``proxy``, ``other``) the declaration can take its role from it.

    Usage::

        with BNRecorder(model, split="retain") as rec:
            for x, y in loader:
                loss = criterion(model(x), y); loss.backward(); optimizer.step()
        record = rec.declaration(dataset_id="sklearn/digits", subset="all classes except 3",
                                 transform=DIGITS_TRAIN_TRANSFORM)

    Inside a loop you do not own, name the data instead of tagging it: ``splits={"retain": retain_set,
    "forget": forget_set}`` (torch ``Dataset``s or ``datasets`` splits in torch format; ``input_key`` names the input
    of mapping records) has every record digested once, and every batch that writes the buffers matched row by row;
    ``observation.split_matching`` gives each split's share of the final statistics
    (:mod:`bnconvention.authoring.split_matching`), and a run whose statistics mix splits is a contradiction.

    Run evaluation under ``torch.no_grad()`` or ``torch.inference_mode()``: an eval-mode forward with autograd
    enabled counts as a training step with frozen buffers (see :mod:`bnconvention.authoring.observation`).
    A recorder is used once; the counts stay readable after the block exits.
    """

    def __init__(self, model: torch.nn.Module, *, split: str = "train", splits: Mapping[str, Any] | None = None,
                 input_key: str | None = None) -> None:
        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"BNRecorder records a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self._split = check_tag(split)
        self._state: typing.Literal["new", "active", "done"] = "new"
        self._tick = 0
        self._bs_min: int | None = None
        self._bs_max: int | None = None
        self._split_tags: list[str] = []
        self._split_noted = False
        self._last_write_split: str | None = None
        self._dropout_train = 0
        self._refits = 0
        self._refit_conventions: list[FittingConvention | None] = []
        self._refit_details: list[RefitDetails | None] = []
        self._handles: list[Any] = []
        self._last_write_tick = 0
        self._probe_tick = 0  # first frozen forward after the last buffer write (0: none since)
        self._probe_trainable = ""
        self._probe_frozen: list[int] = []
        self._start: DigestSet | None = None
        self._end: DigestSet | None = None
        self._layers = [LayerEvents(name, module) for name, module in model.named_modules()
                        if isinstance(module, _BatchNorm)]
        self._dropouts = [module for module in model.modules() if isinstance(module, _DropoutNd)]
        self._dropout_ids = {id(module) for module in self._dropouts}
        # splits matched by content (authoring.split_matching): indexed once, here, before the run
        self._index = SplitIndex(splits, input_key=input_key) if splits is not None else None
        self._shares = ShareTracker(self._index.names) if self._index is not None else None
        self._input_key = input_key
        self._batch: Any = None  # the input of the current outermost forward (its rows digested at its first write)
        self._counted = False  # that forward's rows have moved the shares (once per forward, whatever the layers)
        self._holders: set[int] = set()
        self._depth = 0  # nesting of calls to modules holding BatchNorm layers

    # --- context manager ---------------------------------------------------------------------------------------

    def __enter__(self) -> BNRecorder:
        if self._state != "new":
            raise UsageError("a BNRecorder records one run; create a new one for the next run")
        self._start = model_digests(self.model)
        for events in self._layers:
            events.resync()
            self._handles.append(events.module.register_forward_pre_hook(self._layer_hook(events)))
            self._handles.append(events.module.register_forward_hook(self._seen_hook(events)))
        for module in self._dropouts:
            self._handles.append(module.register_forward_pre_hook(self._dropout_hook))
        if self._index is not None:
            # the records enter at the outermost call of a module holding BatchNorm layers: the model, or its
            # network when a wrapper's own method (a LightningModule's training_step) calls self.net(x)
            names = {e.name for e in self._layers}
            holders = [m for n, m in self.model.named_modules() if n == "" or any(b.startswith(f"{n}.") for b in names)]
            self._holders = {id(m) for m in holders}
            for module in holders:
                self._handles.append(module.register_forward_pre_hook(self._input_hook, with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._input_done, always_call=True))
        refit_listeners.add_refit_listener(self._on_refit)
        refit_listeners.add_window_listener(self._on_refit_window)
        self._state = "active"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._detach()
        self._check_external()
        self._end = model_digests(self.model)
        self._state = "done"

    def _detach(self) -> None:
        refit_listeners.remove_refit_listener(self._on_refit)
        refit_listeners.remove_window_listener(self._on_refit_window)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    # --- split tags --------------------------------------------------------------------------------------------

    @property
    def split(self) -> str:
        """The split tag given to the next buffer updates."""
        return self._split

    def set_split(self, split: str) -> None:
        """Tag the following batches as coming from ``split`` (e.g. ``"forget"`` for gradient ascent steps)."""
        self._split = check_tag(split)
        self._split_noted = False

    @contextlib.contextmanager
    def tagged(self, split: str) -> Iterator[BNRecorder]:
        """Tag the batches inside the block as ``split``; the previous tag comes back afterwards."""
        previous = self._split
        self.set_split(split)
        try:
            yield self
        finally:
            self.set_split(previous)

    # --- hooks (hot path: keep them short) ---------------------------------------------------------------------

    def _layer_hook(self, events: LayerEvents) -> Callable[[Any, tuple[Any, ...]], None]:
        is_grad_enabled = torch.is_grad_enabled
        recorder = self

        def hook(module: Any, args: tuple[Any, ...]) -> None:
            if module is not events.module:
                return  # a deep copy of the model (a teacher) inherited the hook: not the recorded model
            if events.check_external(recorder._tick + 1):
                recorder._tick += 1  # written since the last forward: load_state_dict, by hand
            if module.training:
                events.train_forwards += 1
                # the same condition as _BatchNorm.forward for writing the buffers
                if module.track_running_stats and module.running_mean is not None:
                    tick = recorder._tick = recorder._last_write_tick = recorder._tick + 1
                    events.updates += 1
                    events.last_update_tick = tick
                    momentum = module.momentum
                    if momentum != events.last_momentum:
                        events.last_momentum = momentum
                        if momentum not in events.momenta:
                            events.momenta.append(momentum)
                    size = recorder._note_batch(args)
                    if recorder._shares is not None:
                        recorder._note_shares(module, size)
                    recorder._last_write_split = recorder._split
                    if not recorder._split_noted:
                        recorder._note_split(recorder._split)
            else:
                events.eval_forwards += 1
                if is_grad_enabled():
                    tick = recorder._tick = recorder._tick + 1
                    events.frozen_forwards += 1
                    if recorder._probe_tick <= recorder._last_write_tick:
                        recorder._start_probe(tick)
                    events.last_frozen_tick = tick

        return hook

    @staticmethod
    def _seen_hook(events: LayerEvents) -> Callable[[Any, tuple[Any, ...], Any], None]:
        def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
            if module is events.module:
                events.resync()  # what the forward itself wrote is seen

        return hook

    def _start_probe(self, tick: int) -> None:
        """The first frozen forward since the last buffer write: note the trainable tensors' digest and each layer's
        last frozen tick before it, so the run's end can tell frozen forwards that preceded a change of the weights
        (frozen training steps) from probes that changed nothing (a gradient probe, an evaluation left with autograd
        on). A digest, not version counters: fused optimizers and writes through ``.data`` leave those unchanged.
        One digest per switch from writing the buffers to frozen forwards, none per step."""
        self._probe_tick = tick
        self._probe_trainable = model_digests(self.model).trainable_sha256
        self._probe_frozen = [events.last_frozen_tick for events in self._layers]

    def _frozen_ticks(self, end: DigestSet) -> list[int]:
        """Each layer's last frozen tick that counts: frozen forwards after the last buffer write that no change of
        the trainable tensors followed are probes, not steps, and are left out."""
        if self._probe_tick > self._last_write_tick and end.trainable_sha256 == self._probe_trainable:
            return list(self._probe_frozen)
        return [events.last_frozen_tick for events in self._layers]

    def _check_external(self) -> None:
        for events in self._layers:
            if events.check_external(self._tick + 1):
                self._tick += 1

    def _on_refit_window(self, model: Any, entering: bool) -> None:
        """Refit window listener: the refit engine writes (or restores) the buffers of ``model``'s layers between
        the two calls; those writes are the refit's, announced by :meth:`_on_refit`, not external ones."""
        try:
            inside = {id(module) for module in model.modules()}
        except AttributeError:
            return
        for events in self._layers:
            if id(events.module) in inside:
                if entering and self._state == "active" and events.check_external(self._tick + 1):
                    self._tick += 1
                events.in_refit = entering
                events.resync()

    def _note_batch(self, args: tuple[Any, ...]) -> int | None:
        try:
            size = int(args[0].shape[0])
        except (IndexError, AttributeError, TypeError):
            return None
        if self._bs_min is None or size < self._bs_min:
            self._bs_min = size
        if self._bs_max is None or size > self._bs_max:
            self._bs_max = size
        return size

    def _input_hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before each forward of the recorded model: which named split each row of its input comes from."""
        if id(module) not in self._holders or self._index is None:
            return  # a deep copy of the model (a teacher) inherited the hook
        self._depth += 1
        if self._depth > 1:
            return  # an inner call of the same forward: its input is an activation, not a record
        batch = args[0] if args else kwargs.get(self._input_key or "")
        if batch is None:
            batch = next((kwargs[k] for k in INPUT_KEYS if isinstance(kwargs.get(k), torch.Tensor)), None)
        self._batch = batch if isinstance(batch, torch.Tensor) and batch.dim() else None
        self._counted = False

    def _input_done(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if id(module) in self._holders:
            self._depth -= 1
            if self._depth == 0:
                self._batch = None  # the forward is over: its rows are not a later call's

    def _note_shares(self, module: Any, size: int | None) -> None:
        """The first buffer write of a forward moves the splits' shares as it moves the statistics (its input's rows
        are digested then, not in forwards that write nothing); a write outside a matched forward (a BatchNorm
        layer called alone) counts its rows as unmatched."""
        assert self._shares is not None and self._index is not None
        inside = self._depth > 0
        if inside and self._counted:
            return  # another layer of the same forward: the batch is counted once
        if inside and self._batch is not None:
            counts = self._index.counts(self._batch)
        elif size is not None:
            counts = [0] * len(self._shares.names) + [size]
        else:
            return
        self._counted = inside
        tracked = getattr(module, "num_batches_tracked", None)
        self._shares.update(counts, momentum=module.momentum, batches_tracked=int(tracked) if tracked is not None
                            else 0)

    def _note_split(self, split: str) -> None:
        if split not in self._split_tags:
            self._split_tags.append(split)
        self._split_noted = split == self._split

    def _dropout_hook(self, module: Any, args: tuple[Any, ...]) -> None:
        if module.training and module.p > 0 and id(module) in self._dropout_ids:
            self._dropout_train += 1

    def _on_refit(self, model: Any, report: Any) -> None:
        """Refit listener: the buffers of the BN layers inside ``model`` were just replaced by a refit."""
        try:
            refitted = {id(module) for module in model.modules()}
        except AttributeError:
            return
        hit = [events for events in self._layers if id(events.module) in refitted]
        if not hit:
            return
        declaration = getattr(report, "declaration", None)
        convention = declaration.convention if isinstance(declaration, Declaration) else None
        details = declaration.refit if isinstance(declaration, Declaration) else None
        # the split the refit engine was told; the recorder's own tag when the report does not say
        split = convention.data.role if convention is not None else self._split
        tick = self._tick = self._last_write_tick = self._tick + 1
        for events in hit:
            events.refits += 1
            events.last_refit_tick = tick
        self._refits += 1
        self._refit_conventions.append(convention)
        self._refit_details.append(details)
        self._last_write_split = split
        self._note_split(split)

    # --- results -----------------------------------------------------------------------------------------------

    def observation(self, *, declared_mode: BufferUpdateMode | None = None, role: str | None = None,
                    rule: AccumulationRule | None = None, momentum: float | None = None) -> Observation:
        """What the run did, as the standard's ``Observation``, with contradictions.

        Contradictions seen in the events alone are always included; give what the author claims
        (``declared_mode``, ``role``, ``rule``/``momentum``) to have it checked against the run as well. Inside the
        block the end state is taken now.
        """
        if self._state == "new" or self._start is None:
            raise UsageError("the recorder has not run yet: use it as `with BNRecorder(model) as rec:` first")
        if self._state == "active":
            self._check_external()
        end = self._end if self._end is not None else model_digests(self.model)
        trainable_changed = end.trainable_sha256 != self._start.trainable_sha256
        layers: list[LayerObservation] = []
        bad_momenta: list[str] = []
        for events, last_frozen_tick in zip(self._layers, self._frozen_ticks(end), strict=True):
            module = events.module
            tracks = bool(module.track_running_stats) and getattr(module, "running_mean", None) is not None
            changed = self._start.layer_running_sha256.get(events.name) != end.layer_running_sha256.get(events.name)
            momenta = [m for m in events.momenta if m is None or 0 < m <= 1]
            if len(momenta) != len(events.momenta):
                bad_momenta.append(events.name)
            layers.append(LayerObservation(
                name=events.name, train_forwards=events.train_forwards, eval_forwards=events.eval_forwards,
                buffer_updates=events.updates, momenta=momenta, buffers_changed=changed,
                frozen_forwards=events.frozen_forwards, refits=events.refits,
                mode=layer_mode(tracks=tracks, updates=events.updates, refits=events.refits,
                                last_update_tick=events.last_update_tick, last_refit_tick=events.last_refit_tick,
                                last_frozen_tick=last_frozen_tick, buffers_changed=changed,
                                trainable_changed=trainable_changed, last_external_tick=events.last_external_tick),
            ))
        last_write, observed_rule, observed_momentum = self._last_write()
        if observed_rule == "ema" and not (observed_momentum is not None and 0 < observed_momentum <= 1):
            observed_rule, observed_momentum = None, None
        observation = Observation(
            train_forwards=max((e.train_forwards for e in self._layers), default=0),
            eval_forwards=max((e.eval_forwards for e in self._layers), default=0),
            buffer_updates=max((e.updates for e in self._layers), default=0),
            buffers_changed=any(layer.buffers_changed for layer in layers),
            batch_size_min=self._bs_min,
            batch_size_max=self._bs_max,
            split_tags=list(self._split_tags),
            last_update_split=self._last_write_split,
            layers=layers,
            mode=combine_modes(layer.mode for layer in layers),
            last_write=last_write,
            rule=observed_rule,
            momentum=observed_momentum,
            frozen_forwards=max((e.frozen_forwards for e in self._layers), default=0),
            refits=self._refits,
            trainable_changed=trainable_changed,
            dropout=self._dropout_mode(),
            precision=self._precision(),
        )
        contradictions = observed_contradictions(observation) + structure_contradictions(self.model, self._layers,
                                                                                         layers)
        if bad_momenta:
            contradictions.append(Contradiction(
                code=MOMENTUM_OUT_OF_RANGE, layers=bad_momenta,
                message="buffer updates ran with a momentum outside (0, 1], which the standard cannot name; "
                        "set the layers' momentum to a value in (0, 1] (PyTorch's default is 0.1)",
            ))
        if self._shares is not None:
            observation = observation.model_copy(update={"split_matching": self._shares.matching()})
            contradictions += split_contradictions(observation)
        update: dict[str, Any] = {"contradictions": contradictions}
        if any(c.code == LAYERS_CHANGED for c in contradictions):
            update["mode"] = "unknown"  # the layers it saw are not the model's now
        observation = observation.model_copy(update=update)
        return with_declared(observation, declared_mode=declared_mode, role=role, rule=rule, momentum=momentum)

    def _last_write(self) -> tuple[typing.Literal["update", "refit"] | None, AccumulationRule | None, float | None]:
        if not self._layers:
            return None, None, None
        last = max(self._layers, key=lambda e: max(e.last_update_tick, e.last_refit_tick))
        if last.last_refit_tick == 0 and last.last_update_tick == 0:
            return None, None, None
        if last.last_refit_tick > last.last_update_tick:
            convention = self._refit_conventions[-1]
            if convention is None:
                return "refit", "exact", None
            accumulation = convention.accumulation
            return "refit", accumulation.rule, getattr(accumulation, "momentum", None)
        if last.last_momentum is None:
            return "update", "cumulative", None
        return "update", "ema", float(last.last_momentum)

    def _dropout_mode(self) -> DropoutMode | None:
        if not self._dropouts:
            return "absent"
        if not any(e.updates for e in self._layers):
            return None
        return "on" if self._dropout_train else "off"

    def _precision(self) -> Precision | None:
        for events in self._layers:
            buffer = getattr(events.module, "running_mean", None)
            if buffer is not None:
                return _PRECISIONS.get(str(buffer.dtype))
        return None

    def declaration(
        self, *, dataset_id: str | None = None, subset: str | None = None,
        transform: Transform | TransformSource | Any = None, role: SplitRole | None = None,
        declared_mode: BufferUpdateMode | None = None, rule: AccumulationRule | None = None,
        momentum: float | None = None, batch_size: int | None = None, num_batches: int | None = None,
        precision: Precision | None = None, dropout: DropoutMode | None = None,
        distributed: DistributedMode | None = None, record_count: int | None = None, ids_sha256: str | None = None,
        sampling_seed: int | None = None, dataset_revision: str | None = None, reporting_line: str | None = None,
        strict: bool = False, override_by: str | None = None, override_reason: str | None = None,
        released: torch.nn.Module | None = None,
    ) -> Declaration:
        """The declaration of the model's deployed state, with the buffer-update mode *as observed*.

        The author names what the recorder cannot see: the dataset and subset behind the split tags and the
        transform: a torchvision transform or pipeline (described by :func:`bnconvention.describe_transform`: its
        steps' classes and parameters, and their sha256), a ``Transform`` from :func:`bnconvention.make_transform`,
        or an object with a ``standard()`` method returning one (anything else: :class:`RecordError`, before the
        run is read). ``declared_mode``, ``role`` and ``rule``/``momentum`` state what the author believes; where the
        run disagrees the record keeps the observed mode and rule and lists the contradiction in
        ``observation.contradictions`` (``strict=True`` raises :class:`RecordError` instead). For a run that wrote
        no buffers (``frozen``, ``untouched``), ``role`` and the rule of the earlier fit are the author's to give;
        the rule defaults to the layers' momentum setting. After a refit, anything not given is taken from the
        refit engine's own declaration. To put ``declared_mode`` in place of the observed mode, say who and why
        (``override_by``, ``override_reason``): the record keeps the observed mode and the override beside it.
        The record describes the network whose weights are released: ``released`` when the recorder watched a
        wrapper around it (a LightningModule's ``self.net``, a library's wrapper), and DataParallel/DDP's
        ``.module`` and ``torch.compile``'s ``_orig_mod`` on their own; ``observation.name_mapping`` says how the
        watched layer names map onto the released ones.
        """
        # the transform is checked before the run is read
        standard_transform = as_standard_transform(transform) if transform is not None else None
        return declaration_from_saved(
            self._saved_observation(released), dataset_id=dataset_id, subset=subset, transform=standard_transform,
            role=role, declared_mode=declared_mode, rule=rule, momentum=momentum, batch_size=batch_size,
            num_batches=num_batches, precision=precision,
            dropout=dropout, distributed=distributed, record_count=record_count, ids_sha256=ids_sha256,
            sampling_seed=sampling_seed, dataset_revision=dataset_revision, reporting_line=reporting_line,
            strict=strict, override_by=override_by, override_reason=override_reason)

    def save_observation(self, path: str | os.PathLike[str], *, released: torch.nn.Module | None = None) -> Path:
        """Write what :meth:`declaration` reads (the observation, the BatchNorm layers, the digests) to ``path``,
        atomically, so ``bnconvention declare --from-observation path --weights W`` can declare it later, elsewhere,
        without the model (:mod:`bnconvention.authoring.saved_observation`). Save it beside the weights, at the same
        point of the run: the declaration checks the file's tensors against the digests saved here. ``released``:
        as for :meth:`declaration`."""
        saved = self._saved_observation(released)
        target = Path(path)
        atomic_write_text(target, json.dumps(to_dict(saved), indent=2, ensure_ascii=False) + "\n")
        return target

    def _saved_observation(self, released: torch.nn.Module | None) -> SavedObservation:
        """What :func:`~bnconvention.authoring.recorder_declaration.declaration_from_saved` needs of the recorder
        and its model, as one value (the file :meth:`save_observation` writes). The layers and digests are those of
        the released network (:func:`~bnconvention.authoring.recorder_declaration.released_module`); when it is not
        the recorded model itself, the observation keeps the recorded names and says how they map."""
        observation = self.observation()  # first: a recorder that never ran is refused before any digest
        network, prefix = released_module(self.model, released)
        if prefix:
            observation = observation.model_copy(update={"name_mapping": LayerNameMapping(observed_prefix=prefix,
                                                                                          weights_prefix="")})
        digests = model_digests(network)
        rule, momentum = self._configured_rule()
        refits, details = self._refit_conventions, self._refit_details
        return SavedObservation(
            format=FORMAT, observation=observation, deployed_state=batchnorm_state(network, digests),
            digests=tensor_digests(digests), split=self.split, configured_rule=rule, configured_momentum=momentum,
            sync_batchnorm=any(type(e.module).__name__ == "SyncBatchNorm" for e in self._layers),
            refit_convention=refits[-1] if refits else None, refit=details[-1] if details else None)

    def _configured_rule(self) -> tuple[AccumulationRule | None, float | None]:
        """The rule the layers are configured for, when they all agree: the best guess for an unseen earlier fit."""
        momenta = {e.module.momentum for e in self._layers}
        if len(momenta) != 1:
            return None, None
        (momentum,) = momenta
        if momentum is None:
            return "cumulative", None
        return "ema", float(momentum)

