"""The one error type of the local Hub server.

It lives here, not in ``bnconvention.errors``, because only the server raises it: the library below never sees it
(the ``huggingface_hub`` client turns the server's JSON error into its own ``HfHubHTTPError`` family, which is
what ``bnconvention.hub`` catches). It still subclasses :class:`~bnconvention.errors.BnConventionError` and
``ValueError``, so callers seeding a store can catch either.
"""

from __future__ import annotations

from bnconvention.errors import BnConventionError


class HubRequestError(BnConventionError, ValueError):
    """The local Hub server (``bnconvention.hubserver``) refused a request or a seeding call.

    ``status`` is the HTTP status and ``code`` the ``X-Error-Code`` the real Hub sends for the same case
    (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``, ``BadRequest``, ...); ``headers`` are extra response
    headers (e.g. ``X-Repo-Commit`` on a missing file).
    """

    def __init__(self, message: str, *, status: int, code: str, repo_id: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.repo_id = repo_id
        self.headers = dict(headers or {})


__all__ = ["HubRequestError"]
