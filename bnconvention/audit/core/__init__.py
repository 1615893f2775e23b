"""The audit's shared records and files: what one audit returns (:mod:`.result`), the file names and the JSON writer
(:mod:`.files`), the base of the census model's parts (:mod:`.section`)."""

from bnconvention.audit.core.files import ANNOTATION_FILE, write_json
from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.core.section import Section

__all__ = ["ANNOTATION_FILE", "AuditResult", "Section", "write_json"]
