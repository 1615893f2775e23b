"""The census's readings beyond the per-cell counts: controls, sweeps, detection floor, recalibration budget.

:func:`census_sections` assembles them for :func:`bnconvention.audit.census.run.summarize` over the decided checkpoints
(anchored, not controls); the pool-size sweep needs refits and is run by
:func:`bnconvention.audit.census.run.run_census` before the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.population.detection import detection_floor, recalibration_budget
from bnconvention.audit.run.sweeps import margin_sweep, sweep_qs
from bnconvention.audit.spec.audit_spec import AuditSpec


def census_sections(decided: Sequence[AuditResult], names: Sequence[str], spec: AuditSpec, *,
                    controls: dict[str, Any], pool_sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """The census's controls, sweeps (margins and q here; the pool sizes :func:`run_census` swept), detection floor
    and recalibration budget, over the decided checkpoints (named by ``names``)."""
    return {
        "decided": list(names),
        "controls": controls,
        "sweeps": {"margins": margin_sweep(decided, spec), "fdr_qs": sweep_qs(spec),
                   "pool_sizes": pool_sizes},
        "detection_floor": detection_floor(decided, spec),
        "recalibration_budget": recalibration_budget(list(zip(names, decided, strict=True)), spec),
    }
