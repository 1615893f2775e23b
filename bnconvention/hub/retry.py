"""Our own retry layer for Hub calls: backoff on 408/429/5xx, timeouts, dropped connections and short bodies.

huggingface_hub retries some calls itself (pagination, downloads) with sleeps of 1 to 8 s per try and none at all on
others (``model_info``, discussions, commits). The crawl needs one policy it controls: how many tries, how long to
wait (tests pass delays of a few milliseconds), and which failures are worth another try. A 404, a 401 or a bad
request is not; the error is raised at once.

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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from bnconvention.errors import TransientHubError

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
        from bnconvention.errors import UsageError

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
    import httpx2

    for item in _chain(exc):
        status = _status(item)
        if status is not None:
            return status in RETRYABLE_STATUS
        if isinstance(item, (TransientHubError, httpx2.TransportError, ConnectionError, TimeoutError)):
            return True
    return False


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


def describe(exc: BaseException) -> str:
    """A one-line description of a failure: the HTTP status when there is one, else the exception type."""
    status = _status(exc)
    text = " ".join(str(exc).split())
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
            logger.info("%s failed (%s); retry %d of %d in %.3fs", what, describe(exc), retry,
                        policy.attempts - 1, wait)
            policy.sleep(wait)
            if before_retry is not None:
                found = before_retry()
                if found is not None:
                    return found


__all__ = [
    "RETRYABLE_STATUS",
    "RetryPolicy",
    "TransientHubError",
    "call_with_retry",
    "describe",
    "is_retryable",
    "retry_after_seconds",
]
