"""The refit annotation of a scales audit: cells shipped vs refit on the activation scales, as a 1.1 record.

:func:`bnconvention.audit.scales.cells.scales_cells` measures df/dr/dt with the activations fake-quantized at the
shipped scales and at each replicate's retain-only refit, decided by the same rules as every BatchNorm cell. This
writes those cells as a 1.1 refit annotation whose ``refit_state`` says what was refit (kind ``activation_scales``,
the observer, each replicate's calibration set and seed, the shipped and refit scales digests), so the record cannot
be read as a BatchNorm refit. The subject's digests are θ's and φ's as shipped, and the audit proves them unchanged:
an audit whose weights are not the subject's is refused before anything is written. The annotation goes through
the validator (the decision check included) before it is returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bnconvention.audit.scales.cells import ScalesAudit
from bnconvention.audit.scales.decisions import redecide_scales_cell
from bnconvention.authoring.declaration import default_producer
from bnconvention.errors import DigestMismatchError
from bnconvention.formats.text import signed
from bnconvention.refitting.scales import scales_digests
from bnconvention.standard.models import (
    ActivationScalesRefit,
    AuditedFile,
    Cell,
    DataSplit,
    FittingConvention,
    Producer,
    RefitAnnotation,
    to_dict,
)
from bnconvention.validation.records import ensure_valid_record


def scales_refit_state(audit: ScalesAudit, *, calibration: DataSplit,
                       calibration_seeds: Sequence[int] | None = None) -> ActivationScalesRefit:
    """The ``refit_state`` of a scales audit: the observer, the calibration and the scales digests."""
    spec = audit.shipped.spec
    ratio = audit.median_abs_log_ratio
    return ActivationScalesRefit(
        kind="activation_scales", observer=spec.observer, percentile=spec.percentile, calibration=calibration,
        calibration_seeds=list(calibration_seeds) if calibration_seeds is not None else None,
        shipped_scales_sha256=scales_digests(audit.shipped)[0],
        refit_scales_sha256=[scales_digests(refit)[0] for refit in audit.refits],
        median_abs_log_ratio=ratio if math.isfinite(ratio) else None)


def _reporting_line(cells: Sequence[Cell], *, observer: str, calibration: DataSplit, replicates: int) -> str:
    shown = ", ".join(f"{c.metric} {signed(c.shift_pp)}pp {c.decision.outcome}" for c in cells)
    return (f"activation scales ({observer}) refit on {calibration.record_count} {calibration.role} records x "
            f"{replicates} replicates at bit-identical weights and BatchNorm buffers: {shown}")


def redecide_scales_annotation(annotation: RefitAnnotation, *, margin_pp: float) -> RefitAnnotation:
    """A scales annotation's cells, margin and reporting line at ``margin_pp``, from the stored replicate shifts
    alone (:func:`~bnconvention.audit.scales.decisions.redecide_scales_cell`), validated again."""
    state = annotation.refit_state
    if not isinstance(state, ActivationScalesRefit):
        raise TypeError("not a scales annotation: its refit_state is not of kind activation_scales")
    cells = [redecide_scales_cell(cell, margin_pp=margin_pp) for cell in annotation.cells]
    line = _reporting_line(cells, observer=state.observer, calibration=state.calibration,
                           replicates=annotation.replicates)
    data = to_dict(annotation.model_copy(update={"cells": cells, "margin_pp": margin_pp, "reporting_line": line}))
    return _validated(data)


def _validated(data: dict[str, object]) -> RefitAnnotation:
    record = ensure_valid_record(data, source="scales annotation")
    if not isinstance(record, RefitAnnotation):  # the data says 1.1 refit_annotation: cannot happen
        raise TypeError(f"expected a 1.1 refit annotation, got {type(record).__name__}")
    return record


def scales_annotation(audit: ScalesAudit, *, subject: AuditedFile, convention: FittingConvention,
                      calibration: DataSplit, calibration_seeds: Sequence[int] | None = None,
                      margin_pp: float = 1.2, reporting_line: str | None = None,
                      producer: Producer | None = None) -> RefitAnnotation:
    """A validated 1.1 refit annotation of ``audit`` on ``subject``.

    ``convention``: the BatchNorm state's convention as declared (the buffers are not refit, only the scales).
    DigestMismatchError when the audited weights are not the subject's; RecordError when the record is invalid."""
    if (audit.trainable_sha256, audit.running_sha256) != (subject.trainable_sha256, subject.running_sha256):
        raise DigestMismatchError(
            f"the audited model's digests (trainable {audit.trainable_sha256[:12]}…) are not the subject's "
            f"(trainable {subject.trainable_sha256[:12]}…): the scales were audited on other weights",
            field="/subject")
    data = {
        "spec_version": "1.1", "kind": "refit_annotation", "subject": to_dict(subject),
        "convention": to_dict(convention), "channel": "present", "replicates": len(audit.refits),
        "margin_pp": margin_pp,
        "cells": [to_dict(Cell.model_validate(to_dict(cell))) for cell in audit.cells],
        "refit_state": to_dict(scales_refit_state(audit, calibration=calibration,
                                                  calibration_seeds=calibration_seeds)),
        "producer": to_dict(producer or default_producer()),
        "reporting_line": reporting_line or _reporting_line(audit.cells, observer=audit.shipped.spec.observer,
                                                            calibration=calibration, replicates=len(audit.refits)),
    }
    return _validated(data)


__all__ = ["redecide_scales_annotation", "scales_annotation", "scales_refit_state"]
