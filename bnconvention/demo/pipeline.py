"""``run_demo``: the whole story on one machine, offline, in a few minutes.

Stages (each with a progress bar on stderr, each reusing what a previous run finished):

1. **zoo** — build the digits zoo with the recorder observing every variant's training (or reuse it);
2. **publish** — start the local Hub on 127.0.0.1 and publish the organisation as its author would
   (:mod:`bnconvention.demo.releases`); a rerun reuses the published store;
3. **census** — the auditor lists the organisation and classifies every repo from its headers alone;
4. **audit** — every BatchNorm repo is downloaded at the commit the census read and audited (and the GroupNorm
   twins, to show channel absent at 0.00);
5. **push** — one pull request per audited repo with its refit annotation (never to ``main``; never twice);
6. **validate** — the submission-pipeline check of the organisation's cards and weights, and of the headline pull
   request's revision;
7. **population** — build (or reuse) the structured population and census it with the same instrument
   (:mod:`bnconvention.demo.population_stage`; its journal makes a rerun audit nothing twice);
8. **report** — the static HTML report, with the population's census page.

The Hub's tokens are made up for each run and never leave this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypedDict

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

import bnconvention.demo.releases as release_plan
from bnconvention._version import __version__
from bnconvention.audit.population import CensusResult
from bnconvention.demo.access import DemoAccess, demo_hub
from bnconvention.demo.crawl import audit_channel_absent, ensure_outputs, population
from bnconvention.demo.layout import DEFAULT_OUT, DemoPaths, PopulationSize
from bnconvention.demo.library_models import LIBRARY_MODELS, prepare_library_models
from bnconvention.demo.population_stage import PopulationRun, run_population
from bnconvention.demo.releases import DEMO_ORG, RELEASES, publish_org, release_notes
from bnconvention.demo.spec import DEMO_SPEC, demo_spec
from bnconvention.demo.zoo_stage import prepare_zoo
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.hub import (
    Journal,
    census_entries,
    census_org,
    census_summary,
    make_client,
    validate_hub,
)
from bnconvention.hub.summaries import OrgCensus, write_org_census
from bnconvention.hub_audit import audit_org, push_org
from bnconvention.report_html import ReportInput, write_report

DEMO_FORMAT = "bnconvention-demo/1"
# The crawl journal is bound to the Hub it crawled. The demo's Hub is its store (hub/), served on a new port each
# run, so the journal names the store rather than the port.
JOURNAL_ENDPOINT = "bnconvention-demo-local-hub"
STAGES = ("zoo", "publish", "census", "audit", "push", "validate", "population", "report")


class DemoReuse(TypedDict, total=False):
    """What this run took from an earlier one (the summary's ``reused:`` line): the zoo and the published
    organisation (both or nothing), census entries, audits and pushes from the journal, the population."""

    zoo: bool
    publish: bool
    census: int  # census entries reused from the journal
    audits: int  # audits reused from the journal
    audits_run: int  # audits run now
    pushes: int  # pushes reused from the journal
    pushes_opened: int  # pull requests opened now
    population: bool  # the population built and censused before, nothing audited now


class PublishedRepo(TypedDict):
    repo_id: str
    how: str
    commits: list[str]


class PublishedState(TypedDict):
    """``hub-published.json``: the organisation was fully published from the plan of this digest."""

    format: str
    plan_sha256: str
    org: str
    repos: list[PublishedRepo]


@dataclass
class DemoResult:
    """What one demo run found and did (the summary and the tests read it)."""

    out: Path
    endpoint: str
    report: Path
    census: OrgCensus  # org-census.json
    audits: list[Any]  # RepoAudit, BatchNorm repos then channel-absent ones
    population: CensusResult | None  # the audited releases counted as a census (crawl/population.json)
    pushes: list[Any]  # PushOutcome
    validation: list[Any]  # validator Issue
    pr_check: tuple[str, int, int] | None  # (repo id, pull request number, validation exit code)
    population_census: PopulationRun | None = None  # the structured population's census (stage 7)
    seconds: dict[str, float] = field(default_factory=dict)
    reused: DemoReuse = field(default_factory=lambda: DemoReuse())

    def audited(self) -> list[tuple[str, Any]]:
        """``(repo id, AuditResult)`` of every audited checkpoint, sorted by repo id."""
        return sorted(((a.repo_id, f.result) for a in self.audits for f in a.files if f.result is not None),
                      key=lambda pair: pair[0])



class Stages:
    """Announces each stage on stderr (``[demo 2/7] publish: ...``), times it and says how long it took."""

    def __init__(self, stream: TextIO, *, quiet: bool, names: tuple[str, ...] = STAGES) -> None:
        self.stream = stream
        self.quiet = quiet
        self.names = names
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str, what: str) -> Iterator[None]:
        index = self.names.index(name) + 1
        if not self.quiet:
            print(f"[demo {index}/{len(self.names)}] {name}: {what}", file=self.stream, flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start
        if not self.quiet:  # only when the stage finished
            print(f"[demo {index}/{len(self.names)}] {name}: done in {self.seconds[name]:.0f} s", file=self.stream,
                  flush=True)


@contextlib.contextmanager
def hub_environment(hf_home: Path) -> Iterator[None]:
    """HF_HOME inside the demo output, no telemetry, and no offline switch (it would block the local Hub too);
    the previous values come back afterwards."""
    wanted = {"HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    saved = {key: os.environ.get(key) for key in [*wanted, "HF_HUB_OFFLINE"]}
    os.environ.update(wanted)
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def plan_sha256(zoo: Any, libraries: Any) -> str:
    """What the published organisation depends on: the release plan, the code that publishes it, the zoo's exact
    files and the library models' (:class:`~bnconvention.demo.library_models.LibraryModels`)."""
    here = Path(release_plan.__file__)  # the publishing code, read (library_publish imports torch)
    code = {name: hashlib.sha256(here.with_name(name).read_bytes()).hexdigest()
            for name in (here.name, "library_publish.py")}
    return canonical_sha256({"format": DEMO_FORMAT, "releases": [asdict(r) for r in RELEASES], "code": code,
                             "zoo_code": zoo.code_sha256, "zoo_files": dict(zoo.files),
                             "library_models": libraries.key, "library_files": dict(libraries.files)})


def _published_before(paths: DemoPaths, plan: str) -> bool:
    """Whether ``hub-published.json`` says the organisation was fully published from ``plan``."""
    if not paths.published.is_file() or not paths.hub.is_dir():
        return False
    try:
        state = loads_strict(paths.published.read_bytes(), source=str(paths.published))
    except ValueError:
        return False
    return isinstance(state, dict) and state.get("plan_sha256") == plan


@contextlib.contextmanager
def demo_folder(out: str | os.PathLike[str], *, zoo_dir: str | os.PathLike[str] | None,
                fresh: bool, population_dir: str | os.PathLike[str] | None = None) -> Iterator[DemoPaths]:
    """The demo's output folder, claimed and locked for one run: a folder the demo did not create, or one another
    demo (or ``demo --serve``) is using, is refused (UsageError); ``fresh`` empties it first."""
    paths = DemoPaths.under(out, zoo=zoo_dir, population=population_dir)
    paths.claim()
    lock = FileLock(str(paths.lock), blocking=False)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"another bnconvention demo is running in {paths.root}; wait for it to finish (or stop "
                         "its --serve) or choose another --out") from None
    try:
        if fresh:
            paths.wipe()
            paths.claim()
        yield paths
    finally:
        lock.release()


