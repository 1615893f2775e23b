"""Crawl an organisation: list its models page by page, classify each from its headers, journal every result.

Listing follows the Hub's ``Link: <...>; rel="next"`` pages through huggingface_hub's session with our retry per
page (the client's own ``list_models`` retries with 1-8 s sleeps and restarts nothing finer than a page either).
Each repo is then classified at the commit the listing reported (:func:`bnconvention.hub.classify.classify_repo`)
and its entry written to the journal before the next one starts. On a rerun, repos whose journal entry is final for
the same commit are not read again; a repo whose reading failed is retried; a repo that fails again is recorded with
its error (class ``unreadable``) and the crawl goes on.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bnconvention.errors import UsageError
from bnconvention.formats.text import plural
from bnconvention.hub.classify import RepoCensus, classify_repo, failed_repo
from bnconvention.hub.client import HubClient
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import call_with_retry

OnRepo = Callable[[RepoCensus, bool], None]  # (entry, reused from the journal)


@dataclass(frozen=True)
class ListedRepo:
    """A model repo as the listing reported it: its id, head commit and files."""

    repo_id: str
    sha: str | None
    filenames: tuple[str, ...]
    private: bool = False


def _page(client: HubClient, url: str, params: dict[str, Any] | None) -> tuple[list[Any], str | None]:
    items, links = client.get_json(url, params=params)
    if not isinstance(items, list):
        raise client.error(f"{url}: the model listing is not a JSON list")
    next_url = links.get("next", {}).get("url")
    return items, next_url


def list_org_models(client: HubClient, org: str) -> list[ListedRepo]:
    """Every model of ``org`` (sorted by id), with its head commit and file names.

    A listing that is empty (no such user or organisation, or none of its models visible to this token) is an
    error, and so is one that does not end: a ``next`` link seen before, or more than ``client.max_pages`` pages.
    """
    check_org(org)
    url: str | None = f"{client.endpoint}/api/models"
    params: dict[str, Any] | None = {"author": org, "full": "true"}
    repos: dict[str, ListedRepo] = {}
    seen: set[str] = set()
    pages = 0
    while url is not None:
        if pages >= client.max_pages:
            raise client.error(f"the model listing of {org} at {client.endpoint} did not end after {pages} pages "
                               f"(the --max-pages bound, {client.max_pages}; {plural(len(repos), 'model')} so far): "
                               "the server keeps sending rel=\"next\" links; raise --max-pages for a larger "
                               "organisation")
        current, current_params = url, params
        items, url = call_with_retry(functools.partial(_page, client, current, current_params), policy=client.retry,
                                     what=f"list models of {org} (page {pages + 1})")
        seen.add(current)
        if url is not None and url in seen:
            raise client.error(f"the model listing of {org} at {client.endpoint} loops: page {pages + 2} links back "
                               f"to a page already read ({url})")
        params = None  # the next link carries the query
        pages += 1
        for item in items:
            repo = _listed_repo(client, org, item)
            if repo.repo_id.split("/")[0].lower() == org.lower():  # an author filter the server ignored: never
                repos[repo.repo_id] = repo                           # crawl outside the organisation
    if not repos:
        raise client.error(f"{org} has no model repos at {client.endpoint}: no such user or organisation, or none "
                           "of its models is visible to this token (check the name and --token-env)")
    return [repos[key] for key in sorted(repos)]


def _listed_repo(client: HubClient, org: str, item: Any) -> ListedRepo:
    """One listing entry: only ``id``, ``sha``, ``siblings`` and ``private`` are read (not through ``ModelInfo``,
    which would also build card data the crawl never needs)."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        raise client.error(f"the model listing of {org} holds an entry without an id: {item!r:.200}")
    siblings = item.get("siblings")
    names = sorted(s["rfilename"] for s in siblings if isinstance(s, dict) and isinstance(s.get("rfilename"), str)) \
        if isinstance(siblings, list) else []
    sha = item.get("sha")
    return ListedRepo(repo_id=item["id"], sha=sha if isinstance(sha, str) and sha else None, filenames=tuple(names),
                      private=item.get("private") is True)


