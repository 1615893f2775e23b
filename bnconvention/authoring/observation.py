"""From recorded BatchNorm events to a buffer-update mode, contradictions and a fitting convention (torch-free).

The recorder (:mod:`bnconvention.authoring.recorder`) counts events per BatchNorm layer; this module holds the rules
that turn them into the standard's words, as pure functions over plain values and models, so the rules can be tested
without torch and reused by the validator and the ``declare`` command on an observation read from JSON.

Events of one layer, in order (each stamped with a run-wide tick):

- **update**: a training-mode forward of a layer that tracks running statistics (the buffers are written);
- **refit**: the refit engine replaced the buffers (``bnconvention.authoring.refit_listeners.notify_refit``);
- **frozen step**: an eval-mode forward with autograd enabled, i.e. a training step that left the buffers as they
  were. Evaluation forwards run under ``torch.no_grad()`` / ``torch.inference_mode()`` are not steps and never
  count here; run evaluation that way (as usual) so it is not taken for training.

How a layer's mode is derived (:func:`layer_mode`):

0. Written outside a forward or refit (``load_state_dict``, ``reset_running_stats()``, by hand: the buffers'
   version counters moved between two forwards, :mod:`bnconvention.authoring.recorder_events`) after the last
   update or refit: ``unknown``. Such a write *before* the last update keeps the mode, and is listed as a
   contradiction (the moving average continued from those values).
1. No update and no refit: ``frozen`` if the trainable tensors changed during the run (the model was trained with
   these buffers held fixed), ``untouched`` if not; ``unknown`` if the buffers changed anyway (something the
   recorder cannot see wrote them: ``load_state_dict``, a direct assignment, a refit outside bnconvention).
2. Last write an update with the buffers back to their starting value: ``unknown`` (an unseen write restored them).
3. A refit followed by updates: ``mixed`` (the moving average continued from the refit statistics).
4. Otherwise the last write decides (``refit`` or ``train``), unless frozen steps came after it and the trainable
   tensors changed after them: then the weights moved after the buffers were last fitted, ``mixed``.
   Frozen steps *before* the last write do not matter (the write refitted the buffers afterwards). Eval-mode
   forwards with autograd after the last write that no change of the trainable tensors followed (a gradient probe,
   an evaluation left with autograd on) wrote nothing and moved nothing: they are not counted as steps (the
   recorder compares the trainable digest at the first of them with the one at the end of the run).

An author who knows better can put another mode in the convention only as an **override**
(:func:`with_override`): the observation keeps the observed mode and records who declared what, and why.

The model's mode (:func:`combine_modes`) is the common mode of its layers that track running statistics;
``unknown`` if any layer is unknown; ``mixed`` when layers disagree (some updated and others not, some refit and
others trained); ``untouched`` for a model without running statistics.

>>> layer_mode(tracks=True, updates=3, refits=0, last_update_tick=7, last_refit_tick=0, last_frozen_tick=2,
...            buffers_changed=True, trainable_changed=True)
'train'
>>> layer_mode(tracks=True, updates=3, refits=0, last_update_tick=7, last_refit_tick=0, last_frozen_tick=9,
...            buffers_changed=True, trainable_changed=True)
'mixed'
>>> combine_modes(["train", "train", "frozen"])
'mixed'
"""

from __future__ import annotations

import typing
from collections.abc import Iterable

from bnconvention.authoring.declaration import make_convention
from bnconvention.authoring.split_matching import MIXED_SHARE_FLOOR
from bnconvention.errors import RecordError
from bnconvention.standard.models import (
    AccumulationRule,
    BufferUpdateMode,
    Contradiction,
    DistributedMode,
    DropoutMode,
    FittingConvention,
    ModeOverride,
    Observation,
    Precision,
    SplitRole,
    Transform,
    VarianceEstimator,
)

SPLIT_ROLES: tuple[str, ...] = typing.get_args(SplitRole)
AnyObservation = typing.TypeVar("AnyObservation", bound=Observation)
WRITTEN_MODES: frozenset[str] = frozenset({"train", "refit", "mixed"})

# Stable contradiction codes (documented in docs/recorder.md; never renamed).
UNOBSERVED_BUFFER_WRITE = "unobserved-buffer-write"
MOMENTUM_VARIES = "momentum-varies"
DECLARED_FROZEN_BUFFERS_CHANGED = "declared-frozen-buffers-changed"
DECLARED_UNTOUCHED_BUFFERS_CHANGED = "declared-untouched-buffers-changed"
DECLARED_TRAIN_NO_BUFFER_UPDATE = "declared-train-no-buffer-update"
DECLARED_REFIT_NO_REFIT = "declared-refit-no-refit"
DECLARED_MODE_MISMATCH = "declared-mode-mismatch"
SPLIT_MISMATCH = "split-mismatch"
DECLARED_RULE_MISMATCH = "declared-rule-mismatch"
LAYERS_CHANGED = "batchnorm-layers-changed"
MIXED_SPLIT = "mixed-split"
UNMATCHED_RECORDS = "unmatched-records"


