"""What the HTML report shows: one organisation's census, audits, pull requests and validation, as plain data.

:class:`ReportInput` gathers the documents the hub tooling already produces (the census document of
:func:`bnconvention.hub.summaries.census_summary`, the :class:`~bnconvention.hub_audit.entries.RepoAudit` entries, the
population summary of :func:`bnconvention.audit.census.run.summarize`, the push outcomes and the validator's issues),
plus the files on disk the report copies next to its ``index.html`` (each audit's plots and annotation). Nothing
here does I/O; :mod:`bnconvention.report_html.render` turns it into HTML and :mod:`bnconvention.report_html.write`
writes the folder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from bnconvention.audit.population import CensusResult, CheckpointRow
from bnconvention.formats.json_types import JsonValue
from bnconvention.hub.classify import RepoCensus
from bnconvention.hub.summaries import OrgCensus
from bnconvention.hub_audit.entries import FileAudit, PushOutcome, RepoAudit
from bnconvention.validation import Issue

PlotKind: TypeAlias = Literal["cells", "staleness"]
PLOT_KINDS: tuple[PlotKind, ...] = ("cells", "staleness")
FLAG_CLASSES: frozenset[str] = frozenset({"undeclared", "declared_inconsistent", "unreadable"})
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """A file-name- and fragment-safe form of a repo id or file name (``org/name:x.safetensors`` -> ``org-name-x``).

    >>> slug("digits-lab/unlearn-badteacher-eval")
    'digits-lab-unlearn-badteacher-eval'
    >>> slug("<script>/x")
    'script-x'
    """
    text = text.removesuffix(".safetensors")
    return _SLUG_UNSAFE.sub("-", text).strip("-.") or "item"


@dataclass(frozen=True)
class AuditFiles:
    """Files of one audited checkpoint on disk: its plots (``cells``, ``staleness``) and its annotation JSON."""

    plots: Mapping[str, Path] = field(default_factory=dict)
    annotation: Path | None = None


@dataclass(frozen=True)
class ReportInput:
    """Everything one report shows. ``files`` is keyed by ``(repo id, filename)`` of the audited checkpoint."""

    org: str
    endpoint: str
    census: OrgCensus
    audits: Sequence[RepoAudit] = ()
    audit_summary: CensusResult | None = None
    pushes: Sequence[PushOutcome] = ()
    validation: Sequence[Issue] = ()
    files: Mapping[tuple[str, str], AuditFiles] = field(default_factory=dict)
    release_notes: Mapping[str, str] = field(default_factory=dict)  # repo id -> how it was released
    title: str | None = None
    generator: str = "bnconvention"
    # census.json of a local population (``bnconvention census``): its page is written beside index.html
    population_census: CensusResult | None = None

    def repos(self) -> list[RepoCensus]:
        """The census entries, sorted by repo id."""
        return sorted(self.census.repos, key=lambda r: r.repo_id)

    def audit_of(self, repo_id: str) -> RepoAudit | None:
        return next((a for a in self.audits if a.repo_id == repo_id), None)

    def audited_files(self) -> list[tuple[RepoAudit, FileAudit]]:
        """Every audited checkpoint (with a result), by repo id then file name."""
        pairs = [(a, f) for a in self.audits for f in a.files if f.status == "audited" and f.result is not None]
        return sorted(pairs, key=lambda pair: (pair[0].repo_id, pair[1].filename))

    def push_of(self, repo_id: str) -> PushOutcome | None:
        return next((p for p in self.pushes if p.repo_id == repo_id), None)

    def issues_of(self, repo_id: str) -> list[Issue]:
        """Validator issues reported under ``repo_id`` (its files are named ``<repo id>/<path>``)."""
        return [i for i in self.validation if i.file == repo_id or i.file.startswith(repo_id + "/")]

    def summary_entry(self, repo_id: str, filename: str) -> CheckpointRow | None:
        """The population summary's entry of one checkpoint (it carries the Benjamini–Yekutieli p-values)."""
        if self.audit_summary is None:
            return None
        wanted = f"{repo_id}/{filename}"
        return next((c for c in self.audit_summary.checkpoints if c.checkpoint == wanted), None)

    def flagged(self) -> list[tuple[str, str, str]]:
        """``(repo id, source, reason)`` for every repo the census or the validator flags, sorted."""
        return flagged_repos(self.repos(), self.validation)


def flagged_repos(repos: Sequence[RepoCensus | Mapping[str, JsonValue]],
                  issues: Sequence[Issue]) -> list[tuple[str, str, str]]:
    """``(repo id, flagged by, reason)``, one per repo, sorted: the census class when it needs attention
    (undeclared, inconsistent, unreadable), else the repo's first validation error (issues are named
    ``<repo id>/<path>``). ``repos`` are census entries, or rows of ``org-census.json`` as read (checked as
    entries)."""
    entries = [repo if isinstance(repo, RepoCensus) else RepoCensus.model_validate(repo) for repo in repos]
    flags: list[tuple[str, str, str]] = [
        (repo.repo_id, f"census: {repo.status}", repo.reason) for repo in entries if repo.status in FLAG_CLASSES]
    seen: set[str] = {repo_id for repo_id, _, _ in flags}
    for issue in issues:
        repo_id = "/".join(issue.file.split("/")[:2])
        if issue.severity == "error" and repo_id not in seen:
            seen.add(repo_id)
            flags.append((repo_id, f"validation: {issue.code}", issue.message))
    return sorted(flags)


def checkpoint_key(repo_id: str, filename: str) -> str:
    """The fragment id and file-name stem of one audited checkpoint in the report."""
    stem = slug(repo_id) if filename == "model.safetensors" else f"{slug(repo_id)}--{slug(filename)}"
    return f"audit-{stem}"


__all__ = ["FLAG_CLASSES", "PLOT_KINDS", "AuditFiles", "PlotKind", "ReportInput", "checkpoint_key", "flagged_repos",
           "slug"]
