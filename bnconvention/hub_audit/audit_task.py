"""One repo's audit as a self-contained task: download each checkpoint (a file, or an index and its shards) at the
commit the census read, build its model, run the audit of :mod:`bnconvention.audit`, and return the result as JSON.

Which architecture (:func:`choose_repo_spec`): the repo's own declaration in ``config.json`` — an ``architecture``
entry ``{"factory": ..., "kwargs": {...}}``, the shape the digits zoo writes — when that factory is on the
allowlist; else timm's or transformers' own ``config.json`` (:mod:`bnconvention.architectures.resolve`); otherwise
the spec's ``model``. Nothing a repo names is imported unless it is allowlisted or in the library's own registry.
Published cells: read as a local audit reads them, by one rule
(:func:`bnconvention.audit.measure.checkpoint.published_places`), from the repo's files laid out in the download folder
as they are in the repo: ``config.json`` (``published`` or the zoo's ``shipped_accuracy``) and the eval results of the
card's model-index (``README.md``), the one ``published_source`` names first (``sidecar``: ``config.json``;
``model_index``: the card); with ``published_by_checkpoint`` the key is the repo id. A repo where neither holds them
fails with one reason naming both files and the keys looked for.

Which spec: the spec's rules (:mod:`bnconvention.audit.spec.rules`) are applied first, by repo id and ``config.json``
fields, so one spec audits a mixed organisation, each repo with its own data, model and published cells; the rules
that shaped a file's spec are recorded in its :class:`FileAudit`. A failure's reason names the repo and its file
(``org/name/model.safetensors``, ``org/name/config.json``), never the temporary folder (:func:`relabel_reason`).

:func:`audit_repo_task` does everything from its arguments (download at the pinned revision into a temporary folder,
audit, return the result), so the same task runs in this process, in a spawned worker or as a Ray task with the same
result: every computation is seeded from the spec, and each task runs torch with the same number of threads.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from bnconvention.architectures.factories import allow_user_factory
from bnconvention.architectures.resolve import (
    CONFIG_NAME,
    MAX_CONFIG_BYTES,
    Architecture,
    architecture_from_config,
    parse_config,
    resolve_architecture,
)
from bnconvention.audit.measure import (
    card_path,
    cell_origins,
    load_audit_data,
    load_spec_dataset,
    model_repo_files,
    needs_repo,
    sidecar_path,
)
from bnconvention.audit.run import audit_checkpoint
from bnconvention.audit.spec import AuditSpec, ModelSpec, apply_rules, parse_spec
from bnconvention.data.ids import MAX_INDEX_BYTES
from bnconvention.errors import BnConventionError, UntrustedInputError, UsageError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.card import CARD_NAME, MAX_CARD_BYTES, decode_card, parse_card_metadata
from bnconvention.formats.checkpoint_files import is_index_path
from bnconvention.formats.safetensors_index import INDEX_SUFFIX, parse_index
from bnconvention.formats.text import one_line
from bnconvention.hub.client import (
    DEFAULT_TIMEOUT_S,
    HubClient,
    Secret,
    make_client,
    quiet_hub_progress,
    token_from_env,
)
from bnconvention.hub.retry import RetryPolicy, call_with_retry, describe, is_retryable
from bnconvention.hub_audit.entries import FileAudit, RepoAudit
from bnconvention.hub_audit.reference import fetch_reference
from bnconvention.refitting.devices import Device
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import to_dict


@dataclass(frozen=True)
class AuditTask:
    """Everything one repo's audit needs; picklable. In this process the token rides along in a :class:`Secret`; a
    task for a worker process or a Ray task carries only ``token_env``, the name of the environment variable the
    worker reads it from (:func:`for_workers`), so the token is never in a task's arguments."""

    endpoint: str
    token: Secret
    repo_id: str
    revision: str
    filenames: tuple[str, ...]
    spec: dict[str, Any]
    allowed_factories: tuple[str, ...] = ()
    threads: int = 1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    work_dir: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: Device = "cpu"  # an already resolved device name (bnconvention.refitting.devices), not "auto"
    token_env: str | None = None  # read in the worker when ``token`` is empty


def for_workers(task: AuditTask, *, token_env: str | None) -> AuditTask:
    """``task`` without the token, naming the environment variable each worker reads it from instead; a token given
    by value (no variable) cannot be handed on and is refused."""
    if task.token and token_env is None:
        raise UsageError(f"{task.repo_id}: worker processes and Ray tasks read the Hub token from their environment, "
                         "never from their arguments; give it through an environment variable (--token-env, or "
                         "make_client(token_env=...)) or use --executor local")
    return replace(task, token=Secret(None), token_env=token_env)


def task_token(task: AuditTask) -> Secret:
    """The token the task runs with: its own (in this process), else the one in its worker's environment."""
    return task.token if task.token or task.token_env is None else token_from_env(task.token_env)


# --- choosing the model ------------------------------------------------------------------------------------------


