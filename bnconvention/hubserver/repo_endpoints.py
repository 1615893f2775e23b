"""Read endpoints: listing repos, repo info, tree, paths-info, file HEAD/GET with ranges, refs, commits, whoami;
plus branch and tag creation (they only move refs)."""

from __future__ import annotations

import mimetypes
from urllib.parse import parse_qs

from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.handlers import (
    HubContext,
    HubRequest,
    HubResponse,
    json_response,
    readable_state,
    require_user,
    require_write,
    resolved_commit,
)
from bnconvention.hubserver.payloads import (
    FULL_FIELDS,
    INFO_FIELDS,
    LIST_FIELDS,
    check_expand,
    commit_payload,
    repo_payload,
    tree_entry,
)
from bnconvention.hubserver.records import RepoState
from bnconvention.hubserver.repos import Commit
from bnconvention.hubserver.trees import is_folder, list_folder
from bnconvention.hubserver.validation import bad_request, check_file_path, check_ref_name
from bnconvention.hubserver.wire import parse_range

SORT_KEYS = ("lastModified", "createdAt", "downloads", "likes", "trendingScore", "id")


def whoami(context: HubContext, request: HubRequest) -> HubResponse:
    user = require_user(request)
    return json_response({
        "type": "user", "id": user, "name": user, "fullname": user, "isPro": False, "canPay": False,
        "orgs": [{"type": "org", "name": org, "fullname": org} for org in context.access.orgs_of(user)],
        "auth": {"type": "access_token", "accessToken": {"displayName": "local-hub-token", "role": "write"}},
    })


def list_repos(context: HubContext, request: HubRequest) -> HubResponse:
    repo_type = request.repo_type
    expand = check_expand(repo_type, request.params("expand"))
    if expand and (request.flag("full") or request.flag("cardData") or request.flag("config")):
        raise bad_request("expand cannot be combined with full, cardData or config")
    sort = request.param("sort")
    if sort is not None and sort not in SORT_KEYS:
        raise bad_request(f"sort={sort!r} is not one of {', '.join(SORT_KEYS)}")
    limit = request.int_param("limit", context.page_size, minimum=1)
    offset = request.int_param("cursor", 0)
    author = request.param("author")
    search = (request.param("search") or "").lower()
    filters = request.params("filter")

    chosen: list[tuple[RepoState, Commit]] = []
    for state in context.store.list_repo_states(repo_type):
        namespace = state["id"].split("/")[0]
        if author is not None and namespace.lower() != author.lower():
            continue
        if search and search not in state["id"].lower():
            continue
        if state["private"] and not context.access.can_write(request.user, namespace):
            continue
        commit = context.store.get_commit(state["id"], state["branches"]["main"], repo_type=repo_type)
        if filters:
            tags = repo_payload(context, state, commit, fields=["tags"]).get("tags")
            if not set(filters) <= set(tags if isinstance(tags, list) else []):
                continue
        chosen.append((state, commit))
    if sort and sort != "id":
        def key(item: tuple[RepoState, Commit]) -> str:
            return item[1].date if sort == "lastModified" else item[0]["createdAt"] if sort == "createdAt" else ""
        chosen.sort(key=key, reverse=True)  # stable: equal keys keep id order

    if expand:
        fields: list[str] = list(expand)
    else:
        fields = list(FULL_FIELDS if request.flag("full") else LIST_FIELDS)
        if request.flag("cardData"):
            fields.append("cardData")
    page_size = min(limit, context.page_size)
    page = chosen[offset:offset + page_size]
    body = [repo_payload(context, state, commit, fields=fields) for state, commit in page]
    headers = {}
    if offset + page_size < len(chosen):
        headers["Link"] = request.next_link(cursor=offset + page_size)
    return json_response(body, headers=headers)


def repo_info(context: HubContext, request: HubRequest) -> HubResponse:
    state = readable_state(context, request)
    commit = resolved_commit(context, request)
    fields = check_expand(request.repo_type, request.params("expand")) or list(INFO_FIELDS)
    return json_response(repo_payload(context, state, commit, fields=fields, blobs=request.flag("blobs")))


