"""The per-layer event counters of :class:`~bnconvention.authoring.recorder.BNRecorder`, and how it notices writes
to the running buffers that no forward made.

A BatchNorm layer's buffers are written by its own training-mode forward, by a refit the refit engine announces, or
by something the recorder cannot see: ``load_state_dict``, ``reset_running_stats()``, an in-place copy or an
assignment by hand. Every in-place write bumps a tensor's version counter (``Tensor._version``) and an assignment
replaces the tensor object, so the recorder keeps, per layer, the identity and version of each buffer as the last
forward (or the last announced refit) left them; when the next forward starts, or the run ends, with anything else,
the buffers were written outside a forward: an **external write**, stamped with a tick like the other events.

Reading three version counters per forward is the whole cost; no tensor is copied or hashed.
"""

from __future__ import annotations

from typing import Any

from torch.nn.modules.batchnorm import _BatchNorm

from bnconvention.authoring.observation import LAYERS_CHANGED, UNOBSERVED_BUFFER_WRITE
from bnconvention.errors import UsageError
from bnconvention.standard.models import Contradiction, LayerObservation

BUFFER_NAMES = ("running_mean", "running_var", "num_batches_tracked")
UNSET = object()
BufferVersions = tuple[tuple[int, int] | None, ...]


def buffer_versions(module: Any) -> BufferVersions:
    """The identity and version counter of each running buffer of ``module`` (``None`` for an absent one)."""
    found: list[tuple[int, int] | None] = []
    for name in BUFFER_NAMES:
        buffer = module._buffers.get(name)
        found.append(None if buffer is None else (id(buffer), int(buffer._version)))
    return tuple(found)


class LayerEvents:
    """Mutable counters of one BatchNorm layer; written by its hooks on every forward, so kept minimal."""

    __slots__ = ("name", "module", "train_forwards", "eval_forwards", "frozen_forwards", "updates", "refits",
                 "momenta", "last_momentum", "last_update_tick", "last_refit_tick", "last_frozen_tick",
                 "versions", "external_writes", "last_external_tick", "in_refit")

    def __init__(self, name: str, module: _BatchNorm) -> None:
        self.name = name
        self.module = module
        self.train_forwards = 0
        self.eval_forwards = 0
        self.frozen_forwards = 0
        self.updates = 0
        self.refits = 0
        self.momenta: list[float | None] = []
        self.last_momentum: Any = UNSET
        self.last_update_tick = 0
        self.last_refit_tick = 0
        self.last_frozen_tick = 0
        self.versions: BufferVersions = buffer_versions(module)
        self.external_writes = 0
        self.last_external_tick = 0
        self.in_refit = False  # inside a refit's window: its writes are announced, not external

    def check_external(self, tick: int) -> bool:
        """Whether the buffers were written since the last forward or announced refit; if so it is counted at
        ``tick``. Called before a forward and at the end of the run."""
        if self.in_refit:
            return False
        now = buffer_versions(self.module)
        if now == self.versions:
            return False
        self.versions = now
        self.external_writes += 1
        self.last_external_tick = tick
        return True

    def resync(self) -> None:
        """Take the buffers as they are now as seen (after a forward, or an announced refit)."""
        self.versions = buffer_versions(self.module)


def structure_contradictions(model: Any, events: list[LayerEvents], layers: list[LayerObservation]
                             ) -> list[Contradiction]:
    """BatchNorm layers added or removed during the run, and external writes an update then overwrote."""
    found: list[Contradiction] = []
    seen = {e.name: e.module for e in events}
    now = {name: m for name, m in model.named_modules() if isinstance(m, _BatchNorm)}
    changed = sorted(n for n in seen.keys() | now.keys() if seen.get(n) is not now.get(n))
    if changed:
        found.append(Contradiction(code=LAYERS_CHANGED, layers=changed, message=(
            f"BatchNorm layers were added, removed or replaced during the run ({', '.join(changed[:4])}"
            f"{', ...' if len(changed) > 4 else ''}): their buffer writes were not all observed, so the mode is "
            "'unknown'; record a run over the final architecture")))
    earlier = [e.name for e, layer in zip(events, layers, strict=True) if e.external_writes
               and layer.mode != "unknown"]
    if earlier:
        found.append(Contradiction(code=UNOBSERVED_BUFFER_WRITE, layers=earlier, message=(
            f"running buffers of {', '.join(earlier[:4])} were written outside a forward (load_state_dict, "
            "reset_running_stats or by hand) before the run's last buffer update; the statistics continued "
            "from those values")))
    return found


def check_tag(split: str) -> str:
    """A split tag: any non-empty string (a standard split role lets the declaration take its role from it)."""
    if not isinstance(split, str) or not split.strip():
        raise UsageError(f"a split tag is a non-empty string such as 'train', 'retain' or 'forget', got {split!r}")
    return split


__all__ = ["BUFFER_NAMES", "UNSET", "LayerEvents", "buffer_versions", "check_tag", "structure_contradictions"]