def layer_mode(*, tracks: bool, updates: int, refits: int, last_update_tick: int, last_refit_tick: int,
               last_frozen_tick: int, buffers_changed: bool, trainable_changed: bool,
               last_external_tick: int = 0) -> BufferUpdateMode | None:
    """The buffer-update mode of one layer from its events (rules in the module docstring).

    Ticks are positive and increase through the run; 0 means "never". ``None`` for a layer without running
    statistics (``track_running_stats=False``): it has no deployed state and takes no part in the model's mode.
    ``last_external_tick``: the last write outside a forward or refit the recorder noticed (rule 0).
    """
    if not tracks:
        return None
    if updates == 0 and refits == 0:
        if buffers_changed:
            return "unknown"
        return "frozen" if trainable_changed else "untouched"
    last_write = max(last_update_tick, last_refit_tick)
    if last_external_tick > last_write:
        return "unknown"
    if last_update_tick > last_refit_tick and not buffers_changed:
        return "unknown"
    stale = trainable_changed and last_frozen_tick > last_write
    if refits:
        if last_update_tick > last_refit_tick:
            return "mixed"
        return "mixed" if stale else "refit"
    return "mixed" if stale else "train"


def combine_modes(modes: Iterable[BufferUpdateMode | None]) -> BufferUpdateMode:
    """The model's mode from its layers' modes (``None`` entries, layers without statistics, are skipped)."""
    present = [mode for mode in modes if mode is not None]
    if not present:
        return "untouched"
    if "unknown" in present:
        return "unknown"
    if len(set(present)) == 1:
        return present[0]
    return "mixed"


def _names(layers: Iterable[str], limit: int = 4) -> str:
    names = list(layers)
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def observed_contradictions(observation: Observation) -> list[Contradiction]:
    """Contradictions visible in the events alone: unseen buffer writes, momenta that no single rule names."""
    found: list[Contradiction] = []
    unknown = [layer.name for layer in observation.layers if layer.mode == "unknown"]
    if unknown:
        found.append(Contradiction(
            code=UNOBSERVED_BUFFER_WRITE, layers=unknown,
            message=f"running buffers of {_names(unknown)} were written by something the recorder did not see "
                    "(load_state_dict, a direct assignment, or a refit outside bnconvention); the mode is "
                    "'unknown': record that step too, or declare the mode by hand",
        ))
    written = [layer for layer in observation.layers if layer.buffer_updates]
    momenta = {m for layer in written for m in layer.momenta}
    if len(momenta) > 1:
        shown = ", ".join("None" if m is None else repr(m) for m in sorted(momenta, key=lambda m: (m is None, m or 0)))
        found.append(Contradiction(
            code=MOMENTUM_VARIES, layers=[layer.name for layer in written if len(layer.momenta) > 1] or
            [layer.name for layer in written],
            message=f"buffer updates ran with several momenta ({shown}); a convention names one, the record "
                    "gives the momentum of the last update",
        ))
    return found


def split_contradictions(observation: Observation) -> list[Contradiction]:
    """What the splits matched by content say against a single-split convention: statistics that mix several
    named splits, and buffer-writing records found in none of them (each at least ``MIXED_SHARE_FLOOR`` of the
    statistics)."""
    matching = getattr(observation, "split_matching", None)
    if matching is None:
        return []
    found: list[Contradiction] = []
    mixed = [s for s in matching.splits if s.share >= MIXED_SHARE_FLOOR]
    if len(mixed) > 1:
        shares = ", ".join(f"{s.split} {100 * s.share:.1f} %" for s in sorted(mixed, key=lambda s: -s.share))
        found.append(Contradiction(code=MIXED_SPLIT, message=(
            f"the running statistics mix {len(mixed)} named splits by content ({shares}); a convention names one "
            "split: the record keeps each split's share in observation.split_matching")))
    if matching.unmatched_share >= MIXED_SHARE_FLOOR:
        found.append(Contradiction(code=UNMATCHED_RECORDS, message=(
            f"{matching.unmatched_records} records of buffer-writing batches ({100 * matching.unmatched_share:.1f} % "
            "of the statistics) are in none of the named splits (random augmentation, a cast or device move before "
            "the forward, or data not named)")))
    return found