def declared_architecture(config: Any, *, repo_id: str = "repo") -> tuple[str, dict[str, Any]] | None:
    """``(factory, kwargs)`` the repo's ``config.json`` names (our declaration, transformers' or timm's own config;
    :func:`bnconvention.architectures.resolve.architecture_from_config`), None when it names none; a refusal raises,
    naming ``repo_id/config.json``."""
    found = architecture_from_config(config, source=f"{repo_id}/{CONFIG_NAME}")
    return None if found is None else (found.factory, found.kwargs)


def choose_repo_spec(spec: AuditSpec, *, repo_id: str, config: Any
                     ) -> tuple[AuditSpec, Literal["repo", "spec"], tuple[str, ...]]:
    """The spec to audit this repo with, where its architecture came from, and the refusals passed over.

    The order of :mod:`bnconvention.architectures.resolve`: the repo's own declaration in ``config.json``, then
    timm's or transformers' own config there, then the spec's model (the fallback of an organisation-wide spec).
    """
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
        update["model"] = ModelSpec.model_validate({"factory": chosen.factory, "kwargs": chosen.kwargs}).read_from(
            chosen.source)  # errors say "(from org/name/config.json)", not "(from spec)"
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

# decoded datasets, and audit data that reads nothing from the model repo: loaded once per process, reused per repo
_DATASETS: dict[str, Any] = {}
_DATA_CACHE: dict[str, Any] = {}


def _audit_data(spec: AuditSpec, task: AuditTask, repo_dir: Path) -> Any:
    """The spec's data for this repo: the dataset decoded once per process (a ``hub`` dataset from the task's Hub,
    with its token), split and transformed for this repo (``transform: from_repo``, ids files in the model repo read
    from ``repo_dir``, named by the repo id in messages)."""
    token = task_token(task).reveal()
    dataset_key = canonical_sha256({"dataset": spec.dataset.model_dump(mode="json")})
    data_key = canonical_sha256({"dataset": spec.dataset.model_dump(mode="json"),
                                 "splits": spec.splits.model_dump(mode="json"), "transform": spec.transform})
    if not needs_repo(spec) and data_key in _DATA_CACHE:
        return _DATA_CACHE[data_key]
    if dataset_key not in _DATASETS:
        _DATASETS[dataset_key] = load_spec_dataset(spec, endpoint=task.endpoint, token=token)
    data = load_audit_data(spec, repo_dir=repo_dir, repo_name=task.repo_id, dataset=_DATASETS[dataset_key],
                           endpoint=task.endpoint, token=token)
    if not needs_repo(spec):
        _DATA_CACHE[data_key] = data
    return data


def _fetch_repo_files(client: HubClient, task: AuditTask, spec: AuditSpec, repo_dir: Path) -> None:
    """The model-repo files the spec's data reads (preprocessing configs, ids files) that the repo has, put beside
    the weights; a file the repo lacks is left to the data layer to report."""
    for name in model_repo_files(spec):
        target = repo_dir / name
        if target.exists() or Path(name).is_absolute() or ".." in Path(name).parts:
            continue
        body = client.read_small_file(task.repo_id, name, revision=task.revision, max_bytes=MAX_INDEX_BYTES)
        if body is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)


@contextlib.contextmanager
def _torch_threads(count: int) -> Iterator[None]:
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


@dataclass(frozen=True)
class RepoFiles:
    """The small files of a repo every audited file shares: ``config.json`` and the card, as read at the pinned
    revision (``None`` when the repo has none)."""

    config: bytes | None
    card: bytes | None

    def card_metadata(self) -> dict[str, Any]:
        """The card's front matter, or ``{}`` when there is none or it cannot be read (anchoring on it then
        fails with the card's own error, in :mod:`bnconvention.audit.measure.checkpoint`)."""
        if self.card is None:
            return {}
        try:
            return parse_card_metadata(decode_card(self.card, source=CARD_NAME), source=CARD_NAME)
        except UntrustedInputError:
            return {}


def _local_paths(folder: Path, filename: str) -> tuple[Path, Path, Path]:
    """Where a file's weights, its sidecar (the repo's config.json) and the card go in the temporary folder: where
the audit of :mod:`bnconvention.audit.measure.checkpoint` looks for them."""
    weights = folder / "repo" / filename
    return weights, sidecar_path(weights), card_path(weights)


def relabel_reason(text: str, *, folder: Path, repo_id: str, filename: str) -> str:
    """A failure reason with the temporary folder's paths replaced by what they are in the repo: the weights by
    ``<repo>/<file>``, the sidecar and the config.json beside the weights by ``<repo>/config.json``, the card by
    ``<repo>/README.md``."""
    weights, sidecar, card = _local_paths(folder, filename)
    names = [(weights, filename), (sidecar, CONFIG_NAME), (weights.parent / CONFIG_NAME, CONFIG_NAME),
             (card, CARD_NAME), (folder / "repo", ""), (folder, "")]
    for local, name in names:
        for form in dict.fromkeys((str(local), str(local.resolve()))):
            text = text.replace(form, f"{repo_id}/{name}".rstrip("/"))
    # the sidecar slot and config.json are both the repo's config.json: a list of places looked at names it once
    return re.sub(r"(\S+ \([^()]*\)); \1(?=[;.])", r"\1", text)


