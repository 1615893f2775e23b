"""The organisation census (``hub census``): ``org-census.json`` for programs and ``org-census.md`` for people.

Not the population census of ``bnconvention census`` (:class:`bnconvention.audit.population.CensusResult`,
``census.json``): this one classifies an organisation's repos from their headers; :class:`OrgCensus` is its model.

The JSON is deterministic for a given state of the Hub: repos sorted by id, no timings or retry counts outside the
``run`` section (which says how this particular run went), so a census under injected faults equals a clean one
once ``run`` is set aside.

>>> summary = census_summary("lab", [], endpoint="http://hub")
>>> summary.counts.undeclared, summary.repos_total
(0, 0)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bnconvention.formats.atomic import atomic_output, atomic_write_text
from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.formats.text import plural, table_cell
from bnconvention.hub.classify import REPO_CLASSES, RepoCensus, RepoClass

ORG_CENSUS_FORMAT = "bnconvention-hub-census/1"
ORG_CENSUS_JSON = "org-census.json"
ORG_CENSUS_MD = "org-census.md"


class ClassCounts(BaseModel):
    """Repos per class, every class present (0 when none), in the order of
    :data:`~bnconvention.hub.classify.REPO_CLASSES`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    no_weights: int
    channel_absent: int
    declared_consistent: int
    declared_inconsistent: int
    undeclared: int
    unreadable: int

    def by_class(self) -> list[tuple[RepoClass, int]]:
        """``(class, repos)`` in the order of the file."""
        return [(name, getattr(self, name)) for name in REPO_CLASSES]


class CensusListing(BaseModel):
    """How the listing of the organisation ended (:class:`bnconvention.hub.crawl.ListingEnd`): the census keeps it
    only when the listing stopped before its end."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    complete: bool
    pages: int
    repos: int
    stopped: str | None


class CensusRunSection(BaseModel):
    """How one census run went: repos read (failures among them), repos reused from the journal, seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read: int
    reused: int
    failed: int
    seconds: float


class CensusTotals(BaseModel):
    """Repos, repos per class, BatchNorm repos and bytes read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repos_total: int
    counts: ClassCounts
    bn_repos: int
    bytes_read_total: int


class CensusHead(BaseModel):
    """``org-census.json`` without its ``repos`` list (what :func:`census_text` prints and the streamed writer
    starts from): the organisation, the endpoint read, the totals, ``listing`` only when the listing stopped early,
    ``run`` how this run went (timings, retries)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = ORG_CENSUS_FORMAT
    org: str
    endpoint: str
    repos_total: int
    counts: ClassCounts
    bn_repos: int
    bytes_read_total: int
    listing: CensusListing | None = None
    run: CensusRunSection | None = None

    def document(self, repos: JsonValue) -> JsonObject:
        """The file's mapping with ``repos`` in its place, after the totals and before ``run`` (``listing`` and
        ``run`` only when present)."""
        document: JsonObject = self.model_dump(mode="json", exclude={"listing", "run"})
        if self.listing is not None:
            document["listing"] = self.listing.model_dump(mode="json")
        document["repos"] = repos
        if self.run is not None:
            document["run"] = self.run.model_dump(mode="json")
        return document

    def with_repos(self, repos: list[RepoCensus]) -> OrgCensus:
        """The census of this head and ``repos`` (sorted by id)."""
        return OrgCensus(**dict(self), repos=repos)


class OrgCensus(CensusHead):
    """``org-census.json``: the head (:class:`CensusHead`) and one entry per repo, sorted by id."""

    repos: list[RepoCensus]

    def to_json(self) -> JsonObject:
        """The mapping the file holds (``listing`` and ``run`` only when present)."""
        return self.document([repo.model_dump(mode="json") for repo in self.repos])

    @classmethod
    def read(cls, path: Path) -> OrgCensus:
        """Parse an ``org-census.json`` (raises pydantic's ValidationError when it is not one)."""
        return cls.model_validate_json(path.read_bytes())


CLASS_LABELS = {
    "no_weights": "no safetensors weights",
    "channel_absent": "no running statistics (channel absent)",
    "declared_consistent": "BN declared, consistent with the header",
    "declared_inconsistent": "BN declared, inconsistent with the header",
    "undeclared": "BN undeclared",
    "unreadable": "unreadable",
}


