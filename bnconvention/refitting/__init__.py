"""The refit engine: replace a model's BatchNorm running statistics φ at bit-identical weights θ.

The package is ``refitting``, its function ``refit`` (also ``bnconvention.refit``): two names, so that importing a
submodule never binds the package where the function is looked up.

>>> from bnconvention import refit  # doctest: +SKIP
>>> report = refit(model, retain_loader, rule="exact")  # doctest: +SKIP
>>> report.to_dict()["refit"]["staleness"]["mean_distance"]  # doctest: +SKIP

Modules: :mod:`.engine` (``refit``, the transaction), :mod:`.graph` (fx trace cut into stages), :mod:`.exact`
(layer-major traced pass, memory bound), :mod:`.kernels` (its
bit-identical faster max pooling), :mod:`.fallback` (per-layer hook passes), :mod:`.train_mode`
(``cumulative`` = ``update_bn``, ``ema``), :mod:`.pool` (batches), :mod:`.moments` (float64 Chan accumulation),
:mod:`.state` (snapshot/restore), :mod:`.proof` (the θ witness), :mod:`.devices` (``--device``), :mod:`.staleness`
(docs/statistics.md#staleness), :mod:`.result` (``RefitReport``), :mod:`.files` (weights in/out, ``.npz`` pools; used by
``bnconvention refit``).
"""

from typing import TYPE_CHECKING

from bnconvention._lazy import lazy_exports

if TYPE_CHECKING:
    from bnconvention.refitting.engine import refit
    from bnconvention.refitting.proof import ThetaWitness
    from bnconvention.refitting.result import DEFAULT_MEMORY_BUDGET, ExactMethod, RefitPath, RefitReport
    from bnconvention.refitting.staleness import staleness_distance
    from bnconvention.refitting.state import LayerRunningState, restore_running_state, running_state
# Lazy: the torch-free paths that name a device (``--device``, the audit's and the Hub audit's ``Device`` type) import
# :mod:`.devices` without importing the engine and torch; every other module of the package imports torch at its top.
_EXPORTS: dict[str, str] = {
    "DEFAULT_MEMORY_BUDGET": "bnconvention.refitting.result",
    "ExactMethod": "bnconvention.refitting.result",
    "LayerRunningState": "bnconvention.refitting.state",
    "RefitPath": "bnconvention.refitting.result",
    "RefitReport": "bnconvention.refitting.result",
    "ThetaWitness": "bnconvention.refitting.proof",
    "refit": "bnconvention.refitting.engine",
    "restore_running_state": "bnconvention.refitting.state",
    "running_state": "bnconvention.refitting.state",
    "staleness_distance": "bnconvention.refitting.staleness",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "ExactMethod",
    "LayerRunningState",
    "RefitPath",
    "RefitReport",
    "ThetaWitness",
    "refit",
    "restore_running_state",
    "running_state",
    "staleness_distance",
]
