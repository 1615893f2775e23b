"""Discussions and pull requests of the store: events, status changes, ``refs/pr/N`` heads, merges.

A discussion lives in its repo's ``repo.json`` as::

    {"num", "title", "status": "open|closed|merged|draft", "isPullRequest", "author", "createdAt", "events": [...],
     "pr": {"head", "baseBranch", "baseCommit", "mergeCommitId"}}      # "pr" only for pull requests

Discussions and pull requests share one numbering, as on the Hub. A pull request opened through the discussions
endpoint starts as ``draft`` (what the Hub does for programmatic PRs) and becomes ``open`` with its first commit;
``create_pr`` commits open it directly. Merging fast-forwards the base branch to the PR head when the branch has not
moved, and otherwise writes a merge commit (file-level three-way merge; conflicting files refuse with 409).

:class:`DiscussionStore` works on the same :class:`~bnconvention.hubserver.repos.RepoDatabase` as the
:class:`~bnconvention.hubserver.storage.HubStore` that holds it; the store forwards its discussion methods here, and
its ``commit`` calls the pull-request helpers on the state copy it is about to save.
"""

from __future__ import annotations

import copy
import html

from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.records import DiscussionEvent, DiscussionRecord, DiscussionStatus, EventType, RepoState
from bnconvention.hubserver.repos import Commit, RepoDatabase, RepoKey, find_discussion, repo_key
from bnconvention.hubserver.trees import Tree, check_tree, three_way_merge
from bnconvention.hubserver.validation import bad_request
from bnconvention.hubserver.wire import format_date, sha1_hex

MIN_TITLE, MAX_TITLE = 3, 200
OPEN_STATUSES = ("open", "draft")


def _not_found(repo_id: str, num: int) -> HubRequestError:
    return HubRequestError(f"Discussion #{num} does not exist in {repo_id}; list them with get_repo_discussions",
                           status=404, code="DiscussionNotFound", repo_id=repo_id)


def _check_title(title: object) -> str:
    if not isinstance(title, str) or not MIN_TITLE <= len(title.strip()) <= MAX_TITLE:
        raise bad_request(f"title must be a string of {MIN_TITLE} to {MAX_TITLE} characters (found {title!r})")
    return title.strip()