def census_totals(repos: Iterable[RepoCensus]) -> CensusTotals:
    """Repos, repos per class, BatchNorm repos and bytes read, in one pass over ``repos``."""
    total = bn = read = 0
    counts: Counter[str] = Counter()
    for repo in repos:
        total += 1
        counts[repo.status] += 1
        bn += repo.bn
        read += repo.bytes_read
    return CensusTotals(repos_total=total, counts=ClassCounts(**{name: counts[name] for name in REPO_CLASSES}),
                        bn_repos=bn, bytes_read_total=read)


def census_head(org: str, repos: Iterable[RepoCensus], *, endpoint: str, run: CensusRunSection | None = None,
                listing: CensusListing | None = None) -> CensusHead:
    """The census document without its ``repos`` list (what :func:`census_text` prints), from one pass. ``listing``
    (:meth:`bnconvention.hub.crawl.ListingEnd.section`) is kept only when the listing stopped before its end: the
    census then covers the repos listed so far, and says so."""
    totals = census_totals(repos)
    return CensusHead(org=org, endpoint=endpoint, repos_total=totals.repos_total, counts=totals.counts,
                      bn_repos=totals.bn_repos, bytes_read_total=totals.bytes_read_total,
                      listing=listing if listing is not None and listing.stopped else None, run=run)


def census_summary(org: str, repos: Sequence[RepoCensus], *, endpoint: str,
                   run: CensusRunSection | None = None) -> OrgCensus:
    """The census document of ``org`` (the token is never part of it; the endpoint is)."""
    ordered = sorted(repos, key=lambda r: r.repo_id)
    return census_head(org, ordered, endpoint=endpoint, run=run).with_repos(ordered)


def _cell(text: str | None) -> str:
    return table_cell(text)


def _markdown_head(head: CensusHead) -> list[str]:
    lines = [f"# BatchNorm census of `{head.org}`", "",
             f"{plural(head.repos_total, 'model repo')} read from `{head.endpoint}`, header only "
             f"({plural(head.bytes_read_total, 'byte')} in all).", "",
             "| Class | Repos |", "| --- | ---: |"]
    lines += [f"| {CLASS_LABELS[name]} | {count} |" for name, count in head.counts.by_class()]
    if head.listing is not None:
        lines += ["", f"**Incomplete**: {_cell(head.listing.stopped)}; the census covers the "
                      f"{plural(head.listing.repos, 'repo')} listed before it stopped."]
    return lines + ["", "| Repo | Class | BN layers | Declared convention | Reason | Bytes read |",
                    "| --- | --- | ---: | --- | --- | ---: |"]


def _markdown_row(repo: RepoCensus) -> str:
    layers = sum(c.bn_layers for c in repo.checkpoints)
    conventions = sorted({c.declared_convention for c in repo.checkpoints if c.declared_convention})
    convention = ", ".join(f"`{_cell(c)}`" for c in conventions) or "-"
    return (f"| `{_cell(repo.repo_id)}` | {repo.status} | {layers} | {convention} | {_cell(repo.reason)} "
            f"| {repo.bytes_read} |")


def org_census_markdown(summary: OrgCensus) -> str:
    """A Markdown report: counts per class, then one row per repo."""
    return "\n".join(_markdown_head(summary) + [_markdown_row(repo) for repo in summary.repos]) + "\n"


def census_text(head: CensusHead) -> str:
    """The one-screen summary the CLI prints (of a census or its head)."""
    lines = [f"census of {head.org}: {plural(head.repos_total, 'model repo')}, "
             f"{plural(head.bytes_read_total, 'byte')} read"]
    lines += [f"  {CLASS_LABELS[name]:<44} {count}" for name, count in head.counts.by_class()]
    if head.listing is not None:
        lines.append(f"incomplete: {head.listing.stopped}; the census covers the "
                     f"{plural(head.listing.repos, 'repo')} listed before it stopped")
    return "\n".join(lines) + "\n"


def census_run_line(*, read: int, reused: int, failed: int) -> str:
    """What one census run did: repos read (and how many of those failed), repos reused from the journal."""
    failures = f" ({failed} failed; rerun to retry them)" if failed else ""
    return f"{plural(read, 'repo')} read{failures}, {reused} reused from the journal"


AUDIT_LABELS: dict[str, Callable[[int], str]] = {
    "audited": lambda n: f"{n} audited", "failed": lambda n: f"{n} failed", "skipped": lambda n: f"{n} skipped"}
