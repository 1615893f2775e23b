"""Crawl an organisation: list its models page by page, classify each from its headers, journal every result.

The crawl streams: a listing page is fetched only once every repo of the one before is journaled (or in flight on
one of the ``workers`` threads, a bounded window), and the run keeps counters only; the census reports are written
from the journal afterwards (:func:`census_entries`, :func:`bnconvention.hub.summaries.write_org_census_entries`). Peak
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
from urllib.parse import parse_qs, urlsplit

from tqdm.auto import tqdm

from bnconvention.errors import UsageError
from bnconvention.formats.json_types import JsonValue
from bnconvention.formats.text import plural
from bnconvention.hub.classify import RepoCensus, classify_repo, failed_repo
from bnconvention.hub.client import HubClient
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import call_with_retry
from bnconvention.hub.summaries import CensusListing

OnRepo = Callable[[RepoCensus, bool], None]  # (entry, reused from the journal)


@dataclass(frozen=True)
class ListedRepo:
    """A model repo as the listing reported it: its id, head commit and files."""

    repo_id: str
    sha: str | None
    filenames: tuple[str, ...]
    private: bool = False


def _page(client: HubClient, url: str, params: dict[str, str] | None) -> tuple[list[JsonValue], str | None]:
    items, links = client.get_json(url, params=params)
    if not isinstance(items, list):
        raise client.error(f"{url}: the model listing is not a JSON list")
    next_url = links.get("next", {}).get("url")
    return items, next_url


@dataclass
class ListingEnd:
    """How a listing ended: ``stopped`` is None when the server's pages ended, else the sentence saying why the
    listing stopped before them (the page or repo budget, or a next link that repeats the listing)."""

    pages: int = 0
    repos: int = 0
    stopped: str | None = None

    def section(self) -> CensusListing:
        """The census's ``listing`` section."""
        return CensusListing(complete=self.stopped is None, pages=self.pages, repos=self.repos, stopped=self.stopped)


def _cursor(url: str) -> str | None:
    """The ``cursor`` of a listing URL (the Hub's pagination key), or None."""
    values = parse_qs(urlsplit(url).query).get("cursor")
    return values[-1] if values else None


def iter_org_models(client: HubClient, org: str, *, end: ListingEnd | None = None) -> Iterator[ListedRepo]:
    """Every model of ``org`` in listing order, with its head commit and file names, one page fetched at a time (as
    ``huggingface_hub``'s ``list_models`` pages, through its ``paginate``): a page is requested only once the
    consumer has taken every repo of the one before, so the listing never holds more than one page.

    A listing that is empty (no such user or organisation, or none of its models visible to this token) is an
    error. A listing stops at once when a ``next`` link repeats it (a URL or a ``cursor`` already read, or a page
    listing no model not already listed), and at its budgets: ``client.max_pages`` pages, ``client.max_repos``
    repos. With ``end``, a stop is said there (``end.stopped``) and the repos listed so far are the listing; without
    it, a stop is an error.
    """
    check_org(org)
    said = end is not None
    end = end if end is not None else ListingEnd()
    url: str | None = f"{client.endpoint}/api/models"
    params: dict[str, str] | None = {"author": org, "full": "true"}
    seen: set[str] = set()
    cursors: set[str] = set()
    listed: set[str] = set()  # bounded by max_repos
    pages = found = 0

    def stop(message: str) -> None:
        end.pages, end.repos, end.stopped = pages, found, message

    while url is not None:
        if pages >= client.max_pages:
            stop(f"the model listing of {org} at {client.endpoint} stopped at the page budget: {pages} pages read "
                 f"(--max-pages {client.max_pages}), {plural(found, 'model')} listed, and the server sent a next "
                 "page; raise --max-pages for a larger organisation")
            break
        current, current_params = url, params
        items, url = call_with_retry(functools.partial(_page, client, current, current_params), policy=client.retry,
                                     what=f"list models of {org} (page {pages + 1})")
        seen.add(current)
        cursor = _cursor(current)
        if cursor is not None:
            cursors.add(cursor)
        params = None  # the next link carries the query
        pages += 1
        new = 0
        for item in items:
            repo = _listed_repo(client, org, item)
            if repo.repo_id.split("/")[0].lower() != org.lower():  # an author filter the server ignored: never
                continue                                             # crawl outside the organisation
            if repo.repo_id not in listed:
                if found >= client.max_repos:
                    stop(f"the model listing of {org} at {client.endpoint} stopped at the repo budget: "
                         f"{plural(found, 'model')} listed (--max-repos {client.max_repos}) in "
                         f"{plural(pages, 'page')}, and the listing holds more; raise --max-repos for a larger "
                         "organisation")
                    break
                listed.add(repo.repo_id)
                found += 1
                new += 1
            yield repo
        del items
        if end.stopped is not None:
            break
        if pages > 1 and not new:
            stop(f"the model listing of {org} at {client.endpoint} loops: page {pages} lists no model not already "
                 "listed (its next link repeats the listing)")
        elif url is not None and url in seen:
            stop(f"the model listing of {org} at {client.endpoint} loops: page {pages + 1} links back to a page "
                 f"already read ({url})")
        elif url is not None and _cursor(url) is not None and _cursor(url) in cursors:
            stop(f"the model listing of {org} at {client.endpoint} loops: page {pages + 1} repeats the cursor "
                 f"{_cursor(url)!r} of a page already read")
        if end.stopped is not None:
            break
    end.pages, end.repos = pages, found
    if not found:
        raise client.error(f"{org} has no model repos at {client.endpoint}: no such user or organisation, or none "
                           "of its models is visible to this token (check the name and --token-env)")
    if end.stopped is not None and not said:
        raise client.error(end.stopped)


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
class OrgCensusRun:
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
    listing: ListingEnd = field(default_factory=ListingEnd)  # its ``stopped``: the listing ended before the server's

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


def _to_read(listing: Iterable[ListedRepo], *, journal: Journal, run: OrgCensusRun,
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
               on_repo: OnRepo | None = None, speculative: int | None = None) -> OrgCensusRun:
    """List ``org`` and classify every model not already classified at its current commit (see the module doc),
    streaming: each repo is journaled (and passed to ``on_repo``) as it comes off the listing, and nothing is
    kept per repo; read the entries back with :func:`census_entries`. A listing stopped at a budget or a loop
    classifies the repos listed so far and says so in ``run.listing.stopped``: the reports carry it."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers!r}")
    start = time.perf_counter()
    run = OrgCensusRun(org=org)
    journal.start_listing()
    bar = tqdm(desc=f"census {org}", unit="repo", disable=not progress)

    def reused(census: RepoCensus) -> None:
        bar.update(1)
        if on_repo is not None:
            on_repo(census, True)

    try:
        todo = _to_read(iter_org_models(client, org, end=run.listing), journal=journal, run=run, reused=reused)
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


__all__ = ["FAILURES_KEPT", "OrgCensusRun", "ListedRepo", "ListingEnd", "census_entries", "census_repo", "check_org",
           "census_org", "iter_org_models", "list_org_models"]
