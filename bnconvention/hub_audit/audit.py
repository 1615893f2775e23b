"""Audit an organisation's BatchNorm repos: one task per repo (:mod:`bnconvention.hub_audit.audit_task`: download each
file at the commit the census read, build the model, run the audit of :mod:`bnconvention.audit`), and the
annotations written locally (pushing them is :mod:`bnconvention.hub_audit.push`).

Which repos: those the census found with running statistics (declared, undeclared or inconsistent); every
checkpoint with BatchNorm layers is audited, single-file or sharded (the index and its shards are downloaded).

:func:`audit_org` runs named stages: the census (reusing the journal), :func:`plan_audits` (what to reuse, skip
or run), the tasks on the chosen executor (in this process, spawned workers with ``--workers N``, or Ray tasks with
``--executor ray``; each result's outputs written by :func:`write_repo_outputs` and journaled as it arrives), and
:func:`write_population_summary`.

The journal keeps each repo's last audit under each spec: rows of different specs sit side by side, so a second run
with another spec into the same ``--out`` never turns the first spec's rows into failures, and ``hub push`` offers
every repo audited under any of them. Each audited file's outputs go to ``audits/<repo>/<file stem>/<spec>/``
(``spec-<first 12 hex of the spec's sha256>``), so two specs never write over each other's annotation either;
``audit.json`` and ``audit.md`` summarise the run's spec. Only successes (``audited``, ``skipped``) at the same
commit under the same spec are reused; a failed audit is run again on every rerun, whatever failed (a missing
``--allow-factory``, a module not on ``PYTHONPATH``, the Hub), so fixing the cause and rerunning is enough.
``redo`` and ``redo_failed`` narrow a run to a selection: the named repos (again, even after a success) and/or the
repos whose last audit under this spec failed; every other repo is reused from the journal or left for a later run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bnconvention.audit.core import ANNOTATION_FILE, write_json
from bnconvention.audit.population import summarize
from bnconvention.audit.render import census_markdown, census_sections_markdown, families_markdown, write_audit_outputs
from bnconvention.audit.spec import AuditSpec
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.checkpoint_files import checkpoint_name
from bnconvention.hub.classify import BN_CLASSES, RepoCensus
from bnconvention.hub.client import HubClient
from bnconvention.hub.crawl import census_entries, census_org
from bnconvention.hub.executors import ExecutorKind, run_tasks
from bnconvention.hub.journal import Entry, Journal
from bnconvention.hub_audit.audit_task import (
    AuditTask,
    audit_repo_task,
    declared_architecture,
    for_workers,
    spec_for_repo,
)
from bnconvention.hub_audit.entries import FileAudit, RepoAudit
from bnconvention.refitting.devices import Device

AUDITS_DIR = "audits"


def audit_targets(repos: Iterable[RepoCensus]) -> list[tuple[RepoCensus, list[str]]]:
    """(repo, checkpoints to audit) for every repo with running statistics and at least one readable BatchNorm
    checkpoint: a single file, or a sharded checkpoint's index (its shards are downloaded with it); ``repos`` is
    read once, and only those are kept."""
    targets = []
    for repo in repos:
        if repo.status not in BN_CLASSES:
            continue
        files = [c.name for c in repo.checkpoints if c.bn_layers and c.status != "unreadable"]
        if files:
            targets.append((repo, files))
    return targets


@dataclass
class AuditRun:
    """What one ``hub audit`` run did; ``audits`` holds every BN repo's entry (sorted by repo id)."""

    org: str
    audits: list[RepoAudit]
    ran: int = 0  # audit tasks run (repos with at least one readable BatchNorm checkpoint)
    reused: int = 0
    left: int = 0  # not selected by redo / redo_failed and not yet audited successfully: left for a later run
    reused_ids: set[str] = field(default_factory=set)
    summary: dict[str, Any] | None = None
    out_dir: Path | None = None
    written: list[Path] = field(default_factory=list)
    listing_stopped: str | None = None  # the census's listing stopped at a budget or a loop: part of the org only


    def counts(self) -> dict[str, int]:
        """How many repos ended in each status (audited, failed, skipped), reused ones included."""
        found = {"audited": 0, "failed": 0, "skipped": 0}
        for audit in self.audits:
            found[audit.status] += 1
        return found


