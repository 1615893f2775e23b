"""Audit a quantized zoo variant's activation scales against retain-only recalibrations (``zoo audit-scales``).

A ``<name>-q8`` folder (:mod:`bnconvention.zoo.quantized`) holds the zoo's float weights, the shipped scales and
their 1.1 declaration. :func:`audit_quantized_variant` loads the float model from the zoo, prepares it with the
declared observer and the shipped scales (checked against the declaration), recalibrates them ``replicates``
times on ``size`` retain records drawn with seeds ``seed, seed + 1, ...``, measures df/dr/dt at shipped and refit
scales (:func:`bnconvention.audit.scales.cells.scales_cells`) and returns the 1.1 refit annotation of
:mod:`bnconvention.audit.scales.annotation`, its subject the folder's weights as declared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnconvention.audit.scales import scales_annotation, scales_cells
from bnconvention.authoring.activation_scales import load_quantized, read_declaration
from bnconvention.data.digits import DIGITS_DATASET_ID
from bnconvention.errors import UsageError
from bnconvention.standard.models import AuditedFile, DatasetRef, DataSplit, RefitAnnotation
from bnconvention.zoo.manifest import ZooManifest
from bnconvention.zoo.quantized import QUANTIZED_SUFFIX, calibration_draw
from bnconvention.zoo.variants import FORGET_CLASSES, split_tensors

WEIGHTS_NAME = "model.safetensors"


def variant_of(folder: Path) -> str:
    """The zoo variant a ``<name>-q8`` folder quantizes; UsageError for a folder of another name."""
    if not folder.name.endswith(QUANTIZED_SUFFIX) or folder.name == QUANTIZED_SUFFIX:
        raise UsageError(f"{folder} is not a quantized zoo variant (a folder named <variant>{QUANTIZED_SUFFIX}, "
                         "made by bnconvention zoo build --quantized DIR)")
    return folder.name[: -len(QUANTIZED_SUFFIX)]


def _splits() -> dict[str, Any]:
    data = split_tensors(FORGET_CLASSES)
    return {role: (data.x[role], data.y[role]) for role in ("forget", "retain", "test")}


def audit_quantized_variant(zoo: ZooManifest, folder: Path, *, replicates: int = 3, size: int = 256,
                            seed: int = 100, margin_pp: float = 1.2) -> RefitAnnotation:
    """The scales refit annotation of one quantized variant folder (see the module docstring)."""
    if replicates < 1:
        raise UsageError(f"--replicates must be at least 1, got {replicates}")
    name = variant_of(folder)
    record = read_declaration(folder / "declaration.json")
    model, shipped = load_quantized(zoo.load_model(name), folder / "declaration.json")
    seeds = [seed + r for r in range(replicates)]
    pools = [[calibration_draw("retain", size=size, seed=s)[0]] for s in seeds]
    audit = scales_cells(model, splits=_splits(), calibration_pools=pools, margin_pp=margin_pp, shipped=shipped)
    subject = AuditedFile(filename=WEIGHTS_NAME, trainable_sha256=record.digests.trainable_sha256,
                          running_sha256=record.digests.running_sha256, declared_convention=record.convention.name)
    calibration = DataSplit(role="retain", dataset=DatasetRef(id=DIGITS_DATASET_ID),
                            subset=f"{size} records of the retain split per replicate, drawn with seeds "
                                   f"{seeds[0]}..{seeds[-1]}", record_count=size)
    return scales_annotation(audit, subject=subject, convention=record.convention, calibration=calibration,
                             calibration_seeds=seeds, margin_pp=margin_pp)


__all__ = ["WEIGHTS_NAME", "audit_quantized_variant", "variant_of"]
