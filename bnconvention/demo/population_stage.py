"""The demo's population stage: build (or reuse) the structured population and census it, resumably.

The organisation tells the BatchNorm illusion one release at a time; the population tells it as a census, the way
Shen and Li's census does: families × procedure variants × removals × seeds, known-answer controls, frozen twins,
sweeps, the detection floor and the recoverability curve (:mod:`bnconvention.zoo.population_build`, docs/population.md).
The census journal lives in ``OUT/population-census/``, so a rerun audits nothing it already audited; the report's
census page and the summary's headline are read from its ``census.json``, chosen by the data
(:mod:`bnconvention.audit.population.story`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnconvention.audit.census import run_census
from bnconvention.audit.population import CensusResult
from bnconvention.audit.spec import load_spec
from bnconvention.demo.layout import POPULATION_SIZES, PopulationSize
from bnconvention.errors import UsageError
from bnconvention.zoo.population_build import build_population
from bnconvention.zoo.population_manifest import read_population_manifest
from bnconvention.zoo.population_plan import TINY_CONFIG, PopulationConfig
from bnconvention.zoo.population_spec import SPEC_FILE


@dataclass(frozen=True)
class PopulationRun:
    """What the stage found: the census summary (``census.json``) and how much of it was reused."""

    folder: Path
    census_dir: Path
    summary: CensusResult
    checkpoints: int
    build_reused: bool
    audits_run: int
    audits_reused: int


def population_config(size: PopulationSize) -> Any:
    """The population's configuration: ``full`` (114 checkpoints, the default) or ``tiny`` (14, seconds)."""
    if size not in POPULATION_SIZES:
        raise UsageError(f"population size {size!r}: choose from {', '.join(POPULATION_SIZES)}")
    return PopulationConfig() if size == "full" else TINY_CONFIG


def census_workers() -> int:
    """Audit two checkpoints at a time where there are two cores (each audit then runs on one thread)."""
    return max(1, min(2, os.cpu_count() or 1))


def run_population(folder: Path, census_dir: Path, *, size: PopulationSize, progress: bool) -> PopulationRun:
    """Build or reuse the population in ``folder``, then census it into ``census_dir`` (resuming its journal)."""
    config = population_config(size)
    before = _manifest_sha(folder, read_population_manifest)
    manifest = build_population(folder, config=config, progress=progress)
    spec = load_spec(folder / SPEC_FILE)
    outcome = run_census([folder], spec, census_dir, workers=census_workers(), progress=progress)
    reused = before is not None and before == manifest.code_sha256
    return PopulationRun(folder=folder, census_dir=census_dir, summary=outcome.summary,
                         checkpoints=len(manifest.names), build_reused=reused,
                         audits_run=outcome.audits_run, audits_reused=outcome.audits_reused)


def _manifest_sha(folder: Path, read: Any) -> str | None:
    try:
        return str(read(folder).code_sha256)
    except (OSError, ValueError):
        return None


__all__ = ["POPULATION_SIZES", "PopulationRun", "PopulationSize", "census_workers", "population_config",
           "run_population"]