def largest_split(observation: Observation) -> str | None:
    """The named split with the largest share of the statistics when the splits were matched by content."""
    matching = getattr(observation, "split_matching", None)
    if matching is None or not any(s.share > 0 for s in matching.splits):
        return None
    return max(matching.splits, key=lambda s: s.share).split


def declared_contradictions(observation: Observation, *, declared_mode: BufferUpdateMode | None = None,
                            role: str | None = None, rule: AccumulationRule | None = None,
                            momentum: float | None = None) -> list[Contradiction]:
    """Where what the author declares disagrees with what was observed. Arguments left ``None`` are not checked."""
    found: list[Contradiction] = []
    observed = observation.mode
    changed = [layer.name for layer in observation.layers if layer.buffers_changed]
    override = getattr(observation, "override", None)
    overridden = override is not None and override.mode == declared_mode
    if declared_mode is not None and observed is not None and declared_mode != observed and not overridden:
        if declared_mode in ("frozen", "untouched") and observation.buffers_changed:
            code = DECLARED_FROZEN_BUFFERS_CHANGED if declared_mode == "frozen" else DECLARED_UNTOUCHED_BUFFERS_CHANGED
            found.append(Contradiction(
                code=code, layers=changed,
                message=f"declared {declared_mode!r} but the running buffers of {_names(changed)} changed during "
                        f"the run ({observation.buffer_updates} training-mode updates); observed mode {observed!r}",
            ))
        elif declared_mode == "train" and observation.buffer_updates == 0:
            found.append(Contradiction(
                code=DECLARED_TRAIN_NO_BUFFER_UPDATE,
                message=f"declared 'train' but no BatchNorm layer updated its buffers "
                        f"({observation.eval_forwards} eval-mode forwards, no training-mode forward); "
                        f"observed mode {observed!r}",
            ))
        elif declared_mode == "refit" and not observation.refits:
            found.append(Contradiction(
                code=DECLARED_REFIT_NO_REFIT,
                message=f"declared 'refit' but no refit was reported during the run; observed mode {observed!r} "
                        "(run the refit inside the recorder, through bnconvention.refitting)",
            ))
        else:
            found.append(Contradiction(
                code=DECLARED_MODE_MISMATCH,
                message=f"declared buffer-update mode {declared_mode!r} but the run shows {observed!r}",
            ))
    content = largest_split(observation)
    if role is not None and observed in WRITTEN_MODES and content is not None and role != content:
        found.append(Contradiction(
            code=SPLIT_MISMATCH,
            message=f"declared on {role!r} data, but matched by content the largest share of the running "
                    f"statistics is split {content!r} (observation.split_matching)",
        ))
    elif role is not None and observed in WRITTEN_MODES and content is None \
            and observation.last_update_split is not None and role != observation.last_update_split:
        what = "refit" if (declared_mode or observed) == "refit" else "fit"
        found.append(Contradiction(
            code=SPLIT_MISMATCH,
            message=f"a {what} declared on {role!r} data, but the last buffer updates came from split tag "
                    f"{observation.last_update_split!r} (tags seen: {', '.join(observation.split_tags)})",
        ))
    if rule is not None and observed in WRITTEN_MODES and observation.rule is not None:
        declared = rule if rule != "ema" else f"ema momentum {momentum}"
        seen = observation.rule if observation.rule != "ema" else f"ema momentum {observation.momentum}"
        if declared != seen:
            found.append(Contradiction(
                code=DECLARED_RULE_MISMATCH,
                message=f"declared accumulation {declared} but the last buffer write used {seen}",
            ))
    return found


def with_declared(observation: AnyObservation, *, declared_mode: BufferUpdateMode | None = None,
                  role: str | None = None, rule: AccumulationRule | None = None,
                  momentum: float | None = None) -> AnyObservation:
    """A copy of ``observation`` whose contradictions also cover what the author declares (no duplicates)."""
    extra = declared_contradictions(observation, declared_mode=declared_mode, role=role, rule=rule,
                                    momentum=momentum)
    merged = list(observation.contradictions)
    for item in extra:
        if item not in merged:
            merged.append(item)
    return observation.model_copy(update={"contradictions": merged})


