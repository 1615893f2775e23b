"""The pool-size sweep: R replicates per checkpoint at each pool size, refitting only what no run stored.

Each pool size of ``sweeps.pool_sizes`` (and ``refit.pool_size``, whose replicates the audits themselves stored) is
a design of its own: replicate ``r`` at pool size P refits on P retained records drawn from
``SeedSequence(seed, spawn_key=(0, r))``, is stored under :func:`~bnconvention.audit.run.sweeps.replicate_key`, and the
cells are re-decided from the shipped cells and those replicates at the spec's margin. A pool size computed once is
never refit again; a new one adds exactly R refits per checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bnconvention.audit.core.result import AuditResult, ReplicateRecord
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.measure.evaluation import Refitter
from bnconvention.audit.run.redecide import redecide
from bnconvention.audit.run.runner import check_data_fits, prepare_audit
from bnconvention.audit.run.stages import check_theta_after_audit, replicate_record
from bnconvention.audit.run.sweeps import (
    PoolSizeRow,
    ReplicateStore,
    cell_outcomes,
    design_counts,
    flip_counts,
    replicate_key,
    sweep_qs,
    with_pool_size,
)
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.errors import AuditSpecError


@dataclass(frozen=True)
class SweepCheckpoint:
    """One decided checkpoint of the census: where its weights are and its finished audit."""

    path: Path
    weights_key: str
    result: AuditResult


def check_pool_sizes(spec: AuditSpec, data: AuditData) -> None:
    """Every swept pool size fits the retain split (checked before any audit; the error names the sweep entry)."""
    for i, size in enumerate(spec.sweeps.pool_sizes):
        try:
            check_data_fits(with_pool_size(spec, size), data)
        except AuditSpecError as exc:
            raise AuditSpecError(str(exc).replace("refit.pool_size", f"sweeps.pool_sizes[{i}]"),
                                 field=f"/sweeps/pool_sizes/{i}") from exc


def stored_replicates(checkpoint: SweepCheckpoint, spec: AuditSpec, store: ReplicateStore, *,
                      data: AuditData) -> tuple[list[ReplicateRecord], int]:
    """The R replicates of one checkpoint at ``spec``'s pool size, refitting only the missing ones; returns them
    and the number of refits run."""
    pool = spec.refit.pool_size
    keys = [replicate_key(checkpoint.weights_key, spec, pool_size=pool, index=r) for r in range(spec.replicates)]
    records: list[ReplicateRecord | None] = [store.get(key) for key in keys]
    missing = [r for r, record in enumerate(records) if record is None]
    if missing:
        prepared = prepare_audit(checkpoint.path, spec, data=data)
        loaded = prepared.checkpoint
        refitter = Refitter(loaded.model, after_refit=loaded.weights.round_running if loaded.weights else None)
        for r in missing:
            records[r] = replicate_record(prepared, refitter, r)
            store.put(keys[r], records[r])  # type: ignore[arg-type]
        check_theta_after_audit(loaded.path, before=refitter.theta.trainable_sha256,
                              after=refitter.theta.digests(loaded.model).trainable_sha256)
    return [record for record in records if record is not None], len(missing)


def pool_size_sweep(checkpoints: Sequence[SweepCheckpoint], spec: AuditSpec, store: ReplicateStore, *,
                    data: AuditData) -> tuple[list[PoolSizeRow], int]:
    """One row per pool size (counts at the spec's margin, displaced after BY at each swept q) and the refits the
    sweep ran; no rows when the spec sweeps no pool size."""
    if not spec.sweeps.pool_sizes:
        return [], 0
    rows: list[PoolSizeRow] = []
    total = 0
    for size in sorted({*spec.sweeps.pool_sizes, spec.refit.pool_size}):
        at = with_pool_size(spec, size)
        decided = []
        added = 0
        for checkpoint in checkpoints:
            records, ran = stored_replicates(checkpoint, at, store, data=data)
            added += ran
            decided.append(redecide(checkpoint.result, at, replicates=[r.base_cells for r in records]))
        total += added
        cells = design_counts([cell_outcomes(r, at) for r in decided], fdr_qs=sweep_qs(spec))
        rows.append(PoolSizeRow(pool_size=size, refits_added=added, cells=cells, flips=flip_counts(decided, at)))
    return rows, total