def repo_out_dir(out: Path, repo_id: str) -> Path:
    return out / AUDITS_DIR / repo_id


def spec_label(spec_sha256: str) -> str:
    """The folder of one spec's outputs: ``spec-<first 12 hex of its sha256>``."""
    return f"spec-{spec_sha256[:12]}"


def file_out_dir(out: Path, repo_id: str, filename: str, *, spec_sha256: str) -> Path:
    """Where one audited file's annotation, summary and plots go under one spec:
    ``audits/<repo>/<file stem>/spec-<12 hex>/``."""
    return repo_out_dir(out, repo_id) / checkpoint_name(Path(filename)) / spec_label(spec_sha256)


def _reusable(entry: Entry | None, *, revision: str | None, spec_sha: str) -> bool:
    """A journaled success at this commit under this spec; a failure is never reused."""
    return entry is not None and entry.matches(revision=revision, key=spec_sha) and entry.status != "failed"


def _check_redo(redo: Sequence[str], targets: Sequence[str], org: str) -> None:
    unknown = sorted(set(redo) - set(targets))
    if unknown:
        shown = ", ".join(targets[:5]) + (", ..." if len(targets) > 5 else "") if targets else "none"
        raise UsageError(f"--redo {unknown[0]}: not a BatchNorm repo of the census of {org} (those are: {shown})")


@dataclass
class AuditPlan:
    """Which BN repos of a census this run audits (``tasks``), which it takes from the journal or reports without a
    task (``results``: reused successes, sharded-only repos), and how many it leaves for a later run."""

    tasks: list[AuditTask] = field(default_factory=list)
    results: dict[str, RepoAudit] = field(default_factory=dict)
    reused_ids: set[str] = field(default_factory=set)
    left: int = 0


def plan_audits(client: HubClient, org: str, repos: Iterable[RepoCensus], *, spec_data: dict[str, Any],
                journal: Journal, allowed_factories: Sequence[str] = (), threads: int = 1, device: Device = "cpu",
                redo: Sequence[str] = (), redo_failed: bool = False,
                on_audit: Callable[[RepoAudit, bool], None] | None = None) -> AuditPlan:
    """Sort the census's BN repos: reuse a journaled success at the same commit under the same spec, skip what
    ``redo`` / ``redo_failed`` do not select, and make one :class:`AuditTask` of every other repo."""
    spec_sha = canonical_sha256(spec_data)
    targets = audit_targets(repos)
    _check_redo(redo, [repo.repo_id for repo, _ in targets], org)
    selective = bool(redo) or redo_failed
    plan = AuditPlan()
    for repo, files in targets:
        entry = journal.get("audit", repo.repo_id, key=spec_sha)
        reusable = _reusable(entry, revision=repo.sha, spec_sha=spec_sha)
        selected = repo.repo_id in redo or (redo_failed and entry is not None and entry.status == "failed")
        if not selected and (reusable or selective):
            if entry is None or not reusable:  # never audited successfully, and not selected: left for a later run
                plan.left += 1
                continue
            plan.results[repo.repo_id] = RepoAudit.model_validate(entry.payload)
            plan.reused_ids.add(repo.repo_id)
            if on_audit is not None:
                on_audit(plan.results[repo.repo_id], True)
        else:
            plan.tasks.append(AuditTask(endpoint=client.endpoint, token=client.token, repo_id=repo.repo_id,
                                        revision=repo.sha or "", filenames=tuple(files),
                                        spec=spec_data, allowed_factories=tuple(allowed_factories),
                                        threads=threads, retry=client.retry, timeout_s=client.timeout_s,
                                        device=device))
    return plan