PUSH_LABELS: dict[str, Callable[[int], str]] = {
    "opened": lambda n: f"{plural(n, 'pull request')} opened", "exists": lambda n: f"{n} already proposed",
    "merged": lambda n: f"{n} already on main", "dry-run": lambda n: plural(n, "dry run"),
    "failed": lambda n: f"{n} failed", "nothing": lambda n: f"{n} with nothing to push"}


def tally(statuses: Iterable[str], labels: Mapping[str, Callable[[int], str]]) -> str:
    """``"2 audited, 1 failed"``: how many of each kind, in the order of ``labels``, kinds that occur only."""
    counts = Counter(statuses)
    return ", ".join(label(counts[kind]) for kind, label in labels.items() if counts[kind])


def outcomes_line(noun: str, *, now: Sequence[str], reused: Sequence[str],
                  labels: Mapping[str, Callable[[int], str]], left: int = 0) -> str:
    """One summary line counting outcomes by kind, this run's apart from those reused from the journal, e.g.
    ``"3 repos: 1 pull request opened, 1 failed; 1 reused from the journal (1 already on main)"``."""
    parts = [tally(now, labels)] if now else []
    if reused:
        parts.append(f"{len(reused)} reused from the journal ({tally(reused, labels)})")
    if left:
        parts.append(f"{left} left for a later run")
    return f"{plural(len(now) + len(reused) + left, noun)}: {'; '.join(parts) or 'nothing to do'}"


def write_org_census(summary: OrgCensus, out_dir: str | Path) -> dict[str, Path]:
    """Write ``org-census.json`` and ``org-census.md`` atomically into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / ORG_CENSUS_JSON, json.dumps(summary.to_json(), indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / ORG_CENSUS_MD, org_census_markdown(summary))
    return {"json": out / ORG_CENSUS_JSON, "markdown": out / ORG_CENSUS_MD}


_REPOS_SLOT = "\0repos\0"  # where the streamed list goes in the dumped head (no org or endpoint holds a NUL)


def census_json_chunks(head: CensusHead, repos: Iterable[RepoCensus]) -> Iterator[str]:
    """The text of ``org-census.json`` for ``head`` and ``repos`` (sorted by id), a repo at a time: the bytes
    ``json.dumps(summary.to_json(), indent=2)`` writes, since that indents by nesting depth only (a repo at depth
    2)."""
    before, after = json.dumps(head.document(_REPOS_SLOT), indent=2, ensure_ascii=False).split(
        json.dumps(_REPOS_SLOT, ensure_ascii=False))
    yield before
    empty = True
    for repo in repos:
        item = json.dumps(repo.model_dump(mode="json"), indent=2, ensure_ascii=False).replace("\n", "\n    ")
        yield ("[\n    " if empty else ",\n    ") + item
        empty = False
    yield ("[]" if empty else "\n  ]") + after + "\n"


def write_org_census_entries(head: CensusHead, repos: Callable[[], Iterable[RepoCensus]],
                             out_dir: str | Path) -> dict[str, Path]:
    """:func:`write_org_census` of ``head`` (:func:`census_head`) and the repos ``repos()`` yields, sorted by id
    (called once per file, e.g. ``lambda: census_entries(journal)``), written a repo at a time: the same bytes, with
    memory flat in the number of repos."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_output(out / ORG_CENSUS_JSON, mode="wb") as handle:
        for chunk in census_json_chunks(head, repos()):
            handle.write(chunk.encode("utf-8"))
    with atomic_output(out / ORG_CENSUS_MD, mode="wb") as handle:
        handle.write(("\n".join(_markdown_head(head)) + "\n").encode("utf-8"))
        for repo in repos():
            handle.write((_markdown_row(repo) + "\n").encode("utf-8"))
    return {"json": out / ORG_CENSUS_JSON, "markdown": out / ORG_CENSUS_MD}


__all__ = ["AUDIT_LABELS", "CLASS_LABELS", "ORG_CENSUS_FORMAT", "ORG_CENSUS_JSON", "ORG_CENSUS_MD", "PUSH_LABELS",
           "CensusHead", "CensusListing", "CensusRunSection", "CensusTotals", "ClassCounts", "OrgCensus",
           "census_head", "census_json_chunks", "census_run_line", "census_summary", "census_text", "census_totals",
           "org_census_markdown", "outcomes_line", "tally", "write_org_census", "write_org_census_entries"]
