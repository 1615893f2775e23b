"""The submission-pipeline check on the Hub: validate every model of an organisation, or one repo at one revision
(a branch, a tag, a commit or a pull request's ``refs/pr/N``), with the offline validator's codes, formats and exit
codes (0 no errors, 1 errors, 2 unreadable input).

Each repo is downloaded at the revision (weights, index, card and ``bnconvention/*.json`` annotations only) into a
temporary folder, validated there as one release (:func:`bnconvention.validation.validate_paths`: digests are
computed from the downloaded tensors), and its issues are reported under ``<repo id>/<path in the repo>``. A repo
that cannot be downloaded is reported as unreadable input and the check goes on with the others; a Hub that cannot
be reached at all (refused, dropped, timed out after the retries) stops the check with one network error.

One rule for an organisation and for one repo: every repo of ``ORG`` is checked exactly as ``ORG/NAME`` would be,
so a repo holding nothing to validate (only pickles, say) gets ``input.nothing_to_validate`` either way.

The revision is resolved to its commit from the repo's info as JSON (:meth:`HubClient.resolve_commit`), never
through ``HfApi.model_info`` or ``snapshot_download(revision=<branch>)``, which parse the card's front matter into
``ModelCardData`` (quadratic in its tags); the files are then listed and downloaded at that commit.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub.hf_api import RepoFile
from tqdm.auto import tqdm

from bnconvention.errors import UsageError
from bnconvention.formats.card import CARD_NAME
from bnconvention.hub.client import HubClient, quiet_hub_progress
from bnconvention.hub.crawl import check_org, list_org_models
from bnconvention.hub.retry import call_with_retry, describe, network_error
from bnconvention.validation import Issue, ValidationReport, sort_issues, validate_paths
from bnconvention.validation.issues import new_issue
from bnconvention.validation.release import FileSummary


@dataclass
class HubValidation:
    """The merged report of every repo checked, and which revision of each was checked."""

    target: str
    report: ValidationReport
    checked: list[tuple[str, str]] = field(default_factory=list)  # (repo id, commit)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def _matches(name: str) -> bool:
    return (name.endswith(".safetensors") or name.endswith(".safetensors.index.json") or name == CARD_NAME
            or (name.startswith("bnconvention/") and name.endswith(".json") and name.count("/") == 1))


def _relabel(path: str, local: Path, repo_id: str) -> str:
    prefix = local.as_posix().rstrip("/")
    if path == prefix:
        return repo_id
    if path.startswith(prefix + "/"):
        return f"{repo_id}/{path[len(prefix) + 1:]}"
    return path


def _download(client: HubClient, repo_id: str, commit: str, *, local: Path, cache: Path) -> None:
    """The files :func:`_matches` selects, at ``commit``, into ``local`` (nothing when none matches)."""
    entries = call_with_retry(lambda: list(client.api.list_repo_tree(repo_id, revision=commit, recursive=True)),
                              policy=client.retry, what=f"list the files of {repo_id} at {commit[:12]}")
    for name in sorted(e.path for e in entries if isinstance(e, RepoFile) and _matches(e.path)):
        call_with_retry(functools.partial(client.api.hf_hub_download, repo_id, name, revision=commit,
                                          local_dir=local, cache_dir=cache),
                        policy=client.retry, what=f"download {repo_id}/{name}")


def validate_repo(client: HubClient, repo_id: str, *, revision: str = "main", require_declaration: bool = False,
                  work_dir: str | os.PathLike[str] | None = None) -> tuple[list[Issue], list[FileSummary], str | None]:
    """Issues and file summaries of one repo at ``revision`` (paths relabelled), and the commit checked.

    Raises :class:`~bnconvention.errors.HubNetworkError` when the Hub cannot be reached; any other failure to
    download is the repo's ``input.unreadable`` issue."""
    with tempfile.TemporaryDirectory(prefix="bnc-hub-validate-", dir=work_dir) as tmp:
        local = Path(tmp) / "repo"
        try:
            commit = client.resolve_commit(repo_id, revision=revision)
            _download(client, repo_id, commit, local=local, cache=Path(tmp) / "cache")
        except Exception as exc:  # noqa: BLE001 - reported as unreadable input; other repos are still checked
            network = network_error(exc, endpoint=client.endpoint, scrub=client.scrub)
            if network is not None:
                raise network from None
            issue = new_issue("input.unreadable", file=repo_id, message=(
                f"{repo_id} at revision {revision!r} could not be downloaded ({client.scrub(describe(exc))}); "
                "check the repo id, the revision and the token"))
            return [issue], [], None
        if not local.is_dir():
            local.mkdir()
        report = validate_paths([local], require_declaration=require_declaration)
    prefix = local.as_posix().rstrip("/")

    def relabel_text(text: str) -> str:  # the temporary download folder must not leak into reports
        return text.replace(prefix + "/", f"{repo_id}/").replace(prefix, repo_id)

    issues = [dataclasses.replace(i, file=_relabel(i.file, local, repo_id), message=relabel_text(i.message))
              for i in report.issues]
    summaries = [dataclasses.replace(s, file=_relabel(s.file, local, repo_id), note=relabel_text(s.note))
                 for s in report.files]
    return issues, summaries, commit


def validate_hub(client: HubClient, target: str, *, revision: str | None = None, require_declaration: bool = False,
                 work_dir: str | os.PathLike[str] | None = None, progress: bool = False) -> HubValidation:
    """Validate ``target``: an organisation (every model at its head, each checked as ``ORG/NAME`` would be) or
    one repo ``ORG/NAME`` at ``revision`` (default ``main``)."""
    if "/" in target:
        repos = [(target, revision or "main")]
    else:
        if revision is not None:
            raise UsageError(f"--revision {revision!r} names a revision of one repo: pass ORG/NAME, not the "
                             f"organisation {target!r}")
        check_org(target)
        repos = [(r.repo_id, r.sha or "main") for r in list_org_models(client, target)]
    issues: list[Issue] = []
    summaries: list[FileSummary] = []
    checked: list[tuple[str, str]] = []
    for repo_id, rev in tqdm(repos, desc=f"validate {target}", unit="repo", disable=not progress):
        with quiet_hub_progress():
            found, files, commit = validate_repo(client, repo_id, revision=rev,
                                                 require_declaration=require_declaration, work_dir=work_dir)
        issues += found
        summaries += files
        if commit is not None:
            checked.append((repo_id, commit))
    summaries.sort(key=lambda s: s.file)
    return HubValidation(target=target, report=ValidationReport(issues=sort_issues(issues), files=summaries),
                         checked=checked)


__all__ = ["HubValidation", "validate_hub", "validate_repo"]
