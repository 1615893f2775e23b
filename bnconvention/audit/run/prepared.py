"""A prepared audit: the spec, its data and the loaded checkpoint, checked before anything runs
(:func:`bnconvention.audit.run.runner.prepare_audit` makes one; the stages and the shipped store read it)."""

from __future__ import annotations

from dataclasses import dataclass

from bnconvention.audit.diagnostics.encoder import EncoderPlan
from bnconvention.audit.measure.checkpoint import LoadedCheckpoint
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.scales.stage import ScalesPlan
from bnconvention.audit.spec.audit_spec import AuditSpec


@dataclass
class PreparedAudit:
    """A spec, its data and one loaded checkpoint, all checked: running it cannot fail on bad input any more."""

    spec: AuditSpec
    data: AuditData
    checkpoint: LoadedCheckpoint
    encoder: EncoderPlan | None = None  # the encoder-level diagnostics (spec ``diagnostics``), drawn and checked
    scales: ScalesPlan | None = None  # the shipped activation scales (spec ``quantization``), checked


__all__ = ["PreparedAudit"]
