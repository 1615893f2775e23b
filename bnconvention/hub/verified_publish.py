"""Publish a release folder to the Hub and check it there: :func:`bnconvention.authoring.publish.publish` (stamp,
validate locally, upload) through our one client, then :func:`bnconvention.hub.validate.validate_repo` on what the
Hub now serves at the new commit (or the pull request's ``refs/pr/N``), so a release is only reported good once the
copy on the server validates.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bnconvention.authoring.publish import publish
from bnconvention.hub.client import HubClient
from bnconvention.hub.validate import HubValidation, validate_hub


@dataclass
class HubPublish:
    result: Any  # bnconvention.authoring.publish.PublishResult
    validation: HubValidation | None  # None for a dry run

    @property
    def exit_code(self) -> int:
        return 0 if self.validation is None else self.validation.exit_code


def _revision(result: Any) -> str:
    """The revision the upload made: the pull request's ref, else the commit in the commit URL."""
    if result.pr_url:
        return f"refs/pr/{str(result.pr_url).rstrip('/').rsplit('/', 1)[-1]}"
    if result.commit_url and "/commit/" in str(result.commit_url):
        return str(result.commit_url).rsplit("/commit/", 1)[-1]
    return "main"


def publish_release(client: HubClient, directory: str | os.PathLike[str], *, repo_id: str,
                    records: Sequence[Any] = (), create_pr: bool = False, commit_message: str | None = None,
                    dry_run: bool = False, require_declaration: bool = True) -> HubPublish:
    """Stamp, validate, upload ``directory`` to ``repo_id`` and validate the uploaded revision on the server."""
    result = publish(directory, repo_id=repo_id, records=records, create_pr=create_pr, api=client.api,
                     commit_message=commit_message, dry_run=dry_run, token=client.token.reveal())
    if dry_run or not result.uploaded:
        return HubPublish(result=result, validation=None)
    validation = validate_hub(client, repo_id, revision=_revision(result), require_declaration=require_declaration)
    return HubPublish(result=result, validation=validation)


__all__ = ["HubPublish", "publish_release"]
