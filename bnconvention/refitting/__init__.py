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

from bnconvention.refitting.engine import refit
from bnconvention.refitting.proof import ThetaWitness
from bnconvention.refitting.result import DEFAULT_MEMORY_BUDGET, ExactMethod, RefitPath, RefitReport
from bnconvention.refitting.staleness import staleness_distance
from bnconvention.refitting.state import LayerRunningState, restore_running_state, running_state

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
