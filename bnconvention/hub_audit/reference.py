"""The retrain reference of a Hub audit: a file of a sibling repo, downloaded before the repo's audit.

``hub audit`` downloads each repo alone into its own temporary folder, so a spec's ``diagnostics.reference.path``
(relative to the checkpoint's folder) never finds a retrain reference published as another repo. The Hub form
``reference: {repo: "{org}/{seed_stem}-retrain", filename: model.safetensors, revision: main}`` names it instead:
:func:`fetch_reference` fills in the placeholders from the audited repo's id, pins the reference's revision to the
commit it points to, reads and checks the file's safetensors header first (the census's bounded header read: a
file that is not safetensors, or is truncated, is refused before any download), downloads the one file through
``huggingface_hub`` at that commit, and returns the repo's spec with the reference's local copy as ``path`` and the
resolved ``repo``, ``filename`` and commit as ``revision`` (which the cells' reference arm records); the reference
repo's ``config.json`` and card go beside the copy, where the audit reads them for the audited repo too. A reference
repo, revision or file the Hub does not have is an :class:`~bnconvention.errors.AuditSpecError` naming it: that
repo's audit fails with it, the organisation's audit goes on.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

from bnconvention.architectures.resolve import CONFIG_NAME, MAX_CONFIG_BYTES
from bnconvention.audit.measure import card_path, sidecar_path
from bnconvention.audit.spec import AuditSpec, ReferenceSpec, reference_path
from bnconvention.errors import AuditSpecError
from bnconvention.formats.card import CARD_NAME, MAX_CARD_BYTES
from bnconvention.hub.client import HubClient
from bnconvention.hub.headers import read_single
from bnconvention.hub.retry import call_with_retry

FIELD = "/diagnostics/reference/repo"


def hub_reference(spec: AuditSpec) -> ReferenceSpec | None:
    """The spec's reference when it is the Hub form and a diagnostic uses it; else None."""
    diagnostics = spec.diagnostics
    if diagnostics is None or not diagnostics.any or diagnostics.reference is None:
        return None
    return diagnostics.reference if diagnostics.reference.on_hub else None


def resolve_reference(reference: ReferenceSpec, *, repo_id: str) -> tuple[str, str]:
    """The reference's repo id and filename for the audited repo ``repo_id`` (placeholders filled in)."""
    org, _, name = repo_id.rpartition("/")
    repo = reference_path(reference.repo or "", name=name, org=org or None, field="repo")
    filename = reference_path(reference.filename or "", name=name, field="filename")
    return repo, filename


def _missing(exc: Exception, *, what: str, repo_id: str) -> AuditSpecError:
    return AuditSpecError(f"the retrain reference of {repo_id}, {what}, is not on the Hub "
                          f"({type(exc).__name__}); the cells lp_forget and mia_auc compare with it: publish it or "
                          "fix diagnostics.reference", field=FIELD)


def _fetch_sidecars(client: HubClient, repo: str, *, revision: str, local: Path) -> None:
    """The reference repo's ``config.json`` and card, where the audit reads a checkpoint's architecture and
    published cells (its sidecar ``<stem>.json`` and ``README.md``): as for the audited repo's own weights."""
    for name, limit, target in ((CONFIG_NAME, MAX_CONFIG_BYTES, sidecar_path(local)),
                                (CARD_NAME, MAX_CARD_BYTES, card_path(local))):
        body = client.read_small_file(repo, name, revision=revision, max_bytes=limit)
        if body is not None and not target.exists():
            target.write_bytes(body)


def fetch_reference(client: HubClient, spec: AuditSpec, *, repo_id: str, weights: Path, folder: Path) -> AuditSpec:
    """``spec`` with its Hub reference downloaded into ``folder`` (see the module docstring); unchanged when the
    reference is a local path or there is none."""
    reference = hub_reference(spec)
    if reference is None or spec.diagnostics is None:
        return spec
    repo, filename = resolve_reference(reference, repo_id=repo_id)
    revision = reference.revision or "main"
    try:
        commit = client.resolve_commit(repo, revision=revision)
        header = read_single(client, repo, filename, revision=commit)
        local = Path(call_with_retry(
            lambda: client.api.hf_hub_download(repo, filename, revision=commit, local_dir=folder / "reference",
                                               cache_dir=folder / "cache"),
            policy=client.retry, what=f"download {repo}/{filename}"))
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise _missing(exc, what=f"repo {repo} at {revision}", repo_id=repo_id) from None
    except EntryNotFoundError as exc:
        raise _missing(exc, what=f"{repo}/{filename}", repo_id=repo_id) from None
    _fetch_sidecars(client, repo, revision=commit, local=local)
    if local.stat().st_size != header.total_size:
        raise AuditSpecError(f"{repo}/{filename} at {commit}: the download has {local.stat().st_size} bytes, its "
                             f"header read {header.total_size}; the file changed or the transfer was cut",
                             field=FIELD)
    resolved = reference.model_copy(update={
        "path": Path(os.path.relpath(local.resolve(), weights.parent.resolve())).as_posix(), "repo": repo,
        "filename": filename, "revision": commit})
    return spec.model_copy(update={"diagnostics": spec.diagnostics.model_copy(update={"reference": resolved})})


__all__ = ["fetch_reference", "hub_reference", "resolve_reference"]
