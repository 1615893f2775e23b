"""Audit and push on the Hub, end to end through the real client: every BatchNorm repo of the 150-repo organisation
audited at its pinned commit, one pull request each (never a commit to main), reruns that open nothing, a push
killed between the Hub's answer and the journal, a lost response, .eval_results only for a Hub benchmark, the
validation of pull request revisions, and the same annotations from every executor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.hub_org import SeedRepo, build_org, seed

from bnconvention.audit.render.outputs import annotation_text
from bnconvention.audit.spec.audit_spec import AuditSpec, parse_spec
from bnconvention.authoring.card_stamp import REFIT_BLOCK_KEY, REFIT_SECTION_BEGIN, read_refit_entries
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.card import decode_card, read_card_record
from bnconvention.hub.client import make_client
from bnconvention.hub.executors import ray_available, run_tasks
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import RetryPolicy
from bnconvention.hub.validate import validate_hub
from bnconvention.hub_audit.audit import AuditTask, audit_org, audit_repo_task
from bnconvention.hub_audit.audit_task import for_workers
from bnconvention.hub_audit.entries import RepoAudit
from bnconvention.hub_audit.push import EVAL_DIR, marker, markers_in, push_org
from bnconvention.hubserver import FaultRule, LocalHub
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import to_dict
from bnconvention.validation import validate_record

ORG = "audit-org"
BENCH_ORG = "bench-org"
# copies of two audited repos, for the pull requests the validation test opens: the push tests count every
# pull request of the audited repos, in whatever order the tests run
VALIDATE_ORG = "validate-org"
VALIDATE_COPIES = ("bn-undeclared-01", "bn-declared-03")
OWNER_TOKEN = "hf_owner_secret_0a1b"
AUDITOR_TOKEN = "hf_auditor_secret_9z8y"
TOKEN_ENV = "BNC_TEST_AUDITOR_TOKEN"
FAST = RetryPolicy(attempts=6, base_delay=0.001, max_delay=0.005)
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec", "name": "hub-tests",
    "splits": {"forget_classes": [3]},
    "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}},
    "cells": ["df", "dr", "dt"], "criteria": ["df <= 0.05"],
    "replicates": 2, "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
    "recoverability": None, "provenance": None,
}
SINGLE = ["bn-declared-01", "bn-declared-02", "bn-declared-03", "bn-declared-nocfg-01", "bn-card-only-01",
          "bn-undeclared-01", "bn-undeclared-02", "bn-undeclared-03", "bn-wrong-features-01",
          "bn-invalid-record-01", "bn-card-disagrees-01", "bn-record-not-json-01"]
# sharded checkpoints are audited too (they were reported as skipped)
SHARDED = ([f"bn-declared-sharded-0{i}" for i in range(1, 6)] + [f"bn-undeclared-sharded-0{i}" for i in range(1, 6)]
           + ["bn-stale-sharded-01"])
AUDITED = sorted(SINGLE + SHARDED)



@pytest.fixture(scope="module")
def spec() -> AuditSpec:
    return parse_spec(SPEC)


@pytest.fixture(scope="module")
def org_repos(zoo) -> list[SeedRepo]:
    return build_org(zoo, ORG)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, org_repos: list[SeedRepo], zoo):
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={OWNER_TOKEN: "owner", AUDITOR_TOKEN: "auditor"},
                  orgs={ORG: ["owner"], BENCH_ORG: ["owner"], VALIDATE_ORG: ["owner"], "bench": ["owner"]},
                  page_size=40, durable=False) as server:
        seed(server, org_repos)
        seed(server, [SeedRepo(f"{VALIDATE_ORG}/{name}", r.files, r.expected, r.audited) for r in org_repos
                      for name in VALIDATE_COPIES if r.repo_id == f"{ORG}/{name}"])
        config = zoo.config_path("bn-badteacher-eval").read_bytes()
        for name in ("first", "second", "third", "fourth"):
            server.store.commit(f"{BENCH_ORG}/{name}", files={
                "model.safetensors": zoo.weights_path("bn-badteacher-eval").read_bytes(), "config.json": config,
                "README.md": b"---\nlicense: mit\n---\n# A model\n"}, author="owner")
        server.store.commit("bench/digits", repo_type="dataset", files={
            "eval.yaml": b"name: Digits\ntasks:\n- id: digits_test\n  config: default\n  split: test\n"},
            author="owner")
        yield server


@pytest.fixture(scope="module")
def auditor(hub: LocalHub):
    return make_client(endpoint=hub.endpoint, token=AUDITOR_TOKEN, retry=FAST)


@pytest.fixture(scope="module")
def audited(hub: LocalHub, auditor, spec: AuditSpec, tmp_path_factory: pytest.TempPathFactory):
    """Census and audit of the whole organisation, once; heads of main before anything is pushed."""
    out = tmp_path_factory.mktemp("audit-out")
    journal = Journal(out / "journal.sqlite", org=ORG, endpoint=hub.endpoint)
    run = audit_org(auditor, ORG, spec, journal=journal, out=out, plots=False)
    heads = {state["id"]: state["branches"]["main"] for state in hub.store.list_repo_states()}
    yield {"run": run, "journal": journal, "out": out, "heads": heads}
    journal.close()


@pytest.fixture(scope="module")
def dry_run(audited, auditor, hub: LocalHub):
    """A dry run, and what it left on the Hub and in the journal: taken before the first push whatever test asks
    for it first (``pushed`` needs it)."""
    run = push_org(auditor, ORG, journal=audited["journal"], dry_run=True)
    prs = {repo: _pull_requests(hub, f"{ORG}/{repo}") for repo in AUDITED}
    return {"run": run, "prs": prs, "push_entries": audited["journal"].entries("push")}


@pytest.fixture(scope="module")
def pushed(audited, auditor, dry_run):
    """The first real push: one pull request per audited repo."""
    return push_org(auditor, ORG, journal=audited["journal"])


def _audit(run, repo: str) -> RepoAudit:
    return next(a for a in run.audits if a.repo_id == f"{ORG}/{repo}")


def _pull_requests(hub: LocalHub, repo_id: str) -> list[dict]:
    return [d for d in hub.store.list_discussions(repo_id) if d.get("pr")]


# --- audit ------------------------------------------------------------------------------------------------------


def test_every_batchnorm_repo_is_audited_at_its_pinned_commit(audited, hub: LocalHub) -> None:
    run = audited["run"]
    audited_repos = sorted(a.repo_id.split("/")[1] for a in run.audits if a.status == "audited")
    skipped = sorted(a.repo_id.split("/")[1] for a in run.audits if a.status == "skipped")
    assert audited_repos == AUDITED
    assert skipped == []
    assert run.ran == 23 and run.reused == 0
    for audit in run.audits:
        assert audit.revision == audited["heads"][audit.repo_id]
        for item in audit.files:
            if item.status != "audited":
                continue
            annotation = item.result.annotation
            sharded = audit.repo_id.split("/")[1] in SHARDED
            assert (annotation.subject.repo, annotation.subject.revision, annotation.subject.filename) == (
                audit.repo_id, audit.revision, "model.safetensors.index.json" if sharded else "model.safetensors")
            assert [i for i in validate_record(to_dict(annotation)) if i.severity == "error"] == []
            assert item.annotation_sha256 == canonical_sha256(to_dict(annotation))
            assert item.annotation_path == annotation_filename(item.annotation_sha256)


def test_architecture_comes_from_the_repo_when_allowlisted_else_from_the_spec(audited) -> None:
    run = audited["run"]
    sources = {a.repo_id.split("/")[1]: a.files[0].architecture_source for a in run.audits if a.status == "audited"}
    assert {repo for repo, source in sources.items() if source == "spec"} == {
        "bn-declared-nocfg-01", "bn-record-not-json-01", *(r for r in SHARDED if r != "bn-stale-sharded-01")}
    assert all(a.files[0].factory == "zoo/convnet-bn" for a in run.audits if a.status == "audited")


def test_audit_writes_annotations_and_the_population_summary(audited) -> None:
    out, run = audited["out"], audited["run"]
    item = _audit(run, "bn-declared-01").files[0]
    # one folder per spec under the file's, so two specs never write over each other's annotation
    label = f"spec-{canonical_sha256(parse_spec(SPEC).model_dump(mode='json'))[:12]}"
    folder = out / "audits" / ORG / "bn-declared-01" / "model" / label
    assert (folder / "annotation.json").read_text() == annotation_text(item.result)
    assert (folder / "summary.md").is_file() and (folder / "result.json").is_file()
    summary = json.loads((out / "audit.json").read_text())
    assert summary["counts"]["checkpoints"] == 23 and summary["org"] == ORG
    assert (out / "audit.md").read_text().startswith("#")
    # Regression: the summary linked checkpoints/<name>/annotation.json, the census layout, not this one
    links = [row["annotation"] for row in summary["checkpoints"]]
    assert f"audits/{ORG}/bn-declared-01/model/{label}/annotation.json" in links
    assert [link for link in links if not (out / link).is_file()] == []


def test_audit_rerun_reuses_the_journal(audited, auditor, spec: AuditSpec) -> None:
    again = audit_org(auditor, ORG, spec, journal=audited["journal"], out=audited["out"], plots=False)
    assert (again.ran, again.reused) == (0, 23)
    assert [a.model_dump() for a in again.audits] == [a.model_dump() for a in audited["run"].audits]


# --- push ----------------------------------------------------------------------------------------------------------


def test_dry_run_prints_the_changes_and_pushes_nothing(dry_run) -> None:
    dry = dry_run["run"]
    assert [o.status for o in dry.outcomes] == ["dry-run"] * 23
    assert all(dry_run["prs"][repo] == [] for repo in AUDITED)
    text = dry.plans[0].describe()
    assert text.startswith(f"{ORG}/bn-card-disagrees-01: would open a pull request on ")
    assert "  add    bnconvention/refit-" in text and "  update README.md" in text
    assert f"    +{REFIT_BLOCK_KEY}:" in text and f"    +{REFIT_SECTION_BEGIN}" in text
    assert dry_run["push_entries"] == []


def test_push_opens_one_pull_request_per_audited_repo(audited, pushed, hub: LocalHub) -> None:
    assert [o.status for o in pushed.outcomes] == ["opened"] * 23 and pushed.opened == 23
    for audit in audited["run"].audits:
        prs = _pull_requests(hub, audit.repo_id)
        if audit.status != "audited":
            assert prs == []
            continue
        assert len(prs) == 1 and prs[0]["author"] == "auditor"
        # never a commit to main
        assert hub.store.repo_state(audit.repo_id)["branches"]["main"] == audited["heads"][audit.repo_id]
        item = audit.files[0]
        ref = f"refs/pr/{prs[0]['num']}"
        pushed_bytes = hub.store.read_file(audit.repo_id, item.annotation_path, revision=ref)
        assert pushed_bytes.decode() == annotation_text(item.result)
        assert canonical_sha256(loads_strict(pushed_bytes)) == item.annotation_sha256
        head = hub.store.resolve(audit.repo_id, ref).commit
        assert head.parents == (audit.revision,)
        assert not any(path.startswith(EVAL_DIR) for path in head.tree)  # sklearn/digits is not a Hub benchmark


def test_pull_request_card_keeps_the_declaration_and_adds_the_refit_entry(audited, pushed, hub: LocalHub) -> None:
    repo_id = f"{ORG}/bn-declared-01"
    item = _audit(audited["run"], "bn-declared-01").files[0]
    ref = f"refs/pr/{_pull_requests(hub, repo_id)[0]['num']}"
    before = decode_card(hub.store.read_file(repo_id, "README.md"))
    after = decode_card(hub.store.read_file(repo_id, "README.md", revision=ref))
    assert read_card_record(after) == read_card_record(before)  # the release's own declaration is untouched
    entries = read_refit_entries(after)
    assert [(e["annotation"], e["sha256"], e["revision"]) for e in entries] == [
        (item.annotation_path, item.annotation_sha256, item.result.annotation.subject.revision)]
    assert [c["metric"] for c in entries[0]["cells"]] == ["df", "dr", "dt"]
    assert after.startswith(before[: before.index("---", 3)])  # front matter keys before ours are kept in order
    assert "## BatchNorm refit audit" in after and after.count(REFIT_SECTION_BEGIN) == 1
    details = hub.store.get_discussion(repo_id, int(ref.rsplit("/", 1)[1]))
    description = next(e for e in details["events"] if e["type"] == "comment")["data"]["latest"]["raw"]
    assert markers_in(description) == {item.annotation_sha256}
    assert marker(item.annotation_sha256) in description


def test_card_less_repo_gets_a_card(audited, pushed, hub: LocalHub) -> None:
    repo_id = f"{ORG}/bn-record-not-json-01"
    ref = f"refs/pr/{_pull_requests(hub, repo_id)[0]['num']}"
    card = decode_card(hub.store.read_file(repo_id, "README.md", revision=ref))
    assert len(read_refit_entries(card)) == 1 and read_card_record(card) is None


def test_rerun_opens_no_new_pull_request(audited, pushed, auditor, hub: LocalHub, tmp_path: Path) -> None:
    again = push_org(auditor, ORG, journal=audited["journal"])
    assert (again.opened, again.reused) == (0, 23)
    # even with the push rows of the journal lost: the markers on the Hub say it is done
    with Journal(tmp_path / "fresh.sqlite", org=ORG, endpoint=hub.endpoint) as fresh:
        for entry in audited["journal"].entries("audit"):
            fresh.record("audit", entry.repo_id, revision=entry.revision, key=entry.key, status=entry.status,
                         payload=entry.payload, final=entry.final)
        lost = push_org(auditor, ORG, journal=fresh)
    assert lost.opened == 0 and [o.status for o in lost.outcomes] == ["exists"] * 23
    assert [o.pr_num for o in lost.outcomes] == [o.pr_num for o in pushed.outcomes]
    assert all(len(_pull_requests(hub, f"{ORG}/{repo}")) == 1 for repo in AUDITED)


# --- a small organisation for the failure paths -----------------------------------------------------------------


@pytest.fixture(scope="module")
def bench(hub: LocalHub, auditor, tmp_path_factory: pytest.TempPathFactory):
    """bench-org: four BatchNorm repos audited with a spec whose dataset is the Hub benchmark bench/digits. Each test
    below pushes a repo of its own, so that it passes alone, in any order and on any xdist worker."""
    spec = parse_spec({**SPEC, "dataset": {"kind": "digits", "dataset_id": "bench/digits"}})
    out = tmp_path_factory.mktemp("bench-out")
    journal = Journal(out / "journal.sqlite", org=BENCH_ORG, endpoint=hub.endpoint)
    run = audit_org(auditor, BENCH_ORG, spec, journal=journal, out=out, plots=False)
    yield {"spec": spec, "journal": journal, "run": run, "out": out}
    journal.close()


def test_killed_between_the_hub_answer_and_the_journal_no_second_pull_request(bench, auditor, hub: LocalHub) -> None:
    def killed(outcome) -> None:
        raise KeyboardInterrupt  # the process dies right after the Hub opened the pull request

    with pytest.raises(KeyboardInterrupt):
        push_org(auditor, BENCH_ORG, journal=bench["journal"], repos=[f"{BENCH_ORG}/first"], after_open=killed)
    assert bench["journal"].get("push", f"{BENCH_ORG}/first") is None
    assert len(_pull_requests(hub, f"{BENCH_ORG}/first")) == 1
    rerun = push_org(auditor, BENCH_ORG, journal=bench["journal"], repos=[f"{BENCH_ORG}/first"])
    assert [o.status for o in rerun.outcomes] == ["exists"]
    assert len(_pull_requests(hub, f"{BENCH_ORG}/first")) == 1


def test_lost_response_to_the_commit_is_not_retried_into_a_second_pull_request(bench, auditor,
                                                                                hub: LocalHub) -> None:
    # The server opens the pull request, then the response is cut short: the retry finds it by its marker.
    rule = hub.faults.add(FaultRule(kind="truncate", method="POST", path=f"/api/models/{BENCH_ORG}/second/commit/",
                                    count=1, truncate_fraction=0.2))
    try:
        run = push_org(auditor, BENCH_ORG, journal=bench["journal"], repos=[f"{BENCH_ORG}/second"])
    finally:
        hub.faults.remove(rule)
    assert rule.fired == 1
    assert [(o.status, o.pr_num) for o in run.outcomes] == [("exists", 1)]
    assert len(_pull_requests(hub, f"{BENCH_ORG}/second")) == 1


def test_eval_results_entry_only_for_a_hub_benchmark(bench, auditor, hub: LocalHub) -> None:
    from huggingface_hub import parse_eval_result_entries

    run = push_org(auditor, BENCH_ORG, journal=bench["journal"], repos=[f"{BENCH_ORG}/third"])
    assert [o.status for o in run.outcomes] == ["opened"]
    item = next(a for a in bench["run"].audits if a.repo_id == f"{BENCH_ORG}/third").files[0]
    ref = f"refs/pr/{run.outcomes[0].pr_num}"
    path = f"{EVAL_DIR}/bnconvention-refit-{item.annotation_sha256[:12]}.yaml"
    entries = parse_eval_result_entries(yaml.safe_load(hub.store.read_file(f"{BENCH_ORG}/third", path,
                                                                          revision=ref)))
    dt = next(c for c in item.result.annotation.cells if c.metric == "dt")
    assert [(e.dataset_id, e.task_id, e.value) for e in entries] == [("bench/digits", "digits_test", dt.refit)]
    assert "refit/retain/train-transform/exact" in entries[0].notes


def test_merged_annotation_is_not_pushed_again_after_the_repo_moved(bench, auditor, hub: LocalHub) -> None:
    repo_id = f"{BENCH_ORG}/fourth"
    # its own pull request: it relied on the one test_eval_results_entry_only_for_a_hub_benchmark opened on
    # bench-org/third, and failed alone or when xdist ran the two tests on different workers
    opened = push_org(auditor, BENCH_ORG, journal=bench["journal"], repos=[repo_id])
    assert [o.status for o in opened.outcomes] == ["opened"]
    num = _pull_requests(hub, repo_id)[0]["num"]
    hub.store.merge_pull_request(repo_id, num, author="owner")
    # main moved: the census reads it again and the audit runs again at the new commit, with the same results
    run = audit_org(auditor, BENCH_ORG, bench["spec"], journal=bench["journal"], out=bench["out"], plots=False)
    assert run.ran == 1
    again = push_org(auditor, BENCH_ORG, journal=bench["journal"], repos=[repo_id])
    assert [o.status for o in again.outcomes] == ["merged"]
    assert len(_pull_requests(hub, repo_id)) == 1


# --- validation of pull request revisions -----------------------------------------------------------------------


def test_validate_exit_codes_on_pull_request_revisions(audited, pushed, auditor, hub: LocalHub) -> None:
    owner = make_client(endpoint=hub.endpoint, token=OWNER_TOKEN, retry=FAST)
    good_repo = f"{ORG}/bn-declared-01"
    good = validate_hub(auditor, good_repo, revision=f"refs/pr/{_pull_requests(hub, good_repo)[0]['num']}")
    assert good.exit_code == 0 and good.report.issues == []
    # Regression: file summaries ("agrees with ...") named the temporary download folder instead of the repo
    assert not [f.note for f in good.report.files if "bnc-hub-validate" in f.note]
    assert any(f"agrees with {good_repo}/README.md" in f.note for f in good.report.files)
    assert any(f.file == f"{good_repo}/bnconvention/" + Path(_audit(audited["run"], "bn-declared-01")
                                                               .files[0].annotation_path).name
               for f in good.report.files)

    # a pull request that adds the annotation of other weights (bn-declared-02's) to bn-undeclared-01
    from huggingface_hub import CommitOperationAdd

    item = _audit(audited["run"], "bn-declared-02").files[0]
    info = owner.api.create_commit(f"{VALIDATE_ORG}/bn-undeclared-01", [CommitOperationAdd(
        path_in_repo=item.annotation_path, path_or_fileobj=annotation_text(item.result).encode())],
        commit_message="someone else's annotation", create_pr=True)
    bad = validate_hub(auditor, f"{VALIDATE_ORG}/bn-undeclared-01", revision=f"refs/pr/{info.pr_num}")
    assert bad.exit_code == 1
    assert [(i.code, i.file) for i in bad.report.errors] == [
        ("annotation.subject_mismatch", f"{VALIDATE_ORG}/bn-undeclared-01/{item.annotation_path}")]
    assert all("bnc-hub-validate" not in i.message and "bnc-hub-validate" not in i.file
               for i in bad.report.issues)

    # a pull request whose weights file is cut short: unreadable input
    info = owner.api.create_commit(f"{VALIDATE_ORG}/bn-declared-03", [CommitOperationAdd(
        path_in_repo="model.safetensors", path_or_fileobj=b"\x10\x00\x00\x00\x00\x00\x00\x00{")],
        commit_message="truncated", create_pr=True)
    broken = validate_hub(auditor, f"{VALIDATE_ORG}/bn-declared-03", revision=f"refs/pr/{info.pr_num}")
    assert broken.exit_code == 2
    assert "safetensors.truncated" in {i.code for i in broken.report.issues}

    missing = validate_hub(auditor, f"{ORG}/bn-declared-03", revision="refs/pr/99")
    assert missing.exit_code == 2 and [i.code for i in missing.report.issues] == ["input.unreadable"]


# --- executors ------------------------------------------------------------------------------------------------------


def _tasks(audited, auditor, repos: list[str], monkeypatch: pytest.MonkeyPatch) -> list[AuditTask]:
    """Tasks as the CLI hands them to workers: the token's environment variable, never the token."""
    monkeypatch.setenv(TOKEN_ENV, AUDITOR_TOKEN)
    spec_data = parse_spec(SPEC).model_dump(mode="json")
    return [for_workers(AuditTask(endpoint=auditor.endpoint, token=auditor.token, repo_id=f"{ORG}/{repo}",
                                  revision=audited["heads"][f"{ORG}/{repo}"], filenames=("model.safetensors",),
                                  spec=spec_data, retry=FAST), token_env=TOKEN_ENV) for repo in repos]


