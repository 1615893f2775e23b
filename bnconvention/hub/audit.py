"""Audit an organisation's BatchNorm repos: download each at the commit the census read, build the model, run the
audit of :mod:`bnconvention.audit`, and write the annotations locally (pushing them is :mod:`bnconvention.hub.push`).

Which repos: those the census found with running statistics (declared, undeclared or inconsistent); every
single-file checkpoint with BatchNorm layers is audited. Sharded checkpoints are reported as skipped (the audit
loads one safetensors file).

Which architecture: the repo's own declaration in ``config.json`` — an ``architecture`` entry ``{"factory": ...,
"kwargs": {...}}``, the shape the digits zoo writes — when that factory is on the allowlist; otherwise the spec's
``model``. A factory named by a repo is never imported unless it is allowlisted. Published cells: with
``published_source: sidecar`` they come from ``config.json`` (``published`` or the zoo's ``shipped_accuracy``);
with ``published_by_checkpoint`` the key is the repo id.

Each audit is one task (:func:`audit_repo_task`) that does everything from its arguments: download at the pinned
revision into a temporary folder, audit, and return the result as JSON. So the same task runs in this process, in a
spawned worker (``--workers N``) or as a Ray task (``--executor ray``), and the result is the same: every
computation is seeded from the spec, and each task runs torch with the same number of threads.

The journal keeps each repo's last audit. Only successes (``audited``, ``skipped``) at the same commit under the
same spec are reused; a failed audit is run again on every rerun, whatever failed (a missing ``--allow-factory``,
a module not on ``PYTHONPATH``, the Hub), so fixing the cause and rerunning is enough. ``redo`` and ``redo_failed``
narrow a run to a selection: the named repos (again, even after a success) and/or the repos whose last audit
failed; every other repo is reused from the journal or left for a later run.
"""

from __future__ import annotations

# torch is imported inside the functions that audit: importing this module does not import torch.
import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bnconvention.audit.result import AuditResult
from bnconvention.audit.spec import AuditSpec, ModelSpec, parse_spec
from bnconvention.errors import BnConventionError, UntrustedInputError, UsageError
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.hub.classify import BN_CLASSES, RepoCensus
from bnconvention.hub.client import DEFAULT_TIMEOUT_S, HubClient, Secret, make_client, quiet_hub_progress
from bnconvention.hub.crawl import census_org
from bnconvention.hub.executors import ExecutorKind, run_tasks
from bnconvention.hub.journal import Entry, Journal
from bnconvention.hub.retry import RetryPolicy, call_with_retry, describe, is_retryable
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import to_dict

CONFIG_NAME = "config.json"
MAX_CONFIG_BYTES = 1_000_000
AUDITS_DIR = "audits"


class FileAudit(BaseModel):
    """The audit of one weights file of a repo."""

    model_config = ConfigDict(extra="forbid")

    filename: str
    status: Literal["audited", "failed", "skipped"]
    reason: str = ""
    factory: str | None = None
    architecture_source: Literal["repo", "spec"] | None = None
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
    reason: str = ""
    transient: bool = False
    files: list[FileAudit] = []


@dataclass(frozen=True)
class AuditTask:
    """Everything one repo's audit needs; picklable, with the token kept in a :class:`Secret`."""

    endpoint: str
    token: Secret
    repo_id: str
    revision: str
    filenames: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (checkpoint, reason) reported without auditing
    spec: dict[str, Any]
    allowed_factories: tuple[str, ...] = ()
    threads: int = 1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    work_dir: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


# --- choosing the model ------------------------------------------------------------------------------------------


def declared_architecture(config: Any) -> tuple[str, dict[str, Any]] | None:
    """``(factory, kwargs)`` from a repo's ``config.json`` (``architecture: {factory, kwargs}``), if it names one."""
    if not isinstance(config, dict):
        return None
    arch = config.get("architecture")
    if isinstance(arch, dict) and isinstance(arch.get("factory"), str):
        kwargs = arch.get("kwargs", {})
        return arch["factory"], kwargs if isinstance(kwargs, dict) else {}
    return None