def _audit_file(client: HubClient, task: AuditTask, spec: AuditSpec, files: RepoFiles, filename: str,
                folder: Path) -> FileAudit:
    config = parse_config(files.config, source=f"{task.repo_id}/{CONFIG_NAME}") if files.config else None
    ruled, rules = apply_rules(spec, repo_id=task.repo_id, config=config)
    repo_spec, source, passed_over = choose_repo_spec(ruled, repo_id=task.repo_id, config=config)
    weights = _download(client, task.repo_id, filename, revision=task.revision, folder=folder)
    _, sidecar, card = _local_paths(folder, filename)  # hf_hub_download put the weights at folder/repo/<file>
    if files.config is not None:
        # the sidecar's readers (architecture, population and mechanism metadata) read config.json as the
        # checkpoint's sidecar <name>.json; published cells are read by the rule of a local audit, which takes this
        # copy and config.json below for one place
        sidecar.write_bytes(files.config)
    if files.card is not None and not card.exists():  # the model-index's published cells, beside the weights
        card.write_bytes(files.card)
    repo_dir = weights.parent
    # timm's pretrained_cfg (for from_repo) and the published cells, where a local audit looks for them
    if files.config is not None and not (repo_dir / CONFIG_NAME).exists():
        (repo_dir / CONFIG_NAME).write_bytes(files.config)
    _fetch_repo_files(client, task, repo_spec, repo_dir)
    # a retrain reference published as a sibling repo: downloaded at a pinned commit, its local copy named in the spec
    repo_spec = fetch_reference(client, repo_spec, repo_id=task.repo_id, weights=weights, folder=folder)
    result = audit_checkpoint(weights, repo_spec, data=_audit_data(repo_spec, task, repo_dir), device=task.device)
    subject = result.annotation.subject.model_copy(update={"filename": filename, "repo": task.repo_id,
                                                           "revision": task.revision})
    annotation = result.annotation.model_copy(update={"subject": subject})
    warnings = [*(f"architecture passed over: {note}" for note in passed_over), *result.warnings]
    result = result.model_copy(update={"annotation": annotation, "weights_path": f"{task.repo_id}/{filename}",
                                       "checkpoint": _name(task.repo_id, filename), "warnings": warnings})
    digest = canonical_sha256(to_dict(annotation))
    origins = cell_origins(files.card_metadata(), repo_spec.model_index_metrics)
    return FileAudit(filename=filename, status="audited", factory=result.factory, architecture_source=source,
                     rules=rules, published_origins=origins or None, annotation_sha256=digest,
                     annotation_path=annotation_filename(digest), result=result)


def _name(repo_id: str, filename: str) -> str:
    return repo_id if filename in ("model.safetensors", f"model{INDEX_SUFFIX}") else f"{repo_id}:{filename}"


def audit_repo_task(task: AuditTask) -> str:
    """Audit one repo (every file of ``task.filenames``); returns a :class:`RepoAudit` as JSON. Never raises for a
    repo's own problems: they are returned as ``failed`` files, transient Hub failures marked for a retry."""
    for target in task.allowed_factories:
        allow_user_factory(target)
    client = make_client(endpoint=task.endpoint, token=task_token(task), retry=task.retry, timeout_s=task.timeout_s)
    spec = parse_spec(task.spec)
    files: list[FileAudit] = []
    transient = False
    with tempfile.TemporaryDirectory(prefix="bnc-hub-audit-", dir=task.work_dir) as tmp, \
            _torch_threads(task.threads), quiet_hub_progress():
        reading = CONFIG_NAME
        try:
            config_bytes = client.read_small_file(task.repo_id, CONFIG_NAME, revision=task.revision,
                                                  max_bytes=MAX_CONFIG_BYTES)
            reading = CARD_NAME
            card_bytes = client.read_small_file(task.repo_id, CARD_NAME, revision=task.revision,
                                                max_bytes=MAX_CARD_BYTES)
        except Exception as exc:  # noqa: BLE001 - recorded for every file of the repo
            transient = is_retryable(exc)
            reason = client.scrub(describe(exc))
            files += [FileAudit(filename=name, status="failed", reason=f"reading {task.repo_id}/{reading}: {reason}")
                      for name in task.filenames]
        else:
            shared = RepoFiles(config=config_bytes, card=card_bytes)
            for index, filename in enumerate(task.filenames):
                folder = Path(tmp) / str(index)
                folder.mkdir()
                try:
                    files.append(_audit_file(client, task, spec, shared, filename, folder))
                except Exception as exc:  # noqa: BLE001 - one file's failure is its result; the crawl goes on
                    transient = transient or is_retryable(exc)
                    text = describe(exc) if not isinstance(exc, BnConventionError) else one_line(exc)
                    text = relabel_reason(text, folder=folder, repo_id=task.repo_id, filename=filename)
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
    "for_workers",
    "spec_for_repo",
]
