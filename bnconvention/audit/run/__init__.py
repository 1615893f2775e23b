"""Running one audit: prepare, the stages in order, the shipped-cells and replicate stores, margin and pool sweeps, and
the reproduction of an annotation."""

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

__all__ = ["MAX_ANNOTATION_BYTES", "Reproduction", "TOLERANCE", "audit_checkpoint", "check_spec", "digest_differences",
    "parse_annotation", "pinned_spec", "prepare_audit", "reproduce_local", "reproduction", "reproduction_lines",
    "run_audit", "subject_name"]