def spec_for_repo(spec: AuditSpec, *, repo_id: str, config: Any) -> tuple[AuditSpec, Literal["repo", "spec"]]:
    """The spec to audit this repo with: the repo's allowlisted architecture (else the spec's model), and the
    published cells of this repo."""
    from bnconvention.architectures.factories import available_factories

    update: dict[str, Any] = {}
    declared = declared_architecture(config)
    source: Literal["repo", "spec"]
    if declared is not None and declared[0] in available_factories():
        try:
            update["model"] = ModelSpec.model_validate({"factory": declared[0], "kwargs": declared[1]})
            source = "repo"
        except ValidationError as exc:
            if spec.model is None:
                raise UntrustedInputError(f"{repo_id}/{CONFIG_NAME}: the architecture's kwargs are not plain JSON "
                                          f"values ({exc.errors()[0]['msg']}); name the model in the spec",
                                          source=f"{repo_id}/{CONFIG_NAME}") from None
            source = "spec"
    elif spec.model is not None:
        source = "spec"
    else:
        named = f"names {declared[0]!r}, which is not allowlisted" if declared else "names no architecture"
        raise UsageError(f"{repo_id}: its {CONFIG_NAME} {named}, and the spec has no model section; add model: "
                         "{factory: ...} to the spec (or --allow-factory for your own)")
    if spec.published_by_checkpoint and repo_id in spec.published_by_checkpoint:
        update["published"] = spec.published_by_checkpoint[repo_id]
        update["published_by_checkpoint"] = None
    return (spec.model_copy(update=update) if update else spec), source


# --- one task -----------------------------------------------------------------------------------------------------

_DATA_CACHE: dict[str, Any] = {}


def _audit_data(spec: AuditSpec) -> Any:
    """The spec's data, loaded once per process (it depends on the dataset and splits only)."""
    from bnconvention.audit.data import load_audit_data

    key = canonical_sha256({"dataset": spec.dataset.model_dump(mode="json"),
                            "splits": spec.splits.model_dump(mode="json")})
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = load_audit_data(spec)
    return _DATA_CACHE[key]


@contextlib.contextmanager
def _torch_threads(count: int):  # type: ignore[no-untyped-def]
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _download(client: HubClient, repo_id: str, filename: str, *, revision: str, folder: Path) -> Path:
    local = call_with_retry(
        lambda: client.api.hf_hub_download(repo_id, filename, revision=revision, local_dir=folder / "repo",
                                           cache_dir=folder / "cache"),
        policy=client.retry, what=f"download {repo_id}/{filename}")
    return Path(local)


def _audit_file(client: HubClient, task: AuditTask, spec: AuditSpec, config_bytes: bytes | None, filename: str,
                folder: Path) -> FileAudit:
    from bnconvention.audit.runner import audit_checkpoint

    config = loads_strict(config_bytes, source=f"{task.repo_id}/{CONFIG_NAME}") if config_bytes else None
    repo_spec, source = spec_for_repo(spec, repo_id=task.repo_id, config=config)
    weights = _download(client, task.repo_id, filename, revision=task.revision, folder=folder)
    if config_bytes is not None:
        # the audit reads architecture and published cells from the checkpoint's sidecar <name>.json
        weights.with_name(weights.name[: -len(".safetensors")] + ".json").write_bytes(config_bytes)
    result = audit_checkpoint(weights, repo_spec, data=_audit_data(repo_spec))
    subject = result.annotation.subject.model_copy(update={"filename": filename, "repo": task.repo_id,
                                                           "revision": task.revision})
    annotation = result.annotation.model_copy(update={"subject": subject})
    result = result.model_copy(update={"annotation": annotation, "weights_path": f"{task.repo_id}/{filename}",
                                       "checkpoint": _name(task.repo_id, filename)})
    digest = canonical_sha256(to_dict(annotation))
    return FileAudit(filename=filename, status="audited", factory=result.factory, architecture_source=source,
                     annotation_sha256=digest, annotation_path=annotation_filename(digest), result=result)


def _name(repo_id: str, filename: str) -> str:
    return repo_id if filename == "model.safetensors" else f"{repo_id}:{filename}"


