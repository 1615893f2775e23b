"""Who may do what on the demo's local Hub: the organisation's author and an auditor, with tokens made up per run.

The author (:data:`~bnconvention.demo.releases.AUTHOR`) is a member of
:data:`~bnconvention.demo.releases.DEMO_ORG` and may publish to it; the auditor
(:data:`~bnconvention.demo.releases.AUDITOR`) may read and open pull requests, as anyone may on the Hub. ``bnconvention
demo`` keeps both tokens inside its process; ``demo --serve`` prints them, for the shell that follows the quickstarts.
"""

from __future__ import annotations

import errno
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from bnconvention.demo.releases import AUDITOR, AUTHOR, DEMO_ORG
from bnconvention.errors import UsageError
from bnconvention.hubserver import LocalHub

Role: TypeAlias = Literal["author", "auditor"]


@dataclass(frozen=True)
class DemoAccess:
    author_token: str = field(repr=False)
    auditor_token: str = field(repr=False)

    @classmethod
    def new(cls) -> DemoAccess:
        return cls(author_token=secrets.token_urlsafe(24), auditor_token=secrets.token_urlsafe(24))

    def token(self, role: Role) -> str:
        return self.author_token if role == "author" else self.auditor_token

    def tokens(self) -> dict[str, str]:
        """Token -> user, as :class:`~bnconvention.hubserver.LocalHub` takes them."""
        return {self.author_token: AUTHOR, self.auditor_token: AUDITOR}


ORGS: dict[str, list[str]] = {DEMO_ORG: [AUTHOR]}


def demo_hub(store: Path, access: DemoAccess, *, port: int = 0) -> LocalHub:
    """The local Hub over ``store`` on 127.0.0.1 (``port`` 0: a free one), started; a port in use is a usage
    error that says so."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError(f"--port must be a port number from 0 to 65535 (0: a free port), got {port!r}")
    hub = LocalHub(store, port=port, tokens=access.tokens(), orgs=ORGS, durable=False)
    try:
        return hub.start()
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise UsageError(f"cannot serve on 127.0.0.1:{port}: {exc.strerror}; choose another --port "
                             "(0 picks a free one)") from exc
        raise


__all__ = ["ORGS", "DemoAccess", "Role", "demo_hub"]