def run_demo(out: str | os.PathLike[str] = DEFAULT_OUT, *, zoo_dir: str | os.PathLike[str] | None = None,
             population_dir: str | os.PathLike[str] | None = None, population_size: PopulationSize = "full",
             fresh: bool = False, progress: bool = True, stage_lines: bool | None = None,
             stream: TextIO | None = None) -> DemoResult:
    """Run every stage into ``out`` and return what was found. Stage lines go to ``stream`` (default stderr),
    progress bars to stderr; ``progress=False`` silences both unless ``stage_lines`` keeps the stage lines (the
    CLI does, when stderr is not a terminal: a few lines for a log, no bar redraws). ``zoo_dir`` keeps the zoo
    elsewhere (default ``out/zoo``), ``population_dir`` the population (default ``out/population``; ``tiny``
    builds 14 checkpoints instead of 114); ``fresh`` rebuilds everything. A second demo in the same ``out`` is
    refused (UsageError)."""
    with demo_folder(out, zoo_dir=zoo_dir, fresh=fresh, population_dir=population_dir) as paths:
        stages = Stages(stream or sys.stderr, quiet=not (progress if stage_lines is None else stage_lines))
        with hub_environment(paths.hf_home):
            return _run(paths, stages, progress=progress, population_size=population_size)


