"""Measuring one checkpoint: the audit data, the checkpoint and its published cells, evaluation and refits, the decision
statistics, and the replicate-backed decisions of the cells."""

from typing import TYPE_CHECKING

from bnconvention._lazy import lazy_exports

if TYPE_CHECKING:
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
# Lazy: the population's readings (a torch-free path: the HTML report, hub_audit's journal entries) import the
# decision modules (:mod:`.decisions`, :mod:`.stats`) without the checkpoint and data loaders.
_EXPORTS: dict[str, str] = {
    "ModelChoice": "bnconvention.audit.measure.checkpoint",
    "build_architecture": "bnconvention.audit.measure.checkpoint",
    "card_path": "bnconvention.audit.measure.checkpoint",
    "cell_origins": "bnconvention.audit.measure.published",
    "check_fits": "bnconvention.audit.measure.checkpoint",
    "checkpoint_name": "bnconvention.formats.checkpoint_files",
    "decide": "bnconvention.audit.measure.stats",
    "load_audit_data": "bnconvention.audit.measure.data",
    "load_spec_dataset": "bnconvention.audit.measure.data",
    "model_repo_files": "bnconvention.audit.measure.data",
    "model_shapes": "bnconvention.audit.measure.checkpoint",
    "needs_repo": "bnconvention.audit.measure.data",
    "sidecar_path": "bnconvention.audit.measure.checkpoint",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())

__all__ = ["ModelChoice", "build_architecture", "card_path", "cell_origins", "check_fits", "checkpoint_name", "decide",
           "load_audit_data", "load_spec_dataset", "model_repo_files", "model_shapes", "needs_repo", "sidecar_path"]
