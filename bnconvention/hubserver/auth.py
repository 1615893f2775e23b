"""Tokens, users and organisations of the local Hub, and who may write where.

A token maps to a user name; an organisation lists its members. A user may write to (and read private repos of)
their own namespace and the organisations they belong to; any authenticated user may open discussions and pull
requests on repos they can read, as on the Hub. Tokens are never logged or echoed back.

>>> access = AccessControl({"tok-a": "alice"}, orgs={"lab": ["alice"]})
>>> access.user_for("Bearer tok-a"), access.can_write("alice", "lab"), access.can_write("alice", "other")
('alice', True, False)
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterable, Mapping

from bnconvention.hubserver.errors import HubRequestError

# huggingface_hub maps a 401 to RepositoryNotFoundError unless the message is exactly this one.
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


def unauthorized(detail: str) -> HubRequestError:
    return HubRequestError(f"{INVALID_CREDENTIALS}: {detail}", status=401, code="Unauthorized",
                           headers={"X-Error-Message": INVALID_CREDENTIALS})


def forbidden(message: str, *, repo_id: str | None = None) -> HubRequestError:
    return HubRequestError(message, status=403, code="Forbidden", repo_id=repo_id)


class AccessControl:
    """Token -> user map and organisation memberships. Thread-safe; entries can be added while serving."""

    def __init__(self, tokens: Mapping[str, str] | None = None, *,
                 orgs: Mapping[str, Iterable[str]] | None = None) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        self._orgs: dict[str, set[str]] = {}
        for token, user in (tokens or {}).items():
            self.add_token(token, user)
        for org, members in (orgs or {}).items():
            self.add_org(org, members)

    def add_token(self, token: str, user: str) -> None:
        if not isinstance(token, str) or not token or not isinstance(user, str) or not user:
            raise ValueError("a token and its user name must be non-empty strings")
        with self._lock:
            self._tokens[token] = user

    def add_org(self, org: str, members: Iterable[str]) -> None:
        with self._lock:
            self._orgs.setdefault(org, set()).update(members)

    def user_for(self, authorization: str | None) -> str | None:
        """The user of an ``Authorization: Bearer`` header; ``None`` without one; 401 for an unknown token."""
        if authorization is None or not authorization.strip():
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("expected 'Authorization: Bearer <token>'")
        token = token.strip()
        with self._lock:
            for known, user in self._tokens.items():
                if hmac.compare_digest(known.encode(), token.encode()):
                    return user
        raise unauthorized("the token is not known to this server")

    def orgs_of(self, user: str) -> list[str]:
        with self._lock:
            return sorted(org for org, members in self._orgs.items() if user in members)

    def can_write(self, user: str | None, namespace: str) -> bool:
        if user is None:
            return False
        if user == namespace:
            return True
        with self._lock:
            return user in self._orgs.get(namespace, set())
