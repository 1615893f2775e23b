"""The offline validator of the bnconvention standard.

Entry points: :func:`validate_paths` (files and folders, the ``bnconvention validate`` command),
:func:`validate_record` (one decoded record), :func:`ensure_valid_record` (raise one clear ``RecordError``), and
:func:`best_issue` for a one-line answer. Every issue has a stable code (:data:`CODES`), a severity, the file, a
JSON-pointer path into the record and a message saying what is wrong, what was found and how to fix it.

Whether a declaration is consistent with a checkpoint (card and header, layers, digests) is one pure rule,
:func:`bnconvention.validation.consistency.check_consistency`, which the Hub census and ``publish`` call too.

This package never imports torch: digests are computed by streaming the safetensors file.
"""

from bnconvention.validation.consistency import diff_pointers
from bnconvention.validation.files import ValidationReport, validate_paths
from bnconvention.validation.issues import CODES, CodeInfo, Issue, Severity, best_issue, sort_issues
from bnconvention.validation.records import check_record, ensure_valid_record, validate_record
from bnconvention.validation.rendering import FORMATS, ReportFormat, render

__all__ = [
    "CODES",
    "FORMATS",
    "CodeInfo",
    "Issue",
    "ReportFormat",
    "Severity",
    "ValidationReport",
    "best_issue",
    "check_record",
    "diff_pointers",
    "ensure_valid_record",
    "render",
    "sort_issues",
    "validate_paths",
    "validate_record",
]
