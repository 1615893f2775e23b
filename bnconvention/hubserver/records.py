"""The records the store keeps in a repo's ``repo.json``: the repo's state, its tags, discussions and their events.

They are typed dicts on purpose: ``repo.json`` is written with ``json.dumps(state, sort_keys=True)`` and read back
with ``json.loads``, every mutation works on a deep copy that is saved whole, and callers (tests included) read
``state["branches"]["main"]`` or ``discussion["status"]``; a typed dict names each field without changing that
format. The wire payloads built from them live in :mod:`bnconvention.hubserver.payloads`.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from bnconvention.formats.json_types import JsonObject
from bnconvention.hubserver.validation import RepoType

DiscussionStatus = Literal["open", "closed", "merged", "draft"]
EventType = Literal["comment", "commit", "status-change", "title-change"]


class TagRecord(TypedDict):
    """A tag: the commit it names and its message."""

    oid: str
    message: str


class PullRequestRecord(TypedDict):
    """The pull-request part of a discussion: its ``refs/pr/N`` head, the branch it merges into and the commit it
    started from, and the commit the branch pointed to once merged (``None`` until then)."""

    head: str
    baseBranch: str
    baseCommit: str
    mergeCommitId: str | None


class DiscussionEvent(TypedDict):
    """One event of a discussion. ``data`` is the event's Hub payload, whose shape depends on ``type``: a comment's
    ``{edited, hidden, numEdits, latest}``, a commit's ``{subject, oid}``, a status change's ``{status}``, a title
    change's ``{from, to}``, as the Hub's discussion details carry them."""

    id: str
    type: EventType
    createdAt: str
    author: str
    data: JsonObject


class DiscussionRecord(TypedDict):
    """A discussion or pull request (``pr`` only for pull requests); both share one numbering, as on the Hub."""

    num: int
    title: str
    status: DiscussionStatus
    isPullRequest: bool
    author: str
    createdAt: str
    events: list[DiscussionEvent]
    pr: NotRequired[PullRequestRecord]


class RepoState(TypedDict):
    """A repo's ``repo.json``: branches and tags by name, discussions in the order they were opened.
    ``discussions`` is left out of the summaries :meth:`~bnconvention.hubserver.storage.HubStore.list_repo_states`
    returns."""

    id: str
    type: RepoType
    private: bool
    createdAt: str
    branches: dict[str, str]
    tags: dict[str, TagRecord]
    discussions: NotRequired[list[DiscussionRecord]]


__all__ = ["DiscussionEvent", "DiscussionRecord", "DiscussionStatus", "EventType", "PullRequestRecord", "RepoState",
           "TagRecord"]
