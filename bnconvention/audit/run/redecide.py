"""A stored audit re-decided under another spec (another margin, say) from its stored shipped and replicate cells: a
census rerun reuses a journaled audit (:mod:`bnconvention.audit.census.run`), a pool-size sweep re-decides with the
replicates of another pool size (:mod:`.pool_sweep`).

The activation-scales cells of a result (``AuditResult.scales``, spec ``quantization``) are re-decided with the rest:
their recalibration shifts are stored in the scales annotation, and :func:`redecide` re-decides them at the new
margin by the rule a fresh audit applies (:func:`bnconvention.audit.scales.stage.redecide_scales`).
"""

from __future__ import annotations

from collections.abc import Sequence

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.diagnostics.encoder import cells_for, redecide_typed_cells
from bnconvention.audit.measure.decisions import BaseCells, audit_reporting_line
from bnconvention.audit.run.stages import ShippedCells, decide_cells
from bnconvention.audit.scales.stage import redecide_scales
from bnconvention.audit.spec.audit_spec import AuditSpec


def redecide(result: AuditResult, spec: AuditSpec, *, replicates: Sequence[BaseCells] | None = None
             ) -> AuditResult:
    """The result's decisions, verdicts and reporting line under ``spec`` (another margin, say), from its stored
    shipped cells and ``replicates`` (default: its own replicate cells), and its scales cells from their stored
    recalibration shifts — no model, no refit."""
    if replicates is None and result.spec_sha256 == spec.sha256():
        return result
    if result.shipped_base_cells is None:
        raise ValueError(f"{result.checkpoint}: the result carries no shipped cells to re-decide from")
    a = result.annotation
    replicate_cells = replicates if replicates is not None else [r.base_cells for r in result.replicate_records]
    shipped = ShippedCells(base=result.shipped_base_cells, cells={c.metric: c.shipped for c in a.cells},
                           anchoring=a.anchoring, seconds=result.seconds_shipped_eval)
    published = {c.metric: c.published for c in a.cells if c.published is not None}
    decisions = decide_cells(spec, shipped, list(replicate_cells), channel=a.channel, published=published)
    line = audit_reporting_line(spec=spec, cells=decisions.cells, signs=decisions.signs, channel=a.channel,
                          transform_mode=a.convention.transform.mode)
    typed = redecide_typed_cells(a, spec_cells={c.text for c in spec.cell_expressions()}, margin_pp=spec.margin_pp,
                                 anchored=shipped.anchored, replicates=len(replicate_cells))
    annotation = a.model_copy(update={"margin_pp": spec.margin_pp, "replicates": len(replicate_cells),
                                      "cells": cells_for(a, [*decisions.cells, *typed]), "verdicts": decisions.verdicts,
                                      "audit_reporting_line": line})
    return result.model_copy(update={"annotation": annotation, "sign_tests": decisions.signs,
                                     "scales": redecide_scales(result.scales, margin_pp=spec.margin_pp),
                                     "spec_sha256": spec.sha256()})
