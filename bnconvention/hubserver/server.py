"""The local Hub-compatible HTTP server: :class:`LocalHub` (start, endpoint, stop, stats, faults).

Standard library only (``http.server.ThreadingHTTPServer``, HTTP/1.1 keep-alive, one thread per connection). Each
request: fault decision (latency / status / drop / truncate / trickle / endless), body read (``Content-Length``
or chunked, bounded), dispatch to the endpoint, response written with exact ``Content-Length``, one
:class:`RequestRecord` with the body bytes actually sent. Request lines are logged at DEBUG level without headers,
so tokens never reach a log.

>>> from huggingface_hub import HfApi  # doctest: +SKIP
>>> with LocalHub(tokens={"tok": "alice"}) as hub:  # doctest: +SKIP
...     api = HfApi(endpoint=hub.endpoint, token="tok")
...     api.create_repo("alice/demo")
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bnconvention.errors import UsageError
from bnconvention.hubserver.auth import AccessControl
from bnconvention.hubserver.dispatch import dispatch
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.faults import FaultInjector, FaultRule
from bnconvention.hubserver.handlers import (
    HubContext,
    HubRequest,
    HubResponse,
    error_response,
    header_safe,
    logger,
)
from bnconvention.hubserver.routes import match_route
from bnconvention.hubserver.stats import RequestRecord, RequestStats
from bnconvention.hubserver.storage import HubStore

DEFAULT_MAX_BODY_BYTES = 512 * 1024 * 1024
CHUNK = 64 * 1024
_HOST_HEADER_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]")


class _HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], hub: LocalHub) -> None:
        self.hub = hub
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _HubRequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (reset, broken pipe) is one log line, not a traceback; anything else is a bug of
        ours and keeps the standard traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            logger.info("hubserver: client %s:%s hung up (%s)", client_address[0], client_address[1],
                        type(exc).__name__)
            return
        super().handle_error(request, client_address)


class _HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "bnconvention-hubserver"
    timeout = 120  # an idle keep-alive connection is closed after this many seconds
    # Buffered output: the request is recorded before the last bytes leave, so a client that has read a whole
    # response always finds it in hub.stats.
    wbufsize = CHUNK
    server: _HubHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.open_connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Framing errors found by http.server (bad request line, unsupported method, headers too large) also
        answer JSON with an ``X-Error-Code``, like every other error."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # unparsable request line: still answer with a status and headers
            self.request_version = "HTTP/1.0"
        exc = HubRequestError(f"{phrase}: {message or explain or phrase}", status=code,
                              code=phrase.title().replace(" ", "").replace("-", ""))
        raw_path = urlsplit(getattr(self, "path", "") or "").path or "/"
        request = HubRequest(method=self.command or "-", raw_path=raw_path, raw_query="", headers={}, body=b"",
                             base_url="")
        sent = self._send(self.command or "GET", error_response(exc), truncate=None, trickle=None)
        self._record(request, code, sent, None, time.monotonic())
        with contextlib.suppress(OSError):
            self.wfile.flush()

    def handle_expect_100(self) -> bool:
        # The interim "100 Continue" must leave now, not wait in the output buffer with the final response.
        self.send_response_only(100)
        self.end_headers()
        self.wfile.flush()
        return True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        logger.debug("hubserver %s - " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    # --- one request -----------------------------------------------------------------------------------------------

    def _serve(self, method: str) -> None:
        hub = self.server.hub
        started = time.monotonic()
        split = urlsplit(self.path)
        raw_path, raw_query = split.path or "/", split.query
        decision = hub.faults.decide(method, raw_path)
        decision.wait()
        action = decision.action
        fault = action.kind if action is not None else (
            "gate" if decision.gates else "latency" if decision.latency_s > 0 else None)
        request = HubRequest(method=method, raw_path=raw_path, raw_query=raw_query, headers=self.headers, body=b"",
                             base_url=self._base_url())
        if action is not None and action.kind == "drop":
            self._record(request, None, 0, fault, started)
            self._drop()
            return
        truncate: float | None = None
        trickle: float | None = action.rate_bps if action is not None and action.kind == "trickle" else None
        try:
            request.body = self._read_body(hub.max_body_bytes)
        except HubRequestError as exc:
            self.close_connection = True  # the unread body would be taken for the next request
            response = error_response(exc)
        else:
            if action is not None and action.kind == "status":
                response = _injected_error(action)
            else:
                response = dispatch(hub.context, request)
            if action is not None and action.kind == "truncate":
                truncate = action.truncate_fraction
            if action is not None and action.kind == "endless" and response.status < 400:
                response.headers["Link"] = request.next_link(endless_page=action.fired)
        sent = self._send(method, response, truncate=truncate, trickle=trickle)
        self._record(request, response.status, sent, fault, started)
        try:
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        if truncate is not None:
            self._drop()

    def _base_url(self) -> str:
        host = self.headers.get("Host", "")
        if host and set(host) <= _HOST_HEADER_CHARS:
            return f"http://{host}"
        return self.server.hub.endpoint

    def _read_body(self, limit: int) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked(limit)
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            return b""
        try:
            length = int(raw_length)
        except ValueError:
            raise HubRequestError(f"Content-Length {raw_length!r} is not a number", status=400,
                                  code="BadRequest") from None
        if length < 0:
            raise HubRequestError(f"Content-Length {length} is negative", status=400, code="BadRequest")
        if length > limit:
            raise HubRequestError(f"request body of {length} bytes is over this server's {limit}-byte limit",
                                  status=413, code="PayloadTooLarge")
        return self.rfile.read(length)

    def _read_chunked(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise HubRequestError(f"malformed chunk size {line!r}", status=400, code="BadRequest") from None
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                return b"".join(parts)
            total += size
            if total > limit:
                raise HubRequestError(f"request body over this server's {limit}-byte limit", status=413,
                                      code="PayloadTooLarge")
            parts.append(self.rfile.read(size))
            self.rfile.readline(16)  # CRLF after the chunk

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, method: str, response: HubResponse, *, truncate: float | None, trickle: float | None) -> int:
        """Write the response (the last buffered bytes are flushed by the caller); return the body bytes written.
        ``trickle``: bytes per second of the body (a fault)."""
        try:
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, header_safe(value, limit=4000))
            self.send_header("Content-Length", str(response.length))
            self.end_headers()
            if method == "HEAD":
                return 0
            budget = response.length if truncate is None else int(response.length * truncate)
            if trickle is not None:
                return self._trickle_body(response, budget, rate_bps=trickle)
            return self._write_body(response, budget)
        except OSError:  # the client went away
            self.close_connection = True
            return 0

    def _write_body(self, response: HubResponse, budget: int) -> int:
        if response.file is None:
            self.wfile.write(response.body[:budget])
            return min(budget, len(response.body))
        sent = 0
        with open(response.file, "rb") as handle:
            handle.seek(response.file_offset)
            while sent < budget:
                chunk = handle.read(min(CHUNK, budget - sent))
                if not chunk:
                    break
                self.wfile.write(chunk)
                sent += len(chunk)
        return sent

    def _trickle_body(self, response: HubResponse, budget: int, *, rate_bps: float) -> int:
        """The body in pieces of about a tenth of a second's worth, each flushed, at ``rate_bps`` bytes per second;
        stops when the client hangs up (``OSError``, caught by :meth:`_send`)."""
        if response.file is not None:
            with open(response.file, "rb") as handle:
                handle.seek(response.file_offset)
                body = handle.read(budget)
        else:
            body = response.body[:budget]
        piece = max(1, int(rate_bps / 10))
        sent = 0
        while sent < len(body):
            if sent:
                time.sleep(piece / rate_bps)
            self.wfile.write(body[sent:sent + piece])
            sent += len(body[sent:sent + piece])
            if sent < len(body):  # the last piece leaves with the caller's flush, after the request is recorded
                self.wfile.flush()
        return sent

    def _record(self, request: HubRequest, status: int | None, sent: int, fault: str | None,
                started: float) -> None:
        route = request.route
        if route is None:  # dropped, refused before routing, or a route error: still attribute it to its repo
            with contextlib.suppress(HubRequestError):
                route = match_route(request.method, request.raw_path)
        self.server.hub.record(RequestRecord(
            method=request.method, path=request.raw_path, query=request.raw_query, status=status, bytes_sent=sent,
            repo_id=route.repo_id if route else None, repo_type=route.repo_type if route else None, fault=fault,
            duration_s=time.monotonic() - started))


def _injected_error(rule: FaultRule) -> HubResponse:
    headers: dict[str, str] = {}
    if rule.status in (429, 503):
        headers["Retry-After"] = str(rule.retry_after)
    if rule.status == 429:
        # The IETF RateLimit headers huggingface_hub parses: 0 requests left, reset in retry_after seconds.
        headers["RateLimit"] = f'"api";r=0;t={rule.retry_after}'
        headers["RateLimit-Policy"] = '"fixed window";"api";q=1000;w=300'
    return error_response(HubRequestError(f"injected fault: HTTP {rule.status}", status=rule.status,
                                          code=rule.code, headers=headers))


class LocalHub:
    """A Hub-compatible server for huggingface_hub on 127.0.0.1, backed by a :class:`HubStore` on disk.

    ``root=None`` uses a temporary directory removed by :meth:`stop`. ``durable`` (fsync every write) defaults to
    True for a given ``root`` and False for a temporary one; test fixtures on ``tmp_path`` should pass
    ``durable=False``. ``tokens`` maps token -> user name, ``orgs`` organisation -> members. ``page_size`` is the
    repo-listing page (the client follows ``Link`` headers). ``faults`` and ``seed`` configure fault injection;
    :attr:`faults` changes it at run time.

    ``lfs=False`` (the default) answers every preupload ``regular``: content travels inside the commit, and any
    client works, Xet-enabled or not. ``lfs=True`` answers like the Hub (``lfs`` for binary files, files of 10 MiB
    and more, and ``.gitattributes`` LFS patterns) and serves the classic LFS batch API: what
    ``datasets.Dataset.push_to_hub`` needs (it deletes each parquet shard after its LFS pre-upload). Clients then
    need ``HF_HUB_DISABLE_XET=1``: this server has no Xet storage.
    """

    def __init__(self, root: str | Path | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 tokens: Mapping[str, str] | None = None, orgs: Mapping[str, Iterable[str]] | None = None,
                 faults: Iterable[FaultRule] = (), seed: int = 0, page_size: int = 50, tree_page_size: int = 1000,
                 commits_page_size: int = 50, discussions_page_size: int = 50,
                 clock: Callable[[], datetime] | None = None, durable: bool | None = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, lfs: bool = False) -> None:
        for name, value in (("page_size", page_size), ("tree_page_size", tree_page_size),
                            ("commits_page_size", commits_page_size),
                            ("discussions_page_size", discussions_page_size), ("max_body_bytes", max_body_bytes)):
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be a positive integer, found {value!r}")
        self._temp_root: str | None = None
        if root is None:
            self._temp_root = tempfile.mkdtemp(prefix="bnc-localhub-")
            root = self._temp_root
        if durable is None:  # fsync only data meant to outlive the server (seeding is ~15x faster without)
            durable = self._temp_root is None
        self.host = host
        self.requested_port = port
        self.max_body_bytes = max_body_bytes
        self.store = HubStore(root, clock=clock, durable=durable)
        self.access = AccessControl(tokens, orgs=orgs)
        self.faults = FaultInjector(faults, seed=seed)
        self.context = HubContext(store=self.store, access=self.access, page_size=page_size,
                                  tree_page_size=tree_page_size, commits_page_size=commits_page_size,
                                  discussions_page_size=discussions_page_size, lfs=lfs,
                                  max_body_bytes=max_body_bytes)
        self._stats = RequestStats()
        self._server: _HubHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def start(self) -> LocalHub:
        if self._server is not None:
            return self
        self._server = _HubHTTPServer((self.host, self.requested_port), self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"localhub-{self.port}", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise UsageError("the local Hub is not started; call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: pass it as ``HfApi(endpoint=...)`` or ``HF_ENDPOINT``."""
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop serving, close open connections, and remove the temporary root if one was made."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            with server.connections_lock:
                connections = list(server.open_connections)
            for connection in connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._temp_root is not None:
            shutil.rmtree(self._temp_root, ignore_errors=True)
            self._temp_root = None

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- counters --------------------------------------------------------------------------------------------------

    def record(self, record: RequestRecord) -> None:
        self._stats.record(record)

    @property
    def stats(self) -> list[RequestRecord]:
        """Every request served since the start (or the last :meth:`reset_stats`), in order of completion."""
        return self._stats.records

    def bytes_sent(self, prefix: str | None = None, *, repo_id: str | None = None, method: str | None = None) -> int:
        """Body bytes sent for requests whose raw path starts with ``prefix`` and/or that addressed ``repo_id``."""
        return self._stats.bytes_sent(prefix, repo_id=repo_id, method=method)

    def reset_stats(self) -> None:
        self._stats.reset()
