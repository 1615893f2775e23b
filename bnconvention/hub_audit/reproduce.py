"""Reproduce the annotations of a Hub pull request (``bnconvention hub reproduce ORG/NAME --pr N``).

The stages of :mod:`bnconvention.audit.run.reproduce`, with the Hub as the source:

1. **read** (:func:`pull_request_annotations`): the annotations the pull request adds (``bnconvention/refit-<sha>.json``
   at ``refs/pr/N``, the ones its description's markers name, as ``hub push`` writes them; every such file when the
   description names none), and the spec checked against each.
2. **fetch and re-run** (:func:`rerun_on_hub`): the repo's audit task of ``hub audit``
   (:func:`bnconvention.hub_audit.audit_task.audit_repo_task`), unchanged, at the commit the annotation records
   (``subject.revision``), the weights downloaded there, a Hub dataset read at the annotated revision. A revision that
   no longer exists (the weights' or the Hub dataset's), a file that is gone, a failed re-run:
   :class:`~bnconvention.errors.ReproductionInputError` naming it. The re-run's digests must be the annotation's
   subject's.
3. **compare**: :func:`bnconvention.audit.run.reproduce.reproduction`, the one rule.
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from huggingface_hub.errors import HfHubHTTPError

from bnconvention.audit.core import AuditResult
from bnconvention.audit.run import (
    MAX_ANNOTATION_BYTES,
    TOLERANCE,
    Reproduction,
    check_spec,
    digest_differences,
    parse_annotation,
    pinned_spec,
    reproduction,
    subject_name,
)
from bnconvention.audit.spec import AuditSpec
from bnconvention.errors import ReproductionInputError
from bnconvention.hub.client import HubClient
from bnconvention.hub.proposals import markers_in
from bnconvention.hub.retry import call_with_retry, describe
from bnconvention.hub_audit.audit_task import AuditTask, audit_repo_task
from bnconvention.hub_audit.entries import RepoAudit
from bnconvention.refitting.devices import Device
from bnconvention.standard.locations import ANNOTATION_DIR, annotation_filename
from bnconvention.standard.models import RefitAnnotation


def pull_request_annotations(client: HubClient, repo_id: str, pr: int) -> list[tuple[str, RefitAnnotation]]:
    """``(path, annotation)`` of each annotation pull request ``pr`` of ``repo_id`` adds, in path order."""
    revision = f"refs/pr/{pr}"
    try:
        details = call_with_retry(lambda: client.api.get_discussion_details(repo_id, pr), policy=client.retry,
                                  what=f"read pull request #{pr} of {repo_id}")
        files = call_with_retry(lambda: client.api.list_repo_files(repo_id, revision=revision), policy=client.retry,
                                what=f"list {repo_id}@{revision}")
    except HfHubHTTPError as exc:
        raise ReproductionInputError(f"pull request #{pr} of {repo_id} cannot be read: {client.scrub(describe(exc))}",
                                     missing=f"{repo_id}@{revision}") from exc
    first = next((e for e in details.events if e.type == "comment"), None)
    named = {annotation_filename(sha) for sha in markers_in(getattr(first, "content", "") or "")}
    paths = sorted(p for p in files if PurePosixPath(p).parent == PurePosixPath(ANNOTATION_DIR)
                   and PurePosixPath(p).name.startswith("refit-") and p.endswith(".json") and (not named or p in named))
    if not paths:
        raise ReproductionInputError(f"pull request #{pr} of {repo_id} adds no refit annotation "
                                     f"({ANNOTATION_DIR}/refit-*.json)", missing=f"{repo_id}@{revision}")
    found = []
    for path in paths:
        data = client.read_small_file(repo_id, path, revision=revision, max_bytes=MAX_ANNOTATION_BYTES)
        if data is None:
            raise ReproductionInputError(f"{repo_id}@{revision}: {path} cannot be read", missing=path)
        found.append((path, parse_annotation(data, source=f"{repo_id}@{revision}:{path}")))
    return found


def check_revision(client: HubClient, repo_id: str, revision: str) -> None:
    """Refuse an annotated commit that is no longer on the Hub (history rewritten, repo deleted)."""
    try:
        call_with_retry(lambda: client.api.model_info(repo_id, revision=revision), policy=client.retry,
                        what=f"read {repo_id}@{revision}")
    except HfHubHTTPError as exc:
        raise ReproductionInputError(f"the annotated weights {repo_id}@{revision} are unavailable: "
                                     f"{client.scrub(describe(exc))}", missing=f"{repo_id}@{revision}") from exc


def check_dataset_revision(client: HubClient, spec: AuditSpec) -> None:
    """Refuse a Hub dataset whose annotated revision is no longer on the Hub (history squashed, branch or tag
    deleted), before the re-run: the audit task reuses a dataset it already decoded in this process."""
    dataset = spec.dataset
    if dataset.kind != "hub" or dataset.repo is None or dataset.revision is None:
        return
    repo, revision = str(dataset.repo), str(dataset.revision)
    try:
        call_with_retry(lambda: client.api.dataset_info(repo, revision=revision), policy=client.retry,
                        what=f"read dataset {repo}@{revision}")
    except HfHubHTTPError as exc:
        raise ReproductionInputError(f"the annotated dataset {repo}@{revision} is unavailable: "
                                     f"{client.scrub(describe(exc))}", missing=f"{repo}@{revision}") from exc


def rerun_on_hub(client: HubClient, annotation: RefitAnnotation, spec: AuditSpec, *, repo_id: str,
                 allowed_factories: tuple[str, ...] = (), device: Device = "cpu") -> AuditResult:
    """The annotated file's audit, re-run by ``hub audit``'s own task at the annotated commit."""
    subject = annotation.subject
    if subject.repo not in (None, repo_id):
        raise ReproductionInputError(f"the annotation audited {subject.repo}, not {repo_id}", missing=subject.repo)
    if subject.revision is None:
        raise ReproductionInputError(f"the annotation of {subject.filename} names no revision: the weights it "
                                     "audited cannot be fetched", missing=f"{repo_id}/{subject.filename}")
    check_revision(client, repo_id, subject.revision)
    check_dataset_revision(client, spec)
    task = AuditTask(endpoint=client.endpoint, token=client.token, repo_id=repo_id, revision=subject.revision,
                     filenames=(subject.filename,), spec=spec.model_dump(mode="json"),
                     allowed_factories=allowed_factories, retry=client.retry, timeout_s=client.timeout_s,
                     device=device)
    (audited,) = RepoAudit.model_validate_json(audit_repo_task(task)).files
    if audited.result is None:
        raise ReproductionInputError(f"re-running the audit of {subject_name(annotation)} failed: {audited.reason}",
                                     missing=subject_name(annotation))
    digests = audited.result.annotation.subject
    found = digest_differences(annotation, trainable_sha256=digests.trainable_sha256,
                               running_sha256=digests.running_sha256)
    if found:
        raise ReproductionInputError(f"the weights at {subject_name(annotation)} are not the annotated tensors: "
                                     f"{'; '.join(found)}", missing=subject_name(annotation))
    return audited.result


def reproduce_pull_request(client: HubClient, repo_id: str, pr: int, spec: AuditSpec, *, spec_source: str,
                           tolerance: float = TOLERANCE, allowed_factories: tuple[str, ...] = (),
                           device: Device = "cpu") -> list[Reproduction]:
    """Read → fetch → re-run → compare, for each annotation of pull request ``pr`` of ``repo_id``."""
    results = []
    for path, annotation in pull_request_annotations(client, repo_id, pr):
        start = time.perf_counter()
        check_spec(annotation, spec, source=spec_source)
        result = rerun_on_hub(client, annotation, pinned_spec(annotation, spec), repo_id=repo_id,
                              allowed_factories=allowed_factories, device=device)
        results.append(reproduction(annotation, result, source=f"{repo_id}@refs/pr/{pr}:{path}", tolerance=tolerance,
                                    start=start))
    return results


__all__ = ["check_dataset_revision", "check_revision", "pull_request_annotations", "reproduce_pull_request",
           "rerun_on_hub"]