def _digests(texts: dict[int, str]) -> list[str]:
    return [RepoAudit.model_validate_json(texts[i]).files[0].annotation_sha256 for i in sorted(texts)]


@pytest.mark.slow
def test_process_workers_give_the_same_annotations(audited, auditor, monkeypatch) -> None:
    repos = ["bn-declared-03", "bn-undeclared-01"]
    results: dict[int, str] = {}
    run_tasks(audit_repo_task, _tasks(audited, auditor, repos, monkeypatch), executor="process", workers=2,
              on_result=lambda i, text: results.__setitem__(i, text))
    expected = [_audit(audited["run"], repo).files[0].annotation_sha256 for repo in repos]
    assert _digests(results) == expected


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'bnconvention[ray]')")
def test_ray_tasks_give_the_same_annotations(audited, auditor, monkeypatch) -> None:
    repos = ["bn-card-only-01", "bn-wrong-features-01"]
    results: dict[int, str] = {}
    run_tasks(audit_repo_task, _tasks(audited, auditor, repos, monkeypatch), executor="ray", workers=2,
              on_result=lambda i, text: results.__setitem__(i, text))
    expected = [_audit(audited["run"], repo).files[0].annotation_sha256 for repo in repos]
    assert _digests(results) == expected



def _env_client(hub: LocalHub, monkeypatch: pytest.MonkeyPatch):
    """The auditor, its token read from an environment variable (as the CLI reads it: --token-env)."""
    monkeypatch.setenv(TOKEN_ENV, AUDITOR_TOKEN)
    return make_client(endpoint=hub.endpoint, token_env=TOKEN_ENV, retry=FAST)


