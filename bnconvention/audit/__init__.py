"""The auditor's instrument: refit cells with replicate-backed decisions, staleness and recoverability diagnostics
(docs/statistics.md), for one checkpoint (:func:`audit_checkpoint`) or a population (:func:`run_census`).

Docstrings here cite the two papers the design follows by author (Shen and Li; Kalani et al.): see
docs/statistics.md#references.

>>> from bnconvention.audit import load_spec, audit_checkpoint, write_audit_outputs  # doctest: +SKIP
>>> result = audit_checkpoint("zoo/bn-badteacher-eval.safetensors", load_spec("examples/audit/digits-zoo.yaml"))
...                                                                                  # doctest: +SKIP
>>> result.annotation.reporting_line                                                 # doctest: +SKIP
'deployed state as shipped; refit on the retained split under the training transform (exact rule), forget ...'
"""

from bnconvention.audit.census import CensusOutcome, discover_checkpoints, run_census, summarize
from bnconvention.audit.data import AuditData, Split, load_audit_data
from bnconvention.audit.expressions import BASE_CELLS, CellExpression, Criterion, parse_cell, parse_criterion
from bnconvention.audit.markdown import audit_markdown, census_markdown
from bnconvention.audit.outputs import write_audit_outputs
from bnconvention.audit.result import AuditResult
from bnconvention.audit.runner import PreparedAudit, audit_checkpoint, prepare_audit, run_audit
from bnconvention.audit.spec import AuditSpec, audit_spec_schema_text, generate_audit_spec_schema, load_spec, parse_spec
from bnconvention.audit.stats import by_adjust, decide, sign_test, tost

__all__ = [
    "BASE_CELLS",
    "AuditData",
    "AuditResult",
    "AuditSpec",
    "CellExpression",
    "CensusOutcome",
    "Criterion",
    "PreparedAudit",
    "Split",
    "audit_checkpoint",
    "audit_markdown",
    "audit_spec_schema_text",
    "by_adjust",
    "census_markdown",
    "decide",
    "discover_checkpoints",
    "generate_audit_spec_schema",
    "load_audit_data",
    "load_spec",
    "parse_cell",
    "parse_criterion",
    "parse_spec",
    "prepare_audit",
    "run_audit",
    "run_census",
    "sign_test",
    "summarize",
    "tost",
    "write_audit_outputs",
]
