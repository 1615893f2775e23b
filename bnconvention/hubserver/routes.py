"""Map a raw request path to an endpoint of the Hub API.

The path is split on ``/`` *before* percent-decoding, as the Hub does: a revision ``refs%2Fpr%2F1`` is one segment,
and a tree sub-path quoted with ``safe=""`` is one segment too. Repo ids are checked here, so ``..`` or other
traversal attempts are refused (400) before anything reads the store.

>>> match_route("GET", "/api/models/org/m/revision/refs%2Fpr%2F1")
Route(endpoint='repo_info', repo_type='model', repo_id='org/m', revision='refs/pr/1', path=None, num=None, action=None)
>>> match_route("HEAD", "/datasets/org/d/resolve/main/data/train.csv").path
'data/train.csv'
>>> route = match_route("POST", "/datasets/org/d.git/info/lfs/objects/batch")
>>> route.endpoint, route.repo_type, route.repo_id
('lfs_batch', 'dataset', 'org/d')
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.validation import API_PLURAL, RepoType, bad_request, check_repo_id

DISCUSSION_ACTIONS = ("comment", "status", "title", "merge")
LFS_ACTIONS = ("batch", "verify")
XET_TOKENS = ("xet-write-token", "xet-read-token")


@dataclass(frozen=True)
class Route:
    """An endpoint and the parts of the path it needs."""

    endpoint: str
    repo_type: RepoType | None = None
    repo_id: str | None = None
    revision: str | None = None
    path: str | None = None
    num: int | None = None
    action: str | None = None


def _not_found(raw_path: str) -> HubRequestError:
    return HubRequestError(f"Sorry, we can't find the page you are looking for: {raw_path}", status=404,
                           code="RouteNotFound")


def _method_not_allowed(method: str, raw_path: str, allowed: tuple[str, ...]) -> HubRequestError:
    return HubRequestError(f"{method} is not allowed on {raw_path}; use {' or '.join(allowed)}", status=405,
                           code="MethodNotAllowed", headers={"Allow": ", ".join(allowed)})


def _decode(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError as exc:
        raise bad_request(f"path segment {segment!r} is not percent-encoded UTF-8") from exc


def _split_revision(segments: list[str]) -> tuple[str, list[str]]:
    """The revision at the front of ``segments`` (one segment, or an unencoded ``refs/pr/N``) and the rest."""
    if not segments or not segments[0]:
        raise bad_request("a revision is missing from the path")
    if segments[0] == "refs" and len(segments) >= 3:
        return "/".join(segments[:3]), segments[3:]
    return segments[0], segments[1:]


def _join_path(segments: list[str]) -> str | None:
    joined = "/".join(segments)
    return joined or None


def _check(method: str, raw_path: str, allowed: tuple[str, ...], route: Route) -> Route:
    if method not in allowed:
        raise _method_not_allowed(method, raw_path, allowed)
    return route


def match_route(method: str, raw_path: str) -> Route:
    """The endpoint for ``method`` and ``raw_path`` (no query string); 404 ``RouteNotFound`` / 405 otherwise."""
    raw_segments = raw_path.split("/")[1:]
    if raw_segments and raw_segments[-1] == "":
        raw_segments.pop()
    segs = [_decode(s) for s in raw_segments]
    if segs[:1] == ["api"]:
        return _match_api(method, raw_path, segs[1:])
    repo_type: RepoType = "model"
    if segs and segs[0] in ("datasets", "spaces"):
        repo_type = API_PLURAL[segs[0]]
        segs = segs[1:]
    if len(segs) == 6 and segs[1].endswith(".git") and segs[2:5] == ["info", "lfs", "objects"] \
            and segs[5] in LFS_ACTIONS:
        repo_id = f"{segs[0]}/{segs[1].removesuffix('.git')}"
        check_repo_id(repo_id)
        return _check(method, raw_path, ("POST",), Route(f"lfs_{segs[5]}", repo_type, repo_id))
    if len(segs) >= 4 and segs[2] == "resolve":
        repo_id = f"{segs[0]}/{segs[1]}"
        check_repo_id(repo_id)
        revision, rest = _split_revision(segs[3:])
        path = _join_path(rest)
        if path is None:
            raise bad_request(f"{raw_path}: a file path is missing after the revision", repo_id=repo_id)
        return _check(method, raw_path, ("GET", "HEAD"),
                      Route("resolve", repo_type, repo_id, revision=revision, path=path))
    raise _not_found(raw_path)


def _match_api(method: str, raw_path: str, segs: list[str]) -> Route:
    if segs == ["whoami-v2"]:
        return _check(method, raw_path, ("GET",), Route("whoami"))
    if segs == ["validate-yaml"]:
        return _check(method, raw_path, ("POST",), Route("validate_yaml"))
    if segs == ["repos", "create"]:
        return _check(method, raw_path, ("POST",), Route("create_repo"))
    if len(segs) == 4 and segs[0] == "lfs-objects":  # a signed LFS upload URL (lfs_endpoints)
        return _check(method, raw_path, ("PUT",), Route("lfs_upload", path="/".join(segs[1:])))
    if not segs or segs[0] not in API_PLURAL:
        raise _not_found(raw_path)
    repo_type = API_PLURAL[segs[0]]
    if len(segs) == 1:
        return _check(method, raw_path, ("GET",), Route("list_repos", repo_type))
    if len(segs) < 3:
        raise _not_found(raw_path)
    repo_id = f"{segs[1]}/{segs[2]}"
    check_repo_id(repo_id)
    rest = segs[3:]
    if not rest:
        return _check(method, raw_path, ("GET",), Route("repo_info", repo_type, repo_id, revision="main"))
    head, tail = rest[0], rest[1:]
    if head == "revision" and tail:
        return _check(method, raw_path, ("GET",), Route("repo_info", repo_type, repo_id, revision="/".join(tail)))
    if head == "tree":
        revision, path_segments = _split_revision(tail)
        return _check(method, raw_path, ("GET",),
                      Route("tree", repo_type, repo_id, revision=revision, path=_join_path(path_segments)))
    if head in ("paths-info", "preupload", "commit") and tail:
        return _check(method, raw_path, ("POST",),
                      Route(head.replace("-", "_"), repo_type, repo_id, revision="/".join(tail)))
    if head in XET_TOKENS:
        return _check(method, raw_path, ("GET",), Route("xet_token", repo_type, repo_id))
    if head == "commits" and tail:
        return _check(method, raw_path, ("GET",), Route("commits", repo_type, repo_id, revision="/".join(tail)))
    if head == "refs" and not tail:
        return _check(method, raw_path, ("GET",), Route("refs", repo_type, repo_id))
    if head == "branch" and tail:
        return _check(method, raw_path, ("POST",), Route("create_branch", repo_type, repo_id, path="/".join(tail)))
    if head == "tag" and tail:
        return _check(method, raw_path, ("POST",), Route("create_tag", repo_type, repo_id, revision="/".join(tail)))
    if head == "discussions":
        if not tail:
            endpoint = "list_discussions" if method == "GET" else "create_discussion"
            return _check(method, raw_path, ("GET", "POST"), Route(endpoint, repo_type, repo_id))
        if not tail[0].isdigit() or len(tail[0]) > 9 or int(tail[0]) < 1:
            raise bad_request(f"discussion number {tail[0]!r} is not a positive integer", repo_id=repo_id)
        num = int(tail[0])
        if len(tail) == 1:
            return _check(method, raw_path, ("GET",), Route("discussion", repo_type, repo_id, num=num))
        if len(tail) == 2 and tail[1] in DISCUSSION_ACTIONS:
            return _check(method, raw_path, ("POST",),
                          Route("discussion_action", repo_type, repo_id, num=num, action=tail[1]))
    raise _not_found(raw_path)
