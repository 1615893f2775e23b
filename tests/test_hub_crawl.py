"""The census of a 150-repo organisation on the local Hub, through the real client: every class right, header-only
traffic, pages followed, the journal reused, injected faults absorbed, and a killed crawl resumed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.hub_org import SeedRepo, build_org, seed
from pydantic import ValidationError

from bnconvention.hub.client import make_client
from bnconvention.hub.crawl import census_entries, census_org, list_org_models
from bnconvention.hub.headers import SPECULATIVE_BYTES
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import RetryPolicy
from bnconvention.hub.summaries import (
    CensusRunSection,
    OrgCensus,
    census_summary,
    org_census_markdown,
    write_org_census,
)
from bnconvention.hubserver import FaultRule, LocalHub

ORG = "census-org"
TOKEN = "hf_crawl_test_secret_51c9"
PAGE = 40
FAST = RetryPolicy(attempts=12, base_delay=0.001, max_delay=0.005)

EXPECTED_COUNTS = {"no_weights": 30, "channel_absent": 84, "declared_consistent": 10, "declared_inconsistent": 5,
                   "undeclared": 8, "unreadable": 13}



@pytest.fixture(scope="module")
def org_repos(zoo) -> list[SeedRepo]:
    return build_org(zoo, ORG)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, org_repos: list[SeedRepo]):
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "auditor"}, page_size=PAGE,
                  durable=False) as server:
        seed(server, org_repos)
        yield server


@pytest.fixture(scope="module")
def client(hub: LocalHub):
    return make_client(endpoint=hub.endpoint, token=TOKEN, retry=FAST)


@pytest.fixture(scope="module")
def clean(hub: LocalHub, client, tmp_path_factory: pytest.TempPathFactory):
    """One clean census run: its result, its summary and the requests it made."""
    path = tmp_path_factory.mktemp("clean") / "journal.sqlite"
    hub.reset_stats()
    with Journal(path, org=ORG, endpoint=hub.endpoint) as journal:
        run = census_org(client, ORG, journal=journal)
        repos = list(census_entries(journal))
    stats = hub.stats
    return {"run": run, "repos": repos, "summary": census_summary(ORG, repos, endpoint=hub.endpoint),
            "stats": stats, "journal": path}


def _without_run(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "run"}


def test_org_has_every_class(org_repos: list[SeedRepo]) -> None:
    assert len(org_repos) == 150
    assert Counter(r.expected for r in org_repos) == EXPECTED_COUNTS
    assert any(name.endswith(".safetensors.index.json") for r in org_repos for name in r.files)


def test_every_repo_is_classified_as_expected(clean, org_repos: list[SeedRepo]) -> None:
    run = clean["run"]
    assert (run.listed, run.read, run.reused, run.failed) == (150, 150, 0, 0)
    got = {r.repo_id: r.status for r in clean["repos"]}
    wrong = {r.repo_id: (r.expected, got.get(r.repo_id)) for r in org_repos if got.get(r.repo_id) != r.expected}
    assert wrong == {}
    assert clean["summary"].counts.model_dump() == EXPECTED_COUNTS


@pytest.mark.parametrize(("repo", "status", "reason"), [
    pytest.param("bn-declared-01", "declared_consistent",
                 "4 BatchNorm layers declared as frozen/train/train-transform/ema-m0.1 (header); layers match the "
                 "header; running statistics match the declared digests (1440 bytes read)", id="declared-header"),
    pytest.param("bn-card-only-01", "declared_consistent",
                 "4 BatchNorm layers declared as frozen/train/train-transform/ema-m0.1 (card); layers match the "
                 "header; running statistics match the declared digests (1440 bytes read)", id="declared-card"),
    pytest.param("bn-stale-sharded-01", "declared_inconsistent",
                 "the declaration is stale: the running buffers of layer 'features.1' do not match the declared "
                 "digest: they changed after the declaration was written (stale declaration)", id="stale"),
    pytest.param("bn-undeclared-sharded-01", "undeclared",
                 "4 BatchNorm layers with running statistics (features.1, features.4, features.8, ...) and no "
                 "declaration", id="undeclared-sharded"),
    pytest.param("bn-wrong-features-01", "declared_inconsistent",
                 "the declaration does not match the header's running buffers: layers.num_features_mismatch: 24 is "
                 "not the length of features.4.running_mean in the header: its shape is [16]; set num_features to the "
                 "buffer length", id="num-features"),
    pytest.param("bn-record-not-json-01", "declared_inconsistent",
                 "model.safetensors: the stamped record is not valid JSON", id="record-not-json"),
    pytest.param("bn-card-disagrees-01", "declared_inconsistent",
                 "the card's record differs from the header's (first at /digests/trainable_sha256; 1 difference)",
                 id="card-disagrees"),
    pytest.param("gn-sharded-01", "channel_absent",
                 "no BatchNorm running statistics (channel absent), nothing declared", id="gn-sharded"),
    pytest.param("pickle-only-01", "no_weights",
                 "no .safetensors weights (other weights files, never opened: pytorch_model.bin; convert them to "
                 "safetensors to have them classified and audited)", id="pickle"),
    pytest.param("missing-shard-01", "unreadable",
                 f"{ORG}/missing-shard-01/model.safetensors.index.json: names shard "
                 "'model-00002-of-00002.safetensors', which the repo does not hold", id="missing-shard"),
])
def test_reasons(clean, repo: str, status: str, reason: str) -> None:
    entry = next(r for r in clean["repos"] if r.repo_id == f"{ORG}/{repo}")
    assert (entry.status, entry.reason) == (status, reason)


def test_listing_follows_every_page(clean) -> None:
    listing = [r for r in clean["stats"] if r.path == "/api/models"]
    assert len(listing) == -(-150 // PAGE)
    assert all(r.status == 200 for r in listing)


def test_census_reads_headers_only(clean, hub: LocalHub) -> None:
    """Per repo, what the server sent equals what we counted, and stays within the headers plus one speculative
    range per weights file (plus the card and index, which are read whole)."""
    sent: Counter[str] = Counter()
    for record in clean["stats"]:
        if record.repo_id is not None:
            sent[record.repo_id] += record.bytes_sent
    for entry in clean["repos"]:
        if entry.status == "unreadable":  # reading stopped at the malformed part: at most one range per file
            assert sent[entry.repo_id] <= SPECULATIVE_BYTES * 2 + 200, entry.repo_id
            continue
        assert sent[entry.repo_id] == entry.bytes_read, entry.repo_id
        for checkpoint in entry.checkpoints:
            if checkpoint.status != "unreadable":
                assert checkpoint.bytes_read <= checkpoint.header_bytes + SPECULATIVE_BYTES * len(checkpoint.files) \
                    + 4096, entry.repo_id
    # no request ever asked for a whole weights file
    for record in clean["stats"]:
        if record.path.endswith(".safetensors"):
            assert record.status == 206, record.path


def test_report_json_and_markdown(clean, tmp_path: Path) -> None:
    written = write_org_census(clean["summary"], tmp_path)
    data = json.loads(written["json"].read_text())
    assert data["format"] == "bnconvention-hub-census/1"
    assert data["repos_total"] == 150 and len(data["repos"]) == 150
    assert [r["repo_id"] for r in data["repos"]] == sorted(r["repo_id"] for r in data["repos"])
    markdown = written["markdown"].read_text()
    assert markdown == org_census_markdown(clean["summary"])
    rows = [line for line in markdown.splitlines() if line.startswith(f"| `{ORG}/")]
    assert len(rows) == 150
    assert f"| `{ORG}/bn-wrong-features-01` | declared_inconsistent | 4 | `train/forget/train-transform/ema-m0.1` |" \
        in markdown
    assert "| BN undeclared | 8 |" in markdown


def test_rerun_reuses_every_finished_repo(clean, hub: LocalHub, client) -> None:
    hub.reset_stats()
    with Journal(clean["journal"], org=ORG, endpoint=hub.endpoint) as journal:
        run = census_org(client, ORG, journal=journal)
        repos = list(census_entries(journal))
    assert (run.read, run.reused) == (0, 150)
    assert [r for r in hub.stats if "/resolve/" in r.path] == []
    assert census_summary(ORG, repos, endpoint=hub.endpoint) == clean["summary"]


def test_threaded_census_gives_the_same_result(clean, hub: LocalHub, client, tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.sqlite", org=ORG, endpoint=hub.endpoint) as journal:
        census_org(client, ORG, journal=journal, workers=4)
        assert journal.count("census", final=True) == 150
        repos = list(census_entries(journal))
    assert census_summary(ORG, repos, endpoint=hub.endpoint) == clean["summary"]


def test_injected_faults_end_with_the_same_census(clean, hub: LocalHub, client, tmp_path: Path) -> None:
    """About 20 % of all requests fail (503, 429 with Retry-After, dropped connections, truncated bodies); our
    retry layer absorbs them with millisecond delays, and the census equals the clean one."""
    rules = [FaultRule(kind="status", status=503, probability=0.06),
             FaultRule(kind="status", status=429, probability=0.05),
             FaultRule(kind="drop", probability=0.05),
             FaultRule(kind="truncate", probability=0.05, truncate_fraction=0.3)]
    hub.faults.reseed(1234)
    for rule in rules:
        hub.faults.add(rule)
    hub.reset_stats()
    try:
        with Journal(tmp_path / "journal.sqlite", org=ORG, endpoint=hub.endpoint) as journal:
            run = census_org(client, ORG, journal=journal)
            repos = list(census_entries(journal))
    finally:
        for rule in rules:
            hub.faults.remove(rule)
    faulted = [r for r in hub.stats if r.fault is not None]
    assert len(faulted) >= 0.12 * len(hub.stats)
    assert {r.fault for r in faulted} == {"status", "drop", "truncate"}
    assert run.failed == 0
    assert census_summary(ORG, repos, endpoint=hub.endpoint) == clean["summary"]


def test_a_repo_that_keeps_failing_is_recorded_and_retried_next_time(hub: LocalHub, client, tmp_path: Path) -> None:
    org = "flaky-org"
    hub.store.commit(f"{org}/ok", files={"README.md": b"# ok\n"})
    hub.store.commit(f"{org}/down", files={"model.safetensors": b"\0" * 64})
    rule = hub.faults.add(FaultRule(kind="status", status=503, path=f"/{org}/down/resolve/"))
    journal = Journal(tmp_path / "journal.sqlite", org=org, endpoint=hub.endpoint)
    try:
        run = census_org(client, org, journal=journal)
        down = next(r for r in census_entries(journal) if r.repo_id == f"{org}/down")
        assert (run.read, run.failed) == (2, 1)
        assert down.status == "unreadable"
        assert down.reason.startswith("the Hub failed while reading it: HTTP 503")
        assert journal.get("census", f"{org}/down").final is False
        assert rule.fired == FAST.attempts  # every try, then recorded; the crawl went on
    finally:
        hub.faults.remove(rule)
    run = census_org(client, org, journal=journal)
    assert (run.read, run.reused) == (1, 1)  # only the failed repo is read again
    assert next(r for r in census_entries(journal) if r.repo_id == f"{org}/down").reason.startswith(
        f"{org}/down/model.safetensors: header length")
    journal.close()


def test_a_changed_repo_is_read_again(hub: LocalHub, client, tmp_path: Path, zoo) -> None:
    org = "moving-org"
    hub.store.commit(f"{org}/m", files={"README.md": b"# nothing yet\n"})
    with Journal(tmp_path / "journal.sqlite", org=org, endpoint=hub.endpoint) as journal:
        census_org(client, org, journal=journal)
        first = list(census_entries(journal))
        hub.store.commit(f"{org}/m", files={"model.safetensors": zoo.weights_path("gn-base").read_bytes()})
        second = census_org(client, org, journal=journal)
        second_repos = list(census_entries(journal))
    assert [r.status for r in first] == ["no_weights"]
    assert (second.read, second.reused) == (1, 0)
    assert [r.status for r in second_repos] == ["channel_absent"]


def test_listing_never_leaves_the_organisation(hub: LocalHub, client) -> None:
    hub.store.commit("census-org-twin/x", files={"README.md": b"# x\n"})
    repos = list_org_models(client, ORG)
    assert len(repos) == 150 and all(r.repo_id.startswith(f"{ORG}/") for r in repos)


@pytest.mark.slow
def test_killed_crawl_resumes_without_redoing_finished_repos(clean, hub: LocalHub, client, tmp_path: Path,
                                                             repo_root: Path) -> None:
    """A real SIGKILL of ``python hub_scripts/census.py`` mid-way; the rerun reads only the unfinished repos."""
    journal_path = tmp_path / "journal.sqlite"
    slow = hub.faults.add(FaultRule(kind="latency", latency_s=0.03, path="/resolve/"))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_XET": "1", "BNC_CRAWL_TOKEN": TOKEN}
    command = [sys.executable, str(repo_root / "hub_scripts" / "census.py"), ORG, "--endpoint", hub.endpoint,
               "--token-env", "BNC_CRAWL_TOKEN", "--journal", str(journal_path), "--out", str(tmp_path / "out"),
               "--no-progress", "--retry-delay", "0.001"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        done = 0
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
            if journal_path.exists():
                with sqlite3.connect(journal_path, timeout=5) as db:
                    try:
                        done = db.execute("SELECT COUNT(*) FROM entries WHERE stage='census'").fetchone()[0]
                    except sqlite3.OperationalError:
                        done = 0
                if done >= 30:
                    break
        assert process.poll() is None, process.communicate()[1].decode()[-2000:]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        hub.faults.remove(slow)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (tmp_path / "out" / "org-census.json").exists()  # it never finished

    with Journal(journal_path, org=ORG, endpoint=hub.endpoint) as journal:
        finished = {e.repo_id for e in journal.entries("census") if e.final}
        assert 30 <= len(finished) < 150
        hub.reset_stats()
        run = census_org(client, ORG, journal=journal)
        repos = list(census_entries(journal))
    assert (run.reused, run.read) == (len(finished), 150 - len(finished))
    reread = {r.repo_id for r in hub.stats if "/resolve/" in r.path}
    assert reread and not reread & finished
    assert census_summary(ORG, repos, endpoint=hub.endpoint) == clean["summary"]


# --- streaming: memory flat in the number of repos ------------------------------------------------------------------


def _lazy_org(hub: LocalHub, org: str, count: int) -> None:
    for i in range(count):
        hub.store.commit(f"{org}/m-{i:02d}", files={"README.md": f"# {i}\n".encode()})


@pytest.mark.parametrize("workers", [1, 3])
def test_census_consumes_the_listing_lazily(hub: LocalHub, client, tmp_path: Path, workers: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The census never holds more than its window of repos: the listing is advanced to repo i only once repos
    0 .. i - window are journaled. Reading the whole listing first (as the census once did) raises at repo 1."""
    import bnconvention.hub.crawl as crawl

    org, count = "lazy-org", 30
    _lazy_org(hub, org, count)
    window = 0 if workers == 1 else workers * crawl.WINDOW_PER_WORKER
    real = crawl.iter_org_models
    advanced = []

    def listing(client_, org_, *, end=None):  # noqa: ANN001, ANN202 - the signature of the replaced generator
        for index, repo in enumerate(real(client_, org_, end=end)):
            journaled = journal.count("census")
            if journaled < index - window:
                raise AssertionError(f"listing advanced to repo {index} with only {journaled} journaled")
            advanced.append(index)
            yield repo

    monkeypatch.setattr(crawl, "iter_org_models", listing)
    with Journal(tmp_path / "journal.sqlite", org=org, endpoint=hub.endpoint) as journal:
        run = census_org(client, org, journal=journal, workers=workers)
        assert journal.count("census") == count
    assert advanced == list(range(count))
    assert (run.listed, run.read, run.reused) == (count, count, 0)


