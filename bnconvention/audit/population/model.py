"""The census result: one typed model of ``census.json``, built once from its sections (:func:`.summary.summarize`).

Each section is a model of its own, closed, its fields in the order the file writes them: the readings in
:mod:`.model_readings`, the checkpoint rows in :mod:`.model_rows`, the ledger, controls, sweeps, detection floor,
budget, families, twins and scales counts in :mod:`.model_sections`, the counts and the rest here.
:meth:`CensusResult.to_json` gives the file's mapping and :meth:`CensusResult.read` parses one back. Sections that only
some censuses have (families and twins, the scales counts, the run's invocation and timing, an organisation) are left
out of the file when absent, and so are the keys of a reading that follow the spec's optional diagnostics; every other
``null`` is written. The JSON Schema beside the others in ``schema/`` is generated from it (``bnconvention schema
--write``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnconvention.audit.core.section import Section
from bnconvention.audit.population.model_readings import Readings
from bnconvention.audit.population.model_rows import CheckpointRow, StalenessReading
from bnconvention.audit.population.model_sections import (
    Controls,
    DetectionFloor,
    Families,
    FlipTally,
    LedgerRow,
    RecalibrationBudget,
    ScalesCounts,
    Sweeps,
    TwinGaps,
)
from bnconvention.standard.schema import committed_text, model_schema

CENSUS_FORMAT = "bnconvention-census/2"
CENSUS_SCHEMA_ID = "https://bnconvention.github.io/schema/v1/census.schema.json"
REPO_CENSUS_SCHEMA_PATH = Path("schema") / "v1" / "census.schema.json"


class Counts(Section):
    """How many checkpoints the census holds and how each was counted."""

    checkpoints: int
    anchoring_checked: int
    anchored: int
    eligible: int
    channel_absent: int
    staleness_exceeds_band: int
    controls: int
    decided: int
    twin_arms: int


class ByReading(Section):
    """How far Benjamini–Yekutieli can bind on one cell (:func:`.summary.by_reading`)."""

    m: int
    p_displaced: float
    keeps_all_from: int | None


class CellCounts(Section):
    """Decisions on one cell over the decided checkpoints."""

    displaced: int
    displaced_by: int
    equivalent: int
    undetermined: int
    by: ByReading


class VerdictTally(FlipTally):
    """Flips of one criterion by direction, and how many flip on every replicate."""

    flips_on_every_replicate: int


class LargestShift(Section):
    checkpoint: str
    cell: str
    shift_pp: float


class CellResolution(Section):
    """One cell's one-record resolution over the decided checkpoints (:mod:`.margin`)."""

    checkpoints: int
    unknown: int
    max_pp: float | None
    min_pp: float | None
    above_margin: int
    above_margin_checkpoints: list[str]


class SeedSpread(Section):
    """One recipe's seed spread of one published cell (:func:`.margin.seed_spread_margin`)."""

    recipe: str
    cell: str
    seeds: int
    spread_pp: float


class CellSpread(Section):
    recipes: int
    median_pp: float


class MarginDerivation(Section):
    """How ``margin: auto`` derived the margin: the rule, every spread, the medians per cell."""

    rule: str
    margin_pp: float
    recipes: int
    spreads: list[SeedSpread]
    per_cell: dict[str, CellSpread]


class Margin(Section):
    """The margin the census decided at, where it came from, and each cell's resolution."""

    margin_pp: float
    source: str
    derivation: MarginDerivation | None
    resolution: dict[str, CellResolution]
    warnings: list[str]


class AmendmentRow(Section):
    time: str
    reason: str
    changes: list[str]


class PreregistrationSection(Section):
    """The preregistration record and its amendments, or that there was none."""

    preregistered: bool
    file: str | None = None
    created: str | None = None
    spec_sha256: str | None = None
    margin_pp: float | None = None
    margin_source: str | None = None
    listing_sha256: str | None = None
    checkpoints: int | None = None
    amendments: list[AmendmentRow] | None = None


class Invocation(Section):
    """What the run did: audits run and reused, refits run."""

    audits_run: int
    audits_reused: int
    refits_run: int


class Timing(Section):
    per_checkpoint_seconds: dict[str, float]
    median_seconds: float
    total_seconds: float
    audits_run: int
    audits_reused: int


class CensusResult(Section):
    """``census.json``: the population counts with Benjamini–Yekutieli per cell, the sections that read them, and one
    row per checkpoint."""

    null_beside = {"twin_gaps": "families"}
    format: str = CENSUS_FORMAT
    spec_name: str | None
    spec_sha256: str
    replicates: int
    margin_pp: float
    fdr_q: float
    headline: str
    counts: Counts
    cells: dict[str, CellCounts]
    verdicts: dict[str, VerdictTally]
    largest_shift: LargestShift | None
    margin: Margin
    preregistration: PreregistrationSection
    identical_weights: list[list[str]]
    flip_ledger: list[LedgerRow]
    checkpoints: list[CheckpointRow]
    readings: Readings
    decided: list[str]
    controls: Controls
    sweeps: Sweeps
    detection_floor: DetectionFloor | None
    recalibration_budget: RecalibrationBudget
    families: Families | None = None
    twin_gaps: TwinGaps | None = None
    scales: ScalesCounts | None = None
    invocation: Invocation | None = None
    timing: Timing | None = None
    org: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The mapping ``census.json`` holds (key order as declared)."""
        return self.model_dump(mode="json")

    @classmethod
    def read(cls, path: Path) -> CensusResult:
        """Parse a ``census.json`` (raises pydantic's ValidationError when it is not one)."""
        return cls.model_validate_json(path.read_bytes())


def generate_census_schema() -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of ``census.json``, generated from :class:`CensusResult`."""
    return model_schema(CensusResult, schema_id=CENSUS_SCHEMA_ID, title=f"bnconvention census result, {CENSUS_FORMAT}")


def census_schema_text() -> str:
    """The schema as committed: 2-space indented JSON with a trailing newline."""
    return committed_text(generate_census_schema())


__all__ = ["CENSUS_FORMAT", "CENSUS_SCHEMA_ID", "REPO_CENSUS_SCHEMA_PATH", "ByReading", "CellCounts", "CellResolution",
           "CellSpread", "CensusResult", "CheckpointRow", "Counts", "Invocation", "LargestShift", "LedgerRow", "Margin",
           "MarginDerivation", "PreregistrationSection", "Section", "SeedSpread", "StalenessReading", "Timing",
           "VerdictTally", "census_schema_text", "generate_census_schema"]
