"""The audit's shared records and files: what one audit returns (:mod:`.result`), the file names and the JSON writer
(:mod:`.files`)."""

from bnconvention.audit.core.files import ANNOTATION_FILE, write_json
from bnconvention.audit.core.result import AuditResult

__all__ = ["ANNOTATION_FILE", "AuditResult", "write_json"]
