"""One Hub client for everything: a ``huggingface_hub.HfApi(endpoint=..., token=...)`` plus the few raw HTTP reads
the crawl needs (byte ranges of safetensors files, small files), made through huggingface_hub's own session, URL and
header helpers (``get_session``, ``hf_hub_url``, ``build_hf_headers``, ``hf_raise_for_status``).

The token is read from an environment variable the user names (``--token-env``, default ``HF_TOKEN``), handed to
``HfApi`` and to the request headers, and nowhere else: :class:`HubClient` does not show it in its ``repr``,
:class:`Secret` prints as ``***``, and :meth:`HubClient.scrub` removes it from any text before that text reaches a
log, a journal, a report or an error message.

>>> client = make_client(endpoint="http://127.0.0.1:9", token="hf_example_secret")
>>> "hf_example_secret" in repr(client)
False
>>> client.scrub("Authorization: Bearer hf_example_secret")
'Authorization: Bearer ***'
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_url
from huggingface_hub.errors import RemoteEntryNotFoundError
from huggingface_hub.utils import (
    are_progress_bars_disabled,
    build_hf_headers,
    disable_progress_bars,
    enable_progress_bars,
    get_session,
    hf_raise_for_status,
)

from bnconvention.errors import HubError, UsageError
from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.hub.retry import RetryPolicy, TransientHubError, call_with_retry

DEFAULT_TOKEN_ENV = "HF_TOKEN"
DEFAULT_TIMEOUT_S = 60.0
# Pages of one listing before it is called endless: 1,000 pages hold a million models at the Hub's page size.
DEFAULT_MAX_PAGES = 1000
# Repos of one listing before it stops (said in the census): the largest organisations on the Hub hold tens of
# thousands of models; a census reads each one's header.
DEFAULT_MAX_REPOS = 100_000
MAX_JSON_BYTES = 64 * 1024 * 1024  # one API answer (a listing page, a repo's info with a 4 MB card)
LIBRARY_NAME = "bnconvention"


class Secret:
    """A string that never shows itself: ``str``/``repr`` give ``***``; ``reveal()`` gives the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value or None

    def reveal(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return "Secret(***)" if self._value else "Secret(None)"

    def __str__(self) -> str:
        return "***" if self._value else ""

    def __reduce__(self) -> tuple[Any, ...]:  # picklable for worker processes; still never printed
        return (Secret, (self._value,))


@dataclass(frozen=True)
class Fetched:
    """The bytes of one GET: ``body`` (possibly a prefix), the HTTP status, and the file's total size if known."""

    body: bytes
    status: int
    total_size: int | None
    commit: str | None = None


def token_from_env(token_env: str | None) -> Secret:
    """The token in environment variable ``token_env`` (empty or unset: anonymous)."""
    if token_env is None:
        return Secret(None)
    if not token_env or not token_env.replace("_", "a").isalnum():
        raise UsageError(f"--token-env {token_env!r} is not an environment variable name")
    return Secret(os.environ.get(token_env) or None)


@dataclass
class HubClient:
    """``api`` (an ``HfApi``), the endpoint, the retry policy, and the token, kept out of every printed form."""

    endpoint: str
    api: Any = field(repr=False)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    token: Secret = field(default_factory=lambda: Secret(None), repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_pages: int = DEFAULT_MAX_PAGES
    max_repos: int = DEFAULT_MAX_REPOS
    # the environment variable the token was read from (None: given by value, or anonymous): worker processes and
    # Ray tasks are handed this name, never the token
    token_env: str | None = None

    # --- secrets ----------------------------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` without the token (replaced by ``***``)."""
        secret = self.token.reveal()
        return text.replace(secret, "***") if secret else text

    def error(self, message: str, *, repo_id: str | None = None) -> HubError:
        return HubError(self.scrub(message), repo_id=repo_id)

    # --- requests ---------------------------------------------------------------------------------------------------

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        token: str | bool = self.token.reveal() or False
        return build_hf_headers(token=token, library_name=LIBRARY_NAME, headers=dict(extra or {}))

    def file_url(self, repo_id: str, filename: str, *, revision: str, repo_type: str = "model") -> str:
        return hf_hub_url(repo_id, filename, repo_type=repo_type, revision=revision, endpoint=self.endpoint)

    def _timed_chunks(self, response: Any, *, url: str, deadline: float) -> Iterator[bytes]:
        """The body's chunks, until ``deadline``: ``--timeout`` bounds each request in all, not only the gaps
        between bytes (httpx2's own timeout), so a server that trickles a body cannot hold a crawl."""
        received = 0
        for chunk in response.iter_bytes():
            received += len(chunk)
            yield chunk
            if time.monotonic() > deadline:
                raise TransientHubError(f"GET {url}: no complete response within the {self.timeout_s:g} s request "
                                        f"time bound (--timeout); {received} bytes received")

    def fetch(self, url: str, *, byte_range: tuple[int, int] | None = None, max_bytes: int,
              params: Mapping[str, Any] | None = None) -> Fetched:
        """One GET (no retry), reading at most ``max_bytes`` of the body within :attr:`timeout_s` in all.

        ``byte_range`` is an inclusive span sent as ``Range``. A server that ignores it and answers 200 with the
        whole file is handled too (the span is cut out of the stream, which is closed as soon as it has been read).
        A body shorter than what the server announced, or one that takes longer than :attr:`timeout_s`, raises
        :class:`TransientHubError` (retried by the callers).
        """
        extra = {"Accept-Encoding": "identity"}
        if byte_range is not None:
            extra["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        deadline = time.monotonic() + self.timeout_s
        timeout = httpx2.Timeout(self.timeout_s)
        with get_session().stream("GET", url, headers=self.headers(extra), params=params, timeout=timeout,
                                  follow_redirects=True) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            total = _total_size(response)
            skip, limit = 0, max_bytes
            if byte_range is not None:
                limit = min(max_bytes, byte_range[1] - byte_range[0] + 1)
                if response.status_code == 200:  # the range was ignored: the body starts at byte 0
                    skip = byte_range[0]
            announced = _announced_length(response)
            wanted = limit if announced is None else max(0, min(limit, announced - skip))
            # Read to the end when the body is what we asked for, so the connection goes back to the pool; stop
            # early (closing the connection) only when the server sends more than we want, e.g. a whole file.
            drain = announced is not None and announced <= skip + limit
            data = bytearray()
            for chunk in self._timed_chunks(response, url=url, deadline=deadline):
                data += chunk
                if len(data) >= skip + wanted and not drain:
                    break
            if announced is not None and (len(data) < skip + wanted or (drain and len(data) < announced)):
                raise TransientHubError(f"GET {url} ended after {len(data)} of {announced} bytes (truncated "
                                        "body)")
            body = bytes(data[skip:skip + wanted])
            return Fetched(body=body, status=response.status_code, total_size=total,
                           commit=response.headers.get("X-Repo-Commit"))

    def get_json(self, url: str, *, params: Mapping[str, Any] | None = None,
                 max_bytes: int = MAX_JSON_BYTES) -> tuple[JsonValue, dict[str, dict[str, str]]]:
        """One GET of a JSON API answer (no retry), within :attr:`timeout_s` in all: ``(decoded, links)``, where
        ``links`` are the ``Link`` header's relations (``links["next"]["url"]`` for the next page)."""
        deadline = time.monotonic() + self.timeout_s
        with get_session().stream("GET", url, headers=self.headers(), params=params,
                                  timeout=httpx2.Timeout(self.timeout_s), follow_redirects=True) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            data = bytearray()
            for chunk in self._timed_chunks(response, url=url, deadline=deadline):
                data += chunk
                if len(data) > max_bytes:
                    raise self.error(f"GET {url}: the answer is over {max_bytes} bytes; it was not read")
            announced = _announced_length(response)
            if announced is not None and len(data) < announced:
                raise TransientHubError(f"GET {url} ended after {len(data)} of {announced} bytes (truncated body)")
            try:
                decoded = json.loads(bytes(data))
            except ValueError as exc:
                raise self.error(f"GET {url}: the answer is not JSON ({exc})") from None
            return decoded, {key: value for key, value in response.links.items() if key is not None}

    def repo_info_json(self, repo_id: str, *, revision: str = "main") -> JsonObject:
        """Model repo ``repo_id``'s info at ``revision`` as the Hub sends it (JSON, with retries).

        Not ``HfApi.model_info``: that builds a ``ModelCardData`` from the card's front matter, whose tag
        de-duplication is quadratic (350,000 tags, a legal 3.4 MB card, take minutes); we read a few fields.
        """
        url = f"{self.endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}"
        info, _ = call_with_retry(lambda: self.get_json(url), policy=self.retry,
                                  what=f"GET {repo_id} info at {revision}")
        if not isinstance(info, dict):
            raise self.error(f"{url}: the repo info is not a JSON object", repo_id=repo_id)
        return info

    def resolve_commit(self, repo_id: str, *, revision: str) -> str:
        """The commit ``revision`` of model repo ``repo_id`` points to."""
        sha = self.repo_info_json(repo_id, revision=revision).get("sha")
        if not isinstance(sha, str) or not sha:
            raise self.error(f"{self.endpoint} did not name the commit of {repo_id} at {revision!r}",
                             repo_id=repo_id)
        return sha

    def fetch_with_retry(self, url: str, *, byte_range: tuple[int, int] | None = None, max_bytes: int,
                         what: str, params: Mapping[str, Any] | None = None) -> Fetched:
        return call_with_retry(lambda: self.fetch(url, byte_range=byte_range, max_bytes=max_bytes, params=params),
                               policy=self.retry, what=what)

    def read_small_file(self, repo_id: str, filename: str, *, revision: str, max_bytes: int,
                        repo_type: str = "model") -> bytes | None:
        """A small file's bytes (``None`` when the repo has no such file); over ``max_bytes`` is an error."""
        url = self.file_url(repo_id, filename, revision=revision, repo_type=repo_type)
        try:
            fetched = self.fetch_with_retry(url, max_bytes=max_bytes + 1, what=f"GET {repo_id}/{filename}")
        except RemoteEntryNotFoundError:
            return None
        if len(fetched.body) > max_bytes:
            raise self.error(f"{repo_id}/{filename} is over the {max_bytes}-byte limit for this file; it was not "
                             "read", repo_id=repo_id)
        return fetched.body

    def whoami_name(self) -> str:
        """The user the token belongs to (needed to recognise our own pull requests)."""
        info = call_with_retry(lambda: self.api.whoami(), policy=self.retry, what="whoami")
        name = info.get("name") if isinstance(info, dict) else None
        if not isinstance(name, str) or not name:
            raise self.error(f"{self.endpoint}/api/whoami-v2 did not name the token's user")
        return name


def _total_size(response: Any) -> int | None:
    content_range = response.headers.get("Content-Range")
    if response.status_code == 206 and content_range:
        _, _, total = content_range.rpartition("/")
        return int(total) if total.strip().isdigit() else None
    if response.status_code == 200:
        length = response.headers.get("Content-Length")
        return int(length) if length and length.isdigit() else None
    return None


def _announced_length(response: Any) -> int | None:
    """How many body bytes the server announced (``Content-Length``), to detect truncated bodies."""
    length = response.headers.get("Content-Length")
    return int(length) if length is not None and length.isdigit() else None


@contextlib.contextmanager
def quiet_hub_progress() -> Iterator[None]:
    """Silence huggingface_hub's own download bars (ours report per repo); restored afterwards."""
    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def make_client(*, endpoint: str | None = None, token: str | Secret | None = None,
                token_env: str | None = None, retry: RetryPolicy | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S, max_pages: int = DEFAULT_MAX_PAGES,
                max_repos: int = DEFAULT_MAX_REPOS) -> HubClient:
    """Build the one client: ``token`` (a value) or ``token_env`` (the variable holding it); neither: anonymous."""
    if token is not None and token_env is not None:
        raise UsageError("give the token or the name of its environment variable, not both")
    secret = token if isinstance(token, Secret) else (Secret(token) if token is not None else token_from_env(token_env))
    resolved = (endpoint or constants.ENDPOINT).rstrip("/")
    if not resolved.startswith(("http://", "https://")):
        raise UsageError(f"--endpoint {resolved!r} is not an http(s) URL")
    # token=False: never fall back to a token stored on this machine; the user names the one to use.
    api = HfApi(endpoint=resolved, token=secret.reveal() or False, library_name=LIBRARY_NAME)
    return HubClient(endpoint=resolved, api=api, retry=retry or RetryPolicy(), token=secret, timeout_s=timeout_s,
                     max_pages=max_pages, max_repos=max_repos, token_env=token_env)


__all__ = ["DEFAULT_TOKEN_ENV", "Fetched", "HubClient", "Secret", "make_client", "quiet_hub_progress",
           "token_from_env"]