def tree(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    route_path = request.route.path if request.route else None
    folder = check_file_path(route_path) if route_path else ""
    commit = resolved_commit(context, request)
    if folder in commit.tree:
        raise HubRequestError(f"{folder!r} is a file, not a folder; list its parent folder", status=404,
                              code="EntryNotFound", repo_id=request.repo_id, headers={"X-Repo-Commit": commit.id})
    try:
        entries = list_folder(commit.tree, folder, recursive=request.flag("recursive"))
    except HubRequestError as exc:
        exc.headers["X-Repo-Commit"] = commit.id
        raise
    offset = request.int_param("cursor", 0)
    page = entries[offset:offset + context.tree_page_size]
    headers = {"X-Repo-Commit": commit.id}
    if offset + context.tree_page_size < len(entries):
        headers["Link"] = request.next_link(cursor=offset + context.tree_page_size)
    return json_response([tree_entry(commit.tree, kind, path) for kind, path in page], headers=headers)


def paths_info(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    content_type = request.headers.get("Content-Type", "")
    paths: JsonValue | list[str]
    if "json" in content_type:
        paths = request.json_body().get("paths", [])
    else:
        try:
            form = parse_qs(request.body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(request.body))
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad_request(f"paths-info body is not a form (paths=...&paths=...): {exc}") from exc
        paths = form.get("paths", [])
    if not isinstance(paths, list):
        raise bad_request("paths must be a list of repo paths")
    commit = resolved_commit(context, request)
    out = []
    for path in dict.fromkeys(paths):
        path = check_file_path(path, field="paths[]")
        if path in commit.tree:
            out.append(tree_entry(commit.tree, "file", path))
        elif is_folder(commit.tree, path):
            out.append(tree_entry(commit.tree, "directory", path))
    return json_response(out, headers={"X-Repo-Commit": commit.id})


def resolve_file(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    path = check_file_path(request.route.path if request.route else None)
    commit = resolved_commit(context, request)
    entry = commit.tree.get(path)
    if entry is None:
        raise HubRequestError(f"Entry Not Found: {path!r} does not exist at revision {request.revision!r} of "
                              f"{request.repo_id}", status=404, code="EntryNotFound", repo_id=request.repo_id,
                              headers={"X-Repo-Commit": commit.id})
    headers = {"X-Repo-Commit": commit.id, "ETag": f'"{entry.oid}"', "Accept-Ranges": "bytes",
               "Content-Type": mimetypes.guess_type(path)[0] or "application/octet-stream"}
    if entry.lfs:  # as on the Hub: the client names its cache blob after the content's sha256
        headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
    span = parse_range(request.headers.get("Range"), size=entry.size)
    blob = context.store.blob_path(entry.sha256)
    if span is None:
        return HubResponse(status=200, headers=headers, file=blob, file_offset=0, file_length=entry.size)
    start, end = span
    headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
    return HubResponse(status=206, headers=headers, file=blob, file_offset=start, file_length=end - start + 1)


def refs(context: HubContext, request: HubRequest) -> HubResponse:
    state = readable_state(context, request)
    branches = sorted(state["branches"].items(), key=lambda item: (item[0] != "main", item[0]))
    body: JsonObject = {
        "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": oid} for n, oid in branches],
        "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": t["oid"]}
                 for n, t in sorted(state["tags"].items())],
        "converts": [],
    }
    if request.flag("include_prs"):
        body["pullRequests"] = [
            {"name": f"refs/pr/{d['num']}", "ref": f"refs/pr/{d['num']}", "targetCommit": d["pr"]["head"]}
            for d in sorted(state["discussions"], key=lambda d: d["num"]) if "pr" in d]
    return json_response(body)


def commits(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    history = context.store.history(request.repo_id, request.revision, repo_type=request.repo_type)
    page_index = request.int_param("p", 0)
    size = context.commits_page_size
    page = history[page_index * size:(page_index + 1) * size]
    formatted = "formatted" in request.params("expand[]") + request.params("expand")
    headers = {}
    if (page_index + 1) * size < len(history):
        headers["Link"] = request.next_link(p=page_index + 1)
    return json_response([commit_payload(c, formatted=formatted) for c in page], headers=headers)


def create_branch(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    require_write(context, request)
    body = request.json_body(optional=True)
    starting_point = body.get("startingPoint")
    if starting_point is not None and not isinstance(starting_point, str):
        raise bad_request("startingPoint must be a revision string")
    branch = request.route.path if request.route else None
    context.store.create_branch(request.repo_id, branch or "", revision=starting_point,
                                repo_type=request.repo_type)
    return json_response({})


def create_tag(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    require_write(context, request)
    body = request.json_body()
    message = body.get("message", "")
    if not isinstance(message, str):
        raise bad_request("message must be a string")
    tag = check_ref_name(body.get("tag"), what="tag")
    context.store.create_tag(request.repo_id, tag, revision=request.revision, message=message,
                             repo_type=request.repo_type)
    return json_response({})


ENDPOINTS = {
    "whoami": whoami, "list_repos": list_repos, "repo_info": repo_info, "tree": tree, "paths_info": paths_info,
    "resolve": resolve_file, "refs": refs, "commits": commits, "create_branch": create_branch,
    "create_tag": create_tag,
}
