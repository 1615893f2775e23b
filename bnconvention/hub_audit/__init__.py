"""Audit a Hub organisation's BatchNorm repos and push the annotations back: one task per repo (download, resolve the
architecture, run :mod:`bnconvention.audit`), the organisation's run with its journal and outputs, the pull requests,
and reproducing an annotation a pull request proposes. It sits above the audit and imports it at module top; the
torch-free Hub tooling it stands on (client, census, journal, validation) is :mod:`bnconvention.hub`.

>>> from bnconvention.hub import Journal, make_client  # doctest: +SKIP
>>> from bnconvention.hub_audit import audit_org, push_org  # doctest: +SKIP
"""

from bnconvention._lazy import lazy_exports

# Lazy: ``bnconvention hub push`` and the report's models need not import every stage of an audit.
_EXPORTS: dict[str, str] = {
    "audit_org": "bnconvention.hub_audit.audit",
    "audit_repo_task": "bnconvention.hub_audit.audit",
    "AuditRun": "bnconvention.hub_audit.audit",
    "AuditTask": "bnconvention.hub_audit.audit",
    "FileAudit": "bnconvention.hub_audit.entries",
    "plan_push": "bnconvention.hub_audit.push",
    "push_org": "bnconvention.hub_audit.push",
    "PushOutcome": "bnconvention.hub_audit.entries",
    "PushPlan": "bnconvention.hub_audit.push",
    "PushRun": "bnconvention.hub_audit.push",
    "RepoAudit": "bnconvention.hub_audit.entries",
    "reproduce_pull_request": "bnconvention.hub_audit.reproduce",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())

__all__ = [
    "AuditRun",
    "AuditTask",
    "FileAudit",
    "PushOutcome",
    "PushPlan",
    "PushRun",
    "RepoAudit",
    "audit_org",
    "audit_repo_task",
    "plan_push",
    "push_org",
    "reproduce_pull_request",
]