def test_reports_cover_the_latest_listing_once(hub: LocalHub, client, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A repo listed twice is read once; a repo journaled by an earlier run but no longer listed (deleted, or no
    longer visible) is left out of the entries the reports are written from, as it was when they came from memory."""
    import bnconvention.hub.crawl as crawl

    org = "relisted-org"
    _lazy_org(hub, org, 4)
    real = crawl.iter_org_models
    with Journal(tmp_path / "journal.sqlite", org=org, endpoint=hub.endpoint) as journal:
        census_org(client, org, journal=journal)
        gone = f"{org}/m-01"
        monkeypatch.setattr(crawl, "iter_org_models", lambda c, o, end=None: (r for r in [*real(c, o), *real(c, o)]
                                                                    if r.repo_id != gone))
        run = census_org(client, org, journal=journal)
        ids = [r.repo_id for r in census_entries(journal)]
        assert journal.get("census", gone) is not None  # its row stays in the journal
    assert (run.listed, run.read, run.reused) == (3, 0, 3)
    assert ids == [f"{org}/m-00", f"{org}/m-02", f"{org}/m-03"]


@pytest.mark.parametrize("run_section", [None, CensusRunSection(read=150, reused=0, failed=0, seconds=1.5)],
                         ids=["no-run", "run"])
def test_streamed_reports_are_the_bytes_of_the_in_memory_ones(hub: LocalHub, client, tmp_path: Path,
                                                              run_section: CensusRunSection | None) -> None:
    """org-census.json and org-census.md written a repo at a time from the journal equal, byte for byte, what the
    in-memory writers (the census's former path) make of the entries the census handed out as it classified them."""
    from bnconvention.hub.summaries import census_head, write_org_census_entries

    collected = []
    with Journal(tmp_path / "journal.sqlite", org=ORG, endpoint=hub.endpoint) as journal:
        census_org(client, ORG, journal=journal, workers=2, on_repo=lambda repo, _: collected.append(repo))
        head = census_head(ORG, census_entries(journal), endpoint=hub.endpoint, run=run_section)
        streamed = write_org_census_entries(head, lambda: census_entries(journal), tmp_path / "streamed")
    assert len(collected) == 150
    in_memory = write_org_census(census_summary(ORG, collected, endpoint=hub.endpoint, run=run_section),
                             tmp_path / "in-memory")
    for kind in ("json", "markdown"):
        assert streamed[kind].read_bytes() == in_memory[kind].read_bytes(), kind


def test_streamed_json_of_an_empty_census_is_the_dumped_one() -> None:
    from bnconvention.hub.summaries import census_head, census_json_chunks

    run = CensusRunSection(read=0, reused=0, failed=0, seconds=0.0)
    head = census_head("lab", [], endpoint="http://hub", run=run)
    assert "".join(census_json_chunks(head, [])) == json.dumps(
        census_summary("lab", [], endpoint="http://hub", run=run).to_json(), indent=2, ensure_ascii=False) + "\n"


def test_a_run_keeps_the_first_failures_and_counts_all() -> None:
    """O(1) state per run: every failure is counted (and journaled), only the first FAILURES_KEPT are kept to print."""
    from bnconvention.hub.crawl import FAILURES_KEPT, OrgCensusRun

    run = OrgCensusRun(org="lab")
    for i in range(FAILURES_KEPT + 5):
        run.add_failure(f"lab/m-{i}: HTTP 503")
    assert run.failed == FAILURES_KEPT + 5
    assert run.failures == [f"lab/m-{i}: HTTP 503" for i in range(FAILURES_KEPT)]


# --- the org-census document read back ------------------------------------------------------------------------------


def test_org_census_reads_back_what_it_wrote(tmp_path: Path) -> None:
    run = CensusRunSection(read=0, reused=0, failed=0, seconds=0.25)
    summary = census_summary("lab", [], endpoint="http://hub", run=run)
    written = write_org_census(summary, tmp_path)
    assert OrgCensus.read(written["json"]) == summary


@pytest.mark.parametrize("change", [
    pytest.param({"counts": {"no_weights": 0}}, id="class-missing-from-counts"),
    pytest.param({"counts": {**dict.fromkeys(EXPECTED_COUNTS, 0), "bogus": 1}}, id="unknown-class"),
    pytest.param({"run": {"read": "many", "reused": 0, "failed": 0, "seconds": 0}}, id="run-not-a-count"),
    pytest.param({"run": {"read": 0, "reused": 0, "failed": 0, "seconds": 0, "token": "hf_x"}}, id="run-extra-key"),
    pytest.param({"listing": {"stopped": "page budget"}}, id="listing-incomplete"),
    pytest.param({"repos": [{"repo_id": "lab/x"}]}, id="repo-without-class"),
])
def test_org_census_rejects_a_malformed_document(tmp_path: Path, change: dict) -> None:
    document = {**census_summary("lab", [], endpoint="http://hub").to_json(), **change}
    (tmp_path / "org-census.json").write_text(json.dumps(document), "utf-8")
    with pytest.raises(ValidationError):
        OrgCensus.read(tmp_path / "org-census.json")
