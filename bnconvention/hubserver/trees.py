"""Pure operations on repo trees (``{path: FileEntry}``): apply commit operations, three-way merge, tree listing.

Nothing here touches the disk; the store computes a new tree, checks it, and only then writes.

>>> a = FileEntry.of(b"x")
>>> apply_operations({}, [AddFile("d/f.txt", b"x")])["d/f.txt"] == a
True
>>> a.oid  # git hash-object of b"x"
'c1b0730e0133447badcfd47fd144e254807b06e1'
>>> merged, conflicts = three_way_merge({}, {"a": a}, {"b": a})
>>> sorted(merged), conflicts
(['a', 'b'], [])
>>> three_way_merge({"a": a}, {"a": FileEntry.of(b"y")}, {"a": FileEntry.of(b"z")})[1]
['a']
>>> FileEntry.of_lfs("0" * 64, 5).oid  # an LFS file's git id is its pointer's, as on the Hub
'dcc4689d5770b475b5120d8bba9696b1e34cdd05'
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bnconvention.formats.canonical import sha256_hex
from bnconvention.formats.json_types import JsonObject
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.validation import bad_request, check_file_path, check_folder_path
from bnconvention.hubserver.wire import git_blob_sha1, sha1_hex


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file that stands for a content in git (the Hub's ``oid`` of an LFS file is its id)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode("ascii")


@dataclass(frozen=True)
class FileEntry:
    """One file of a tree: content address (sha256), git blob id (the Hub's ``oid``/``ETag``) and size.

    ``lfs``: uploaded through the LFS batch API; its ``oid`` is then the git id of its pointer file, as on the Hub
    (which also names the content's sha256 in ``lfs`` entries and ``X-Linked-Etag``)."""

    sha256: str
    oid: str
    size: int
    lfs: bool = False

    @classmethod
    def of(cls, data: bytes) -> FileEntry:
        return cls(sha256=sha256_hex(data), oid=git_blob_sha1(data), size=len(data))

    @classmethod
    def of_lfs(cls, sha256: str, size: int) -> FileEntry:
        return cls(sha256=sha256, oid=git_blob_sha1(lfs_pointer(sha256, size)), size=size, lfs=True)

    def to_json(self) -> JsonObject:
        value: JsonObject = {"sha256": self.sha256, "oid": self.oid, "size": self.size}
        if self.lfs:
            value["lfs"] = True
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> FileEntry:
        size = value["size"]
        if not isinstance(size, int):
            raise ValueError(f"tree entry size {size!r} is not an integer")
        return cls(sha256=str(value["sha256"]), oid=str(value["oid"]), size=size, lfs=value.get("lfs") is True)


Tree = dict[str, FileEntry]


@dataclass(frozen=True)
class AddFile:
    """Add or overwrite ``path`` with ``data``."""

    path: str
    data: bytes


@dataclass(frozen=True)
class AddLfsFile:
    """Add or overwrite ``path`` with a content uploaded beforehand through the LFS batch API (the store checks
    that it holds it)."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class DeleteFile:
    """Delete the file ``path`` (it must exist)."""

    path: str


@dataclass(frozen=True)
class DeleteFolder:
    """Delete every file under the folder ``path`` (at least one must exist)."""

    path: str


Operation = AddFile | AddLfsFile | DeleteFile | DeleteFolder


def _entry_not_found(message: str) -> HubRequestError:
    return HubRequestError(message, status=404, code="EntryNotFound")


def apply_operations(tree: Mapping[str, FileEntry], operations: Iterable[Operation]) -> Tree:
    """The tree after applying ``operations`` in order; raises before anything is written."""
    result: Tree = dict(tree)
    for op in operations:
        if isinstance(op, AddFile):
            check_file_path(op.path)
            if not isinstance(op.data, bytes | bytearray | memoryview):
                raise bad_request(f"content of {op.path!r} must be bytes, found {type(op.data).__name__}")
            result[op.path] = FileEntry.of(bytes(op.data))
        elif isinstance(op, AddLfsFile):
            result[check_file_path(op.path)] = FileEntry.of_lfs(op.sha256, op.size)
        elif isinstance(op, DeleteFile):
            check_file_path(op.path)
            if op.path not in result:
                raise _entry_not_found(f"A file with this name doesn't exist: {op.path!r}")
            del result[op.path]
        elif isinstance(op, DeleteFolder):
            folder = check_folder_path(op.path)
            doomed = [path for path in result if path.startswith(folder + "/")]
            if not doomed:
                raise _entry_not_found(f"A folder with this name doesn't exist: {folder!r}")
            for path in doomed:
                del result[path]
        else:
            raise bad_request(f"unknown commit operation {op!r}")
    check_tree(result)
    return result


def check_tree(tree: Mapping[str, FileEntry]) -> None:
    """A path cannot be both a file and a folder."""
    for path in tree:
        parent = posixpath.dirname(path)
        while parent:
            if parent in tree:
                raise bad_request(f"{parent!r} is a file, so {path!r} cannot be created under it")
            parent = posixpath.dirname(parent)


def three_way_merge(base: Mapping[str, FileEntry], ours: Mapping[str, FileEntry],
                    theirs: Mapping[str, FileEntry]) -> tuple[Tree, list[str]]:
    """File-level three-way merge: a path changed on one side takes that side; changed on both, differently, is a
    conflict. Returns the merged tree and the sorted conflicting paths."""
    merged: Tree = {}
    conflicts: list[str] = []
    for path in sorted(set(base) | set(ours) | set(theirs)):
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        if o == t:
            chosen = o
        elif o == b:
            chosen = t
        elif t == b:
            chosen = o
        else:
            conflicts.append(path)
            continue
        if chosen is not None:
            merged[path] = chosen
    return merged, conflicts


def folder_oid(tree: Mapping[str, FileEntry], folder: str) -> str:
    """A stable id for a folder's content (stands in for git's tree sha1)."""
    prefix = folder + "/" if folder else ""
    lines = sorted(f"{path[len(prefix):]}\0{entry.oid}" for path, entry in tree.items() if path.startswith(prefix))
    return sha1_hex("\n".join(lines).encode("utf-8"))


def list_folder(tree: Mapping[str, FileEntry], folder: str, *, recursive: bool) -> list[tuple[str, str]]:
    """``(kind, path)`` pairs under ``folder`` ("" = root), folders before files at each level, sorted by path.

    Raises 404 ``EntryNotFound`` when ``folder`` is neither the root nor a folder of the tree.
    """
    prefix = folder + "/" if folder else ""
    folders: set[str] = set()
    files: list[str] = []
    for path in tree:
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix):]
        parts = rest.split("/")
        if recursive:
            files.append(path)
            for depth in range(1, len(parts)):
                folders.add(prefix + "/".join(parts[:depth]))
        elif len(parts) == 1:
            files.append(path)
        else:
            folders.add(prefix + parts[0])
    if folder and not files and not folders:
        raise _entry_not_found(f"{folder!r} is not a folder of this revision")
    return [("directory", path) for path in sorted(folders)] + [("file", path) for path in sorted(files)]


def is_folder(tree: Mapping[str, FileEntry], path: str) -> bool:
    prefix = path + "/"
    return any(p.startswith(prefix) for p in tree)