def _check_text(text: object, *, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise bad_request(f"{what} must be a non-empty string (found {text!r})")
    return text


def _discussion(state: RepoState, num: int) -> DiscussionRecord:
    discussion = find_discussion(state, num) if isinstance(num, int) else None
    if discussion is None:
        raise _not_found(state["id"], num)
    return discussion


def _pr_number(ref: str) -> int:
    return int(ref.rsplit("/", 1)[1])


class DiscussionStore:
    """Discussions and pull requests of the repos in ``db`` (its lock serialises every change)."""

    def __init__(self, db: RepoDatabase) -> None:
        self._db = db

    # --- events ----------------------------------------------------------------------------------------------------

    def _event(self, key: RepoKey, discussion: DiscussionRecord, kind: EventType, author: str,
               data: JsonObject) -> DiscussionEvent:
        index = len(discussion["events"])
        event: DiscussionEvent = {
            "id": sha1_hex(f"{key[0]}/{key[1]}#{discussion['num']}/{index}".encode())[:24], "type": kind,
            "createdAt": format_date(self._db.clock()), "author": author, "data": data}
        discussion["events"].append(event)
        return event

    def _comment_event(self, key: RepoKey, discussion: DiscussionRecord, author: str,
                       text: str) -> DiscussionEvent:
        now = format_date(self._db.clock())
        return self._event(key, discussion, "comment", author, {
            "edited": False, "hidden": False, "numEdits": 0,
            "latest": {"raw": text, "html": f"<p>{html.escape(text)}</p>", "updatedAt": now, "author": author},
        })

    def _new_discussion(self, state: RepoState, *, title: str, author: str, pull_request: bool,
                        status: DiscussionStatus) -> DiscussionRecord:
        num = max((d["num"] for d in state["discussions"]), default=0) + 1
        discussion: DiscussionRecord = {"num": num, "title": title, "status": status, "isPullRequest": pull_request,
                                        "author": author, "createdAt": format_date(self._db.clock()), "events": []}
        state["discussions"].append(discussion)
        return discussion

    # --- used by HubStore.commit, inside the lock, on the state copy it is about to save ----------------------------

    @staticmethod
    def check_pr_open(state: RepoState, ref: str) -> None:
        """Refuse a push to ``refs/pr/N`` unless pull request N is open (or a draft)."""
        discussion = _discussion(state, _pr_number(ref))
        if discussion["status"] not in OPEN_STATUSES:
            raise bad_request(f"pull request #{discussion['num']} is {discussion['status']}; reopen it before "
                              "pushing to " + ref, repo_id=state["id"])

    def open_pull_request(self, state: RepoState, key: RepoKey, *, title: str, description: str,
                          author: str, base_branch: str, base_commit: str, head: Commit) -> int:
        """Add an open pull request whose head is ``head`` to ``state``; return its number."""
        discussion = self._new_discussion(state, title=title.strip()[:MAX_TITLE], author=author,
                                          pull_request=True, status="open")
        discussion["pr"] = {"head": head.id, "baseBranch": base_branch, "baseCommit": base_commit,
                            "mergeCommitId": None}
        if description and description.strip():
            self._comment_event(key, discussion, author, description)
        self._event(key, discussion, "commit", author, {"subject": head.title, "oid": head.id})
        return discussion["num"]

    def push_to_pull_request(self, state: RepoState, key: RepoKey, ref: str, *, head: Commit,
                             author: str) -> None:
        """Move pull request ``ref``'s head to ``head`` in ``state`` (a draft opens with its first commit)."""
        discussion = _discussion(state, _pr_number(ref))
        discussion["pr"]["head"] = head.id
        self._event(key, discussion, "commit", author, {"subject": head.title, "oid": head.id})
        if discussion["status"] == "draft":
            discussion["status"] = "open"
            self._event(key, discussion, "status-change", author, {"status": "open"})

    # --- public API ------------------------------------------------------------------------------------------------

    def create_discussion(self, repo_id: str, *, title: JsonValue, description: str = "", author: str,
                          pull_request: bool = False, repo_type: str = "model") -> int:
        """Open a discussion (or a draft pull request at the head of main); return its number. The title, the
        status and a comment are checked here, as the request's JSON gives them."""
        checked_title = _check_title(title)
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            discussion = self._new_discussion(state, title=checked_title, author=author, pull_request=pull_request,
                                              status="draft" if pull_request else "open")
            if pull_request:
                head = self._db.resolve(key, "main").commit.id
                discussion["pr"] = {"head": head, "baseBranch": "main", "baseCommit": head, "mergeCommitId": None}
            if isinstance(description, str) and description.strip():
                self._comment_event(key, discussion, author, description)
            self._db.save_state(key, state)
            return discussion["num"]

    def list_discussions(self, repo_id: str, *, repo_type: str = "model") -> list[DiscussionRecord]:
        """Copies of every discussion and pull request, newest first."""
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            discussions = copy.deepcopy(self._db.state(key)["discussions"])
        return sorted(discussions, key=lambda d: -d["num"])

    def get_discussion(self, repo_id: str, num: int, *, repo_type: str = "model") -> DiscussionRecord:
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            return copy.deepcopy(_discussion(self._db.state(key), num))

    def comment_discussion(self, repo_id: str, num: int, *, comment: JsonValue, author: str,
                           repo_type: str = "model") -> DiscussionEvent:
        """Append a comment; return the event."""
        text = _check_text(comment, what="comment")
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            event = self._comment_event(key, _discussion(state, num), author, text)
            self._db.save_state(key, state)
            return copy.deepcopy(event)

    def change_discussion_status(self, repo_id: str, num: int, *, status: JsonValue, author: str,
                                 comment: str | None = None, repo_type: str = "model") -> DiscussionEvent:
        """Open or close a discussion or pull request (a merged one stays merged); return the status event."""
        if status not in ("open", "closed"):
            raise bad_request(f"status must be 'open' or 'closed' (found {status!r})", repo_id=repo_id)
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            discussion = _discussion(state, num)
            if discussion["status"] == "merged":
                raise bad_request(f"pull request #{num} is merged; its status cannot change", repo_id=repo_id)
            if comment is not None and str(comment).strip():
                self._comment_event(key, discussion, author, str(comment))
            new_status: DiscussionStatus = "open" if status == "open" else "closed"
            discussion["status"] = new_status
            event = self._event(key, discussion, "status-change", author, {"status": new_status})
            self._db.save_state(key, state)
            return copy.deepcopy(event)

    def rename_discussion(self, repo_id: str, num: int, *, title: JsonValue, author: str,
                          repo_type: str = "model") -> DiscussionEvent:
        new_title = _check_title(title)
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            discussion = _discussion(state, num)
            old_title, discussion["title"] = discussion["title"], new_title
            event = self._event(key, discussion, "title-change", author, {"from": old_title, "to": new_title})
            self._db.save_state(key, state)
            return copy.deepcopy(event)

    def _pull_request_trees(self, key: RepoKey, discussion: DiscussionRecord) -> tuple[Tree, Tree, Tree]:
        """(merge base, current base-branch head, PR head) trees."""
        target = self._db.resolve(key, discussion["pr"]["baseBranch"]).commit
        head = self._db.load_commit(key, discussion["pr"]["head"])
        base_oid = self._db.merge_base(key, target.id, head.id)
        base = self._db.load_commit(key, base_oid).tree if base_oid else {}
        return base, target.tree, head.tree

    def pull_request_trees(self, repo_id: str, num: int, *, repo_type: str = "model") -> tuple[Tree, Tree, Tree]:
        """The merge-base, base-branch and head trees of pull request ``num`` (for diffs and conflicts)."""
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            discussion = _discussion(self._db.state(key), num)
            if "pr" not in discussion:
                raise bad_request(f"#{num} is a discussion, not a pull request", repo_id=repo_id)
            return self._pull_request_trees(key, discussion)

    def pull_request_conflicts(self, repo_id: str, num: int, *, repo_type: str = "model") -> list[str]:
        """Files changed differently on the base branch and in the pull request (empty once merged or closed)."""
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            discussion = _discussion(self._db.state(key), num)
            if "pr" not in discussion or discussion["status"] not in OPEN_STATUSES:
                return []
            return three_way_merge(*self._pull_request_trees(key, discussion))[1]

    def _merged_head(self, key: RepoKey, discussion: DiscussionRecord, *, author: str) -> str:
        """The commit the base branch points to once the pull request is merged: the branch head when it already
        contains the PR, the PR head when the branch has not moved (fast-forward), else a new merge commit."""
        pr, num = discussion["pr"], discussion["num"]
        target = self._db.resolve(key, pr["baseBranch"]).commit
        head = self._db.load_commit(key, pr["head"])
        base_oid = self._db.merge_base(key, target.id, head.id)
        if base_oid == head.id:
            return target.id
        if base_oid == target.id:
            return head.id
        base_tree = self._db.load_commit(key, base_oid).tree if base_oid else {}
        tree, conflicts = three_way_merge(base_tree, target.tree, head.tree)
        if conflicts:
            raise HubRequestError(
                f"pull request #{num} conflicts with {pr['baseBranch']} in {', '.join(conflicts)}; update "
                "the pull request from the branch first", status=409, code="MergeConflict", repo_id=key[1])
        check_tree(tree)
        return self._db.new_commit(key, parents=(target.id, head.id), tree=tree, blobs={},
                                   title=f"Merge refs/pr/{num}: {discussion['title']}", message="",
                                   author=author).id

    def merge_pull_request(self, repo_id: str, num: int, *, author: str, comment: str | None = None,
                           repo_type: str = "model") -> str:
        """Merge pull request ``num`` into its base branch; return the commit the branch now points to."""
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            discussion = _discussion(state, num)
            if "pr" not in discussion:
                raise bad_request(f"#{num} is a discussion, not a pull request", repo_id=repo_id)
            if discussion["status"] not in OPEN_STATUSES:
                raise bad_request(f"pull request #{num} is {discussion['status']}; only open pull requests can be "
                                  "merged", repo_id=repo_id)
            pr = discussion["pr"]
            merged_oid = self._merged_head(key, discussion, author=author)
            state["branches"][pr["baseBranch"]] = merged_oid
            pr["mergeCommitId"] = merged_oid
            if comment is not None and str(comment).strip():
                self._comment_event(key, discussion, author, str(comment))
            discussion["status"] = "merged"
            self._event(key, discussion, "status-change", author, {"status": "merged"})
            self._db.save_state(key, state)
            return merged_oid
