"""One checkpoint's row of the census (``checkpoints[]``): its cells with every p-value, flips, staleness, the
encoder and scales columns when the spec asked for them, its place in the population and its mechanism."""

from __future__ import annotations

from bnconvention.audit.core.section import Section
from bnconvention.audit.population.model_readings import MechanismRow
from bnconvention.standard.diagnostics import Interval


class CheckpointCell(Section):
    """One cell of one checkpoint with every p-value."""

    shipped: float
    refit: float
    shift_pp: float
    min_shift_pp: float
    max_shift_pp: float
    outcome: str
    method: str
    p_value: float | None
    sign_p_value: float
    sign_beyond: int
    by_p_value: float | None
    displaced_by: bool


class Flip(Section):
    criterion: str
    direction: str | None
    refit_pass_replicates: int | None


class StalenessReading(Section):
    """One checkpoint's staleness: the distances of its shipped statistics to the refits and the band's verdict."""

    mean_distance: float
    var_distance: float
    exceeds_band: bool | None
    band_p_value: float | None


class EncoderColumns(Section):
    """The encoder-level diagnostics of one checkpoint (:func:`.encoder_report.encoder_row`): the probe's columns
    when the probe ran, the attack's when it ran, relearning's when it ran (its areas only when the record has them).
    A column of a diagnostic that ran is written even when null (no retrain reference, target not reached)."""

    null_beside = {"lp_reference": "lp_shipped", "nc_residual_pp": "lp_shipped",
                   "relearn_steps_shipped": "relearn_steps_refit"}
    lp_shipped: float | None = None
    lp_refit: float | None = None
    lp_reference: float | None = None
    bn_residual_pp: Interval | None = None
    nc_residual_pp: Interval | None = None
    mia_auc_shipped: Interval | None = None
    mia_auc_refit: Interval | None = None
    mia_shift_pp: Interval | None = None
    relearn_steps_shipped: int | None = None
    relearn_steps_refit: list[int | None] | None = None
    relearn_area_shipped: float | None = None
    relearn_area_refit: list[float] | None = None


class ScalesCell(Section):
    """One scales cell of one checkpoint: its shift over the recalibrations and decision."""

    shipped: float
    refit: float
    shift_pp: float
    min_shift_pp: float
    max_shift_pp: float
    outcome: str
    p_value: float | None


class ScalesColumns(Section):
    """The activation scales of one checkpoint (:func:`.scales_report.scales_row`): the status and, when audited,
    each cell's shift and decision (those keys are written, null or not, exactly when the scales were audited)."""

    null_beside = dict.fromkeys(("observer", "sites", "replicates", "calibration_size", "displaced",
                                 "median_abs_log_ratio", "max_abs_log_ratio", "annotation"), "cells")
    status: str
    reason: str
    observer: str | None = None
    sites: int | None = None
    replicates: int | None = None
    calibration_size: int | None = None
    cells: dict[str, ScalesCell] | None = None
    displaced: bool | None = None
    median_abs_log_ratio: float | None = None
    max_abs_log_ratio: float | None = None
    annotation: str | None = None


class PopulationPlace(Section):
    """Where a checkpoint sits in a structured population, from its sidecar (the keys it names)."""

    role: str | None = None
    family: str | None = None
    variant: str | None = None
    removal: str | None = None
    removal_kind: str | None = None
    seed: int | None = None
    parent: str | None = None
    twin_arm: str | None = None
    twin_level: int | None = None
    twin_partner: str | None = None


class CheckpointRow(Section):
    """One checkpoint's line of the census."""

    checkpoint: str
    file: str
    path: str
    factory: str | None
    trainable_sha256: str
    channel: str
    anchored: bool | None
    cells: dict[str, CheckpointCell]
    flips: list[Flip]
    staleness: StalenessReading | None
    recoverability_shift_pp: float | None
    reporting_line: str
    annotation: str
    encoder: EncoderColumns | None = None
    scales: ScalesColumns | None = None
    population: PopulationPlace | None = None
    mechanism: MechanismRow
    group: str


__all__ = ["CheckpointCell", "CheckpointRow", "EncoderColumns", "Flip", "PopulationPlace", "ScalesCell",
           "ScalesColumns", "StalenessReading"]
