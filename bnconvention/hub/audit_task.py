"""One repo's audit as a self-contained task: download each checkpoint (a file, or an index and its shards) at the
commit the census read, build its model, run the audit of :mod:`bnconvention.audit`, and return the result as JSON.

Which architecture (:func:`choose_repo_spec`): the repo's own declaration in ``config.json`` — an ``architecture``
entry ``{"factory": ..., "kwargs": {...}}``, the shape the digits zoo writes — when that factory is on the
allowlist; else timm's or transformers' own ``config.json`` (:mod:`bnconvention.architectures.resolve`); otherwise
the spec's ``model``. Nothing a repo names is imported unless it is allowlisted or in the library's own registry.
Published cells: with ``published_source: sidecar`` they come from ``config.json`` (``published`` or the zoo's
``shipped_accuracy``); with ``published_by_checkpoint`` the key is the repo id.

:func:`audit_repo_task` does everything from its arguments (download at the pinned revision into a temporary folder,
audit, return the result), so the same task runs in this process, in a spawned worker or as a Ray task with the same
result: every computation is seeded from the spec, and each task runs torch with the same number of threads.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bnconvention.architectures.resolve import CONFIG_NAME, MAX_CONFIG_BYTES, parse_config
from bnconvention.audit.result import AuditResult
from bnconvention.audit.spec import AuditSpec, ModelSpec, parse_spec
from bnconvention.errors import BnConventionError, UsageError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.checkpoint_files import is_index_path
from bnconvention.formats.safetensors_index import INDEX_SUFFIX, parse_index
from bnconvention.formats.text import one_line
from bnconvention.hub.client import DEFAULT_TIMEOUT_S, HubClient, Secret, make_client, quiet_hub_progress
from bnconvention.hub.retry import RetryPolicy, call_with_retry, describe, is_retryable
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import to_dict


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


def declared_architecture(config: Any, *, repo_id: str = "repo") -> tuple[str, dict[str, Any]] | None:
    """``(factory, kwargs)`` the repo's ``config.json`` names (our declaration, transformers' or timm's own config;
    :func:`bnconvention.architectures.resolve.architecture_from_config`), None when it names none; a refusal raises,
    naming ``repo_id/config.json``."""
    from bnconvention.architectures.resolve import architecture_from_config

    found = architecture_from_config(config, source=f"{repo_id}/{CONFIG_NAME}")
    return None if found is None else (found.factory, found.kwargs)


def choose_repo_spec(spec: AuditSpec, *, repo_id: str, config: Any
                     ) -> tuple[AuditSpec, Literal["repo", "spec"], tuple[str, ...]]:
    """The spec to audit this repo with, where its architecture came from, and the refusals passed over.

    The order of :mod:`bnconvention.architectures.resolve`: the repo's own declaration in ``config.json``, then
    timm's or transformers' own config there, then the spec's model (the fallback of an organisation-wide spec).
    """
    from bnconvention.architectures.resolve import Architecture, resolve_architecture

    fallback = (Architecture(factory=spec.model.factory, kwargs=dict(spec.model.kwargs), source="spec")
                if spec.model is not None else None)
    resolution = resolve_architecture([(config, f"{repo_id}/{CONFIG_NAME}")], fallback=fallback)
    if resolution is None:
        has = f"its {CONFIG_NAME} names no architecture" if config is not None else f"it has no {CONFIG_NAME}"
        raise UsageError(f"{repo_id}: {has}, and the spec has no model section; add model: {{factory: ...}} to "
                         "the spec (or --allow-factory for your own)")
    update: dict[str, Any] = {}
    chosen = resolution.architecture
    source: Literal["repo", "spec"] = "spec" if chosen.source == "spec" else "repo"
    if source == "repo":
        update["model"] = ModelSpec.model_validate({"factory": chosen.factory, "kwargs": chosen.kwargs})
    if spec.published_by_checkpoint and repo_id in spec.published_by_checkpoint:
        update["published"] = spec.published_by_checkpoint[repo_id]
        update["published_by_checkpoint"] = None
    return (spec.model_copy(update=update) if update else spec), source, resolution.passed_over


def spec_for_repo(spec: AuditSpec, *, repo_id: str, config: Any) -> tuple[AuditSpec, Literal["repo", "spec"]]:
    """The spec to audit this repo with (its architecture resolved by :func:`choose_repo_spec`, and the published
    cells of this repo), and where the architecture came from."""
    repo_spec, source, _ = choose_repo_spec(spec, repo_id=repo_id, config=config)
    return repo_spec, source


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
def _torch_threads(count: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _download(client: HubClient, repo_id: str, filename: str, *, revision: str, folder: Path) -> Path:
    """The checkpoint's local path: the file, or a shard index with every shard it names beside it."""
    def one(name: str) -> Path:
        local = call_with_retry(
            lambda: client.api.hf_hub_download(repo_id, name, revision=revision, local_dir=folder / "repo",
                                               cache_dir=folder / "cache"),
            policy=client.retry, what=f"download {repo_id}/{name}")
        return Path(local)

    path = one(filename)
    if is_index_path(path):
        index = parse_index(path.read_bytes(), filename=filename, source=f"{repo_id}/{filename}")
        for shard in index.shards:
            one(shard)
    return path


