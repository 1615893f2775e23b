"""A static HTML report of an organisation's BatchNorm audit: census table, audited checkpoints, validation.

The report is a folder that opens from disk in any browser (no server, no scripts, no external resources):
``index.html`` with inline CSS, the audit's PNG plots under ``plots/`` and the refit annotations under
``annotations/``, linked from the page.

>>> from bnconvention.report_html import ReportInput, write_report  # doctest: +SKIP
>>> write_report(ReportInput(org="lab", endpoint="http://127.0.0.1:8000", census=census_doc), "report")
...                                                                   # doctest: +SKIP
PosixPath('.../report/index.html')
"""

from bnconvention.report_html.markup import esc
from bnconvention.report_html.model import (
    FLAG_CLASSES,
    AuditFiles,
    ReportInput,
    checkpoint_key,
    flagged_repos,
    slug,
)
from bnconvention.report_html.render import render_index
from bnconvention.report_html.write import ANNOTATIONS_DIR, INDEX, PLOTS_DIR, write_report

__all__ = [
    "ANNOTATIONS_DIR",
    "FLAG_CLASSES",
    "INDEX",
    "PLOTS_DIR",
    "AuditFiles",
    "ReportInput",
    "checkpoint_key",
    "esc",
    "flagged_repos",
    "render_index",
    "slug",
    "write_report",
]