def audit_repo_task(task: AuditTask) -> str:
    """Audit one repo (every file of ``task.filenames``); returns a :class:`RepoAudit` as JSON. Never raises for a
    repo's own problems: they are returned as ``failed`` files, transient Hub failures marked for a retry."""
    from bnconvention.architectures.factories import allow_user_factory

    for target in task.allowed_factories:
        allow_user_factory(target)
    client = make_client(endpoint=task.endpoint, token=task.token, retry=task.retry, timeout_s=task.timeout_s)
    spec = parse_spec(task.spec)
    files: list[FileAudit] = [FileAudit(filename=name, status="skipped", reason=reason)
                              for name, reason in task.skipped]
    transient = False
    with tempfile.TemporaryDirectory(prefix="bnc-hub-audit-", dir=task.work_dir) as tmp, \
            _torch_threads(task.threads), quiet_hub_progress():
        try:
            config_bytes = client.read_small_file(task.repo_id, CONFIG_NAME, revision=task.revision,
                                                  max_bytes=MAX_CONFIG_BYTES)
        except Exception as exc:  # noqa: BLE001 - recorded for every file of the repo
            transient = is_retryable(exc)
            reason = client.scrub(describe(exc))
            files += [FileAudit(filename=name, status="failed", reason=f"reading {CONFIG_NAME}: {reason}")
                      for name in task.filenames]
        else:
            for index, filename in enumerate(task.filenames):
                folder = Path(tmp) / str(index)
                folder.mkdir()
                try:
                    files.append(_audit_file(client, task, spec, config_bytes, filename, folder))
                except Exception as exc:  # noqa: BLE001 - one file's failure is its result; the crawl goes on
                    transient = transient or is_retryable(exc)
                    text = describe(exc) if not isinstance(exc, BnConventionError) else " ".join(str(exc).split())
                    files.append(FileAudit(filename=filename, status="failed", reason=client.scrub(text)))
    files.sort(key=lambda f: f.filename)
    statuses = {f.status for f in files}
    status: Literal["audited", "failed", "skipped"] = (
        "failed" if "failed" in statuses else "audited" if "audited" in statuses else "skipped")
    reason = next((f"{f.filename}: {f.reason}" for f in files if f.status == status and f.reason), "")
    return RepoAudit(repo_id=task.repo_id, revision=task.revision, spec_sha256=canonical_sha256(task.spec),
                     status=status, reason=reason, transient=transient, files=files).model_dump_json()


# --- the organisation ---------------------------------------------------------------------------------------------


def audit_targets(repos: Sequence[RepoCensus]) -> list[tuple[RepoCensus, list[str], list[tuple[str, str]]]]:
    """(repo, single files to audit, (checkpoint, reason) skipped) for every repo with running statistics."""
    targets = []
    for repo in repos:
        if repo.status not in BN_CLASSES:
            continue
        files, skipped = [], []
        for checkpoint in repo.checkpoints:
            if checkpoint.bn_layers == 0 or checkpoint.status == "unreadable":
                continue
            if checkpoint.kind == "sharded":
                skipped.append((checkpoint.name, "sharded checkpoint: the audit loads one safetensors file; merge "
                                                 "the shards to audit it"))
            else:
                files.append(checkpoint.name)
        if files or skipped:
            targets.append((repo, files, skipped))
    return targets


@dataclass
class AuditRun:
    """What one ``hub audit`` run did; ``audits`` holds every BN repo's entry (sorted by repo id)."""

    org: str
    audits: list[RepoAudit]
    ran: int = 0  # audit tasks run (repos with at least one single-file BatchNorm checkpoint)
    reused: int = 0
    left: int = 0  # not selected by redo / redo_failed and not yet audited successfully: left for a later run
    reused_ids: set[str] = field(default_factory=set)
    summary: dict[str, Any] | None = None
    out_dir: Path | None = None
    written: list[Path] = field(default_factory=list)


    def counts(self) -> dict[str, int]:
        """How many repos ended in each status (audited, failed, skipped), reused ones included."""
        found = {"audited": 0, "failed": 0, "skipped": 0}
        for audit in self.audits:
            found[audit.status] += 1
        return found


def repo_out_dir(out: Path, repo_id: str) -> Path:
    return out / AUDITS_DIR / repo_id


def _file_out_dir(out: Path, repo_id: str, filename: str) -> Path:
    """Where one audited file's annotation, summary and plots go: ``audits/<repo>/<file stem>/``."""
    return repo_out_dir(out, repo_id) / Path(filename).name.removesuffix(".safetensors")


def _reusable(entry: Entry | None, *, revision: str | None, spec_sha: str) -> bool:
    """A journaled success at this commit under this spec; a failure is never reused."""
    return entry is not None and entry.matches(revision=revision, key=spec_sha) and entry.status != "failed"


def _check_redo(redo: Sequence[str], targets: Sequence[str], org: str) -> None:
    unknown = sorted(set(redo) - set(targets))
    if unknown:
        shown = ", ".join(targets[:5]) + (", ..." if len(targets) > 5 else "") if targets else "none"
        raise UsageError(f"--redo {unknown[0]}: not a BatchNorm repo of the census of {org} (those are: {shown})")


