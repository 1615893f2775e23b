"""A census of a population of checkpoints: discovery, preregistration, the journal, the census run and its
per-checkpoint annotations."""

from bnconvention.audit.census.preregistration import PREREGISTRATION_FILE
from bnconvention.audit.census.run import preregister_census, run_census

__all__ = ["PREREGISTRATION_FILE", "preregister_census", "run_census"]