def test_worker_tasks_carry_the_token_variable_never_the_token(audited, hub: LocalHub, monkeypatch, tmp_path) -> None:
    import pickle

    import bnconvention.hub_audit.audit as hub_audit

    sent: list[bytes] = []
    monkeypatch.setattr(hub_audit, "run_tasks", lambda fn, tasks, **kw: sent.append(pickle.dumps(list(tasks))))
    client = _env_client(hub, monkeypatch)
    for executor in ("process", "ray"):
        audit_org(client, ORG, parse_spec(SPEC), journal=audited["journal"], out=tmp_path, executor=executor,
                  workers=2, plots=False, redo=[f"{ORG}/bn-declared-03"])
    assert len(sent) == 2
    for payload in sent:
        tasks = pickle.loads(payload)
        assert [t.repo_id for t in tasks] == [f"{ORG}/bn-declared-03"]
        assert tasks[0].token_env == TOKEN_ENV and not tasks[0].token
        assert AUDITOR_TOKEN.encode() not in payload


def test_worker_tasks_refuse_a_token_given_by_value(audited, auditor, tmp_path) -> None:
    from bnconvention.errors import UsageError

    with pytest.raises(UsageError, match="environment"):
        audit_org(auditor, ORG, parse_spec(SPEC), journal=audited["journal"], out=tmp_path, executor="process",
                  workers=2, plots=False, redo=[f"{ORG}/bn-declared-03"])


