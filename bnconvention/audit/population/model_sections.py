"""The census's sections beyond the counts and the rows: the flip ledger's lines, the controls with their background
rate, the sweeps, the detection floor, the recalibration budget, the families, the frozen twins and the scales
counts, each a closed part of :class:`.model.CensusResult`."""

from __future__ import annotations

from bnconvention.audit.core.section import Section
from bnconvention.audit.run.sweeps import MarginRow, PoolSizeRow


class Operand(Section):
    """One cell a flipped criterion compares (:mod:`.ledger`)."""

    cell: str
    published: float | None
    shipped: float
    refit: float
    replicate_min: float
    replicate_max: float
    shift_pp: float
    budget_pp: float | None


class LedgerRow(Section):
    """One flip of the flip ledger."""

    checkpoint: str
    group: str
    label: str | None
    criterion: str
    thresholds: list[float]
    direction: str | None
    shipped_pass: bool
    refit_pass: bool
    replicates_passing: int | None
    replicates: int
    compared: list[Operand]
    clears_budget: bool
    holds_every_replicate: bool | None = None


class ControlCell(Section):
    """One cell of a control: its outcome, mean shift and largest |replicate shift|."""

    outcome: str
    shift_pp: float
    max_abs_shift_pp: float


class ControlRow(Section):
    """One known-answer control (:func:`.controls.control_row`)."""

    checkpoint: str
    label: str
    flips: list[str]
    channel: str
    anchored: bool | None
    expected: str
    holds: bool
    cells: dict[str, ControlCell]


class BackgroundRate(Section):
    """Over some BatchNorm controls: how many are displaced on each cell and flip each criterion."""

    checkpoints: int
    displaced: dict[str, int]
    flips: dict[str, int]


class Background(BackgroundRate):
    """The census's background rate over every BatchNorm control, and per label (:func:`.controls.background`)."""

    by_label: dict[str, BackgroundRate]


class Controls(Section):
    """The known-answer controls and the background rate they give."""

    controls: int
    as_expected: int
    rows: list[ControlRow]
    background: Background


class Sweeps(Section):
    """The census re-decided at other margins, q levels and pool sizes."""

    margins: list[MarginRow]
    fdr_qs: list[float]
    pool_sizes: list[PoolSizeRow]


class PlantedRow(Section):
    """One planted size of the detection floor: cells planted, recovered, recovered after BY."""

    planted_pp: float
    cells: int
    recovered: int
    recovered_by: int


class DetectionFloor(Section):
    """The planted-effect detection floor on centred replicate residuals (:func:`.detection.detection_floor`)."""

    method: str
    margin_pp: float
    share: float
    cells: int
    floor_pp: float | None
    rows: list[PlantedRow]


class BudgetCell(Section):
    """One cell's recalibration budget over the decided checkpoints."""

    max_pp: float
    median_pp: float


class BudgetCounts(Section):
    """The verdict flips against their checkpoints' budgets."""

    flips: int
    clear_budget: int
    hold_every_replicate: int
    clear_and_hold: int


class RecalibrationBudget(Section):
    """The budget per cell (None: no refit to compare, a checkpoint without BatchNorm) and each flip against it."""

    cells: dict[str, BudgetCell | None]
    flips: list[LedgerRow]
    counts: BudgetCounts


class FamilyCell(Section):
    """One cell of one family: the seed-clustered mean with its interval and decision, and its displaced count."""

    clusters: int
    cluster_means_pp: list[float]
    mean_shift_pp: float
    lower_pp: float | None
    upper_pp: float | None
    tost_p_value: float | None
    exact: bool
    outcome: str
    displaced_by: int
    displaced: int
    equivalent: int


class FlipTally(Section):
    """A criterion's flips by direction."""

    flips: int
    pass_to_fail: int
    fail_to_pass: int


class FamilyRow(Section):
    """One family × variant × removal kind (:func:`.families.family_readings`)."""

    family: str
    variant: str
    removal_kind: str | None
    checkpoints: int
    seeds: list[int | None]
    removals: list[str]
    cells: dict[str, FamilyCell]
    flips: dict[str, FlipTally]
    statements: list[str]


class Families(Section):
    """The per-family readings of a structured population."""

    level: float
    margin_pp: float
    clustered_by: list[str]
    families: list[FamilyRow]


class TwinPair(Section):
    """One online twin with its frozen partner: the headline cell as shipped in both arms and the gap."""

    online: str
    frozen: str
    seed: int | None
    level: int | None
    online_shipped: float
    frozen_shipped: float
    gap_pp: float
    same_theta: bool


class TwinLevel(Section):
    """The mean twin gap at one weight-movement level with its interval across seeds."""

    level: int | None
    pairs: int
    seeds: list[int | None]
    mean_gap_pp: float
    lower_pp: float | None
    upper_pp: float | None
    same_theta: bool


class TwinGaps(Section):
    """The frozen-twin gap (:func:`.families.twin_gaps`)."""

    cell: str
    confidence: float
    levels: list[TwinLevel]
    pairs: list[TwinPair]


class ScalesCounts(Section):
    """The activation scales over the census (:func:`.scales_report.scales_counts`): decisions per scales cell."""

    quantized: int
    not_quantized: int
    displaced: int
    cells: dict[str, dict[str, int]]


__all__ = ["Background", "BackgroundRate", "BudgetCell", "BudgetCounts", "ControlCell", "ControlRow", "Controls",
           "DetectionFloor", "Families", "FamilyCell", "FamilyRow", "FlipTally", "LedgerRow", "MarginRow", "Operand",
           "PlantedRow", "RecalibrationBudget", "ScalesCounts", "Sweeps", "TwinGaps",
           "TwinLevel", "TwinPair"]
