"""Crawl an organisation: list its models page by page, classify each from its headers, journal every result.

The crawl streams: a listing page is fetched only once every repo of the one before is journaled (or in flight on
one of the ``workers`` threads, a bounded window), and the run keeps counters only; the census reports are written
from the journal afterwards (:func:`census_entries`, :func:`bnconvention.hub.summaries.write_census_entries`). Peak
memory is flat in the size of the organisation (``benchmarks/hub_census.py --thousands``).

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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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


def iter_org_models(client: HubClient, org: str) -> Iterator[ListedRepo]:
    """Every model of ``org`` in listing order, with its head commit and file names, one page fetched at a time (as
    ``huggingface_hub``'s ``list_models`` pages, through its ``paginate``): a page is requested only once the
    consumer has taken every repo of the one before, so the listing never holds more than one page.

    A listing that is empty (no such user or organisation, or none of its models visible to this token) is an
    error, and so is one that does not end: a ``next`` link seen before, or more than ``client.max_pages`` pages
    (the set of page URLs seen is bounded by ``max_pages`` too).
    """
    check_org(org)
    url: str | None = f"{client.endpoint}/api/models"
    params: dict[str, Any] | None = {"author": org, "full": "true"}
    seen: set[str] = set()
    pages = found = 0
    while url is not None:
        if pages >= client.max_pages:
            raise client.error(f"the model listing of {org} at {client.endpoint} did not end after {pages} pages "
                               f"(the --max-pages bound, {client.max_pages}; {plural(found, 'model')} so far): "
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
                found += 1                                           # crawl outside the organisation
                yield repo
        del items
    if not found:
        raise client.error(f"{org} has no model repos at {client.endpoint}: no such user or organisation, or none "
                           "of its models is visible to this token (check the name and --token-env)")


def list_org_models(client: HubClient, org: str) -> list[ListedRepo]:
    """Every model of ``org`` as one list sorted by id (a repo listed twice: its last entry); the census streams
    :func:`iter_org_models` instead."""
    repos = {repo.repo_id: repo for repo in iter_org_models(client, org)}
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


FAILURES_KEPT = 20  # failure messages a run keeps for its report; the journal holds every one
WINDOW_PER_WORKER = 16  # repos in flight per census thread (a page or more: the pool stays busy while the next page
# is fetched); the listing is read only as fast as they finish


@dataclass
class CensusRun:
    """What one census run did: how many repos were listed, read (and failed) or reused, and the first
    :data:`FAILURES_KEPT` failures. The entries themselves are in the journal (:func:`census_entries`): a run holds
    no per-repo state, so its memory is flat in the size of the organisation."""

    org: str
    read: int = 0
    reused: int = 0
    failed: int = 0
    seconds: float = 0.0
    listed: int = 0
    failures: list[str] = field(default_factory=list)

    def add_failure(self, message: str) -> None:
        self.failed += 1
        if len(self.failures) < FAILURES_KEPT:
            self.failures.append(message)


def census_repo(client: HubClient, repo: ListedRepo, *, speculative: int | None = None) -> tuple[RepoCensus, bool]:
    """One repo's entry and whether it is final (False: the Hub failed, redo it next time)."""
    try:
        repo = _complete(client, repo)
        return classify_repo(client, repo.repo_id, sha=repo.sha or "", filenames=list(repo.filenames),
                             speculative=speculative), True
    except Exception as exc:  # noqa: BLE001 - a repo that fails is recorded with its error; the crawl goes on
        return failed_repo(repo.repo_id, repo.sha, exc, client), False


def census_entries(journal: Journal) -> Iterator[RepoCensus]:
    """The entries of the census ``journal`` listed (this run's listing, never another run's; a journal that
    listed nothing: the latest finished census), sorted by repo id, read back a page of rows at a time
    (:meth:`Journal.listed_entries`): what the census reports are written from."""
    for entry in journal.listed_entries("census"):
        yield RepoCensus.model_validate(entry.payload)


def _to_read(listing: Iterable[ListedRepo], *, journal: Journal, run: CensusRun,
             reused: Callable[[RepoCensus], None]) -> Iterator[ListedRepo]:
    """The listed repos to classify: each noted in the journal's listing as it comes (a repo listed twice, as when
    the organisation changes between pages, only once), those with a final entry at the listed commit passed to
    ``reused`` instead."""
    for repo in listing:
        if not journal.add_listed(repo.repo_id):
            continue
        run.listed += 1
        entry = journal.get("census", repo.repo_id)
        if entry is not None and repo.sha is not None and entry.matches(revision=repo.sha):
            run.reused += 1
            reused(RepoCensus.model_validate(entry.payload))
        else:
            yield repo


def _classified(client: HubClient, repos: Iterable[ListedRepo], *, workers: int,
                speculative: int | None) -> Iterator[tuple[ListedRepo, RepoCensus, bool]]:
    """Each repo's entry and finality, in the order of ``repos``: in this thread with one worker; else on a thread
    pool (I/O bound) holding at most ``workers * WINDOW_PER_WORKER`` repos, so ``repos`` is advanced only as
    entries are taken."""
    if workers == 1:
        for repo in repos:
            yield (repo, *census_repo(client, repo, speculative=speculative))
        return
    window: deque[tuple[ListedRepo, Future[tuple[RepoCensus, bool]]]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="census") as pool:
        for repo in repos:
            window.append((repo, pool.submit(census_repo, client, repo, speculative=speculative)))
            if len(window) >= workers * WINDOW_PER_WORKER:
                done, future = window.popleft()
                yield (done, *future.result())
        while window:
            done, future = window.popleft()
            yield (done, *future.result())


def census_org(client: HubClient, org: str, *, journal: Journal, workers: int = 1, progress: bool = False,
               on_repo: OnRepo | None = None, speculative: int | None = None) -> CensusRun:
    """List ``org`` and classify every model not already classified at its current commit (see the module doc),
    streaming: each repo is journaled (and passed to ``on_repo``) as it comes off the listing, and nothing is
    kept per repo; read the entries back with :func:`census_entries`."""
    from tqdm.auto import tqdm

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers!r}")
    start = time.perf_counter()
    run = CensusRun(org=org)
    journal.start_listing()
    bar = tqdm(desc=f"census {org}", unit="repo", disable=not progress)

    def reused(census: RepoCensus) -> None:
        bar.update(1)
        if on_repo is not None:
            on_repo(census, True)

    try:
        todo = _to_read(iter_org_models(client, org), journal=journal, run=run, reused=reused)
        for repo, census, final in _classified(client, todo, workers=workers, speculative=speculative):
            journal.record("census", repo.repo_id, revision=census.sha, status=census.status,
                           payload=census.model_dump(mode="json"), final=final)
            run.read += 1
            if not final:
                run.add_failure(f"{repo.repo_id}: {census.reason}")
            bar.update(1)
            if on_repo is not None:
                on_repo(census, False)
    finally:
        bar.close()
    journal.finish_listing()  # the listing ended: a journal opened later reads this one
    run.seconds = time.perf_counter() - start
    return run


__all__ = ["FAILURES_KEPT", "CensusRun", "ListedRepo", "census_entries", "census_repo", "check_org", "census_org",
           "iter_org_models", "list_org_models"]
