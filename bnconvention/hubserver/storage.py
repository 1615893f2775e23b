"""Repos on disk with commit history: content-addressed blobs, commits with parents, branches, tags, ``refs/pr/N``.

Layout under ``root`` (every write is atomic: a temporary file, then a rename)::

    hubstore.json                          format marker
    blobs/ab/ab12...                       file contents, named by sha256 (written once, never changed)
    repos/models/<ns>/<name>/repo.json     branches, tags, discussions and pull requests (one atomic file)
    repos/models/<ns>/<name>/commits/<oid>.json   immutable commit objects (parents, full tree, message)

A mutation computes everything first (new tree, checks), then writes blobs and the commit object (both invisible
until referenced), and finally replaces ``repo.json`` in one rename: a failed or refused request leaves every
visible state as it was. One lock serialises mutations, so the store is safe to share between server threads.
Pull requests live in ``repo.json`` with their head commit; ``refs/pr/N`` is derived from them.

The same methods serve the HTTP handlers and test fixtures (``hub.store.commit(repo_id, files={...})``).
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.hubserver.discussions import DiscussionsMixin
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.trees import AddFile, FileEntry, Operation, Tree, apply_operations
from bnconvention.hubserver.validation import (
    COMMIT_OID,
    URL_PREFIX,
    RepoType,
    bad_request,
    check_file_path,
    check_ref_name,
    check_repo_id,
    check_repo_type,
)
from bnconvention.hubserver.wire import format_date, sha1_hex, utc_now

STORE_MARKER = "hubstore.json"
STORE_FORMAT = "bnconvention-hubstore/1"
DEFAULT_BRANCH = "main"
DEFAULT_AUTHOR = "hubserver"
PR_REF = re.compile(r"^refs/pr/([1-9][0-9]*)$")
_COMMIT_PREFIX = re.compile(r"^[0-9a-fA-F]{5,40}$")
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

RevisionKind = Literal["branch", "tag", "pr", "commit"]


@dataclass(frozen=True)
class Commit:
    """An immutable commit: parents (first parent first), the full tree, title/message, author and date."""

    id: str
    parents: tuple[str, ...]
    tree: dict[str, FileEntry] = field(repr=False)
    title: str
    message: str
    author: str
    date: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "parents": list(self.parents), "title": self.title, "message": self.message,
                "author": self.author, "date": self.date,
                "tree": {path: entry.to_json() for path, entry in sorted(self.tree.items())}}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Commit:
        return cls(id=value["id"], parents=tuple(value["parents"]), title=value["title"], message=value["message"],
                   author=value["author"], date=value["date"],
                   tree={path: FileEntry.from_json(entry) for path, entry in value["tree"].items()})


@dataclass(frozen=True)
class ResolvedRevision:
    """What a revision string named: a branch, a tag, a pull request ref or a commit id, and its commit."""

    kind: RevisionKind
    name: str
    commit: Commit


@dataclass(frozen=True)
class CommitResult:
    """A new commit: its id, the ref it landed on (``main``, ``refs/pr/3``) and the PR number when it made one."""

    oid: str
    revision: str
    pr_num: int | None = None


def _repo_not_found(repo_id: str, repo_type: str) -> HubRequestError:
    return HubRequestError(
        f"Repository Not Found: {repo_type} repo {repo_id!r} does not exist (or is private); check the repo id "
        "and the repo type", status=404, code="RepoNotFound", repo_id=repo_id)


def _revision_not_found(repo_id: str, revision: str) -> HubRequestError:
    return HubRequestError(
        f"Invalid rev id: {revision!r} is not a branch, tag, refs/pr/N or commit of {repo_id}; list them with "
        "list_repo_refs", status=404, code="RevisionNotFound", repo_id=repo_id)


class HubStore(DiscussionsMixin):
    """Repos with history on disk under ``root``. Thread-safe; all writes atomic.

    ``clock`` returns the current time (tests pass a fixed clock for stable dates); ``durable=False`` skips fsync
    (faster seeding of throwaway test stores; renames stay atomic).
    """

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], datetime] | None = None,
                 durable: bool = True) -> None:
        self.root = Path(root)
        self.clock = clock or utc_now
        self.durable = durable
        self._lock = threading.RLock()
        self._states: dict[tuple[str, str], dict[str, Any]] = {}
        self._commits: dict[tuple[str, str], dict[str, Commit]] = {}
        self._last_commit_time: datetime | None = None
        self._open_root()

    # --- disk ------------------------------------------------------------------------------------------------------

    def _open_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        marker = self.root / STORE_MARKER
        if marker.exists():
            try:
                fmt = json.loads(marker.read_text("utf-8")).get("format")
            except (ValueError, AttributeError) as exc:
                raise UsageError(f"{marker}: not a hub store marker ({exc}); point --root at a hub store "
                                 "or an empty directory") from exc
            if fmt != STORE_FORMAT:
                raise UsageError(f"{marker}: store format {fmt!r} is not {STORE_FORMAT!r}; use a new root")
        elif any(self.root.iterdir()):
            raise UsageError(f"{self.root} is not empty and has no {STORE_MARKER}: refusing to use it as a hub "
                             "store; pick an empty or new directory")
        else:
            self._write(marker, json.dumps({"format": STORE_FORMAT}).encode())
        for repo_json in sorted(self.root.glob("repos/*/*/*/repo.json")):
            state = json.loads(repo_json.read_text("utf-8"))
            self._states[(state["type"], state["id"])] = state

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.durable:
            atomic_write_bytes(path, data)
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _repo_dir(self, key: tuple[str, str]) -> Path:
        repo_type, repo_id = key
        namespace, name = repo_id.split("/")
        return self.root / "repos" / f"{repo_type}s" / namespace / name

    def blob_path(self, sha256: str) -> Path:
        """Where the content with this sha256 is stored."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise bad_request(f"{sha256!r} is not a sha256 hex digest")
        return self.root / "blobs" / sha256[:2] / sha256

    def _put_blob(self, data: bytes, entry: FileEntry) -> None:
        path = self.blob_path(entry.sha256)
        if not path.exists():
            self._write(path, data)

    def _save_state(self, key: tuple[str, str], state: dict[str, Any]) -> None:
        data = json.dumps(state, sort_keys=True, ensure_ascii=False, indent=1).encode("utf-8")
        self._write(self._repo_dir(key) / "repo.json", data)
        self._states[key] = state

    # --- repos -----------------------------------------------------------------------------------------------------

    def _key(self, repo_id: str, repo_type: str | None) -> tuple[str, str]:
        repo_type = check_repo_type(repo_type)
        check_repo_id(repo_id)
        return repo_type, repo_id

    def _state(self, key: tuple[str, str]) -> dict[str, Any]:
        state = self._states.get(key)
        if state is None:
            raise _repo_not_found(key[1], key[0])
        return state

    def create_repo(self, repo_id: str, *, repo_type: RepoType = "model", private: bool = False,
                    exist_ok: bool = False, author: str = DEFAULT_AUTHOR) -> str:
        """Create ``repo_id`` with the Hub's initial commit (a ``.gitattributes``); return its URL path.

        An existing repo raises 409 ``RepoExists`` unless ``exist_ok``.
        """
        key = self._key(repo_id, repo_type)
        with self._lock:
            if key in self._states:
                if exist_ok:
                    return URL_PREFIX[key[0]] + repo_id
                raise HubRequestError(f"You already created this {key[0]} repo: {repo_id}", status=409,
                                      code="RepoExists", repo_id=repo_id)
            initial = self._new_commit(key, parents=(), tree={".gitattributes": FileEntry.of(GITATTRIBUTES)},
                                       blobs={".gitattributes": GITATTRIBUTES}, title="initial commit",
                                       message="", author=author)
            state = {"id": repo_id, "type": key[0], "private": bool(private), "createdAt": initial.date,
                     "branches": {DEFAULT_BRANCH: initial.id}, "tags": {}, "discussions": []}
            self._save_state(key, state)
        return URL_PREFIX[key[0]] + repo_id

    def repo_exists(self, repo_id: str, *, repo_type: RepoType = "model") -> bool:
        with self._lock:
            return self._key(repo_id, repo_type) in self._states

    def repo_state(self, repo_id: str, *, repo_type: RepoType = "model") -> dict[str, Any]:
        """A copy of the repo's state: ``id, type, private, createdAt, branches, tags, discussions``."""
        with self._lock:
            return copy.deepcopy(self._state(self._key(repo_id, repo_type)))

    def list_repo_states(self, repo_type: RepoType = "model") -> list[dict[str, Any]]:
        """Copies of every repo's state of this type, sorted by id (discussions left out)."""
        repo_type = check_repo_type(repo_type)
        with self._lock:
            states = [{k: copy.deepcopy(v) for k, v in state.items() if k != "discussions"}
                      for (kind, _), state in self._states.items() if kind == repo_type]
        return sorted(states, key=lambda s: s["id"])

    # --- commits ---------------------------------------------------------------------------------------------------

    def _new_commit(self, key: tuple[str, str], *, parents: Iterable[str], tree: Tree, blobs: Mapping[str, bytes],
                    title: str, message: str, author: str) -> Commit:
        """Write the blobs still referenced by ``tree`` and the commit object; nothing refers to them yet."""
        # Commit dates strictly increase across the store (by at least 1 ms), so "newest first" is well defined
        # even for commits made within the same millisecond.
        moment = self.clock()
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)  # dates carry milliseconds
        if self._last_commit_time is not None and moment <= self._last_commit_time:
            moment = self._last_commit_time + timedelta(milliseconds=1)
        self._last_commit_time = moment
        body = {"parents": list(parents), "tree": {p: e.to_json() for p, e in sorted(tree.items())},
                "title": title, "message": message, "author": author, "date": format_date(moment)}
        oid = sha1_hex(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        commit = Commit(id=oid, parents=tuple(body["parents"]), tree=dict(tree), title=title, message=message,
                        author=author, date=body["date"])
        for path, data in blobs.items():
            if tree.get(path) is not None:
                self._put_blob(data, tree[path])
        self._write(self._repo_dir(key) / "commits" / f"{oid}.json",
                    json.dumps(commit.to_json(), sort_keys=True).encode("utf-8"))
        self._commits.setdefault(key, {})[oid] = commit
        return commit

    def _commit(self, key: tuple[str, str], oid: str) -> Commit:
        cache = self._commits.setdefault(key, {})
        commit = cache.get(oid)
        if commit is None:
            path = self._repo_dir(key) / "commits" / f"{oid}.json"
            if not COMMIT_OID.match(oid) or not path.exists():
                raise _revision_not_found(key[1], oid)
            commit = Commit.from_json(json.loads(path.read_text("utf-8")))
            cache[oid] = commit
        return commit

    def get_commit(self, repo_id: str, oid: str, *, repo_type: RepoType = "model") -> Commit:
        key = self._key(repo_id, repo_type)
        with self._lock:
            self._state(key)
            return self._commit(key, oid)

    def _resolve(self, key: tuple[str, str], revision: str) -> ResolvedRevision:
        state = self._state(key)
        if not isinstance(revision, str) or not revision:
            raise _revision_not_found(key[1], str(revision))
        match = PR_REF.match(revision)
        if match:
            discussion = self._find_discussion(state, int(match.group(1)))
            if discussion is None or "pr" not in discussion:
                raise _revision_not_found(key[1], revision)
            return ResolvedRevision("pr", revision, self._commit(key, discussion["pr"]["head"]))
        branch = revision.removeprefix("refs/heads/")
        if branch in state["branches"]:
            return ResolvedRevision("branch", branch, self._commit(key, state["branches"][branch]))
        tag = revision.removeprefix("refs/tags/")
        if tag in state["tags"]:
            return ResolvedRevision("tag", tag, self._commit(key, state["tags"][tag]["oid"]))
        if COMMIT_OID.match(revision):
            return ResolvedRevision("commit", revision, self._commit(key, revision))
        raise _revision_not_found(key[1], revision)

    def resolve(self, repo_id: str, revision: str = DEFAULT_BRANCH, *,
                repo_type: RepoType = "model") -> ResolvedRevision:
        """Resolve a branch, tag, ``refs/pr/N`` or commit id; 404 ``RevisionNotFound`` when it names nothing."""
        key = self._key(repo_id, repo_type)
        with self._lock:
            return self._resolve(key, revision)

    def _walk(self, key: tuple[str, str], heads: Iterable[str]) -> Iterable[Commit]:
        """Ancestors of ``heads`` (included), newest first; a child always comes before its parents."""
        seen: set[str] = set()
        queue: list[tuple[str, int, str]] = []
        counter = 0
        for oid in heads:
            if oid not in seen:
                seen.add(oid)
                commit = self._commit(key, oid)
                heapq.heappush(queue, (_neg_date(commit.date), counter, oid))
                counter += 1
        while queue:
            _, _, oid = heapq.heappop(queue)
            commit = self._commit(key, oid)
            yield commit
            for parent in commit.parents:
                if parent not in seen:
                    seen.add(parent)
                    heapq.heappush(queue, (_neg_date(self._commit(key, parent).date), counter, parent))
                    counter += 1

    def history(self, repo_id: str, revision: str = DEFAULT_BRANCH, *,
                repo_type: RepoType = "model") -> list[Commit]:
        """Every commit reachable from ``revision``, newest first."""
        key = self._key(repo_id, repo_type)
        with self._lock:
            head = self._resolve(key, revision).commit.id
            return list(self._walk(key, [head]))

    def _merge_base(self, key: tuple[str, str], a: str, b: str) -> str | None:
        ancestors = {commit.id for commit in self._walk(key, [a])}
        for commit in self._walk(key, [b]):
            if commit.id in ancestors:
                return commit.id
        return None

    def _commit_by_prefix(self, key: tuple[str, str], prefix: str) -> Commit:
        """A commit of this repo named by a full id or a prefix of 5+ hex digits (unique among reachable ones)."""
        if not isinstance(prefix, str) or not _COMMIT_PREFIX.match(prefix):
            raise bad_request(f"parentCommit {prefix!r} is not a commit id (5 to 40 hex digits)", repo_id=key[1])
        prefix = prefix.lower()
        state = self._state(key)
        heads = list(state["branches"].values()) + [t["oid"] for t in state["tags"].values()]
        heads += [d["pr"]["head"] for d in state["discussions"] if "pr" in d]
        found = {c.id for c in self._walk(key, heads) if c.id.startswith(prefix)}
        if len(found) != 1:
            raise _revision_not_found(key[1], prefix)
        return self._commit(key, found.pop())

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
        key = self._key(repo_id, repo_type)
        with self._lock:
            if key not in self._states and create_missing and not create_pr and revision == DEFAULT_BRANCH:
                self.create_repo(repo_id, repo_type=key[0], author=author)
            state = copy.deepcopy(self._state(key))
            target = self._resolve(key, revision)
            if create_pr:
                if target.kind != "branch":
                    raise bad_request(f"create_pr needs a branch to merge into, not {revision!r}", repo_id=repo_id)
                base = self._commit_by_prefix(key, parent_commit) if parent_commit else target.commit
            else:
                if target.kind not in ("branch", "pr"):
                    raise bad_request(f"cannot commit to the {target.kind} {revision!r}: commit to a branch or to "
                                      "an open refs/pr/N", repo_id=repo_id)
                if parent_commit is not None and not target.commit.id.startswith(str(parent_commit).lower()):
                    raise HubRequestError(
                        f"A commit has happened since: {revision!r} is at {target.commit.id}, not at "
                        f"{parent_commit}; refresh and try again", status=412, code="PreconditionFailed",
                        repo_id=repo_id)
                if target.kind == "pr":
                    self._check_pr_open(state, target.name)
                base = target.commit
            tree = apply_operations(base.tree, ops)
            blobs = {op.path: bytes(op.data) for op in ops if isinstance(op, AddFile)}
            new = self._new_commit(key, parents=(base.id,), tree=tree, blobs=blobs, title=message,
                                   message=description or "", author=author)
            if create_pr:
                num = self._open_pull_request(state, key, title=message, description=description, author=author,
                                              base_branch=target.name, base_commit=base.id, head=new)
                landed, pr_num = f"refs/pr/{num}", num
            elif target.kind == "pr":
                self._push_to_pull_request(state, key, target.name, head=new, author=author)
                landed, pr_num = target.name, int(target.name.rsplit("/", 1)[1])
            else:
                state["branches"][target.name] = new.id
                landed, pr_num = target.name, None
            self._save_state(key, state)
        return CommitResult(oid=new.id, revision=landed, pr_num=pr_num)

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
        key = self._key(repo_id, repo_type)
        with self._lock:
            state = copy.deepcopy(self._state(key))
            if branch in state["branches"]:
                if exist_ok:
                    return state["branches"][branch]
                raise HubRequestError(f"Reference already exists: branch {branch!r} of {repo_id}", status=409,
                                      code="Conflict", repo_id=repo_id)
            oid = self._resolve(key, revision or DEFAULT_BRANCH).commit.id
            state["branches"][branch] = oid
            self._save_state(key, state)
        return oid

    def create_tag(self, repo_id: str, tag: str, *, revision: str = DEFAULT_BRANCH, message: str = "",
                   repo_type: RepoType = "model") -> str:
        """Tag ``revision``; 409 when the tag exists."""
        check_ref_name(tag, what="tag")
        key = self._key(repo_id, repo_type)
        with self._lock:
            state = copy.deepcopy(self._state(key))
            if tag in state["tags"]:
                raise HubRequestError(f"Reference already exists: tag {tag!r} of {repo_id}", status=409,
                                      code="Conflict", repo_id=repo_id)
            oid = self._resolve(key, revision).commit.id
            state["tags"][tag] = {"oid": oid, "message": str(message or "")}
            self._save_state(key, state)
        return oid


def _neg_date(date: str) -> tuple[int, ...]:
    """A heap key that puts later dates first (dates are fixed-width ISO strings)."""
    return tuple(-ord(c) for c in date)