def audit_org(client: HubClient, org: str, spec: AuditSpec, *, journal: Journal, out: str | os.PathLike[str],
              executor: ExecutorKind = "local", workers: int = 1, allowed_factories: Sequence[str] = (),
              threads: int = 1, plots: bool = True, progress: bool = False, redo: Sequence[str] = (),
              redo_failed: bool = False, on_audit: Callable[[RepoAudit, bool], None] | None = None) -> AuditRun:
    """Census (reusing the journal), then audit every BN repo not yet audited successfully at its commit under
    this spec; with ``redo`` / ``redo_failed``, only those repos (see the module docstring)."""
    from tqdm.auto import tqdm

    from bnconvention.audit.census import summarize
    from bnconvention.audit.markdown import census_markdown
    from bnconvention.audit.outputs import ANNOTATION_FILE, write_audit_outputs, write_json
    from bnconvention.formats.atomic import atomic_write_text

    out_dir = Path(out)
    census = census_org(client, org, journal=journal, progress=progress)
    spec_data = spec.model_dump(mode="json")
    spec_sha = canonical_sha256(spec_data)
    run = AuditRun(org=org, audits=[], out_dir=out_dir)
    results: dict[str, RepoAudit] = {}
    tasks: list[AuditTask] = []
    targets = audit_targets(census.repos)
    _check_redo(redo, [repo.repo_id for repo, _, _ in targets], org)
    selective = bool(redo) or redo_failed
    for repo, files, skipped in targets:
        entry = journal.get("audit", repo.repo_id)
        reusable = _reusable(entry, revision=repo.sha, spec_sha=spec_sha)
        selected = repo.repo_id in redo or (redo_failed and entry is not None and entry.status == "failed")
        if not selected and (reusable or selective):
            if not reusable:  # never audited successfully, and not selected: left for a later run
                run.left += 1
                continue
            results[repo.repo_id] = RepoAudit.model_validate(entry.payload)  # type: ignore[union-attr]
            run.reused += 1
            run.reused_ids.add(repo.repo_id)
            if on_audit is not None:
                on_audit(results[repo.repo_id], True)
            continue
        if not files:  # only sharded checkpoints: nothing to load, reported here without a task
            skipped_audit = RepoAudit(repo_id=repo.repo_id, revision=repo.sha or "", spec_sha256=spec_sha,
                                      status="skipped", reason=f"{skipped[0][0]}: {skipped[0][1]}",
                                      files=[FileAudit(filename=n, status="skipped", reason=r) for n, r in skipped])
            journal.record("audit", repo.repo_id, revision=repo.sha, key=spec_sha, status="skipped",
                           payload=skipped_audit.model_dump(mode="json"))
            results[repo.repo_id] = skipped_audit
            continue
        tasks.append(AuditTask(endpoint=client.endpoint, token=client.token, repo_id=repo.repo_id,
                               revision=repo.sha or "", filenames=tuple(files), skipped=tuple(skipped),
                               spec=spec_data, allowed_factories=tuple(allowed_factories), threads=threads,
                               retry=client.retry, timeout_s=client.timeout_s))
    bar = tqdm(total=len(tasks) + run.reused, initial=run.reused, desc=f"audit {org}", unit="repo",
               disable=not progress)

    def finish(index: int, text: str) -> None:
        audit = RepoAudit.model_validate_json(text)
        for item in audit.files:
            if item.result is not None:
                written = write_audit_outputs(item.result, _file_out_dir(out_dir, audit.repo_id, item.filename),
                                              plots=plots)
                run.written.extend(written.values())
        journal.record("audit", audit.repo_id, revision=audit.revision, key=spec_sha, status=audit.status,
                       payload=audit.model_dump(mode="json"), final=audit.status != "failed")
        results[audit.repo_id] = audit
        run.ran += 1
        bar.update(1)
        if on_audit is not None:
            on_audit(audit, False)

    try:
        run_tasks(audit_repo_task, tasks, executor=executor, workers=workers, on_result=finish)
    finally:
        bar.close()
    run.audits = [results[key] for key in sorted(results)]

    audited = [(f.result, f"{a.repo_id}/{f.filename}", _file_out_dir(out_dir, a.repo_id, f.filename))
               for a in run.audits for f in a.files if f.result is not None]
    if audited:
        summary = summarize([r for r, _, _ in audited], [n for _, n, _ in audited], spec,
                            annotations=[(d / ANNOTATION_FILE).relative_to(out_dir).as_posix() for _, _, d in audited])
        summary["org"] = org
        write_json(out_dir / "audit.json", summary)
        atomic_write_text(out_dir / "audit.md", census_markdown(summary))
        run.summary = summary
    return run


__all__ = [
    "AUDITS_DIR",
    "AuditRun",
    "AuditTask",
    "FileAudit",
    "RepoAudit",
    "audit_org",
    "audit_repo_task",
    "audit_targets",
    "declared_architecture",
    "spec_for_repo",
]
