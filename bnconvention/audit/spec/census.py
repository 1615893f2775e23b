"""The census sections of an audit spec: ``sweeps`` (margins, false-discovery levels and pool sizes read from the
stored replicates) and ``controls`` (known-answer negative controls, the planted-effect detection floor).

Neither section changes a refit: they are left out of the journal key (:func:`bnconvention.audit.run.sweeps.
measurement_sha256`), so editing them, like editing ``margin_pp`` or ``fdr_q``, reuses every stored replicate.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bnconvention.audit.spec.data import MAX_LEVELS, MAX_SWEEP_VALUES, Records, SpecModel, Text

PositiveFloat = Annotated[float, Field(gt=0)]
FdrLevel = Annotated[float, Field(gt=0, lt=1)]
PlantedSize = Annotated[float, Field(ge=0)]

DEFAULT_MARGINS_PP = (1.0, 1.2, 1.5, 2.0)
DEFAULT_FDR_QS = (0.01, 0.05, 0.1)
DEFAULT_PLANTED_PP = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


class SweepSpec(SpecModel):
    """Designs the census re-reads from its stored replicates (docs/statistics.md, "Sweeps")."""

    margins_pp: list[PositiveFloat] = Field(default_factory=lambda: list(DEFAULT_MARGINS_PP), max_length=MAX_LEVELS,
                                            description=(
        "Margins (pp) at which the census recounts displaced/equivalent/undetermined cells from the stored "
        f"replicate shifts; no refit is added (at most {MAX_LEVELS} margins)."))
    fdr_qs: list[FdrLevel] = Field(default_factory=lambda: list(DEFAULT_FDR_QS), max_length=MAX_LEVELS, description=(
        "False-discovery levels at which the displaced cells are recounted after Benjamini-Yekutieli (at most "
        f"{MAX_LEVELS})."))
    pool_sizes: list[Records] = Field(default_factory=list, max_length=MAX_SWEEP_VALUES, description=(
        "Refit pool sizes to compare with refit.pool_size: each checkpoint gets R replicates per pool size, "
        f"stored by pool size, so a pool size computed once is never refit again (at most {MAX_SWEEP_VALUES} "
        "pool sizes)."))


class ControlsSpec(SpecModel):
    """Known-answer negative controls: reported in their own table and kept out of the multiplicity family."""

    checkpoints: dict[Text, Text] = Field(default_factory=dict, description=(
        "Checkpoint name patterns (fnmatch, e.g. '*-retrain') -> the control's label (e.g. 'retrain "
        "reference'); the first matching pattern labels it. Known answer: no cell displaced."))
    channel_absent: bool = Field(default=True, description=(
        "Treat every channel-absent checkpoint (GroupNorm, LayerNorm: no running statistics) as a control; its "
        "known answer is every replicate shift exactly 0.00 pp."))
    planted_pp: list[PlantedSize] = Field(default_factory=lambda: list(DEFAULT_PLANTED_PP), max_length=MAX_LEVELS,
                                          description=(
        "Shifts (pp) planted in the replicate shifts of every non-displaced cell of the decided checkpoints, to "
        f"count how many the census design recovers (the detection floor; at most {MAX_LEVELS} sizes)."))
