"""The census result: one typed model of ``census.json``, built once from its sections (:func:`.summary.summarize`).

Each section is a model of its own, its fields in the order the file writes them; :meth:`CensusResult.to_json` gives
the file's mapping and :meth:`CensusResult.read` parses one back. Sections that only some censuses have (families
and twins, the scales counts, the run's invocation and timing, an organisation) are left out of the file when
absent; every other ``null`` is written. The JSON Schema beside the others in ``schema/`` is generated from it
(``bnconvention schema --write``). Readings whose shape follows the spec's optional diagnostics stay open mappings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, JsonValue, model_serializer
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from bnconvention.standard.schema import committed_text, model_schema

CENSUS_FORMAT = "bnconvention-census/2"
JsonObject = dict[str, JsonValue]  # a reading whose keys follow the spec's optional diagnostics: kept as written
CENSUS_SCHEMA_ID = "https://bnconvention.github.io/schema/v1/census.schema.json"
REPO_CENSUS_SCHEMA_PATH = Path("schema") / "v1" / "census.schema.json"


class Section(BaseModel):
    """A part of the census: closed (no unknown keys), frozen, its optional keys left out when absent."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    optional: ClassVar[frozenset[str]] = frozenset()
    # an optional key written as null while the key it goes with is present (no twins in a population with families)
    null_beside: ClassVar[dict[str, str]] = {}

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items()
                if not (key in self.optional and value is None and data.get(self.null_beside.get(key, "")) is None)}


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


class VerdictTally(Section):
    """Flips of one criterion by direction."""

    flips: int
    pass_to_fail: int
    fail_to_pass: int
    flips_on_every_replicate: int


class LargestShift(Section):
    checkpoint: str
    cell: str
    shift_pp: float


class Resolution(Section):
    """One cell's one-record resolution over the decided checkpoints (:mod:`.margin`)."""

    checkpoints: int
    unknown: int
    max_pp: float | None
    min_pp: float | None
    above_margin: int
    above_margin_checkpoints: list[str]


class Margin(Section):
    """The margin the census decided at, where it came from, and each cell's resolution."""

    margin_pp: float
    source: str
    derivation: JsonObject | None
    resolution: dict[str, Resolution]
    warnings: list[str]


class AmendmentRow(Section):
    time: str
    reason: str
    changes: list[str]


class PreregistrationSection(Section):
    """The preregistration record and its amendments, or that there was none."""

    optional = frozenset({"file", "created", "spec_sha256", "margin_pp", "margin_source", "listing_sha256",
                          "checkpoints", "amendments"})
    preregistered: bool
    file: str | None = None
    created: str | None = None
    spec_sha256: str | None = None
    margin_pp: float | None = None
    margin_source: str | None = None
    listing_sha256: str | None = None
    checkpoints: int | None = None
    amendments: list[AmendmentRow] | None = None


class Operand(Section):
    """One cell a flipped criterion compares (:mod:`.ledger`)."""

    cell: str
    published: float | None
    shipped: float
    refit: float
    replicate_min: float
    replicate_max: float
    shift_pp: float
    budget_pp: float


class LedgerRow(Section):
    """One flip of the flip ledger."""

    optional = frozenset({"holds_every_replicate"})
    checkpoint: str
    group: str
    label: str | None
    criterion: str
    thresholds: list[float]
    direction: str | None
    shipped_pass: bool
    refit_pass: bool
    replicates_passing: int
    replicates: int
    compared: list[Operand]
    clears_budget: bool
    holds_every_replicate: bool | None = None


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
    refit_pass_replicates: int


class Staleness(Section):
    mean_distance: float
    var_distance: float
    exceeds_band: bool | None
    band_p_value: float | None


class CheckpointRow(Section):
    """One checkpoint's line of the census."""

    optional = frozenset({"encoder", "scales", "population"})
    checkpoint: str
    file: str
    path: str
    factory: str | None
    trainable_sha256: str
    channel: str
    anchored: bool | None
    cells: dict[str, CheckpointCell]
    flips: list[Flip]
    staleness: Staleness | None
    recoverability_shift_pp: float | None
    reporting_line: str
    annotation: str
    encoder: JsonObject | None = None
    scales: JsonObject | None = None
    population: JsonObject | None = None
    mechanism: JsonObject | None
    group: str


class ControlRow(Section):
    checkpoint: str
    label: str
    flips: list[str]
    channel: str
    anchored: bool | None
    expected: str
    holds: bool
    cells: dict[str, JsonObject]


class Controls(Section):
    """The known-answer controls and the background rate they give."""

    controls: int
    as_expected: int
    rows: list[ControlRow]
    background: JsonObject


class SweepCell(Section):
    """One cell's decisions in one row of a sweep, displaced after BY at each swept q (keyed by q)."""

    displaced: int
    equivalent: int
    undetermined: int
    displaced_by: dict[str, int]


class MarginRow(Section):
    """The census re-decided at one margin: decisions per cell, flips per criterion, the scales cells if any."""

    optional = frozenset({"scales"})
    margin_pp: float
    cells: dict[str, SweepCell]
    flips: dict[str, int]
    scales: dict[str, dict[str, int]] | None = None


class Sweeps(Section):
    """The census re-decided at other margins, q levels and pool sizes."""

    margins: list[MarginRow]
    fdr_qs: list[float]
    pool_sizes: list[JsonObject]


class RecalibrationBudget(Section):
    cells: dict[str, JsonObject | None]  # None: no refit to compare (a checkpoint without BatchNorm)
    flips: list[LedgerRow]
    counts: dict[str, int]


class Families(Section):
    level: float
    margin_pp: float
    clustered_by: list[str]
    families: list[JsonObject]


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

    optional = frozenset({"families", "twin_gaps", "scales", "invocation", "timing", "org"})
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
    readings: JsonObject
    decided: list[str]
    controls: Controls
    sweeps: Sweeps
    detection_floor: JsonObject | None
    recalibration_budget: RecalibrationBudget
    families: Families | None = None
    twin_gaps: JsonObject | None = None
    scales: JsonObject | None = None
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


__all__ = ["CENSUS_FORMAT", "CENSUS_SCHEMA_ID", "REPO_CENSUS_SCHEMA_PATH", "CensusResult", "CheckpointRow", "Counts",
           "Invocation", "LedgerRow", "Section", "Timing", "census_schema_text", "generate_census_schema"]
