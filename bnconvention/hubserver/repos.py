"""The store's shared state: repos on disk with their blobs, commit objects and ``repo.json`` states.

Layout under ``root`` (every write is atomic: a temporary file, then a rename)::

    hubstore.json                          format marker
    blobs/ab/ab12...                       file contents, named by sha256 (written once, never changed)
    repos/models/<ns>/<name>/repo.json     branches, tags, discussions and pull requests (one atomic file)
    repos/models/<ns>/<name>/commits/<oid>.json   immutable commit objects (parents, full tree, message)

:class:`RepoDatabase` is what :class:`~bnconvention.hubserver.storage.HubStore` (repos, commits, refs) and
:class:`~bnconvention.hubserver.discussions.DiscussionStore` (discussions, pull requests) both work on: it holds
the one lock, reads and writes the files, resolves revisions and walks history, but decides nothing about what a
mutation may do. A new commit object is invisible until a ``repo.json`` written by :meth:`RepoDatabase.save_state`
refers to it, so a refused mutation leaves every visible state as it was.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.formats.json_types import JsonObject
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.records import DiscussionRecord, RepoState
from bnconvention.hubserver.trees import FileEntry, Tree
from bnconvention.hubserver.validation import COMMIT_OID, RepoType, bad_request, check_repo_id, check_repo_type
from bnconvention.hubserver.wire import format_date, sha1_hex

STORE_MARKER = "hubstore.json"
STORE_FORMAT = "bnconvention-hubstore/1"
DEFAULT_BRANCH = "main"
PR_REF = re.compile(r"^refs/pr/([1-9][0-9]*)$")
_COMMIT_PREFIX = re.compile(r"^[0-9a-fA-F]{5,40}$")

RevisionKind = Literal["branch", "tag", "pr", "commit"]
RepoKey = tuple[RepoType, str]
"""``(repo_type, repo_id)``, checked: the key of one repo in the store."""


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

    def to_json(self) -> JsonObject:
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


def repo_not_found(repo_id: str, repo_type: str) -> HubRequestError:
    return HubRequestError(
        f"Repository Not Found: {repo_type} repo {repo_id!r} does not exist (or is private); check the repo id "
        "and the repo type", status=404, code="RepoNotFound", repo_id=repo_id)


def revision_not_found(repo_id: str, revision: str) -> HubRequestError:
    return HubRequestError(
        f"Invalid rev id: {revision!r} is not a branch, tag, refs/pr/N or commit of {repo_id}; list them with "
        "list_repo_refs", status=404, code="RevisionNotFound", repo_id=repo_id)


def find_discussion(state: RepoState, num: int) -> DiscussionRecord | None:
    """Discussion or pull request ``num`` of a repo state, or ``None``."""
    for discussion in state["discussions"]:
        if discussion["num"] == num:
            return discussion
    return None


def repo_key(repo_id: str, repo_type: str | None) -> RepoKey:
    """The checked key of a repo (400 on a bad type or id)."""
    checked_type = check_repo_type(repo_type)
    check_repo_id(repo_id)
    return checked_type, repo_id


class RepoDatabase:
    """Blobs, commit objects and repo states on disk under ``root``, behind one re-entrant lock.

    Callers hold :attr:`lock` around a read-modify-:meth:`save_state` sequence; every method here assumes it.
    ``clock`` dates new commits; ``durable=False`` skips fsync (renames stay atomic).
    """

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], datetime], durable: bool) -> None:
        self.root = Path(root)
        self.clock = clock
        self.durable = durable
        self.lock = threading.RLock()
        self._states: dict[RepoKey, RepoState] = {}
        self._commits: dict[RepoKey, dict[str, Commit]] = {}
        self._last_commit_time: datetime | None = None
        self._open_root()

    # --- files -----------------------------------------------------------------------------------------------------

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
            self.write(marker, json.dumps({"format": STORE_FORMAT}).encode())
        for repo_json in sorted(self.root.glob("repos/*/*/*/repo.json")):
            state: RepoState = json.loads(repo_json.read_text("utf-8"))
            self._states[(state["type"], state["id"])] = state

    def write(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` atomically (fsynced when durable)."""
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

    def _repo_dir(self, key: RepoKey) -> Path:
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
            self.write(path, data)

    def put_blob(self, sha256: str, data: bytes) -> None:
        """Store ``data`` under its sha256 (an LFS upload: referenced by no tree until a commit names it)."""
        path = self.blob_path(sha256)
        if not path.exists():
            self.write(path, data)

    def has_blob(self, sha256: str, size: int) -> bool:
        path = self.blob_path(sha256)
        return path.is_file() and path.stat().st_size == size

    # --- repo states -----------------------------------------------------------------------------------------------

    def has(self, key: RepoKey) -> bool:
        return key in self._states

    def state(self, key: RepoKey) -> RepoState:
        """The live state of a repo (404 ``RepoNotFound``); copy it before changing it."""
        state = self._states.get(key)
        if state is None:
            raise repo_not_found(key[1], key[0])
        return state

    def states(self, repo_type: RepoType) -> Iterator[RepoState]:
        """The live states of every repo of this type, in no particular order."""
        return (state for (kind, _), state in self._states.items() if kind == repo_type)

    def save_state(self, key: RepoKey, state: RepoState) -> None:
        """Make ``state`` the repo's visible state (one atomic rename of ``repo.json``)."""
        data = json.dumps(state, sort_keys=True, ensure_ascii=False, indent=1).encode("utf-8")
        self.write(self._repo_dir(key) / "repo.json", data)
        self._states[key] = state

    # --- commits ---------------------------------------------------------------------------------------------------

    def _next_commit_date(self) -> str:
        # Commit dates strictly increase across the store (by at least 1 ms), so "newest first" is well defined
        # even for commits made within the same millisecond.
        moment = self.clock()
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)  # dates carry milliseconds
        if self._last_commit_time is not None and moment <= self._last_commit_time:
            moment = self._last_commit_time + timedelta(milliseconds=1)
        self._last_commit_time = moment
        return format_date(moment)

    def new_commit(self, key: RepoKey, *, parents: Iterable[str], tree: Tree, blobs: Mapping[str, bytes],
                   title: str, message: str, author: str) -> Commit:
        """Write the blobs still referenced by ``tree`` and the commit object; nothing refers to them yet."""
        date = self._next_commit_date()
        parent_ids = list(parents)
        body = {"parents": parent_ids, "tree": {p: e.to_json() for p, e in sorted(tree.items())},
                "title": title, "message": message, "author": author, "date": date}
        oid = sha1_hex(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        commit = Commit(id=oid, parents=tuple(parent_ids), tree=dict(tree), title=title, message=message,
                        author=author, date=date)
        for path, data in blobs.items():
            if tree.get(path) is not None:
                self._put_blob(data, tree[path])
        self.write(self._repo_dir(key) / "commits" / f"{oid}.json",
                   json.dumps(commit.to_json(), sort_keys=True).encode("utf-8"))
        self._commits.setdefault(key, {})[oid] = commit
        return commit

    def load_commit(self, key: RepoKey, oid: str) -> Commit:
        """The commit ``oid`` of this repo (404 ``RevisionNotFound`` when it has none by that id)."""
        cache = self._commits.setdefault(key, {})
        commit = cache.get(oid)
        if commit is None:
            path = self._repo_dir(key) / "commits" / f"{oid}.json"
            if not COMMIT_OID.match(oid) or not path.exists():
                raise revision_not_found(key[1], oid)
            commit = Commit.from_json(json.loads(path.read_text("utf-8")))
            cache[oid] = commit
        return commit

    def resolve(self, key: RepoKey, revision: str) -> ResolvedRevision:
        """A branch, tag, ``refs/pr/N`` or full commit id of this repo (404 ``RevisionNotFound`` otherwise)."""
        state = self.state(key)
        if not isinstance(revision, str) or not revision:
            raise revision_not_found(key[1], str(revision))
        match = PR_REF.match(revision)
        if match:
            discussion = find_discussion(state, int(match.group(1)))
            if discussion is None or "pr" not in discussion:
                raise revision_not_found(key[1], revision)
            return ResolvedRevision("pr", revision, self.load_commit(key, discussion["pr"]["head"]))
        branch = revision.removeprefix("refs/heads/")
        if branch in state["branches"]:
            return ResolvedRevision("branch", branch, self.load_commit(key, state["branches"][branch]))
        tag = revision.removeprefix("refs/tags/")
        if tag in state["tags"]:
            return ResolvedRevision("tag", tag, self.load_commit(key, state["tags"][tag]["oid"]))
        if COMMIT_OID.match(revision):
            return ResolvedRevision("commit", revision, self.load_commit(key, revision))
        raise revision_not_found(key[1], revision)

    def walk(self, key: RepoKey, heads: Iterable[str]) -> Iterator[Commit]:
        """Ancestors of ``heads`` (included), newest first; a child always comes before its parents."""
        seen: set[str] = set()
        queue: list[tuple[tuple[int, ...], int, str]] = []
        counter = 0
        for oid in heads:
            if oid not in seen:
                seen.add(oid)
                heapq.heappush(queue, (_neg_date(self.load_commit(key, oid).date), counter, oid))
                counter += 1
        while queue:
            _, _, oid = heapq.heappop(queue)
            commit = self.load_commit(key, oid)
            yield commit
            for parent in commit.parents:
                if parent not in seen:
                    seen.add(parent)
                    heapq.heappush(queue, (_neg_date(self.load_commit(key, parent).date), counter, parent))
                    counter += 1

    def merge_base(self, key: RepoKey, a: str, b: str) -> str | None:
        """The newest common ancestor of commits ``a`` and ``b`` (``None`` when they share none)."""
        ancestors = {commit.id for commit in self.walk(key, [a])}
        for commit in self.walk(key, [b]):
            if commit.id in ancestors:
                return commit.id
        return None

    def drop_unreachable(self, key: RepoKey) -> list[str]:
        """Delete the commits no branch, tag or pull request (head, base, merge) reaches any more, as the Hub's
        garbage collection does after a super-squash: they stop resolving (404 ``RevisionNotFound``). Blobs stay
        (shared by content across repos). Returns the dropped ids, sorted."""
        state = self.state(key)
        roots = list(state["branches"].values()) + [t["oid"] for t in state["tags"].values()]
        for discussion in state["discussions"]:
            pr = discussion.get("pr")
            if pr is not None:
                roots += [oid for oid in (pr["head"], pr["baseCommit"], pr["mergeCommitId"]) if isinstance(oid, str)]
        folder = self._repo_dir(key) / "commits"
        stored = {path.stem for path in folder.glob("*.json")} if folder.is_dir() else set()
        reachable = {commit.id for commit in self.walk(key, [r for r in roots if r in stored])}
        dropped = sorted(stored - reachable)
        for oid in dropped:
            (folder / f"{oid}.json").unlink()
            self._commits.get(key, {}).pop(oid, None)
        return dropped

    def commit_by_prefix(self, key: RepoKey, prefix: str) -> Commit:
        """A commit of this repo named by a full id or a prefix of 5+ hex digits (unique among reachable ones)."""
        if not isinstance(prefix, str) or not _COMMIT_PREFIX.match(prefix):
            raise bad_request(f"parentCommit {prefix!r} is not a commit id (5 to 40 hex digits)", repo_id=key[1])
        prefix = prefix.lower()
        state = self.state(key)
        heads = list(state["branches"].values()) + [t["oid"] for t in state["tags"].values()]
        heads += [d["pr"]["head"] for d in state["discussions"] if "pr" in d]
        found = {c.id for c in self.walk(key, heads) if c.id.startswith(prefix)}
        if len(found) != 1:
            raise revision_not_found(key[1], prefix)
        return self.load_commit(key, found.pop())


def _neg_date(date: str) -> tuple[int, ...]:
    """A heap key that puts later dates first (dates are fixed-width ISO strings)."""
    return tuple(-ord(c) for c in date)
