"""Checks on names that arrive from requests: repo ids, file paths in a repo, branch and tag names.

Every name that later becomes part of a filesystem path (namespaces, repo names) is checked here, so nothing a
client sends can escape the store's root. File paths inside a repo never touch the filesystem (blobs are
content-addressed) but are still checked the way the Hub checks them.

>>> check_repo_id("org/model-1")
('org', 'model-1')
>>> check_file_path("weights/model.safetensors")
'weights/model.safetensors'
"""

from __future__ import annotations

import re
from typing import Literal

from bnconvention.hubserver.errors import HubRequestError

RepoType = Literal["model", "dataset", "space"]
REPO_TYPES: tuple[RepoType, ...] = ("model", "dataset", "space")
# URL prefix of a repo's web/resolve URLs, and the plural used in /api/{plural}/... paths.
URL_PREFIX: dict[str, str] = {"model": "", "dataset": "datasets/", "space": "spaces/"}
API_PLURAL: dict[str, RepoType] = {"models": "model", "datasets": "dataset", "spaces": "space"}

MAX_NAME_LENGTH = 96
MAX_PATH_LENGTH = 1024
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
# Namespaces that would make URLs ambiguous (/api/..., /datasets/...).
RESERVED_NAMESPACES = frozenset({"api", "models", "datasets", "spaces", "buckets", "kernels", "resolve"})
_REF_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9_])?$")
COMMIT_OID = re.compile(r"^[0-9a-f]{40}$")


def bad_request(message: str, *, repo_id: str | None = None) -> HubRequestError:
    return HubRequestError(message, status=400, code="BadRequest", repo_id=repo_id)


def check_repo_type(repo_type: object) -> RepoType:
    if repo_type is None:
        return "model"
    for known in REPO_TYPES:
        if repo_type == known:
            return known
    raise bad_request(f"repo type {repo_type!r} is not one of {', '.join(REPO_TYPES)}")


def check_name(name: object, *, what: str) -> str:
    """A namespace or repo name: letters, digits, ``-``, ``_``, ``.``; no ``--`` or ``..``; at most 96 chars."""
    if not isinstance(name, str) or not name:
        raise bad_request(f"{what} is missing or not a string (found {name!r})")
    if len(name) > MAX_NAME_LENGTH or not _NAME.match(name) or "--" in name or ".." in name:
        raise bad_request(
            f"{what} {name!r} is not a valid name: use letters, digits, '-', '_' and '.', start and end with a "
            f"letter or digit, no '--' or '..', at most {MAX_NAME_LENGTH} characters"
        )
    return name


def check_repo_id(repo_id: object) -> tuple[str, str]:
    """Split ``namespace/name`` after checking both parts."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise bad_request(f"repo id {repo_id!r} must be 'namespace/name'")
    namespace, name = repo_id.split("/")
    check_name(namespace, what="namespace")
    check_name(name, what="repo name")
    if namespace.lower() in RESERVED_NAMESPACES:
        raise bad_request(f"namespace {namespace!r} is reserved; pick another user or organization name")
    return namespace, name


def check_file_path(path: object, *, field: str = "path") -> str:
    """A file path inside a repo: relative, '/'-separated, no empty, '.', '..' or '.git' parts, no control chars."""
    if not isinstance(path, str) or not path:
        raise bad_request(f"{field} is missing or not a string (found {path!r})")
    if len(path) > MAX_PATH_LENGTH:
        raise bad_request(f"{field} is {len(path)} characters long, over the {MAX_PATH_LENGTH}-character limit")
    if path.startswith("/") or "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise bad_request(
            f"{field} {path!r} is not a valid repo path: it must be relative, use '/' as separator and contain no "
            "control characters"
        )
    for part in path.split("/"):
        if part in ("", ".", "..") or part == ".git":
            raise bad_request(
                f"{field} {path!r} is not a valid repo path: empty, '.', '..' and '.git' components are not allowed"
            )
    return path


def check_folder_path(path: object, *, field: str = "path") -> str:
    """A folder path: like a file path, a trailing '/' tolerated (the client sends one for folder deletes)."""
    if isinstance(path, str) and path.endswith("/") and len(path) > 1:
        path = path[:-1]
    return check_file_path(path, field=field)


def check_ref_name(name: object, *, what: str) -> str:
    """A branch or tag name: not 'refs/...', not a commit id, no '..' or '//'."""
    if not isinstance(name, str) or not name:
        raise bad_request(f"{what} name is missing or not a string (found {name!r})")
    if (len(name) > 200 or not _REF_NAME.match(name) or ".." in name or "//" in name or name.startswith("refs/")
            or COMMIT_OID.match(name) or name.endswith(".lock")):
        raise bad_request(
            f"{what} name {name!r} is invalid: use letters, digits, '.', '_', '-' and '/', not starting with "
            "'refs/', not a 40-hex commit id"
        )
    return name
