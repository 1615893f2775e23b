"""What one audit returns: the standard's refit annotation plus the working data reports and the census need.

:class:`AuditResult` is also the census journal's entry for a finished checkpoint, so it round-trips through JSON
(``AuditResult.model_validate_json(result.model_dump_json())`` gives an equal object). The annotation inside is the
record of the standard that gets written back; everything else (sign-test p-values for Benjamini–Yekutieli across
a census, the per-layer reference band for the staleness plot, per-replicate pools and timings) stays local.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from bnconvention.standard.models import LayerStaleness, RefitAnnotation

RESULT_FORMAT: Final = "bnconvention-audit-result/1"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplicateRecord(_Result):
    index: int
    pool_ids_sha256: str = Field(description="record_ids_sha256 of the retained records this replicate refit on.")
    augmentation_seed: int
    base_cells: dict[str, float] = Field(description="df, dr, dt after this replicate's refit.")
    seconds: float


class SignRecord(_Result):
    """The exact sign test of one cell, kept for multiplicity control across a census."""

    p_value: float
    beyond: int
    direction: Literal["up", "down"] | None


class AuditResult(_Result):
    format: Literal["bnconvention-audit-result/1"] = RESULT_FORMAT
    checkpoint: str = Field(description="File name without .safetensors.")
    weights_path: str
    weights_key: str = Field(description="sha256 over the file's trainable and running digests.")
    spec_sha256: str
    measurement_sha256: str | None = Field(default=None, description=(
        "Digest of the spec without its decision-only fields (margin, q, sweeps, controls): the journal key."))
    factory: str
    anchored: bool | None = Field(description="None when no published cells were given.")
    annotation: RefitAnnotation
    sign_tests: dict[str, SignRecord]
    band_layers: list[LayerStaleness] | None = Field(
        default=None, description="Per-layer distance between two independent retain refits (the reference band).")
    shipped_base_cells: dict[str, float] | None = Field(default=None, description=(
        "df, dr, dt as shipped: with the replicate records, what a margin or pool-size sweep re-decides from."))
    replicate_records: list[ReplicateRecord]
    refits_run: Annotated[int, Field(ge=0)] = Field(description="Refit passes this audit ran (replicates and checks).")
    seconds: float
    seconds_shipped_eval: float
    warnings: list[str] = Field(default_factory=list)
