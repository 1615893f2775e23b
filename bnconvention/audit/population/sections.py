"""The census's sweeps: the margins and q levels re-decided here from the stored shifts, beside the pool sizes
:func:`bnconvention.audit.census.run.run_census` swept with refits before the summary.

:mod:`bnconvention.audit.run.sweeps` re-decides and counts (a layer below the census model); its rows become the
model's :class:`~bnconvention.audit.run.sweeps.MarginRow` rows as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.population.model_sections import Sweeps
from bnconvention.audit.run.sweeps import PoolSizeRow, margin_sweep, sweep_qs
from bnconvention.audit.spec.audit_spec import AuditSpec


def census_sweeps(decided: Sequence[AuditResult], spec: AuditSpec, *, pool_sizes: Sequence[PoolSizeRow]) -> Sweeps:
    """The census's sweeps over the decided checkpoints: margins and q here, the pool sizes :func:`run_census`
    swept."""
    return Sweeps(margins=margin_sweep(decided, spec),
                  fdr_qs=sweep_qs(spec), pool_sizes=list(pool_sizes))
