"""Discussion and pull-request endpoints: list (filters, pages), details with events, create, comment, status,
title, merge. Anyone signed in may open and comment; the author or the namespace's writers may change the status or
title; only writers merge."""

from __future__ import annotations

from bnconvention.formats.json_types import JsonObject
from bnconvention.hubserver.auth import forbidden
from bnconvention.hubserver.handlers import (
    HubContext,
    HubRequest,
    HubResponse,
    json_response,
    readable_state,
    require_user,
)
from bnconvention.hubserver.payloads import discussion_details, discussion_summary, event_payload
from bnconvention.hubserver.validation import bad_request

TYPE_FILTERS = ("all", "discussion", "pull_request")
STATUS_FILTERS = {"all": None, "open": ("open", "draft"), "closed": ("closed", "merged")}


def list_discussions(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    kind = request.param("type") or "all"
    status = request.param("status") or "all"
    author = request.param("author")
    if kind not in TYPE_FILTERS:
        raise bad_request(f"type={kind!r} is not one of {', '.join(TYPE_FILTERS)}")
    if status not in STATUS_FILTERS:
        raise bad_request(f"status={status!r} is not one of {', '.join(STATUS_FILTERS)}")
    statuses = STATUS_FILTERS[status]
    chosen = [d for d in context.store.list_discussions(request.repo_id, repo_type=request.repo_type)
              if (kind == "all" or d["isPullRequest"] == (kind == "pull_request"))
              and (statuses is None or d["status"] in statuses)
              and (author is None or d["author"] == author)]
    page = request.int_param("p", 0)
    size = context.discussions_page_size
    start = page * size
    return json_response({
        "discussions": [discussion_summary(d, repo_id=request.repo_id, repo_type=request.repo_type)
                        for d in chosen[start:start + size]],
        "count": len(chosen), "start": start,
        "numClosedDiscussions": sum(1 for d in chosen if d["status"] in ("closed", "merged")),
    })


def get_discussion(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    num = _num(request)
    discussion = context.store.get_discussion(request.repo_id, num, repo_type=request.repo_type)
    return json_response(discussion_details(context, discussion, repo_id=request.repo_id,
                                            repo_type=request.repo_type, with_diff=request.flag("diff")))


def create_discussion(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    user = require_user(request)
    body = request.json_body()
    description = body.get("description") or ""
    pull_request = body.get("pullRequest", False)
    if not isinstance(description, str) or not isinstance(pull_request, bool):
        raise bad_request("description must be a string and pullRequest a boolean")
    num = context.store.create_discussion(request.repo_id, title=body.get("title"),
                                          description=description, author=user, pull_request=pull_request,
                                          repo_type=request.repo_type)
    return json_response({"num": num, "pullRequest": pull_request,
                          "url": {"web": f"{request.base_url}/{request.repo_id}/discussions/{num}"}})


def _num(request: HubRequest) -> int:
    if request.route is None or request.route.num is None:
        raise bad_request("a discussion number is missing from the path")
    return request.route.num


def _check_owner_or_author(context: HubContext, request: HubRequest, user: str, *, what: str) -> None:
    discussion = context.store.get_discussion(request.repo_id, _num(request), repo_type=request.repo_type)
    if discussion["author"] != user and not context.access.can_write(user, request.repo_id.split("/")[0]):
        raise forbidden(f"{user} cannot {what} #{discussion['num']}: only its author and the repo's owners can",
                        repo_id=request.repo_id)


def discussion_action(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    user = require_user(request)
    num = _num(request)
    action = request.route.action if request.route else None
    body: JsonObject = request.json_body(optional=True)
    store, repo_id, repo_type = context.store, request.repo_id, request.repo_type
    if action == "comment":
        event = store.comment_discussion(repo_id, num, comment=body.get("comment"),
                                         author=user, repo_type=repo_type)
        return json_response({"newMessage": event_payload(event)})
    if action == "status":
        _check_owner_or_author(context, request, user, what="change the status of")
        comment = body.get("comment")
        event = store.change_discussion_status(repo_id, num, status=body.get("status"),
                                               author=user, comment=None if comment is None else str(comment),
                                               repo_type=repo_type)
        return json_response({"newStatus": event_payload(event)})
    if action == "title":
        _check_owner_or_author(context, request, user, what="rename")
        event = store.rename_discussion(repo_id, num, title=body.get("title"),
                                        author=user, repo_type=repo_type)
        return json_response({"newTitle": event_payload(event)})
    if not context.access.can_write(user, repo_id.split("/")[0]):
        raise forbidden(f"{user} cannot merge pull requests of {repo_id}: only its owners can", repo_id=repo_id)
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise bad_request("comment must be a string")
    merged = store.merge_pull_request(repo_id, num, author=user, comment=comment, repo_type=repo_type)
    return json_response({"status": "merged", "mergeCommitId": merged})


ENDPOINTS = {"list_discussions": list_discussions, "discussion": get_discussion,
             "create_discussion": create_discussion, "discussion_action": discussion_action}