def test_ray_address_reaches_ray_init_and_needs_the_ray_executor(monkeypatch) -> None:
    from bnconvention.errors import UsageError

    with pytest.raises(UsageError, match="--ray-address needs --executor ray"):
        run_tasks(len, ["a"], executor="process", workers=2, on_result=lambda i, r: None, ray_address="auto")
    if not ray_available():
        pytest.skip("ray is not installed")
    import ray

    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        raise ConnectionError("no cluster here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(ConnectionError):
        run_tasks(len, ["a"], executor="ray", workers=2, on_result=lambda i, r: None, ray_address="ray://head:10001")
    assert calls == [{"address": "ray://head:10001", "log_to_driver": False}]


@pytest.mark.ray
@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'bnconvention[ray]')")
def test_ray_address_comes_from_the_environment_as_rays_own_tools_read_it_and_the_flag_wins(monkeypatch) -> None:
    # a run submitted with `ray job submit -- bnconvention hub audit ...` has RAY_ADDRESS set for its
    # driver; starting a local instance (num_cpus=...) there would be refused by ray.init
    import ray

    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        raise ConnectionError("no cluster here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("RAY_ADDRESS", "ray://env-head:10001")
    for flag in (None, "ray://flag-head:10001"):
        with pytest.raises(ConnectionError):
            run_tasks(len, ["a"], executor="ray", workers=2, on_result=lambda i, r: None, ray_address=flag)
    monkeypatch.setenv("RAY_ADDRESS", "")  # set but empty: a local instance, as ray.init does
    with pytest.raises(ConnectionError):
        run_tasks(len, ["a"], executor="ray", workers=2, on_result=lambda i, r: None)
    assert calls == [{"address": "ray://env-head:10001", "log_to_driver": False},
                     {"address": "ray://flag-head:10001", "log_to_driver": False},
                     {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True}]
    # RAY_ADDRESS alone never asks for the ray executor (only the flag does)
    run_tasks(len, ["a"], executor="local", workers=1, on_result=lambda i, r: None)


def _untimed(value):
    """``value`` without its wall-clock fields (``seconds``, ``seconds_*``)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not k.startswith("seconds")}
    return [_untimed(v) for v in value] if isinstance(value, list) else value


def _untimed_lines(text: bytes) -> list[str]:
    """A summary's lines, the one that reports the audit's wall-clock time (``... s in all.``) left out."""
    return [line for line in text.decode().splitlines() if not line.endswith(" s in all.")]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'bnconvention[ray]')")
def test_hub_audit_on_ray_is_byte_identical_to_one_worker(audited, hub: LocalHub, monkeypatch, tmp_path) -> None:
    """audit_org with Ray tasks (token from the workers' environment) writes the same bytes and journals the same
    results as the in-process run of the fixture."""
    from bnconvention.hub_audit.audit import file_out_dir

    repos = [f"{ORG}/bn-declared-03", f"{ORG}/bn-undeclared-01"]
    client = _env_client(hub, monkeypatch)
    with Journal(tmp_path / "journal.sqlite", org=ORG, endpoint=hub.endpoint) as journal:
        run = audit_org(client, ORG, parse_spec(SPEC), journal=journal, out=tmp_path / "out", executor="ray",
                        workers=2, plots=False, redo=repos)
        ours = {r: journal.get("audit", r).payload for r in repos}
    assert run.ran == 2
    theirs = {r: audited["journal"].get("audit", r, key=ours[r]["spec_sha256"]).payload for r in repos}
    assert _untimed(ours) == _untimed(theirs)  # wall-clock seconds are the only fields that may differ
    for repo in repos:
        folder = file_out_dir(tmp_path / "out", repo, "model.safetensors", spec_sha256=ours[repo]["spec_sha256"])
        expected = file_out_dir(audited["out"], repo, "model.safetensors", spec_sha256=ours[repo]["spec_sha256"])
        names = sorted(p.name for p in folder.iterdir())
        assert names and names == sorted(p.name for p in expected.iterdir())
        for name in names:  # the annotation byte for byte; result.json and summary.md also record seconds
            ours_bytes, theirs_bytes = (folder / name).read_bytes(), (expected / name).read_bytes()
            if name == "result.json":
                assert _untimed(json.loads(ours_bytes)) == _untimed(json.loads(theirs_bytes)), f"{repo}/{name}"
            elif name.endswith(".md"):
                assert _untimed_lines(ours_bytes) == _untimed_lines(theirs_bytes), f"{repo}/{name}"
            else:
                assert ours_bytes == theirs_bytes, f"{repo}/{name}"
        assert any(name.endswith(".json") and name != "result.json" for name in names)


# --- the stages of audit_org, each on its own (no Hub needed) -------------------------------------------------------


def _census_repo(name: str, *, kind: str = "single", status: str = "undeclared", sha: str = "c0"):
    from bnconvention.hub.classify import CheckpointReport, RepoCensus

    file = "model.safetensors" if kind == "single" else "model.safetensors.index.json"
    return RepoCensus(repo_id=f"{ORG}/{name}", sha=sha, status=status, reason="", checkpoints=[
        CheckpointReport(name=file, kind=kind, status=status, reason="", bn_layers=0 if status == "no_weights" else 3)])


@pytest.fixture()
def plan_setup(tmp_path: Path):
    from bnconvention.hub_audit.audit import plan_audits

    client = make_client(endpoint="http://127.0.0.1:9", token=AUDITOR_TOKEN, retry=FAST)
    spec_data = parse_spec(SPEC).model_dump(mode="json")
    with Journal(tmp_path / "journal.sqlite", org=ORG, endpoint=client.endpoint) as journal:
        def plan(repos, **options):
            return plan_audits(client, ORG, repos, spec_data=spec_data, journal=journal, **options)
        yield plan, journal, canonical_sha256(spec_data)


def test_plan_audits_makes_tasks_of_single_and_sharded_checkpoints_and_ignores_repos_without_bn(plan_setup) -> None:
    # a sharded checkpoint is a task like a single file (it was recorded as skipped, with no task)
    plan, journal, _ = plan_setup
    repos = [_census_repo("single"), _census_repo("sharded", kind="sharded"), _census_repo("gn", status="no_weights")]
    result = plan(repos, threads=3, allowed_factories=["mine:build"])
    assert [(t.repo_id, t.filenames, t.revision, t.threads, t.allowed_factories) for t in result.tasks] == [
        (f"{ORG}/single", ("model.safetensors",), "c0", 3, ("mine:build",)),
        (f"{ORG}/sharded", ("model.safetensors.index.json",), "c0", 3, ("mine:build",))]
    assert (result.results, result.reused_ids, result.left) == ({}, set(), 0)
    assert journal.get("audit", f"{ORG}/sharded") is None


def test_audit_targets_keeps_readable_batchnorm_checkpoints_only() -> None:
    from bnconvention.hub.classify import CheckpointReport
    from bnconvention.hub_audit.audit import audit_targets

    unreadable = _census_repo("unreadable")
    unreadable.checkpoints = [CheckpointReport(name="model.safetensors", kind="single", status="unreadable",
                                               reason="header too large", bn_layers=3)]
    repos = [_census_repo("single"), _census_repo("sharded", kind="sharded"), _census_repo("gn", status="no_weights"),
             unreadable]
    assert [(repo.repo_id, files) for repo, files in audit_targets(iter(repos))] == [
        (f"{ORG}/single", ["model.safetensors"]), (f"{ORG}/sharded", ["model.safetensors.index.json"])]


def test_plan_audits_reuses_successes_at_the_same_commit_and_reruns_failures(plan_setup) -> None:
    plan, journal, spec_sha = plan_setup
    done = RepoAudit(repo_id=f"{ORG}/done", revision="c0", spec_sha256=spec_sha, status="audited")
    journal.record("audit", done.repo_id, revision="c0", key=spec_sha, status="audited",
                   payload=done.model_dump(mode="json"))
    journal.record("audit", f"{ORG}/failed", revision="c0", key=spec_sha, status="failed", payload={}, final=False)
    heard: list[tuple[str, bool]] = []
    repos = [_census_repo("done"), _census_repo("failed"), _census_repo("moved", sha="c1")]
    journal.record("audit", f"{ORG}/moved", revision="c0", key=spec_sha, status="audited",
                   payload=done.model_dump(mode="json"))
    result = plan(repos, on_audit=lambda audit, reused: heard.append((audit.repo_id, reused)))
    assert result.results == {done.repo_id: done} and result.reused_ids == {done.repo_id}
    assert heard == [(done.repo_id, True)]
    assert [t.repo_id for t in result.tasks] == [f"{ORG}/failed", f"{ORG}/moved"]
    selective = plan(repos, redo_failed=True)  # only the failed one runs; the never-audited moved one waits
    assert [t.repo_id for t in selective.tasks] == [f"{ORG}/failed"]
    assert (selective.left, selective.reused_ids) == (1, {done.repo_id})
    again = plan(repos, redo=[done.repo_id])
    assert [t.repo_id for t in again.tasks] == [done.repo_id] and again.left == 2


def test_plan_audits_refuses_a_redo_outside_the_census(plan_setup) -> None:
    from bnconvention.errors import UsageError

    plan, _, _ = plan_setup
    with pytest.raises(UsageError, match=f"--redo {ORG}/other: not a BatchNorm repo of the census of {ORG}"):
        plan([_census_repo("single")], redo=[f"{ORG}/other"])


def test_population_summary_is_not_written_without_audited_files(tmp_path: Path, spec: AuditSpec) -> None:
    from bnconvention.hub_audit.audit import write_population_summary

    skipped = RepoAudit(repo_id=f"{ORG}/x", revision="c0", spec_sha256="s", status="skipped")
    assert write_population_summary([skipped], spec, tmp_path, org=ORG) is None
    assert list(tmp_path.iterdir()) == []
