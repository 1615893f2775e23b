"""Which files go to LFS, as the Hub decides at preupload, and the checks an ``lfsFile`` commit line needs.

Used by ``write_endpoints`` (preupload, commit) and ``lfs_endpoints`` (the batch API), which never import each
other.

>>> upload_mode("w.safetensors", size=10, sample=b"{}", patterns=["*.safetensors"])
'lfs'
>>> upload_mode("README.md", size=20, sample=b"# card", patterns=["*.safetensors"])
'regular'
>>> upload_mode("data/train.parquet", size=900, sample=b"PAR1\\x15\\x00", patterns=[])
'lfs'
>>> lfs_patterns("*.bin filter=lfs diff=lfs merge=lfs -text\\n# *.txt filter=lfs\\n*.md text\\n")
['*.bin']
>>> is_tracked("weights/a.bin", ["*.bin"]), is_tracked("a.bin", ["weights/*.bin"])
(True, False)
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any, Literal

from bnconvention.hubserver.handlers import HubContext
from bnconvention.hubserver.repos import Commit
from bnconvention.hubserver.validation import bad_request

# The Hub stores files of 10 MiB and more in LFS whatever their name.
LFS_MIN_SIZE = 10 * 1024 * 1024
MAX_GITATTRIBUTES_BYTES = 1024 * 1024
LFS_JSON = "application/vnd.git-lfs+json"
UPLOAD_URL_LIFETIME_S = 3600
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")

UploadMode = Literal["lfs", "regular"]


def lfs_patterns(gitattributes: str) -> list[str]:
    """The patterns a ``.gitattributes`` text tracks with ``filter=lfs`` (comments and other attributes skipped)."""
    patterns = []
    for line in gitattributes.splitlines():
        parts = line.split()
        if parts and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            patterns.append(parts[0])
    return patterns


def is_tracked(path: str, patterns: list[str]) -> bool:
    """Whether a gitattributes pattern matches ``path``: a pattern without ``/`` matches the file name at any
    depth, one with ``/`` the whole path from the repo root (git's rule, ``**`` approximated by ``*``)."""
    name = posixpath.basename(path)
    for pattern in patterns:
        anchored = pattern.lstrip("/")
        if "/" in anchored.rstrip("/"):
            if fnmatch.fnmatchcase(path, anchored.replace("**/", "*")):
                return True
        elif fnmatch.fnmatchcase(name, anchored):
            return True
    return False


def upload_mode(path: str, *, size: int, sample: bytes, patterns: list[str]) -> UploadMode:
    """What the Hub's preupload answers for one file: ``lfs`` for a file of 10 MiB or more, a binary one (a NUL
    byte in its first 512 bytes, git's test) or one the ``.gitattributes`` tracks; ``regular`` otherwise."""
    if size >= LFS_MIN_SIZE or b"\0" in sample or is_tracked(path, patterns):
        return "lfs"
    return "regular"


def revision_patterns(context: HubContext, commit: Commit) -> list[str]:
    """The LFS patterns of the ``.gitattributes`` at a commit (none when it is absent, too big or not UTF-8)."""
    entry = commit.tree.get(".gitattributes")
    if entry is None or entry.size > MAX_GITATTRIBUTES_BYTES:
        return []

    def compute() -> list[str]:
        try:
            return lfs_patterns(context.store.blob_path(entry.sha256).read_text("utf-8"))
        except (OSError, UnicodeDecodeError):
            return []

    patterns: list[str] = context.cached("gitattributes", entry.sha256, compute)
    return patterns



def lfs_size(context: HubContext, oid: str, size: Any, *, path: str, line: int) -> int:
    """The size of an ``lfsFile`` commit line: as given, or (a copied LFS file names none) the stored object's."""
    if not SHA256_HEX.match(oid):
        raise bad_request(f"line {line}: LFS file {path!r} needs a sha256 'oid', found {oid!r}")
    if size is None:
        blob = context.store.blob_path(oid)
        if not blob.is_file():
            raise bad_request(f"line {line}: LFS object sha256:{oid} of {path!r} was never uploaded")
        return blob.stat().st_size
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise bad_request(f"line {line}: LFS file {path!r} has size {size!r}, not a non-negative integer")
    return size
