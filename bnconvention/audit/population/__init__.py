"""Reading a population of audits: families and frozen twins, controls, the ledger, detection floor, margins, readings,
the census summary and its story."""

from bnconvention.audit.population.families import census_group, control_labels, family_label
from bnconvention.audit.population.ledger import counted_as
from bnconvention.audit.population.model import CENSUS_FORMAT, CensusResult
from bnconvention.audit.population.model_rows import CheckpointCell, CheckpointRow
from bnconvention.audit.population.model_sections import FamilyCell, FamilyRow, LedgerRow
from bnconvention.audit.population.scales_report import CELLS as SCALES_CELLS
from bnconvention.audit.population.scales_report import HEADING as SCALES_HEADING
from bnconvention.audit.population.scales_report import reading as scales_reading
from bnconvention.audit.population.story import floor_reading, headline, headline_cell, margin_line, population_story
from bnconvention.audit.population.summary import CensusRun, summarize

__all__ = ["CENSUS_FORMAT", "SCALES_CELLS", "SCALES_HEADING", "CensusResult", "CensusRun", "CheckpointCell",
           "CheckpointRow", "FamilyCell", "FamilyRow", "LedgerRow", "census_group", "control_labels",
           "counted_as", "family_label", "floor_reading", "headline", "headline_cell", "margin_line",
           "population_story", "scales_reading", "summarize"]
