"""Fault injection for the local Hub: latency, error statuses, dropped connections, truncated or trickled bodies,
and listings that never end.

A :class:`FaultRule` matches requests by method and a regex searched in the raw request path (percent-encoded, as
sent, without the query string), and fires with a probability drawn from the injector's seeded RNG, on at most
``count`` requests ("the next N matching requests") when ``count`` is set. Rules are checked in order: every firing
``latency`` rule adds its delay; the first firing rule of another kind decides the response.
Rules can be added and removed while the server runs (the injector is thread-safe).

>>> injector = FaultInjector(seed=0)
>>> rule = injector.add(FaultRule(kind="status", status=503, path="/resolve/", count=1))
>>> injector.decide("GET", "/org/m/resolve/main/config.json").action is rule
True
>>> injector.decide("GET", "/org/m/resolve/main/config.json").action is None  # count used up
True
>>> FaultRule.from_spec("kind=status,status=429,path=/api/models,probability=0.5").retry_after
1
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from bnconvention.errors import UsageError

FaultKind = Literal["latency", "gate", "status", "drop", "truncate", "trickle", "endless"]
FAULT_KINDS: tuple[FaultKind, ...] = ("latency", "gate", "status", "drop", "truncate", "trickle", "endless")
GATE_MAX_S = 120.0  # a gate nobody opens holds a request at most this long (latency_s, when set, instead)
# X-Error-Code sent with an injected status when the rule names none.
DEFAULT_ERROR_CODES: dict[int, str] = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "EntryNotFound", 408: "RequestTimeout",
    409: "Conflict", 429: "RateLimited", 500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable",
    504: "GatewayTimeout",
}


@dataclass(eq=False)
class FaultRule:
    """One fault. ``kind``:

    - ``latency``: sleep ``latency_s`` seconds, then serve normally (combines with other rules);
    - ``gate``: hold the request until the rule's ``gate`` event is set (by the test that added it, once it has
      seen what it waits for) or ``latency_s`` seconds pass (``GATE_MAX_S`` when 0), then serve normally (combines
      with other rules): a run kept busy for exactly as long as a test needs, whatever the machine's speed;
    - ``status``: answer ``status`` (4xx/5xx) with a JSON error, ``X-Error-Code`` (``error_code`` or a default per
      status; 404 defaults to ``EntryNotFound``), and for 429/503 ``Retry-After: retry_after`` plus the
      ``RateLimit`` headers huggingface_hub reads;
    - ``drop``: close the connection without sending anything;
    - ``truncate``: send the real status, headers and ``Content-Length``, then only ``truncate_fraction`` of the
      body, and close;
    - ``trickle``: send the real response, its body at ``rate_bps`` bytes per second (a server that is slow but
      never silent long enough for a read timeout);
    - ``endless``: serve the real response with a ``Link: <...>; rel="next"`` header to a URL never sent before
      (a listing that never ends).

    ``fired`` counts how often the rule has fired.
    """

    kind: FaultKind
    path: str = ""
    method: str | None = None
    probability: float = 1.0
    count: int | None = None
    status: int = 503
    latency_s: float = 0.0
    retry_after: int = 1
    error_code: str | None = None
    truncate_fraction: float = 0.5
    rate_bps: float = 2.0
    gate: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    fired: int = field(default=0, init=False)
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise UsageError(f"fault kind {self.kind!r} is not one of {', '.join(FAULT_KINDS)}")
        try:
            self._pattern = re.compile(self.path)
        except re.error as exc:
            raise UsageError(f"fault path regex {self.path!r} does not compile: {exc}") from exc
        if not 0.0 <= float(self.probability) <= 1.0:
            raise UsageError(f"fault probability must be within [0, 1], found {self.probability!r}")
        if self.count is not None and (not isinstance(self.count, int) or self.count < 1):
            raise UsageError(f"fault count must be a positive integer or None, found {self.count!r}")
        if self.kind == "status" and not (isinstance(self.status, int) and 400 <= self.status <= 599):
            raise UsageError(f"an injected status must be 4xx or 5xx, found {self.status!r}")
        if self.latency_s < 0 or self.retry_after < 0:
            raise UsageError("fault latency_s and retry_after must not be negative")
        if not self.rate_bps > 0:
            raise UsageError(f"rate_bps must be positive, found {self.rate_bps!r}")
        if not 0.0 <= self.truncate_fraction < 1.0:
            raise UsageError(f"truncate_fraction must be within [0, 1), found {self.truncate_fraction!r}")
        if self.method is not None:
            self.method = self.method.upper()

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and self._pattern.search(path) is not None

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    @property
    def code(self) -> str:
        return self.error_code or DEFAULT_ERROR_CODES.get(self.status, "InjectedFault")

    @classmethod
    def from_spec(cls, spec: str) -> FaultRule:
        """Parse ``key=value,...`` (the CLI's ``--fault``), e.g. ``kind=status,status=503,path=/resolve/,count=2``."""
        values: dict[str, object] = {}
        converters = {"kind": str, "path": str, "method": str, "probability": float, "count": int, "status": int,
                      "latency_s": float, "retry_after": int, "error_code": str, "truncate_fraction": float,
                      "rate_bps": float}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, raw = item.partition("=")
            if not sep or key not in converters:
                raise UsageError(f"fault spec item {item!r} is not KEY=VALUE with KEY one of "
                                 f"{', '.join(converters)} (in {spec!r})")
            try:
                values[key] = converters[key](raw)
            except ValueError as exc:
                raise UsageError(f"fault spec {key}={raw!r} is not a valid {converters[key].__name__}") from exc
        if "kind" not in values:
            raise UsageError(f"fault spec {spec!r} needs kind={'|'.join(FAULT_KINDS)}")
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class FaultDecision:
    """What to do with one request: a delay, and the rule that decides the response (``None``: serve normally)."""

    latency_s: float = 0.0
    action: FaultRule | None = None
    gates: tuple[FaultRule, ...] = ()  # gate rules whose events the request waits for

    def wait(self) -> None:
        """Sleep the latency, then wait for every gate (each at most its own bound)."""
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        for rule in self.gates:
            rule.gate.wait(timeout=rule.latency_s or GATE_MAX_S)


class FaultInjector:
    """The server's fault rules and seeded RNG. Thread-safe; rules may change while requests are served."""

    def __init__(self, rules: Iterable[FaultRule] = (), *, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = list(rules)
        self._rng = random.Random(seed)

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules = [r for r in self._rules if r is not rule]

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def reseed(self, seed: int) -> None:
        with self._lock:
            self._rng.seed(seed)

    @property
    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    def decide(self, method: str, path: str) -> FaultDecision:
        latency = 0.0
        action: FaultRule | None = None
        gates: list[FaultRule] = []
        with self._lock:
            for rule in self._rules:
                if rule.exhausted or not rule.matches(method, path):
                    continue
                if rule.kind not in ("latency", "gate") and action is not None:
                    continue  # the response is decided; leave this rule's budget untouched
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                rule.fired += 1
                if rule.kind == "latency":
                    latency += rule.latency_s
                elif rule.kind == "gate":
                    gates.append(rule)
                else:
                    action = rule
        return FaultDecision(latency_s=latency, action=action, gates=tuple(gates))