def _run(paths: DemoPaths, stages: Stages, *, progress: bool, population_size: PopulationSize) -> DemoResult:
    reused = DemoReuse()
    with stages.stage("zoo", f"digits zoo with the recorder observing training, and the timm and transformers "
                             f"models ({paths.zoo})"):
        zoo, libraries, reused["zoo"] = prepare_models(paths, progress=progress)

    access = DemoAccess.new()
    plan = plan_sha256(zoo, libraries)
    published = _published_before(paths, plan)
    if not published:
        paths.forget_hub()  # a changed zoo or an interrupted publish: start the organisation over
    with demo_hub(paths.hub, access) as hub:
        if published and not all(hub.store.repo_exists(r.repo_id) for r in RELEASES):
            published = False
        with stages.stage("publish", f"{len(RELEASES)} releases of {DEMO_ORG} on a local Hub at {hub.endpoint}"):
            reused["publish"] = published
            if not published:
                _publish(paths, hub, (zoo, libraries), access.author_token, plan, progress=progress)
        return _crawl(paths, stages, hub.endpoint, access.auditor_token, reused, progress=progress,
                      population_size=population_size)


def prepare_models(paths: DemoPaths, *, progress: bool) -> tuple[Any, Any, bool]:
    """``(zoo, library models, reused)``: the observed digits zoo and the timm and transformers models beside it,
    each reused when its cache is current; ``reused`` when both were. ``demo`` and ``demo --serve`` share it."""
    # torch, timm and transformers: imported when a demo runs, not with the package
    zoo, zoo_reused = prepare_zoo(paths.zoo, progress=progress)
    with tqdm(total=len(LIBRARY_MODELS), desc="timm and transformers models", unit="model",
              disable=not progress) as bar:
        libraries, libraries_reused = prepare_library_models(paths.library_models, zoo_code=zoo.code_sha256,
                                                             on_model=lambda model: bar.update(1))
    return zoo, libraries, zoo_reused and libraries_reused


def publish_demo_org(hub: Any, models: tuple[Any, Any], releases_dir: Path, token: str, *,
                     progress: bool) -> list[Any]:
    """Publish every release of the organisation to ``hub`` as its author (``token``), through huggingface_hub and
    the libraries' own publishing code; ``models`` is ``(zoo, library models)``. The ``Published`` record of each.
    ``demo`` and ``demo --serve`` publish with this one function."""
    zoo, libraries = models
    author = make_client(endpoint=hub.endpoint, token=token)
    with tqdm(total=len(RELEASES), desc=f"publish {DEMO_ORG}", unit="repo", disable=not progress) as bar:
        return publish_org(author, zoo, releases_dir, libraries=libraries, on_release=lambda release: bar.update(1))


def _publish(paths: DemoPaths, hub: Any, models: tuple[Any, Any], token: str, plan: str, *, progress: bool) -> None:
    published = publish_demo_org(hub, models, paths.releases, token, progress=progress)
    state: PublishedState = {"format": DEMO_FORMAT, "plan_sha256": plan, "org": DEMO_ORG, "repos": [
        {"repo_id": p.repo_id, "how": p.how, "commits": p.commits} for p in published]}
    atomic_write_text(paths.published, json.dumps(state, indent=2) + "\n")


