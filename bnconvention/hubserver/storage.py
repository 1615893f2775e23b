"""The local Hub's store: repos with commit history, branches, tags, discussions and ``refs/pr/N``.

:class:`HubStore` is the one API the HTTP endpoints and test fixtures use (``hub.store.commit(repo_id,
files={...})``). Files, commit objects and the lock live in its :class:`~bnconvention.hubserver.repos.RepoDatabase`
(layout and atomicity described there); discussions and pull requests in the
:class:`~bnconvention.hubserver.discussions.DiscussionStore` it holds on the same database. A mutation computes
everything first (new tree, checks), then writes blobs and the commit object (both invisible until referenced),
and finally replaces ``repo.json`` in one rename: a failed or refused request leaves every visible state as it
was. One lock serialises mutations, so the store is safe to share between server threads. Pull requests live in
``repo.json`` with their head commit; ``refs/pr/N`` is derived from them.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bnconvention.formats.canonical import sha256_hex
from bnconvention.formats.json_types import JsonValue
from bnconvention.hubserver.discussions import DiscussionStore
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.records import DiscussionEvent, DiscussionRecord, RepoState
from bnconvention.hubserver.repos import (
    DEFAULT_BRANCH,
    Commit,
    RepoDatabase,
    RepoKey,
    ResolvedRevision,
    repo_key,
)
from bnconvention.hubserver.trees import AddFile, AddLfsFile, FileEntry, Operation, Tree, apply_operations
from bnconvention.hubserver.validation import (
    URL_PREFIX,
    RepoType,
    bad_request,
    check_file_path,
    check_ref_name,
    check_repo_type,
)
from bnconvention.hubserver.wire import utc_now

DEFAULT_AUTHOR = "hubserver"
# What the Hub writes into a new repo's initial commit (shortened to the patterns that matter here).
GITATTRIBUTES = (
    b"*.bin filter=lfs diff=lfs merge=lfs -text\n"
    b"*.ckpt filter=lfs diff=lfs merge=lfs -text\n"
    b"*.h5 filter=lfs diff=lfs merge=lfs -text\n"
    b"*.onnx filter=lfs diff=lfs merge=lfs -text\n"
    b"*.pt filter=lfs diff=lfs merge=lfs -text\n"
    b"*.pth filter=lfs diff=lfs merge=lfs -text\n"
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    b"*.zip filter=lfs diff=lfs merge=lfs -text\n"
)


@dataclass(frozen=True)
class CommitResult:
    """A new commit: its id, the ref it landed on (``main``, ``refs/pr/3``) and the PR number when it made one."""

    oid: str
    revision: str
    pr_num: int | None = None


class HubStore:
    """Repos with history on disk under ``root``. Thread-safe; all writes atomic.

    ``clock`` returns the current time (tests pass a fixed clock for stable dates); ``durable=False`` skips fsync
    (faster seeding of throwaway test stores; renames stay atomic).
    """

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], datetime] | None = None,
                 durable: bool = True) -> None:
        self._db = RepoDatabase(root, clock=clock or utc_now, durable=durable)
        self._discussions = DiscussionStore(self._db)

    @property
    def root(self) -> Path:
        return self._db.root

    @property
    def clock(self) -> Callable[[], datetime]:
        return self._db.clock

    @property
    def durable(self) -> bool:
        return self._db.durable

    def blob_path(self, sha256: str) -> Path:
        """Where the content with this sha256 is stored."""
        return self._db.blob_path(sha256)

    def has_blob(self, sha256: str, size: int) -> bool:
        """Whether the store holds a content with this sha256 and size (an LFS object already uploaded)."""
        return self._db.has_blob(sha256, size)

    def put_lfs_object(self, data: bytes, *, sha256: str, size: int) -> None:
        """Keep an object uploaded through the LFS batch API, after checking it is what was announced (422
        otherwise); commits then refer to it with ``AddLfsFile``."""
        if len(data) != size or sha256_hex(data) != sha256:
            raise HubRequestError(f"the uploaded object is not sha256:{sha256} of {size} bytes (received "
                                  f"{len(data)} bytes); upload the announced content", status=422,
                                  code="LfsObjectMismatch")
        with self._db.lock:
            self._db.put_blob(sha256, data)

    # --- repos -----------------------------------------------------------------------------------------------------

    def create_repo(self, repo_id: str, *, repo_type: RepoType = "model", private: bool = False,
                    exist_ok: bool = False, author: str = DEFAULT_AUTHOR) -> str:
        """Create ``repo_id`` with the Hub's initial commit (a ``.gitattributes``); return its URL path.

        An existing repo raises 409 ``RepoExists`` unless ``exist_ok``.
        """
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            if self._db.has(key):
                if exist_ok:
                    return URL_PREFIX[key[0]] + repo_id
                raise HubRequestError(f"You already created this {key[0]} repo: {repo_id}", status=409,
                                      code="RepoExists", repo_id=repo_id)
            initial = self._db.new_commit(key, parents=(), tree={".gitattributes": FileEntry.of(GITATTRIBUTES)},
                                          blobs={".gitattributes": GITATTRIBUTES}, title="initial commit",
                                          message="", author=author)
            state: RepoState = {"id": repo_id, "type": key[0], "private": bool(private), "createdAt": initial.date,
                                "branches": {DEFAULT_BRANCH: initial.id}, "tags": {}, "discussions": []}
            self._db.save_state(key, state)
        return URL_PREFIX[key[0]] + repo_id

    def repo_exists(self, repo_id: str, *, repo_type: RepoType = "model") -> bool:
        with self._db.lock:
            return self._db.has(repo_key(repo_id, repo_type))

    def repo_state(self, repo_id: str, *, repo_type: RepoType = "model") -> RepoState:
        """A copy of the repo's state: ``id, type, private, createdAt, branches, tags, discussions``."""
        with self._db.lock:
            return copy.deepcopy(self._db.state(repo_key(repo_id, repo_type)))

    def list_repo_states(self, repo_type: RepoType = "model") -> list[RepoState]:
        """Copies of every repo's state of this type, sorted by id (discussions left out)."""
        repo_type = check_repo_type(repo_type)
        with self._db.lock:
            states: list[RepoState] = []
            for state in self._db.states(repo_type):
                summary = copy.deepcopy(state)
                summary.pop("discussions", None)
                states.append(summary)
        return sorted(states, key=lambda s: s["id"])

    # --- commits ---------------------------------------------------------------------------------------------------

    def get_commit(self, repo_id: str, oid: str, *, repo_type: RepoType = "model") -> Commit:
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            self._db.state(key)
            return self._db.load_commit(key, oid)

    def resolve(self, repo_id: str, revision: str = DEFAULT_BRANCH, *,
                repo_type: RepoType = "model") -> ResolvedRevision:
        """Resolve a branch, tag, ``refs/pr/N`` or commit id; 404 ``RevisionNotFound`` when it names nothing."""
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            return self._db.resolve(key, revision)

    def history(self, repo_id: str, revision: str = DEFAULT_BRANCH, *,
                repo_type: RepoType = "model") -> list[Commit]:
        """Every commit reachable from ``revision``, newest first."""
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            head = self._db.resolve(key, revision).commit.id
            return list(self._db.walk(key, [head]))

    def commit(self, repo_id: str, *, files: Mapping[str, bytes] | None = None, operations: Iterable[Operation] = (),
               message: str = "Upload files", description: str = "", revision: str = DEFAULT_BRANCH,
               repo_type: RepoType = "model", author: str = DEFAULT_AUTHOR, parent_commit: str | None = None,
               create_pr: bool = False, create_missing: bool = True) -> CommitResult:
        """Commit ``files`` (path -> bytes) and ``operations`` onto ``revision``.

        ``revision`` is a branch or ``refs/pr/N`` (pushes to an open pull request). ``create_pr`` opens a new pull
        request against the branch ``revision`` (from ``parent_commit`` when given) with a ``refs/pr/N`` ref and a
        discussion titled ``message`` whose first comment is ``description``. Otherwise ``parent_commit`` must be
        the current head (412 ``PreconditionFailed``). A missing repo is created first when ``create_missing``
        (fixture seeding; the HTTP handler passes False). Nothing is written unless the whole commit is valid.

        >>> import tempfile
        >>> store = HubStore(tempfile.mkdtemp(), durable=False)
        >>> result = store.commit("org/demo", files={"README.md": b"# demo\\n"}, message="add card")
        >>> store.read_file("org/demo", "README.md")
        b'# demo\\n'
        """
        if not isinstance(message, str) or not message.strip():
            raise bad_request("the commit summary is empty; give the commit a title", repo_id=repo_id)
        ops: list[Operation] = [AddFile(check_file_path(path), data) for path, data in (files or {}).items()]
        ops.extend(operations)
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            if not self._db.has(key) and create_missing and not create_pr and revision == DEFAULT_BRANCH:
                self.create_repo(repo_id, repo_type=key[0], author=author)
            state = copy.deepcopy(self._db.state(key))
            target = self._db.resolve(key, revision)
            self._check_lfs_objects(repo_id, ops)
            base = self._commit_base(key, state, target, revision=revision, create_pr=create_pr,
                                     parent_commit=parent_commit)
            tree = apply_operations(base.tree, ops)
            blobs = {op.path: bytes(op.data) for op in ops if isinstance(op, AddFile)}
            new = self._db.new_commit(key, parents=(base.id,), tree=tree, blobs=blobs, title=message,
                                      message=description or "", author=author)
            if create_pr:
                num = self._discussions.open_pull_request(state, key, title=message, description=description,
                                                          author=author, base_branch=target.name,
                                                          base_commit=base.id, head=new)
                landed, pr_num = f"refs/pr/{num}", num
            elif target.kind == "pr":
                self._discussions.push_to_pull_request(state, key, target.name, head=new, author=author)
                landed, pr_num = target.name, int(target.name.rsplit("/", 1)[1])
            else:
                state["branches"][target.name] = new.id
                landed, pr_num = target.name, None
            self._db.save_state(key, state)
        return CommitResult(oid=new.id, revision=landed, pr_num=pr_num)

    def _commit_base(self, key: RepoKey, state: RepoState, target: ResolvedRevision, *, revision: str,
                     create_pr: bool, parent_commit: str | None) -> Commit:
        """The commit a new one builds on, after refusing a target that cannot take it (a tag, a closed pull
        request, a moved head)."""
        repo_id = key[1]
        if create_pr:
            if target.kind != "branch":
                raise bad_request(f"create_pr needs a branch to merge into, not {revision!r}", repo_id=repo_id)
            return self._db.commit_by_prefix(key, parent_commit) if parent_commit else target.commit
        if target.kind not in ("branch", "pr"):
            raise bad_request(f"cannot commit to the {target.kind} {revision!r}: commit to a branch or to "
                              "an open refs/pr/N", repo_id=repo_id)
        if parent_commit is not None and not target.commit.id.startswith(str(parent_commit).lower()):
            raise HubRequestError(
                f"A commit has happened since: {revision!r} is at {target.commit.id}, not at "
                f"{parent_commit}; refresh and try again", status=412, code="PreconditionFailed",
                repo_id=repo_id)
        if target.kind == "pr":
            self._discussions.check_pr_open(state, target.name)
        return target.commit

    def _check_lfs_objects(self, repo_id: str, ops: Iterable[Operation]) -> None:
        for op in ops:
            if isinstance(op, AddLfsFile) and not self._db.has_blob(op.sha256, op.size):
                raise bad_request(f"LFS object sha256:{op.sha256} ({op.size} bytes) of {op.path!r} was never "
                                  "uploaded: upload it through the LFS batch API first", repo_id=repo_id)

    def read_file(self, repo_id: str, path: str, *, revision: str = DEFAULT_BRANCH,
                  repo_type: RepoType = "model") -> bytes:
        """The bytes of ``path`` at ``revision`` (404 ``EntryNotFound`` when absent)."""
        commit = self.resolve(repo_id, revision, repo_type=repo_type).commit
        entry = commit.tree.get(path)
        if entry is None:
            raise HubRequestError(f"{path!r} does not exist at {revision!r} of {repo_id}", status=404,
                                  code="EntryNotFound", repo_id=repo_id, headers={"X-Repo-Commit": commit.id})
        return self.blob_path(entry.sha256).read_bytes()

    # --- branches and tags -----------------------------------------------------------------------------------------

    def create_branch(self, repo_id: str, branch: str, *, revision: str | None = None,
                      repo_type: RepoType = "model", exist_ok: bool = False) -> str:
        """Create ``branch`` at ``revision`` (default: head of main); 409 when it exists unless ``exist_ok``."""
        check_ref_name(branch, what="branch")
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            if branch in state["branches"]:
                if exist_ok:
                    return state["branches"][branch]
                raise HubRequestError(f"Reference already exists: branch {branch!r} of {repo_id}", status=409,
                                      code="Conflict", repo_id=repo_id)
            oid = self._db.resolve(key, revision or DEFAULT_BRANCH).commit.id
            state["branches"][branch] = oid
            self._db.save_state(key, state)
        return oid

    def create_tag(self, repo_id: str, tag: str, *, revision: str = DEFAULT_BRANCH, message: str = "",
                   repo_type: RepoType = "model") -> str:
        """Tag ``revision``; 409 when the tag exists."""
        check_ref_name(tag, what="tag")
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            if tag in state["tags"]:
                raise HubRequestError(f"Reference already exists: tag {tag!r} of {repo_id}", status=409,
                                      code="Conflict", repo_id=repo_id)
            oid = self._db.resolve(key, revision).commit.id
            state["tags"][tag] = {"oid": oid, "message": str(message or "")}
            self._db.save_state(key, state)
        return oid


    def super_squash(self, repo_id: str, branch: str = DEFAULT_BRANCH, *, message: str = "Super-squash branch",
                     repo_type: RepoType = "model", author: str = DEFAULT_AUTHOR) -> str:
        """Squash ``branch``'s history into one parentless commit with its head's files, as the Hub's super-squash
        (``HfApi.super_squash_history``) does, and drop the commits nothing reaches any more: a revision pinned at
        one of them answers 404 ``RevisionNotFound`` from then on. Returns the new head.

        >>> import tempfile
        >>> store = HubStore(tempfile.mkdtemp(), durable=False)
        >>> old = store.commit("org/demo", files={"README.md": b"# demo\\n"}).oid
        >>> head = store.super_squash("org/demo")
        >>> store.read_file("org/demo", "README.md", revision=head)
        b'# demo\\n'
        >>> try:
        ...     store.resolve("org/demo", old)
        ... except HubRequestError as exc:
        ...     print(exc.status, exc.code)
        404 RevisionNotFound
        """
        key = repo_key(repo_id, repo_type)
        with self._db.lock:
            state = copy.deepcopy(self._db.state(key))
            target = self._db.resolve(key, branch)
            if target.kind != "branch":
                raise bad_request(f"super-squash needs a branch, not the {target.kind} {branch!r}", repo_id=repo_id)
            new = self._db.new_commit(key, parents=(), tree=target.commit.tree, blobs={}, title=message, message="",
                                      author=author)
            state["branches"][target.name] = new.id
            self._db.save_state(key, state)
            self._db.drop_unreachable(key)
        return new.id

    # --- discussions and pull requests (see ``discussions``) ------------------------------------------------------

    def create_discussion(self, repo_id: str, *, title: JsonValue, description: str = "", author: str,
                          pull_request: bool = False, repo_type: str = "model") -> int:
        """Open a discussion (or a draft pull request at the head of main); return its number."""
        return self._discussions.create_discussion(repo_id, title=title, description=description, author=author,
                                                   pull_request=pull_request, repo_type=repo_type)

    def list_discussions(self, repo_id: str, *, repo_type: str = "model") -> list[DiscussionRecord]:
        """Copies of every discussion and pull request, newest first."""
        return self._discussions.list_discussions(repo_id, repo_type=repo_type)

    def get_discussion(self, repo_id: str, num: int, *, repo_type: str = "model") -> DiscussionRecord:
        return self._discussions.get_discussion(repo_id, num, repo_type=repo_type)

    def comment_discussion(self, repo_id: str, num: int, *, comment: JsonValue, author: str,
                           repo_type: str = "model") -> DiscussionEvent:
        """Append a comment; return the event."""
        return self._discussions.comment_discussion(repo_id, num, comment=comment, author=author,
                                                    repo_type=repo_type)

    def change_discussion_status(self, repo_id: str, num: int, *, status: JsonValue, author: str,
                                 comment: str | None = None, repo_type: str = "model") -> DiscussionEvent:
        """Open or close a discussion or pull request (a merged one stays merged); return the status event."""
        return self._discussions.change_discussion_status(repo_id, num, status=status, author=author,
                                                          comment=comment, repo_type=repo_type)

    def rename_discussion(self, repo_id: str, num: int, *, title: JsonValue, author: str,
                          repo_type: str = "model") -> DiscussionEvent:
        return self._discussions.rename_discussion(repo_id, num, title=title, author=author, repo_type=repo_type)

    def pull_request_trees(self, repo_id: str, num: int, *, repo_type: str = "model") -> tuple[Tree, Tree, Tree]:
        """The merge-base, base-branch and head trees of pull request ``num`` (for diffs and conflicts)."""
        return self._discussions.pull_request_trees(repo_id, num, repo_type=repo_type)

    def pull_request_conflicts(self, repo_id: str, num: int, *, repo_type: str = "model") -> list[str]:
        """Files changed differently on the base branch and in the pull request (empty once merged or closed)."""
        return self._discussions.pull_request_conflicts(repo_id, num, repo_type=repo_type)

    def merge_pull_request(self, repo_id: str, num: int, *, author: str, comment: str | None = None,
                           repo_type: str = "model") -> str:
        """Merge pull request ``num`` into its base branch; return the commit the branch now points to."""
        return self._discussions.merge_pull_request(repo_id, num, author=author, comment=comment,
                                                    repo_type=repo_type)