def audit_org(client: HubClient, org: str, spec: AuditSpec, *, journal: Journal, out: str | os.PathLike[str],
              executor: ExecutorKind = "local", workers: int = 1, allowed_factories: Sequence[str] = (),
              threads: int = 1, device: Device = "cpu", plots: bool = True, progress: bool = False,
              redo: Sequence[str] = (), redo_failed: bool = False, ray_address: str | None = None,
              on_audit: Callable[[RepoAudit, bool], None] | None = None) -> AuditRun:
    """Census (reusing the journal), then audit every BN repo not yet audited successfully at its commit under
    this spec; with ``redo`` / ``redo_failed``, only those repos (see the module docstring)."""
    out_dir = Path(out)
    census = census_org(client, org, journal=journal, progress=progress)
    spec_data = spec.model_dump(mode="json")
    spec_sha = canonical_sha256(spec_data)
    plan = plan_audits(client, org, census_entries(journal), spec_data=spec_data, journal=journal,
                       allowed_factories=allowed_factories, threads=threads, device=device, redo=redo,
                       redo_failed=redo_failed,
                       on_audit=on_audit)
    run = AuditRun(org=org, audits=[], out_dir=out_dir, reused=len(plan.reused_ids), left=plan.left,
                   reused_ids=set(plan.reused_ids), listing_stopped=census.listing.stopped)
    results = dict(plan.results)

    def finish(audit: RepoAudit) -> None:
        run.written.extend(write_repo_outputs(audit, out_dir, plots=plots))
        journal.record("audit", audit.repo_id, revision=audit.revision, key=spec_sha, status=audit.status,
                       payload=audit.model_dump(mode="json"), final=audit.status != "failed")
        results[audit.repo_id] = audit
        run.ran += 1
        if on_audit is not None:
            on_audit(audit, False)

    tasks = plan.tasks if executor == "local" else [for_workers(t, token_env=client.token_env) for t in plan.tasks]
    _run_audit_tasks(tasks, finish, org=org, reused=run.reused, executor=executor, workers=workers,
                     progress=progress, ray_address=ray_address)
    run.audits = [results[key] for key in sorted(results)]
    run.summary = write_population_summary(run.audits, spec, out_dir, org=org)
    return run


def _run_audit_tasks(tasks: Sequence[AuditTask], finish: Callable[[RepoAudit], None], *, org: str, reused: int,
                     executor: ExecutorKind, workers: int, progress: bool, ray_address: str | None = None) -> None:
    """Run the tasks on the executor; ``finish`` gets each repo's audit as it arrives (in this process)."""
    bar = tqdm(total=len(tasks) + reused, initial=reused, desc=f"audit {org}", unit="repo", disable=not progress)

    def arrived(index: int, text: str) -> None:
        finish(RepoAudit.model_validate_json(text))
        bar.update(1)

    try:
        run_tasks(audit_repo_task, list(tasks), executor=executor, workers=workers, on_result=arrived,
                  ray_address=ray_address)
    finally:
        bar.close()


def write_repo_outputs(audit: RepoAudit, out_dir: Path, *, plots: bool = True) -> list[Path]:
    """Each audited file's annotation, summary and plots under :func:`file_out_dir`; the paths written."""
    written: list[Path] = []
    for item in audit.files:
        if item.result is not None:
            folder = file_out_dir(out_dir, audit.repo_id, item.filename, spec_sha256=audit.spec_sha256)
            files = write_audit_outputs(item.result, folder, plots=plots)
            written.extend(files.values())
    return written


def write_population_summary(audits: Sequence[RepoAudit], spec: AuditSpec, out_dir: Path, *,
                             org: str) -> dict[str, Any] | None:
    """``audit.json`` and ``audit.md`` over every audited file (reused ones included), linking each annotation
    where :func:`write_repo_outputs` put it; None (nothing written) when no file was audited."""
    audited = [(f.result, f"{a.repo_id}/{f.filename}",
                file_out_dir(out_dir, a.repo_id, f.filename, spec_sha256=a.spec_sha256))
               for a in audits for f in a.files if f.result is not None]
    if not audited:
        return None
    census = summarize([r for r, _, _ in audited], [n for _, n, _ in audited], spec,
                       annotations=[(d / ANNOTATION_FILE).relative_to(out_dir).as_posix() for _, _, d in audited],
                       org=org)
    summary = census.to_json()
    write_json(out_dir / "audit.json", summary)
    atomic_write_text(out_dir / "audit.md", census_markdown(census) + census_sections_markdown(census)
                      + families_markdown(census))
    return summary


__all__ = [
    "AUDITS_DIR",
    "AuditPlan",
    "AuditRun",
    "AuditTask",
    "FileAudit",
    "RepoAudit",
    "audit_org",
    "audit_repo_task",
    "audit_targets",
    "declared_architecture",
    "file_out_dir",
    "plan_audits",
    "spec_for_repo",
    "spec_label",
    "write_population_summary",
    "write_repo_outputs",
]
