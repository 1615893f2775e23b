"""Per-request counters of the local Hub: method, path, status and body bytes sent, so tests can measure traffic.

>>> stats = RequestStats()
>>> stats.record(RequestRecord(method="GET", path="/org/m/resolve/main/a.bin", query="", status=206,
...                            bytes_sent=100, repo_id="org/m", repo_type="model"))
>>> stats.bytes_sent(repo_id="org/m"), stats.bytes_sent(prefix="/api/")
(100, 0)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One served request. ``status`` is ``None`` when the connection was dropped without a response;
    ``bytes_sent`` counts body bytes actually written (headers excluded); ``fault`` names an injected fault."""

    method: str
    path: str  # raw path as sent (percent-encoded), without the query string
    query: str
    status: int | None
    bytes_sent: int
    repo_id: str | None = None
    repo_type: str | None = None
    fault: str | None = None
    duration_s: float = 0.0


class RequestStats:
    """Thread-safe list of :class:`RequestRecord`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def record(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def reset(self) -> None:
        with self._lock:
            self._records.clear()

    def bytes_sent(self, prefix: str | None = None, *, repo_id: str | None = None,
                   method: str | None = None) -> int:
        """Body bytes sent for requests whose raw path starts with ``prefix`` / that addressed ``repo_id``."""
        return sum(r.bytes_sent for r in self.records
                   if (prefix is None or r.path.startswith(prefix))
                   and (repo_id is None or r.repo_id == repo_id)
                   and (method is None or r.method == method.upper()))
