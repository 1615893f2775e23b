"""Measuring one checkpoint: the audit data, the checkpoint and its published cells, evaluation and refits, the decision
statistics, and the replicate-backed decisions of the cells."""

from bnconvention.audit.measure.checkpoint import (
    ModelChoice,
    build_architecture,
    card_path,
    check_fits,
    model_shapes,
    sidecar_path,
)
from bnconvention.audit.measure.data import load_audit_data, load_spec_dataset, model_repo_files, needs_repo
from bnconvention.audit.measure.published import cell_origins
from bnconvention.audit.measure.stats import decide
from bnconvention.formats.checkpoint_files import checkpoint_name

__all__ = ["ModelChoice", "build_architecture", "card_path", "cell_origins", "check_fits", "checkpoint_name", "decide",
           "load_audit_data", "load_spec_dataset", "model_repo_files", "model_shapes", "needs_repo", "sidecar_path"]
