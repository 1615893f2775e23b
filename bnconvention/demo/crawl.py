"""The auditor's side of the demo, over the hub library: census, audits, pull requests, validation.

Everything goes through :mod:`bnconvention.hub` with the auditor's own client and one crawl journal, so a rerun
reuses finished work: the census entry of a repo at the same commit, the audit of a repo at the same commit under
the same spec, the pull request of the same annotations.

``hub audit`` audits the repos with running statistics. The demo also audits the repos the census found without
them (the GroupNorm twins), through the same per-repo task (:func:`bnconvention.hub_audit.audit.audit_repo_task`), so
the report can show what a refit does to them: nothing, every shift exactly 0.00, said rather than skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bnconvention.audit.population import CensusResult, summarize
from bnconvention.audit.render import write_audit_outputs
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.hub.classify import RepoCensus
from bnconvention.hub.client import HubClient
from bnconvention.hub.journal import Journal
from bnconvention.hub_audit.audit import AuditTask, audit_repo_task, repo_out_dir
from bnconvention.hub_audit.entries import RepoAudit
from bnconvention.report_html import AuditFiles

PLOT_NAMES = {"cells": "cells.png", "staleness": "staleness.png"}
ANNOTATION_NAME = "annotation.json"


def output_dir(out: Path, repo_id: str, filename: str) -> Path:
    """Where ``hub audit`` writes one checkpoint's annotation, summary and plots."""
    return repo_out_dir(out, repo_id) / Path(filename).name.removesuffix(".safetensors")


def ensure_outputs(audits: Sequence[RepoAudit], out: Path) -> dict[tuple[str, str], AuditFiles]:
    """The annotation and plots of every audited checkpoint on disk, rewritten where missing (an audit reused from
    the journal whose output folder was deleted)."""
    files: dict[tuple[str, str], AuditFiles] = {}
    for audit in audits:
        for item in audit.files:
            if item.result is None:
                continue
            folder = output_dir(out, audit.repo_id, item.filename)
            wanted = [folder / ANNOTATION_NAME, *(folder / name for name in PLOT_NAMES.values())]
            if not all(path.is_file() for path in wanted):
                write_audit_outputs(item.result, folder, plots=True)
            files[(audit.repo_id, item.filename)] = AuditFiles(
                plots={kind: folder / name for kind, name in PLOT_NAMES.items()}, annotation=folder / ANNOTATION_NAME)
    return files


def channel_absent_targets(repos: Sequence[RepoCensus]) -> list[tuple[RepoCensus, tuple[str, ...]]]:
    """Repos without running statistics and the single-file checkpoints of each (what an audit can load)."""
    targets = []
    for repo in repos:
        if repo.status != "channel_absent" or repo.sha is None:
            continue
        files = tuple(c.name for c in repo.checkpoints if c.kind == "single" and c.status == "channel_absent")
        if files:
            targets.append((repo, files))
    return targets


def audit_channel_absent(client: HubClient, repos: Sequence[RepoCensus], spec: Any, *, journal: Journal,
                         out: Path, progress: bool) -> tuple[list[RepoAudit], int]:
    """Audit the repos without running statistics (journaled like ``hub audit``); ``(audits, reused)``."""
    spec_data = spec.model_dump(mode="json")
    spec_sha = canonical_sha256(spec_data)
    audits: list[RepoAudit] = []
    reused = 0
    targets = channel_absent_targets(repos)
    with tqdm(total=len(targets), desc="audit channel absent", unit="repo", disable=not progress) as bar:
        for repo, files in targets:
            entry = journal.get("audit", repo.repo_id)
            if entry is not None and entry.matches(revision=repo.sha, key=spec_sha):
                audits.append(RepoAudit.model_validate(entry.payload))
                reused += 1
                bar.update(1)
                continue
            task = AuditTask(endpoint=client.endpoint, token=client.token, repo_id=repo.repo_id,
                             revision=repo.sha or "", filenames=files, spec=spec_data,
                             retry=client.retry)
            audit = RepoAudit.model_validate_json(audit_repo_task(task))
            for item in audit.files:
                if item.result is not None:
                    write_audit_outputs(item.result, output_dir(out, audit.repo_id, item.filename), plots=True)
            journal.record("audit", audit.repo_id, revision=audit.revision, key=spec_sha, status=audit.status,
                           payload=audit.model_dump(mode="json"), final=not audit.transient)
            audits.append(audit)
            bar.update(1)
    return audits, reused


def population(audits: Sequence[RepoAudit], spec: Any) -> CensusResult | None:
    """Counts across every audited checkpoint (Benjamini–Yekutieli per cell), as ``bnconvention census`` makes."""
    pairs = sorted(((f"{a.repo_id}/{f.filename}", f.result) for a in audits for f in a.files if f.result is not None),
                   key=lambda pair: pair[0])
    if not pairs:
        return None
    return summarize([result for _, result in pairs], [name for name, _ in pairs], spec)


__all__ = ["audit_channel_absent", "channel_absent_targets", "ensure_outputs", "output_dir", "population"]
