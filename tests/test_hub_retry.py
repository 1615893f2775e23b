"""Our retry layer: which failures are retried, how long it waits, and what it gives back."""

from __future__ import annotations

import httpx2
import pytest
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

from bnconvention.errors import UsageError
from bnconvention.hub.retry import RetryPolicy, TransientHubError, call_with_retry, is_retryable


def _http_error(status: int, headers: dict[str, str] | None = None) -> HfHubHTTPError:
    request = httpx2.Request("GET", "http://hub.test/api/models")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    return HfHubHTTPError(f"{status} error", response=response)


@pytest.mark.parametrize(("error", "expected"), [
    pytest.param(_http_error(429), True, id="429"),
    pytest.param(_http_error(503), True, id="503"),
    pytest.param(_http_error(500), True, id="500"),
    pytest.param(_http_error(408), True, id="408"),
    pytest.param(_http_error(404), False, id="404"),
    pytest.param(_http_error(401), False, id="401"),
    pytest.param(_http_error(400), False, id="400"),
    pytest.param(httpx2.ConnectError("refused"), True, id="connect-error"),
    pytest.param(httpx2.RemoteProtocolError("server disconnected"), True, id="dropped"),
    pytest.param(httpx2.ReadTimeout("slow"), True, id="timeout"),
    pytest.param(TransientHubError("short body"), True, id="truncated-body"),
    pytest.param(ValueError("bug"), False, id="value-error"),
])
def test_is_retryable(error: BaseException, expected: bool) -> None:
    assert is_retryable(error) is expected


def test_wrapped_network_error_is_retryable() -> None:
    # hf_hub_download raises LocalEntryNotFoundError from the ConnectError that made it fail
    try:
        try:
            raise httpx2.ConnectError("refused")
        except httpx2.ConnectError as inner:
            raise LocalEntryNotFoundError("cannot reach the Hub") from inner
    except LocalEntryNotFoundError as exc:
        assert is_retryable(exc)


def test_retries_until_success_with_exponential_waits() -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=5, base_delay=0.5, max_delay=1.5, jitter=0.0, sleep=waits.append)
    failures = [_http_error(503), httpx2.ConnectError("refused"), _http_error(502)]

    def flaky() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    assert call_with_retry(flaky, policy=policy, what="test") == "ok"
    assert waits == [0.5, 1.0, 1.5]


def test_retry_after_is_honoured_and_capped() -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=3, base_delay=0.001, max_delay=2.0, jitter=0.0, sleep=waits.append)
    failures = [_http_error(429, {"Retry-After": "1"}), _http_error(503, {"Retry-After": "30"})]

    def flaky() -> int:
        if failures:
            raise failures.pop(0)
        return 7

    assert call_with_retry(flaky, policy=policy, what="test") == 7
    assert waits == [1.0, 2.0]


def test_non_retryable_error_is_raised_at_once() -> None:
    calls = []

    def missing() -> None:
        calls.append(1)
        raise _http_error(404)

    with pytest.raises(HfHubHTTPError):
        call_with_retry(missing, policy=RetryPolicy(attempts=5, base_delay=0.0), what="test")
    assert calls == [1]


def test_last_failure_is_reraised_unchanged_after_the_attempts() -> None:
    calls = []
    error = _http_error(503)

    def down() -> None:
        calls.append(1)
        raise error

    with pytest.raises(HfHubHTTPError) as caught:
        call_with_retry(down, policy=RetryPolicy(attempts=3, base_delay=0.0), what="test")
    assert caught.value is error
    assert len(calls) == 3


def test_before_retry_can_return_what_the_failed_attempt_did() -> None:
    # A non-idempotent call (opening a pull request) looks for its own effect before trying again.
    attempts = []

    def create() -> str:
        attempts.append(1)
        raise httpx2.RemoteProtocolError("response cut short")

    found = call_with_retry(create, policy=RetryPolicy(attempts=5, base_delay=0.0), what="test",
                            before_retry=lambda: "pull request #3")
    assert found == "pull request #3"
    assert attempts == [1]


@pytest.mark.parametrize("kwargs", [
    pytest.param({"attempts": 0}, id="no-attempts"),
    pytest.param({"base_delay": -1.0}, id="negative-delay"),
    pytest.param({"jitter": 2.0}, id="jitter-over-one"),
])
def test_bad_policy_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_jitter_stays_within_its_band() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, jitter=0.25)
    for retry, full in ((1, 1.0), (2, 2.0), (3, 4.0), (5, 8.0)):
        wait = policy.delay(retry)
        assert 0.75 * full <= wait <= full
