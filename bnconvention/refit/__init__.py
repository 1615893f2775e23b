"""The refit engine: replace a model's BatchNorm running statistics φ at bit-identical weights θ.

>>> from bnconvention.refit import refit  # doctest: +SKIP
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

import sys
import types
from typing import Any

from bnconvention.refit.engine import refit
from bnconvention.refit.proof import ThetaWitness
from bnconvention.refit.result import DEFAULT_MEMORY_BUDGET, ExactMethod, RefitPath, RefitReport
from bnconvention.refit.staleness import staleness_distance
from bnconvention.refit.state import LayerRunningState, restore_running_state, running_state

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


class _CallablePackage(types.ModuleType):
    """``bnconvention.refit`` names both this package and its function. Python binds a loaded subpackage as an
    attribute of its parent, so once any ``bnconvention.refit.*`` module has been imported, ``from bnconvention
    import refit`` finds the package, not the function (the lazy export never runs). Calling the package calls the
    function, so ``refit(model, batches)`` works whatever was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> RefitReport:
        return refit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
