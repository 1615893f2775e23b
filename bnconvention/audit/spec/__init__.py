"""The audit spec: its pydantic models (the source of truth of ``schema/v1/audit-spec.schema.json``), cell and criterion
expressions, per-repo rules, loading and the schema."""

from bnconvention.audit.spec.audit_spec import AuditSpec, ModelSpec, load_spec, parse_spec
from bnconvention.audit.spec.census import SweepSpec
from bnconvention.audit.spec.diagnostics import ReferenceSpec, reference_path
from bnconvention.audit.spec.rules import apply_rules

__all__ = ["AuditSpec", "ModelSpec", "ReferenceSpec", "SweepSpec", "apply_rules", "load_spec", "parse_spec",
           "reference_path"]
