"""The Hub audit's journal entries: one repo's audit (:class:`RepoAudit`, its files' :class:`FileAudit`) and one
repo's pull request (:class:`PushOutcome`). ``hub audit`` writes them, ``hub push`` and the HTML report read them.

The report (:mod:`bnconvention.report_html`) reads these models on a torch-free path, so this module imports only
records: the audit's result model (:mod:`bnconvention.audit.core`), never its machinery.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict

from bnconvention.audit.core import AuditResult
from bnconvention.formats.text import elide

MAX_REASON = 2000  # characters of a failure reason kept in the journal and the outputs
# A reason quotes what a repo's files said; the journal keeps a bounded prefix of it, whatever the repo put there.
# (cut 40 characters short, so that the cut reason with its "... (N characters)" fits and a reread keeps it as it is)
Reason = Annotated[str, AfterValidator(lambda text: elide(text, MAX_REASON - 40) if len(text) > MAX_REASON else text)]


class FileAudit(BaseModel):
    """The audit of one weights file of a repo."""

    model_config = ConfigDict(extra="forbid")

    filename: str
    status: Literal["audited", "failed", "skipped"]
    reason: Reason = ""
    factory: str | None = None
    architecture_source: Literal["repo", "spec"] | None = None
    rules: list[str] = []  # the spec rules that shaped this repo's spec (see bnconvention.audit.spec.rules)
    # cell -> where the card's model-index publishes it (task, dataset, metric type and name): hub push puts the
    # refit cell beside it
    published_origins: dict[str, dict[str, Any]] | None = None
    annotation_sha256: str | None = None
    annotation_path: str | None = None
    result: AuditResult | None = None


class RepoAudit(BaseModel):
    """The audit of one repo at one commit under one spec (the journal's ``audit`` entry)."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str
    revision: str
    spec_sha256: str
    status: Literal["audited", "failed", "skipped"]
    reason: Reason = ""
    transient: bool = False
    files: list[FileAudit] = []


PushStatus = Literal["opened", "exists", "merged", "dry-run", "failed", "nothing"]


class PushOutcome(BaseModel):
    """The journal's ``push`` entry of one repo."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str
    revision: str
    status: PushStatus
    annotations: list[str]
    pr_num: int | None = None
    pr_url: str | None = None
    reason: str = ""
    transient: bool = False
