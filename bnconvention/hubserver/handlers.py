"""What every endpoint shares: the request, response and context objects, and the access checks.

Endpoints are plain functions ``(HubContext, HubRequest) -> HubResponse`` (in ``repo_endpoints``,
``write_endpoints`` and ``discussion_endpoints``, which import this module and never each other); they raise
:class:`~bnconvention.hubserver.errors.HubRequestError` for every refusal, which ``dispatch`` turns into a JSON
error with the ``X-Error-Code`` header the client maps to its typed exceptions. The HTTP plumbing (sockets,
faults, counters) lives in ``server``.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from bnconvention.errors import JSONInputError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.json_types import JsonObject
from bnconvention.formats.text import one_line
from bnconvention.hubserver.auth import AccessControl, forbidden, unauthorized
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.records import RepoState
from bnconvention.hubserver.repos import Commit
from bnconvention.hubserver.routes import Route
from bnconvention.hubserver.storage import HubStore
from bnconvention.hubserver.validation import RepoType, bad_request

logger = logging.getLogger("bnconvention.hubserver")

JSON_TYPE = "application/json; charset=utf-8"


@dataclass
class HubContext:
    """What endpoints share: the store, access control, page sizes, the upload mode and parse caches.

    ``lfs``: preupload answers like the Hub (``lfs`` for binary, large or ``.gitattributes``-tracked files) and
    the classic LFS batch API is served (``lfs_endpoints``); otherwise every file is ``regular``. ``lfs_secret``
    signs the upload URLs the batch API hands out (they carry no token, like the Hub's storage URLs).
    """

    store: HubStore
    access: AccessControl
    page_size: int = 50
    tree_page_size: int = 1000
    commits_page_size: int = 50
    discussions_page_size: int = 50
    lfs: bool = False
    max_body_bytes: int = 512 * 1024 * 1024
    lfs_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _caches: dict[str, dict[str, object]] = field(default_factory=dict, repr=False)

    def cached(self, kind: str, key: str, compute: Callable[[], Any]) -> Any:
        """Memoise a pure function of immutable content (card metadata, safetensors counts by blob sha256)."""
        with self._cache_lock:
            cache = self._caches.setdefault(kind, {})
            if key in cache:
                return cache[key]
        value = compute()
        with self._cache_lock:
            cache[key] = value
        return value


@dataclass
class HubRequest:
    """One parsed request. ``user`` is the authenticated user (``None``: anonymous)."""

    method: str
    raw_path: str
    raw_query: str
    headers: Mapping[str, str] | Message[str, str]
    body: bytes
    base_url: str
    route: Route | None = None
    user: str | None = None

    @property
    def repo_id(self) -> str:
        """The repo the route names (endpoints of repo routes only)."""
        if self.route is None or self.route.repo_id is None:
            raise HubRequestError(f"internal: {self.raw_path} has no repo in its route", status=500,
                                  code="InternalError")
        return self.route.repo_id

    @property
    def repo_type(self) -> RepoType:
        if self.route is None or self.route.repo_type is None:
            raise HubRequestError(f"internal: {self.raw_path} has no repo type in its route", status=500,
                                  code="InternalError")
        return self.route.repo_type

    @property
    def revision(self) -> str:
        return (self.route.revision if self.route is not None else None) or "main"

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(self.raw_query, keep_blank_values=True)

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def params(self, name: str) -> list[str]:
        return self.query.get(name, [])

    def flag(self, name: str) -> bool:
        value = self.param(name)
        return value is not None and value.lower() in ("1", "true", "yes", "")

    def int_param(self, name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
        value = self.param(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise bad_request(f"query parameter {name}={value!r} is not an integer") from None
        if number < minimum or (maximum is not None and number > maximum):
            raise bad_request(f"query parameter {name}={number} is out of range")
        return number

    def json_body(self, *, optional: bool = False) -> JsonObject:
        """The body as strict JSON (400 when malformed or of the wrong top-level type); ``{}`` for an empty body
        when ``optional``."""
        if not self.body.strip():
            if optional:
                return {}
            raise bad_request(f"{self.method} {self.raw_path} needs a JSON body")
        try:
            value = loads_strict(self.body, source=f"{self.method} {self.raw_path} body")
        except JSONInputError as exc:
            raise bad_request(str(exc)) from exc
        if not isinstance(value, dict):
            raise bad_request(f"the JSON body must be a dict, found {type(value).__name__}")
        return value

    def next_link(self, **changes: object) -> str:
        """An absolute ``Link`` header value pointing to this URL with ``changes`` in the query."""
        query = {k: v for k, v in self.query.items() if k not in changes}
        query.update({k: [str(v)] for k, v in changes.items()})
        return f'<{self.base_url}{self.raw_path}?{urlencode(query, doseq=True)}>; rel="next"'


@dataclass
class HubResponse:
    """A response: a byte body or a slice of a stored blob (streamed), plus headers."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: Path | None = None
    file_offset: int = 0
    file_length: int = 0

    @property
    def length(self) -> int:
        return self.file_length if self.file is not None else len(self.body)


def json_response(value: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> HubResponse:
    body = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return HubResponse(status=status, headers={"Content-Type": JSON_TYPE, **(headers or {})}, body=body)


def header_safe(text: str, *, limit: int = 400) -> str:
    """One line of latin-1 text, fit for a header value."""
    flat = one_line(text)[:limit]
    return flat.encode("latin-1", "replace").decode("latin-1")


def error_response(exc: HubRequestError, *, extra: Mapping[str, Any] | None = None) -> HubResponse:
    headers = {"X-Error-Code": exc.code, "X-Error-Message": header_safe(str(exc))}
    headers.update(exc.headers)
    return json_response({"error": str(exc), **(extra or {})}, status=exc.status, headers=headers)


def require_user(request: HubRequest) -> str:
    if request.user is None:
        raise unauthorized("this endpoint needs a token (Authorization: Bearer <token>)")
    return request.user


def readable_state(context: HubContext, request: HubRequest) -> RepoState:
    """The route's repo state; a private repo the user may not read is reported as missing, as on the Hub."""
    state = context.store.repo_state(request.repo_id, repo_type=request.repo_type)
    if state["private"] and not context.access.can_write(request.user, request.repo_id.split("/")[0]):
        raise HubRequestError(f"Repository Not Found: {request.repo_id}", status=404, code="RepoNotFound",
                              repo_id=request.repo_id)
    return state


def require_write(context: HubContext, request: HubRequest) -> str:
    """The user, when they may write to the route's namespace (401 without a token, 403 otherwise)."""
    user = require_user(request)
    namespace = request.repo_id.split("/")[0]
    if not context.access.can_write(user, namespace):
        raise forbidden(f"{user} cannot write to {namespace}/: only its owner and organization members can; "
                        "open a pull request instead (create_pr=True)", repo_id=request.repo_id)
    return user


def resolved_commit(context: HubContext, request: HubRequest, revision: str | None = None) -> Commit:
    return context.store.resolve(request.repo_id, revision or request.revision,
                                 repo_type=request.repo_type).commit
