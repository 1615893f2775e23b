"""Running one audit: prepare, the stages in order, the shipped-cells and replicate stores, margin and pool sweeps, and
the reproduction of an annotation."""

from typing import TYPE_CHECKING

from bnconvention._lazy import lazy_exports

if TYPE_CHECKING:
    from bnconvention.audit.run.reproduce import (
        MAX_ANNOTATION_BYTES,
        TOLERANCE,
        Reproduction,
        check_spec,
        digest_differences,
        parse_annotation,
        pinned_spec,
        reproduce_local,
        reproduction,
        reproduction_lines,
        subject_name,
    )
    from bnconvention.audit.run.runner import audit_checkpoint, prepare_audit, run_audit
# Lazy: the population's readings (a torch-free path: the HTML report, hub_audit's journal entries) import the margin
# sweep (:mod:`.sweeps`, decisions from stored numbers) without the runner and its stages.
_EXPORTS: dict[str, str] = {
    "MAX_ANNOTATION_BYTES": "bnconvention.audit.run.reproduce",
    "Reproduction": "bnconvention.audit.run.reproduce",
    "TOLERANCE": "bnconvention.audit.run.reproduce",
    "audit_checkpoint": "bnconvention.audit.run.runner",
    "check_spec": "bnconvention.audit.run.reproduce",
    "digest_differences": "bnconvention.audit.run.reproduce",
    "parse_annotation": "bnconvention.audit.run.reproduce",
    "pinned_spec": "bnconvention.audit.run.reproduce",
    "prepare_audit": "bnconvention.audit.run.runner",
    "reproduce_local": "bnconvention.audit.run.reproduce",
    "reproduction": "bnconvention.audit.run.reproduce",
    "reproduction_lines": "bnconvention.audit.run.reproduce",
    "run_audit": "bnconvention.audit.run.runner",
    "subject_name": "bnconvention.audit.run.reproduce",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())

__all__ = ["MAX_ANNOTATION_BYTES", "Reproduction", "TOLERANCE", "audit_checkpoint", "check_spec", "digest_differences",
    "parse_annotation", "pinned_spec", "prepare_audit", "reproduce_local", "reproduction", "reproduction_lines",
    "run_audit", "subject_name"]