def _audit_file(client: HubClient, task: AuditTask, spec: AuditSpec, config_bytes: bytes | None, filename: str,
                folder: Path) -> FileAudit:
    from bnconvention.audit.checkpoint import sidecar_path
    from bnconvention.audit.runner import audit_checkpoint

    config = parse_config(config_bytes, source=f"{task.repo_id}/{CONFIG_NAME}") if config_bytes else None
    repo_spec, source, passed_over = choose_repo_spec(spec, repo_id=task.repo_id, config=config)
    weights = _download(client, task.repo_id, filename, revision=task.revision, folder=folder)
    if config_bytes is not None:
        # the audit reads architecture and published cells from the checkpoint's sidecar <name>.json
        sidecar_path(weights).write_bytes(config_bytes)
    result = audit_checkpoint(weights, repo_spec, data=_audit_data(repo_spec))
    subject = result.annotation.subject.model_copy(update={"filename": filename, "repo": task.repo_id,
                                                           "revision": task.revision})
    annotation = result.annotation.model_copy(update={"subject": subject})
    warnings = [*(f"architecture passed over: {note}" for note in passed_over), *result.warnings]
    result = result.model_copy(update={"annotation": annotation, "weights_path": f"{task.repo_id}/{filename}",
                                       "checkpoint": _name(task.repo_id, filename), "warnings": warnings})
    digest = canonical_sha256(to_dict(annotation))
    return FileAudit(filename=filename, status="audited", factory=result.factory, architecture_source=source,
                     annotation_sha256=digest, annotation_path=annotation_filename(digest), result=result)


def _name(repo_id: str, filename: str) -> str:
    return repo_id if filename in ("model.safetensors", f"model{INDEX_SUFFIX}") else f"{repo_id}:{filename}"


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
                    text = describe(exc) if not isinstance(exc, BnConventionError) else one_line(exc)
                    files.append(FileAudit(filename=filename, status="failed", reason=client.scrub(text)))
    files.sort(key=lambda f: f.filename)
    statuses = {f.status for f in files}
    status: Literal["audited", "failed", "skipped"] = (
        "failed" if "failed" in statuses else "audited" if "audited" in statuses else "skipped")
    reason = next((f"{f.filename}: {f.reason}" for f in files if f.status == status and f.reason), "")
    return RepoAudit(repo_id=task.repo_id, revision=task.revision, spec_sha256=canonical_sha256(task.spec),
                     status=status, reason=reason, transient=transient, files=files).model_dump_json()


__all__ = [
    "CONFIG_NAME",
    "AuditTask",
    "FileAudit",
    "RepoAudit",
    "audit_repo_task",
    "choose_repo_spec",
    "declared_architecture",
    "spec_for_repo",
]
