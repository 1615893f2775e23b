"""Request and response objects of the local Hub, shared checks, and the dispatch from a route to its endpoint.

Endpoints are plain functions ``(HubContext, HubRequest) -> HubResponse`` (in ``repo_endpoints``,
``write_endpoints`` and ``discussion_endpoints``); they raise :class:`~bnconvention.errors.HubRequestError` for
every refusal, which :func:`dispatch` turns into a JSON error with the ``X-Error-Code`` header the client maps to
its typed exceptions. The HTTP plumbing (sockets, faults, counters) lives in ``server``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from bnconvention.errors import HubRequestError, JSONInputError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.text import one_line
from bnconvention.hubserver.auth import AccessControl, unauthorized
from bnconvention.hubserver.routes import Route, match_route
from bnconvention.hubserver.storage import HubStore
from bnconvention.hubserver.validation import RepoType, bad_request

logger = logging.getLogger("bnconvention.hubserver")

JSON_TYPE = "application/json; charset=utf-8"


@dataclass
class HubContext:
    """What endpoints share: the store, access control, page sizes and parse caches."""

    store: HubStore
    access: AccessControl
    page_size: int = 50
    tree_page_size: int = 1000
    commits_page_size: int = 50
    discussions_page_size: int = 50
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _caches: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

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
    headers: Mapping[str, str]
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

    def json_body(self, *, optional: bool = False, expect: type = dict) -> Any:
        """The body as strict JSON (400 when malformed or of the wrong top-level type); ``{}`` for an empty body
        when ``optional``."""
        if not self.body.strip():
            if optional:
                return expect()
            raise bad_request(f"{self.method} {self.raw_path} needs a JSON body")
        try:
            value = loads_strict(self.body, source=f"{self.method} {self.raw_path} body")
        except JSONInputError as exc:
            raise bad_request(str(exc)) from exc
        if not isinstance(value, expect):
            raise bad_request(f"the JSON body must be a {expect.__name__}, found {type(value).__name__}")
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


Endpoint = Callable[[HubContext, HubRequest], HubResponse]


def _endpoints() -> dict[str, Endpoint]:
    from bnconvention.hubserver import discussion_endpoints, repo_endpoints, write_endpoints

    table: dict[str, Endpoint] = {}
    for module in (repo_endpoints, write_endpoints, discussion_endpoints):
        table.update(module.ENDPOINTS)
    return table


_TABLE: dict[str, Endpoint] | None = None


def dispatch(context: HubContext, request: HubRequest) -> HubResponse:
    """Authenticate, route and run one request; every refusal becomes a JSON error response."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _endpoints()
    try:
        request.user = context.access.user_for(request.headers.get("Authorization"))
        request.route = match_route(request.method, request.raw_path)
        return _TABLE[request.route.endpoint](context, request)
    except HubRequestError as exc:
        return error_response(exc)
    except Exception:  # noqa: BLE001 - a server bug must not kill the connection thread; it is logged
        logger.exception("hubserver: unhandled error on %s %s", request.method, request.raw_path)
        return error_response(HubRequestError(
            "Internal error in the local Hub server (see its log)", status=500, code="InternalError"))
