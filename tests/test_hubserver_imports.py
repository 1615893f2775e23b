"""Where the local Hub server's pieces live: its own error type, and an acyclic import graph inside the package.

Issue #11: ``HubRequestError`` sat in ``bnconvention.errors`` though only the server raises it; ``storage`` and
``discussions`` imported each other (one class split across a mixin), and ``handlers`` imported the endpoint modules
that import it. These tests fail if either comes back.
"""

from __future__ import annotations

import pytest

import bnconvention.errors
from bnconvention.errors import BnConventionError
from bnconvention.hubserver.errors import HubRequestError


def test_hub_request_error_lives_in_the_server_package() -> None:
    assert not hasattr(bnconvention.errors, "HubRequestError")
    assert "HubRequestError" not in bnconvention.errors.__all__
    exc = HubRequestError("gone", status=404, code="RepoNotFound", repo_id="org/m", headers={"X-Repo-Commit": "a"})
    assert isinstance(exc, BnConventionError)
    assert isinstance(exc, ValueError)
    assert (exc.status, exc.code, exc.repo_id, exc.headers, str(exc)) == (
        404, "RepoNotFound", "org/m", {"X-Repo-Commit": "a"}, "gone")
    with pytest.raises(BnConventionError, match="gone"):
        raise exc
