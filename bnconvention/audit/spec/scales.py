"""The optional ``quantization`` section of an audit spec: activation scales as a second deployed state
(docs/statistics.md#activation-scales-the-second-deployed-state).

Off by default: a spec without it audits, and digests (journal keys), exactly as before (the section is left out of
the spec's dump when absent). With it, a checkpoint that ships activation scales (declared by an ``activation_scales``
state in the folder's ``declaration.json``, the weights header or the model card, the scales file beside the
weights) is audited on that state too (:mod:`bnconvention.audit.scales.stage`): cells at the shipped scales
against ``replicates`` recalibrations on ``calibration_size`` retain records each, at bit-identical θ and BatchNorm
buffers:

.. code-block:: yaml

    quantization:
      replicates: 10          # default: the spec's replicates
      calibration_size: 256   # retain records per recalibration
      seed: 0                 # default: the spec's seed; draw r comes from SeedSequence(seed, spawn_key=(5, r))
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bnconvention.audit.spec.data import MAX_RECORDS, MAX_REPLICATES, Records, Replicates, SpecModel

SCALES_STREAM = 5  # the spawn key of the recalibration draws (0 replicates, 1 recoverability, 2 provenance, 3 curve)


class QuantizationSpec(SpecModel):
    replicates: Replicates | None = Field(default=None, description=(
        "Retain-only recalibrations of the shipped activation scales (R); default the spec's replicates; at most "
        f"{MAX_REPLICATES:,}."))
    calibration_size: Records = Field(default=256, description=(
        f"Retain records each recalibration observes (eval transform, eval-mode forwards; at most {MAX_RECORDS:,})."))
    seed: Annotated[int, Field(ge=0)] | None = Field(default=None, description=(
        "Root seed of the recalibration draws; default the spec's seed."))


__all__ = ["SCALES_STREAM", "QuantizationSpec"]
