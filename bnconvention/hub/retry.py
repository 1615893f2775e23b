"""Our own retry layer for Hub calls: backoff on 408/429/5xx, timeouts, dropped connections and short bodies.

huggingface_hub retries some calls itself (pagination, downloads) with sleeps of 1 to 8 s per try and none at all on
others (``model_info``, discussions, commits). The crawl needs one policy it controls: how many tries, how long to
wait (tests pass delays of a few milliseconds), and which failures are worth another try. A 404, a 401 or a bad
request is not; the error is raised at once.

Why not ``huggingface_hub.utils.http_backoff``: it retries one request given as method and URL, with a fixed
``time.sleep`` (1 to 8 s, Retry-After plus one second); it does not cover what fails *while a streamed body is read*
(a header range cut short or trickled past its time bound), the API calls made through ``HfApi`` methods
(``model_info``, discussions, ``create_commit``), nor a non-idempotent call that must look for its own effect
before trying again (opening a pull request). One layer for all of them keeps one policy and one report.

Every retry is logged (logger ``bnconvention.hub``, level WARNING) as one line saying what is retried, why, and
when; the CLI shows these lines on stderr (:func:`show_retries`), so a slow run says why it is slow.

>>> policy = RetryPolicy(attempts=3, base_delay=0.0)
>>> calls = []
>>> def flaky():
...     calls.append(1)
...     if len(calls) < 3:
...         raise TransientHubError("injected")
...     return "ok"
>>> call_with_retry(flaky, policy=policy, what="demo")
'ok'
>>> len(calls)
3
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx2

from bnconvention.errors import HubNetworkError, TransientHubError, UsageError
from bnconvention.formats.text import one_line

logger = logging.getLogger("bnconvention.hub")

T = TypeVar("T")

RETRYABLE_STATUS: frozenset[int] = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    The wait before try ``k`` (k = 1 for the first retry) is ``min(max_delay, base_delay * 2**(k-1))`` times a
    random factor in ``[1 - jitter, 1]``; a ``Retry-After`` the server sent is honoured, capped at ``max_delay``.
    ``sleep`` is injectable so tests can record the waits instead of sleeping.
    """

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise UsageError(f"retry attempts must be a positive integer, got {self.attempts!r}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise UsageError("retry delays must not be negative")
        if not 0.0 <= self.jitter <= 1.0:
            raise UsageError(f"retry jitter must be within [0, 1], got {self.jitter!r}")

    def delay(self, retry: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        if retry_after is not None:
            return max(0.0, min(self.max_delay, retry_after))
        wait = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return wait * (1.0 - self.jitter * random.random())  # noqa: S311 - jitter, not cryptography


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def is_retryable(exc: BaseException) -> bool:
    """Whether a failure is transient: 408/425/429/5xx, a timeout, a dropped or refused connection, a short body.

    The whole cause chain is inspected, because huggingface_hub wraps network errors (e.g. ``hf_hub_download``
    raises ``LocalEntryNotFoundError`` from a ``ConnectError``).
    """
    for item in _chain(exc):
        status = _status(item)
        if status is not None:
            return status in RETRYABLE_STATUS
        if isinstance(item, (TransientHubError, httpx2.TransportError, ConnectionError, TimeoutError)):
            return True
    return False


def network_cause(exc: BaseException) -> BaseException | None:
    """The network-level failure behind ``exc`` (refused, dropped, cut short, timed out), or ``None`` when the Hub
    answered (an HTTP status) or the failure is not about the network."""
    for item in _chain(exc):
        if _status(item) is not None or isinstance(item, HubNetworkError):
            return None
        if isinstance(item, (TransientHubError, httpx2.TransportError, ConnectionError, TimeoutError)):
            return item
    return None


def _network_phrase(exc: BaseException) -> str:
    phrases: tuple[tuple[type[BaseException], str], ...] = (
        (httpx2.ConnectTimeout, "did not accept the connection in time"),
        (httpx2.TimeoutException, "did not answer in time"),
        (httpx2.ConnectError, "could not be reached"),
        (httpx2.RemoteProtocolError, "dropped the connection"),
        (httpx2.NetworkError, "broke the connection"),
        (TransientHubError, "did not send a complete response"),
        (ConnectionRefusedError, "could not be reached"),
        (TimeoutError, "did not answer in time"),
    )
    return next((phrase for kind, phrase in phrases if isinstance(exc, kind)), "failed at the network level")


def _request_of(exc: BaseException) -> str:
    """``METHOD URL`` of the request an httpx2 error carries, or ``""``."""
    try:
        request = exc.request  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx2 raises RuntimeError when no request was attached
        return ""
    return f"{request.method} {request.url}" if request is not None else ""


def network_error(exc: BaseException, *, endpoint: str, scrub: Callable[[str], str] = str,
                  what: str | None = None) -> HubNetworkError | None:
    """One :class:`HubNetworkError` naming the endpoint for a network-level failure (``None`` for any other)."""
    cause = network_cause(exc)
    if cause is None:
        return None
    detail = one_line(cause) or type(cause).__name__
    request = what or next(filter(None, (_request_of(item) for item in _chain(exc))), "")
    request = request.replace(f" {endpoint.rstrip('/')}/", " /", 1)
    during = f"{request}: " if request else ""
    message = (f"the Hub at {endpoint} {_network_phrase(cause)} ({during}{detail}); check --endpoint, the network "
               "and --timeout, then rerun")
    return HubNetworkError(scrub(message), endpoint=endpoint, repo_id=getattr(exc, "repo_id", None))


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` (seconds) on a 429/503, if it sent one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def describe(exc: BaseException, *, brief: bool = False) -> str:
    """A one-line description of a failure: the HTTP status when there is one, else the exception type.
    ``brief``: with the server's own message only (when it sent one), not huggingface_hub's whole text."""
    status = _status(exc)
    server_message = getattr(exc, "server_message", None)
    text = one_line(server_message if brief and status is not None and server_message else exc)
    if len(text) > 300:
        text = text[:297] + "..."
    prefix = f"HTTP {status}" if status is not None else type(exc).__name__
    return f"{prefix}: {text}" if text else prefix


def call_with_retry(fn: Callable[[], T], *, policy: RetryPolicy, what: str,
                    before_retry: Callable[[], T | None] | None = None) -> T:
    """Call ``fn`` until it succeeds, a non-retryable error is raised, or ``policy.attempts`` are used up.

    ``before_retry`` runs before every retry; when it returns something other than ``None`` that value is returned
    instead of calling ``fn`` again. A non-idempotent call (opening a pull request) uses it to look for what the
    failed try may have done after all. After the last try the failure is re-raised unchanged, so callers keep the
    client's typed exceptions; ``what`` names the operation in log lines.
    """
    retry = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            retry += 1
            if retry >= policy.attempts or not is_retryable(exc):
                raise
            wait = policy.delay(retry, retry_after=retry_after_seconds(exc))
            logger.warning("retrying %s after %s (retry %d of %d, in %.2f s)", what, describe(exc, brief=True), retry,
                           policy.attempts - 1, wait)
            policy.sleep(wait)
            if before_retry is not None:
                found = before_retry()
                if found is not None:
                    return found


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of the record (pytest and the CLI swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never break the command
            self.handleError(record)


def show_retries() -> None:
    """Show every retry on stderr as ``bnconvention: retrying ...`` (idempotent; the CLI calls it)."""
    if any(isinstance(h, _StderrHandler) for h in logger.handlers):
        return
    handler = _StderrHandler(level=logging.WARNING)
    handler.setFormatter(logging.Formatter("bnconvention: %(message)s"))
    logger.addHandler(handler)


__all__ = [
    "RETRYABLE_STATUS",
    "RetryPolicy",
    "TransientHubError",
    "call_with_retry",
    "describe",
    "is_retryable",
    "network_cause",
    "network_error",
    "retry_after_seconds",
    "show_retries",
]
