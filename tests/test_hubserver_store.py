"""The local Hub's store (history, refs, atomicity, threads), its pure helpers, fault rules and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers.processes import sigint_default

from bnconvention.errors import UsageError
from bnconvention.hubserver import AddFile, DeleteFile, DeleteFolder, FaultRule, FileEntry, HubStore
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.routes import Route, match_route
from bnconvention.hubserver.trees import apply_operations, list_folder, three_way_merge
from bnconvention.hubserver.validation import check_file_path, check_ref_name, check_repo_id
from bnconvention.hubserver.wire import format_date, parse_range

REPO_ROOT = Path(__file__).resolve().parent.parent


class TickingClock:
    """One second per call from a fixed start: stable, distinct dates."""

    def __init__(self) -> None:
        self.now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> HubStore:
    return HubStore(tmp_path / "store", clock=TickingClock())


# --- store ----------------------------------------------------------------------------------------------------------


def test_commits_have_parents_dates_and_content_addressed_blobs(store: HubStore) -> None:
    first = store.commit("org/m", files={"a.txt": b"same", "b.txt": b"same"}, message="one", author="ann")
    second = store.commit("org/m", operations=[DeleteFile("b.txt")], message="two", author="ann")
    history = store.history("org/m")
    assert [c.title for c in history] == ["two", "one", "initial commit"]
    assert [c.date for c in history] == ["2025-01-02T03:04:08.000Z", "2025-01-02T03:04:07.000Z",
                                         "2025-01-02T03:04:06.000Z"]
    assert history[0].parents == (first.oid,) and history[0].id == second.oid
    assert sorted(store.resolve("org/m", first.oid).commit.tree) == [".gitattributes", "a.txt", "b.txt"]
    blobs = sorted(p.name for p in (store.root / "blobs").rglob("*") if p.is_file())
    assert blobs == sorted({hashlib.sha256(b"same").hexdigest(),
                            store.resolve("org/m").commit.tree[".gitattributes"].sha256})


def test_store_reopens_with_the_same_state(store: HubStore) -> None:
    store.commit("org/m", files={"w.bin": b"\x00\x01"}, message="weights")
    result = store.commit("org/m", files={"card.md": b"x"}, message="PR", create_pr=True, author="bob",
                          description="why")
    store.create_tag("org/m", "v1", revision="main", message="first")
    store.comment_discussion("org/m", 1, comment="looks good", author="ann")
    reopened = HubStore(store.root)
    assert reopened.repo_state("org/m") == store.repo_state("org/m")
    assert [c.id for c in reopened.history("org/m", "refs/pr/1")] == [c.id for c in store.history("org/m",
                                                                                                   "refs/pr/1")]
    assert reopened.resolve("org/m", "refs/pr/1").commit.id == result.oid
    assert reopened.resolve("org/m", "refs/tags/v1").kind == "tag"
    assert reopened.read_file("org/m", "w.bin") == b"\x00\x01"


def test_super_squash_drops_the_commits_nothing_reaches(store: HubStore) -> None:
    first = store.commit("org/data", files={"a.txt": b"1"}, repo_type="dataset").oid
    tagged = store.commit("org/data", files={"b.txt": b"2"}, repo_type="dataset").oid
    store.create_tag("org/data", "v1", revision=tagged, repo_type="dataset")
    last = store.commit("org/data", files={"c.txt": b"3"}, repo_type="dataset").oid
    head = store.super_squash("org/data", repo_type="dataset")
    squashed = store.get_commit("org/data", head, repo_type="dataset")
    assert squashed.parents == () and sorted(squashed.tree) == [".gitattributes", "a.txt", "b.txt", "c.txt"]
    assert [c.id for c in store.history("org/data", repo_type="dataset")] == [head]
    # a tag keeps its commit and that commit's ancestors; what only the branch reached is gone
    assert [c.id for c in store.history("org/data", "v1", repo_type="dataset")][:2] == [tagged, first]
    with pytest.raises(HubRequestError) as caught:
        store.resolve("org/data", last, repo_type="dataset")
    assert (caught.value.status, caught.value.code) == (404, "RevisionNotFound")
    reopened = HubStore(store.root, durable=False)  # dropped from disk too
    with pytest.raises(HubRequestError):
        reopened.resolve("org/data", last, repo_type="dataset")
    with pytest.raises(HubRequestError) as caught:
        store.super_squash("org/data", "v1", repo_type="dataset")
    assert caught.value.code == "BadRequest"


def test_refused_commit_writes_nothing(store: HubStore) -> None:
    store.commit("org/m", files={"a.txt": b"a"})
    before = snapshot(store.root)
    with pytest.raises(HubRequestError) as missing:
        store.commit("org/m", operations=[AddFile("new.txt", b"n"), DeleteFile("absent.txt")])
    assert (missing.value.status, missing.value.code) == (404, "EntryNotFound")
    with pytest.raises(HubRequestError) as stale:
        store.commit("org/m", files={"b.txt": b"b"}, parent_commit="0" * 40)
    assert (stale.value.status, stale.value.code) == (412, "PreconditionFailed")
    with pytest.raises(HubRequestError) as bad_path:
        store.commit("org/m", files={"../x": b"b"})
    assert bad_path.value.status == 400
    assert snapshot(store.root) == before


def test_failed_state_write_keeps_the_old_state(store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.commit("org/m", files={"a.txt": b"a"})
    state_before = store.repo_state("org/m")
    repo_json = (store.root / "repos/models/org/m/repo.json").read_bytes()
    original_write = store._db.write  # the one writer of the store's files (RepoDatabase)

    def failing_write(path: Path, data: bytes) -> None:
        if path.name == "repo.json":
            raise OSError("disk full")
        original_write(path, data)

    monkeypatch.setattr(store._db, "write", failing_write)
    with pytest.raises(OSError, match="disk full"):
        store.commit("org/m", files={"b.txt": b"b"})
    assert store.repo_state("org/m") == state_before
    assert (store.root / "repos/models/org/m/repo.json").read_bytes() == repo_json
    assert not list((store.root / "repos/models/org/m").glob(".repo.json.*"))


def test_concurrent_commits_all_land(store: HubStore) -> None:
    store.create_repo("org/busy")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(5):
                store.commit("org/busy", files={f"w{n}/{i}.txt": f"{n}-{i}".encode()}, message=f"{n}/{i}")
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    history = store.history("org/busy")
    assert len(history) == 31 and all(len(c.parents) <= 1 for c in history)
    assert len([p for p in store.resolve("org/busy").commit.tree if p.startswith("w")]) == 30


def test_pull_request_lifecycle_in_the_store(store: HubStore) -> None:
    store.commit("org/m", files={"a.txt": b"a"})
    num = store.create_discussion("org/m", title="Draft PR", author="bob", pull_request=True)
    assert store.get_discussion("org/m", num)["status"] == "draft"
    store.commit("org/m", files={"b.txt": b"b"}, revision=f"refs/pr/{num}", author="bob", message="fill")
    assert [e["type"] for e in store.get_discussion("org/m", num)["events"]] == ["commit", "status-change"]
    assert store.get_discussion("org/m", num)["status"] == "open"
    store.change_discussion_status("org/m", num, status="closed", author="bob")
    with pytest.raises(HubRequestError, match="closed; reopen it"):
        store.commit("org/m", files={"c.txt": b"c"}, revision=f"refs/pr/{num}")
    with pytest.raises(HubRequestError, match="only open pull requests"):
        store.merge_pull_request("org/m", num, author="org")
    store.change_discussion_status("org/m", num, status="open", author="bob")
    merged = store.merge_pull_request("org/m", num, author="org")
    assert store.resolve("org/m").commit.id == merged
    with pytest.raises(HubRequestError, match="merged"):
        store.change_discussion_status("org/m", num, status="closed", author="org")
    with pytest.raises(HubRequestError) as discussion_merge:
        store.merge_pull_request("org/m", store.create_discussion("org/m", title="Talk", author="ann"),
                                 author="org")
    assert "not a pull request" in str(discussion_merge.value)


def test_create_pr_from_a_parent_commit_prefix(store: HubStore) -> None:
    first = store.commit("org/m", files={"a.txt": b"1"})
    store.commit("org/m", files={"a.txt": b"2"})
    result = store.commit("org/m", files={"b.txt": b"b"}, create_pr=True, parent_commit=first.oid[:7])
    assert store.get_commit("org/m", result.oid).parents == (first.oid,)
    assert store.get_discussion("org/m", result.pr_num)["pr"]["baseCommit"] == first.oid


def test_branches_and_tags(store: HubStore) -> None:
    store.commit("org/m", files={"a.txt": b"a"})
    oid = store.create_branch("org/m", "dev")
    store.commit("org/m", files={"d.txt": b"d"}, revision="dev")
    assert store.resolve("org/m", "refs/heads/dev").commit.parents == (oid,)
    assert store.resolve("org/m").commit.id == oid
    with pytest.raises(HubRequestError) as exists:
        store.create_branch("org/m", "dev")
    assert exists.value.status == 409
    store.create_tag("org/m", "v1.0", revision="dev")
    with pytest.raises(HubRequestError, match="cannot commit to the tag"):
        store.commit("org/m", files={"x": b"x"}, revision="v1.0")


def test_refuses_a_non_empty_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "someone-elses.txt").write_text("data")
    with pytest.raises(UsageError, match="not empty"):
        HubStore(tmp_path)
    assert (tmp_path / "someone-elses.txt").read_text() == "data"


# --- pure helpers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method, path, expected", [
    pytest.param("GET", "/api/models", Route("list_repos", "model"), id="list"),
    pytest.param("GET", "/api/datasets/o/d/revision/v1", Route("repo_info", "dataset", "o/d", revision="v1"),
                 id="dataset-info"),
    pytest.param("GET", "/api/models/o/m/tree/refs%2Fpr%2F2/a%2Fb",
                 Route("tree", "model", "o/m", revision="refs/pr/2", path="a/b"), id="tree-encoded"),
    pytest.param("GET", "/api/models/o/m/tree/refs/pr/2", Route("tree", "model", "o/m", revision="refs/pr/2"),
                 id="tree-unencoded-pr"),
    pytest.param("POST", "/api/models/o/m/paths-info/main", Route("paths_info", "model", "o/m", revision="main"),
                 id="paths-info"),
    pytest.param("POST", "/api/spaces/o/s/discussions/3/merge",
                 Route("discussion_action", "space", "o/s", num=3, action="merge"), id="merge"),
    pytest.param("HEAD", "/o/m/resolve/abc/dir/f%20g.txt", Route("resolve", "model", "o/m", revision="abc",
                                                                 path="dir/f g.txt"), id="resolve-space"),
])
def test_routes(method: str, path: str, expected: Route) -> None:
    assert match_route(method, path) == expected


@pytest.mark.parametrize("bad", ["../x", "a/../b", "/abs", "a//b", "a/", ".", "a\\b", "a/.git/x", "nul\x00",
                                 "x" * 1025, ""])
def test_bad_file_paths(bad: str) -> None:
    with pytest.raises(HubRequestError) as caught:
        check_file_path(bad)
    assert caught.value.status == 400


@pytest.mark.parametrize("bad", ["a", "a/b/c", "../b", "a/..", "-a/b", "a/b-", "a--b/c", "api/x", "a/b c",
                                 "a/" + "b" * 97])
def test_bad_repo_ids(bad: str) -> None:
    with pytest.raises(HubRequestError):
        check_repo_id(bad)


@pytest.mark.parametrize("bad", ["refs/pr/1", "a..b", "0" * 40, "-x", "x.lock", ""])
def test_bad_ref_names(bad: str) -> None:
    with pytest.raises(HubRequestError):
        check_ref_name(bad, what="branch")


def test_tree_operations() -> None:
    a, b = FileEntry.of(b"a"), FileEntry.of(b"b")
    tree = apply_operations({}, [AddFile("d/x.txt", b"a"), AddFile("d/e/y.txt", b"b"), AddFile("z.txt", b"a")])
    assert tree == {"d/x.txt": a, "d/e/y.txt": b, "z.txt": a}
    assert apply_operations(tree, [DeleteFolder("d/")]) == {"z.txt": a}
    assert list_folder(tree, "d", recursive=False) == [("directory", "d/e"), ("file", "d/x.txt")]
    with pytest.raises(HubRequestError) as clash:
        apply_operations(tree, [AddFile("z.txt/inner", b"x")])
    assert "is a file" in str(clash.value)
    assert three_way_merge({"f": a}, {"f": b}, {"f": a}) == ({"f": b}, [])
    assert three_way_merge({"f": a}, {}, {"f": a}) == ({}, [])
    assert three_way_merge({"f": a}, {}, {"f": b}) == ({}, ["f"])


def test_dates_and_ranges() -> None:
    assert format_date(datetime(2025, 1, 1, 0, 0, 0, 999999)) == "2025-01-01T00:00:00.999Z"
    assert parse_range("bytes=5-", size=10) == (5, 9)
    assert parse_range("bytes=9-3", size=10) is None
    with pytest.raises(HubRequestError) as caught:
        parse_range("bytes=-0", size=10)
    assert caught.value.headers == {"Content-Range": "bytes */10"}


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"kind": "explode"}, "fault kind", id="kind"),
    pytest.param({"kind": "status", "status": 302}, "4xx or 5xx", id="status"),
    pytest.param({"kind": "drop", "probability": 1.5}, "probability", id="probability"),
    pytest.param({"kind": "drop", "count": 0}, "count", id="count"),
    pytest.param({"kind": "drop", "path": "("}, "does not compile", id="regex"),
    pytest.param({"kind": "truncate", "truncate_fraction": 1.0}, "truncate_fraction", id="fraction"),
])
def test_fault_rule_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        FaultRule(**kwargs)  # type: ignore[arg-type]


def test_fault_spec_parsing() -> None:
    rule = FaultRule.from_spec("kind=status,status=429,path=/api/models,probability=0.25,count=3,retry_after=2")
    assert (rule.kind, rule.status, rule.path, rule.probability, rule.count, rule.retry_after) == (
        "status", 429, "/api/models", 0.25, 3, 2)
    with pytest.raises(UsageError, match="KEY=VALUE"):
        FaultRule.from_spec("kind=drop,bogus=1")
    with pytest.raises(UsageError, match="needs kind"):
        FaultRule.from_spec("status=500")


# --- CLI ------------------------------------------------------------------------------------------------------------


def test_cli_serves_until_interrupted_and_never_prints_tokens(tmp_path: Path) -> None:
    secret = "s3cret-token-value"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "bnconvention", "hubserver", "--root", str(tmp_path / "hub"), "--token",
         f"alice={secret}", "--org", "lab=alice"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env, preexec_fn=sigint_default)
    try:
        first_line = process.stdout.readline().strip()
        assert first_line.startswith("endpoint: http://127.0.0.1:")
        endpoint = first_line.split(" ", 1)[1]
        whoami = urllib.request.Request(f"{endpoint}/api/whoami-v2", headers={"Authorization": f"Bearer {secret}"})
        with urllib.request.urlopen(whoami, timeout=10) as reply:
            body = json.loads(reply.read())
        assert body["name"] == "alice" and [o["name"] for o in body["orgs"]] == ["lab"]
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert secret not in first_line + out + err
    assert (tmp_path / "hub" / "hubstore.json").exists()


def test_cli_rejects_a_malformed_token_without_echoing_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "bnconvention", "hubserver", "--root", str(tmp_path / "h"),
                             "--token", "only-a-secret"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 2
    assert "--token expects NAME=VALUE" in result.stderr and "only-a-secret" not in result.stderr