def with_override(observation: Observation, *, mode: BufferUpdateMode, by: str, reason: str) -> Observation:
    """A copy of ``observation`` whose convention mode is the author's ``mode``, recorded as an override beside the
    observed one (the observation's own ``mode`` is kept). The declared-mode contradiction the override answers is
    not listed again; the events' own contradictions stay."""
    observed = observation.mode
    if observed is None:
        raise RecordError("the observation has no derived 'mode' to override; declare the mode without --override")
    if mode == observed:
        raise RecordError(f"the run already shows mode {mode!r}: there is nothing to override (drop the override)")
    if not by.strip() or not reason.strip():
        raise RecordError("an override names who makes it and why (by= and reason= are non-empty)")
    return observation.model_copy(update={"override": ModeOverride(mode=mode, observed=observed, by=by,
                                                                   reason=reason)})


def with_author(observation: Observation, *, declared_mode: BufferUpdateMode | None, role: str | None,
                rule: AccumulationRule | None, momentum: float | None, override_by: str | None = None,
                override_reason: str | None = None) -> Observation:
    """The observation with what the author says: claims checked against the run (:func:`with_declared`), and,
    when ``override_reason`` and ``override_by`` are given, ``declared_mode`` as an override (:func:`with_override`).
    """
    if override_reason is not None or override_by is not None:
        if declared_mode is None or override_reason is None or override_by is None:
            raise RecordError("an override needs the mode, who overrides and why (declared_mode=, override_by=, "
                              "override_reason=; on the command line --mode, --override-by and --override)")
        observation = with_override(observation, mode=declared_mode, by=override_by, reason=override_reason)
    return with_declared(observation, declared_mode=declared_mode, role=role, rule=rule, momentum=momentum)


def convention_mode(observation: Observation) -> BufferUpdateMode | None:
    """The mode a convention built from ``observation`` carries: the author's override when there is one."""
    override = getattr(observation, "override", None)
    return override.mode if override is not None else observation.mode


def convention_from_observation(
    observation: Observation, *, dataset_id: str, subset: str, transform: Transform,
    role: SplitRole | None = None, rule: AccumulationRule | None = None, momentum: float | None = None,
    batch_size: int | None = None, num_batches: int | None = None, precision: Precision | None = None,
    variance_estimator: VarianceEstimator = "unbiased", dropout: DropoutMode | None = None,
    distributed: DistributedMode = "none", record_count: int | None = None, ids_sha256: str | None = None,
    sampling_seed: int | None = None, dataset_revision: str | None = None,
) -> FittingConvention:
    """The fitting convention an observation supports, completed by what only the author knows.

    Observed values win where the run wrote the buffers (mode ``train``, ``refit``, ``mixed``): the mode, the rule
    and momentum of the last write, the batch size (largest seen), the number of updates, the buffer dtype and
    dropout. ``role`` defaults to the split tag of the last write when that tag is a split role. Where the run wrote
    nothing (``frozen``, ``untouched``, ``unknown``) the statistics come from an earlier fit the recorder did not
    see, so ``role`` and ``rule`` must be given.
    """
    mode = convention_mode(observation)
    if mode is None:
        raise RecordError("the observation has no derived 'mode'; it was not produced by bnconvention's recorder. "
                          "Record the run with BNRecorder, or declare the convention from flags")
    written = mode in WRITTEN_MODES
    if role is None:
        tag = (largest_split(observation) or observation.last_update_split) if written else None
        if tag is None or tag not in SPLIT_ROLES:
            found = f"the last write was tagged {tag!r}" if tag is not None else "the run wrote no buffers"
            raise RecordError(f"cannot tell which split fitted the statistics ({found}); name it with role= "
                              f"(one of {', '.join(SPLIT_ROLES)})")
        role = typing.cast(SplitRole, tag)
    if written and observation.rule is not None:
        rule, momentum = observation.rule, observation.momentum
        if observation.last_write == "update":
            # the last write was a training-mode pass the recorder saw: its shape is measured
            batch_size = observation.batch_size_max or batch_size
            num_batches = observation.buffer_updates or num_batches
            precision = observation.precision or precision
            dropout = observation.dropout or dropout
    if rule is None:
        raise RecordError(f"the run's mode is {mode!r}: the statistics were fitted before it, by a rule the "
                          "recorder did not see; name it with rule= ('ema' with momentum=, 'cumulative' or 'exact')")
    if dropout is None:
        dropout = "absent" if observation.dropout == "absent" else "off"
    return make_convention(
        buffer_update_mode=mode, role=role, dataset_id=dataset_id, subset=subset, transform=transform, rule=rule,
        momentum=momentum if rule == "ema" else None, batch_size=batch_size or None,
        num_batches=num_batches or None, variance_estimator=variance_estimator, precision=precision,
        dropout=dropout, distributed=distributed, record_count=record_count, ids_sha256=ids_sha256,
        sampling_seed=sampling_seed, dataset_revision=dataset_revision,
    )
