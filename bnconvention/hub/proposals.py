"""What was already pushed to a repo: our pull requests (by the markers their descriptions carry) and the
annotations ``main`` holds. :mod:`bnconvention.hub_audit.push` asks both before opening a pull request, and again before
retrying a failed attempt, so a rerun never proposes the same annotation twice.
"""

from __future__ import annotations

import json
import re
from typing import Any

from huggingface_hub.hf_api import RepoFile

from bnconvention.errors import BnConventionError
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.hub.client import HubClient
from bnconvention.hub.retry import call_with_retry, is_retryable
from bnconvention.standard.locations import ANNOTATION_DIR
from bnconvention.standard.models import RefitAnnotation, to_dict

MARKER = "bnconvention:refit-annotation"
_MARKER_RE = re.compile(r"<!-- bnconvention:refit-annotation sha256=([0-9a-f]{64}) -->")
MAX_ANNOTATION_BYTES = 4 * 1024 * 1024


def marker(sha256: str) -> str:
    return f"<!-- {MARKER} sha256={sha256} -->"


def markers_in(text: str) -> set[str]:
    """The annotation digests a pull request description carries."""
    return set(_MARKER_RE.findall(text or ""))


def our_pull_requests(client: HubClient, repo_id: str, *, user: str) -> list[tuple[int, str, set[str]]]:
    """Our pull requests of a repo (any status): ``(num, status, annotation digests its description carries)``."""
    def search() -> list[tuple[int, str, set[str]]]:
        # every pull request of ours is checked (a maintainer may have renamed it); there are few per repo
        found = []
        for discussion in client.api.get_repo_discussions(repo_id, author=user, discussion_type="pull_request",
                                                          discussion_status="all"):
            details = client.api.get_discussion_details(repo_id, discussion.num)
            first = next((e for e in details.events if e.type == "comment"), None)
            if first is not None:
                found.append((discussion.num, discussion.status, markers_in(getattr(first, "content", ""))))
        return found

    return call_with_retry(search, policy=client.retry, what=f"search pull requests of {repo_id}")


def find_pull_request(client: HubClient, repo_id: str, annotations: list[str], *, user: str) -> tuple[int, str] | None:
    """Our pull request (any status) whose description carries a marker for every annotation: ``(num, status)``."""
    wanted = set(annotations)
    return next(((num, status) for num, status, carried in our_pull_requests(client, repo_id, user=user)
                 if wanted <= carried), None)


def comparable(annotation: Any) -> str:
    """An annotation's digest without the audited commit: the same weights and results at a later commit (after
    our own pull request was merged, say) count as the same annotation."""
    data = json.loads(json.dumps(annotation))
    if isinstance(data, dict) and isinstance(data.get("subject"), dict):
        data["subject"].pop("revision", None)
    return canonical_sha256(data)


def already_on_main(client: HubClient, repo_id: str, annotations: list[RefitAnnotation]) -> bool:
    """Whether ``main`` already holds every annotation, possibly recorded at an earlier commit of the same weights
    (a merged pull request of ours, or the authors' own commit)."""
    found = annotations_on_main(client, repo_id)
    return all(comparable(to_dict(a)) in found for a in annotations)


def annotations_on_main(client: HubClient, repo_id: str) -> set[str]:
    """The annotations ``main`` holds, each as its digest without the audited commit (:func:`_comparable`).

    One rule for every other file under ``bnconvention/``: one that is not an annotation we could have written
    (over :data:`MAX_ANNOTATION_BYTES`, which the tree listing says without downloading it, or not strict JSON) is
    someone else's, not ours to judge here, and is passed over."""
    def present() -> set[str]:
        entries = client.api.list_repo_tree(repo_id, revision="main", recursive=True)
        names = [e.path for e in entries if isinstance(e, RepoFile) and _candidate(e.path, e.size)]
        found = set()
        for name in names:
            try:
                data = client.read_small_file(repo_id, name, revision="main", max_bytes=MAX_ANNOTATION_BYTES)
                if data is not None:
                    found.add(comparable(loads_strict(data, source=f"{repo_id}/{name}")))
            except BnConventionError as exc:
                if is_retryable(exc):
                    raise
                continue  # grew past the bound since the listing, or malformed: not ours either way
        return found

    return call_with_retry(present, policy=client.retry, what=f"look for annotations on {repo_id} main")


def _candidate(path: str, size: int | None) -> bool:
    """A file that may be one of our annotations: ``bnconvention/<name>.json`` within the size bound."""
    return (path.startswith(f"{ANNOTATION_DIR}/") and path.endswith(".json") and path.count("/") == 1
            and (size is None or size <= MAX_ANNOTATION_BYTES))


__all__ = ["MARKER", "MAX_ANNOTATION_BYTES", "already_on_main", "annotations_on_main", "comparable",
           "find_pull_request", "marker", "markers_in", "our_pull_requests"]