def check_org(org: str) -> None:
    if not org or "/" in org or not org.replace("-", "a").replace("_", "a").replace(".", "a").isalnum():
        raise UsageError(f"{org!r} is not an organisation or user name (use the part before the '/' of a repo id)")


def _complete(client: HubClient, repo: ListedRepo) -> ListedRepo:
    """Fill in the commit and files when the listing left them out (a server without ``full`` support)."""
    if repo.sha is not None and repo.filenames:
        return repo
    info = _listed_repo(client, repo.repo_id.split("/")[0], client.repo_info_json(repo.repo_id))
    return ListedRepo(repo_id=repo.repo_id, sha=info.sha, filenames=info.filenames, private=repo.private)


@dataclass
class CensusRun:
    """What one census run did: every repo's entry (sorted by id), and how many were read or reused."""

    org: str
    repos: list[RepoCensus]
    read: int = 0
    reused: int = 0
    failed: int = 0
    seconds: float = 0.0
    listed: int = 0
    failures: list[str] = field(default_factory=list)


def census_repo(client: HubClient, repo: ListedRepo, *, speculative: int | None = None) -> tuple[RepoCensus, bool]:
    """One repo's entry and whether it is final (False: the Hub failed, redo it next time)."""
    try:
        repo = _complete(client, repo)
        return classify_repo(client, repo.repo_id, sha=repo.sha or "", filenames=list(repo.filenames),
                             speculative=speculative), True
    except Exception as exc:  # noqa: BLE001 - a repo that fails is recorded with its error; the crawl goes on
        return failed_repo(repo.repo_id, repo.sha, exc, client), False


def census_org(client: HubClient, org: str, *, journal: Journal, workers: int = 1, progress: bool = False,
               on_repo: OnRepo | None = None, speculative: int | None = None) -> CensusRun:
    """List ``org`` and classify every model not already classified at its current commit (see the module doc)."""
    from tqdm.auto import tqdm

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers!r}")
    start = time.perf_counter()
    listed = list_org_models(client, org)
    run = CensusRun(org=org, repos=[], listed=len(listed))
    results: dict[str, RepoCensus] = {}
    todo: list[ListedRepo] = []
    for repo in listed:
        entry = journal.get("census", repo.repo_id)
        if entry is not None and repo.sha is not None and entry.matches(revision=repo.sha):
            results[repo.repo_id] = RepoCensus.model_validate(entry.payload)
            run.reused += 1
            if on_repo is not None:
                on_repo(results[repo.repo_id], True)
        else:
            todo.append(repo)

    bar = tqdm(total=len(listed), initial=run.reused, desc=f"census {org}", unit="repo", disable=not progress)

    def finish(repo: ListedRepo, census: RepoCensus, final: bool) -> None:
        journal.record("census", repo.repo_id, revision=census.sha, status=census.status,
                       payload=census.model_dump(mode="json"), final=final)
        results[repo.repo_id] = census
        run.read += 1
        if not final:
            run.failed += 1
            run.failures.append(f"{repo.repo_id}: {census.reason}")
        bar.update(1)
        if on_repo is not None:
            on_repo(census, False)

    try:
        if workers == 1:
            for repo in todo:
                census, final = census_repo(client, repo, speculative=speculative)
                finish(repo, census, final)
        else:
            # I/O bound: threads. Results are journaled by the main thread as they complete.
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="census") as pool:
                futures = [(repo, pool.submit(census_repo, client, repo, speculative=speculative)) for repo in todo]
                for repo, future in futures:
                    census, final = future.result()
                    finish(repo, census, final)
    finally:
        bar.close()
    run.repos = [results[key] for key in sorted(results)]
    run.seconds = time.perf_counter() - start
    return run


__all__ = ["CensusRun", "ListedRepo", "census_repo", "check_org", "list_org_models", "census_org"]