def _crawl(paths: DemoPaths, stages: Stages, endpoint: str, token: str, reused: DemoReuse, *,
           progress: bool, population_size: PopulationSize) -> DemoResult:
    client = make_client(endpoint=endpoint, token=token)
    spec = demo_spec()
    paths.crawl.mkdir(parents=True, exist_ok=True)
    with Journal(paths.journal, org=DEMO_ORG, endpoint=JOURNAL_ENDPOINT) as journal:
        with stages.stage("census", f"list {DEMO_ORG} and classify every repo from its safetensors headers"):
            census_run = census_org(client, DEMO_ORG, journal=journal, progress=progress)
            census_repos = list(census_entries(journal))  # a demo organisation: a few dozen repos, the report's rows
            census = census_summary(DEMO_ORG, census_repos, endpoint=endpoint)
            write_org_census(census, paths.crawl)
            reused["census"] = census_run.reused
        with stages.stage("audit", "download each repo at the census commit; refit at bit-identical weights"):
            audit_run = audit_org(client, DEMO_ORG, spec, journal=journal, out=paths.crawl, progress=progress)
            absent, absent_reused = audit_channel_absent(client, census_repos, spec, journal=journal,
                                                         out=paths.crawl, progress=progress)
            audits = list(audit_run.audits) + absent
            reused["audits"] = audit_run.reused + absent_reused
            reused["audits_run"] = audit_run.ran + len(absent) - absent_reused
            summary = population(audits, spec)
            if summary is not None:
                atomic_write_text(paths.crawl / "population.json", json.dumps(summary.to_json(), indent=2) + "\n")
        with stages.stage("push", "one pull request per audited repo with its refit annotation"):
            push_run = push_org(client, DEMO_ORG, journal=journal, progress=progress)
            reused["pushes"] = push_run.reused
            reused["pushes_opened"] = push_run.opened
    with stages.stage("validate", f"validate the cards and weights of {DEMO_ORG} and the headline pull request"):
        validation = validate_hub(client, DEMO_ORG, progress=progress)
        issues = list(validation.report.issues)
        atomic_write_text(paths.crawl / "validation.json",
                          json.dumps([i.to_dict() for i in issues], indent=2) + "\n")
        pr_check = _check_headline_pr(client, audits, push_run.outcomes)
    with stages.stage("population", f"the {population_size} population in {paths.population} and its census"):
        censused = run_population(paths.population, paths.population_census, size=population_size,
                                  progress=progress)
        reused["population"] = censused.build_reused and censused.audits_run == 0
    with stages.stage("report", f"HTML report in {paths.report}"):
        files = ensure_outputs(audits, paths.crawl)
        report = write_report(ReportInput(
            org=DEMO_ORG, endpoint=endpoint, census=census, audits=audits, audit_summary=summary,
            pushes=push_run.outcomes, validation=issues, files=files, release_notes=release_notes(),
            title=f"The BatchNorm illusion on {DEMO_ORG}: census, audits and refit annotations",
            generator=_generator(), population_census=censused.summary), paths.report)
    return DemoResult(out=paths.root, endpoint=endpoint, report=report, census=census, audits=audits,
                      population=summary, pushes=list(push_run.outcomes), validation=issues, pr_check=pr_check,
                      population_census=censused, seconds=dict(stages.seconds), reused=reused)


def headline_release(audits: list[Any]) -> tuple[str, Any] | None:
    """The displaced release with a verdict flip whose headline cell moved most: ``(repo id, AuditResult)``."""
    candidates = []
    for audit in audits:
        for item in audit.files:
            result = item.result
            if result is None or result.annotation.channel != "present" or result.anchored is False:
                continue
            flipped = any(v.flipped for v in result.annotation.verdicts)
            cell = next((c for c in result.annotation.cells if c.metric == DEMO_SPEC["headline"]), None)
            if flipped and cell is not None and cell.decision.outcome == "displaced":
                candidates.append((-abs(cell.shift_pp), audit.repo_id, result))
    if not candidates:
        return None
    candidates.sort(key=lambda c: (c[0], c[1]))
    return candidates[0][1], candidates[0][2]


def _check_headline_pr(client: Any, audits: list[Any], pushes: list[Any]) -> tuple[str, int, int] | None:
    """Validate the headline repo's pull request revision (what a submission pipeline would check)."""
    top = headline_release(audits)
    if top is None:
        return None
    push = next((p for p in pushes if p.repo_id == top[0] and p.pr_num is not None), None)
    if push is None:
        return None
    checked = validate_hub(client, top[0], revision=f"refs/pr/{push.pr_num}")
    return top[0], int(push.pr_num), checked.exit_code


def _generator() -> str:
    return f"bnconvention {__version__} (bnconvention demo)"


__all__ = ["DEMO_FORMAT", "JOURNAL_ENDPOINT", "STAGES", "DemoResult", "Stages", "demo_folder", "headline_release",
           "hub_environment", "plan_sha256", "prepare_models", "publish_demo_org", "run_demo"]
