"""The local Hub server driven by the real huggingface_hub client (one ``HfApi(endpoint=...)`` per user).

Raw-HTTP checks (faults, ranges, malformed requests) are in ``test_hubserver_wire.py``; the store, routes and CLI
in ``test_hubserver_store.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, ModelCard
from huggingface_hub.errors import (
    BadRequestError,
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url
from safetensors.numpy import save as save_safetensors

from bnconvention.hubserver import FaultRule, LocalHub
from bnconvention.hubserver.storage import GITATTRIBUTES
from bnconvention.hubserver.wire import git_blob_sha1

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ORGS = {"lab": ["alice"]}
DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")



@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens=TOKENS, orgs=ORGS, page_size=4,
                  discussions_page_size=2, durable=False) as server:
        yield server


@pytest.fixture(scope="module")
def alice(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token="tok-alice")


@pytest.fixture(scope="module")
def bob(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token="tok-bob")


@pytest.fixture(scope="module")
def anon(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token=False)


@pytest.fixture(scope="module")
def card_bytes(fixtures_dir: Path) -> bytes:
    return (fixtures_dir / "hub" / "README.md").read_bytes()


def test_whoami_reports_user_and_orgs(alice: HfApi, bob: HfApi, hub: LocalHub) -> None:
    assert alice.whoami()["name"] == "alice"
    assert [org["name"] for org in alice.whoami()["orgs"]] == ["lab"]
    assert bob.whoami()["orgs"] == []
    with pytest.raises(HfHubHTTPError) as caught:
        HfApi(endpoint=hub.endpoint, token="not-a-token").whoami()
    assert caught.value.response.status_code == 401
    assert not isinstance(caught.value, RepositoryNotFoundError)


def test_create_repo_exist_ok_and_permissions(alice: HfApi, bob: HfApi, anon: HfApi, hub: LocalHub) -> None:
    url = alice.create_repo("lab/created")
    assert str(url) == f"{hub.endpoint}/lab/created"
    assert url.repo_id == "lab/created"
    with pytest.raises(HfHubHTTPError) as exists:
        alice.create_repo("lab/created")
    assert exists.value.response.status_code == 409
    assert exists.value.response.json()["url"] == f"{hub.endpoint}/lab/created"
    assert str(alice.create_repo("lab/created", exist_ok=True)) == f"{hub.endpoint}/lab/created"
    with pytest.raises(HfHubHTTPError) as forbidden:
        bob.create_repo("lab/by-bob")
    assert forbidden.value.response.status_code == 403
    with pytest.raises(HfHubHTTPError) as anonymous:
        anon.create_repo("lab/by-nobody")
    assert anonymous.value.response.status_code == 401
    assert not hub.store.repo_exists("lab/by-bob") and not hub.store.repo_exists("lab/by-nobody")
    assert str(bob.create_repo("bob-own")) == f"{hub.endpoint}/bob/bob-own"  # no namespace: the user's own


def test_dataset_repo_round_trip(alice: HfApi, tmp_path: Path) -> None:
    url = alice.create_repo("lab/table", repo_type="dataset")
    assert url.repo_type == "dataset" and url.repo_id == "lab/table"
    alice.upload_file(path_or_fileobj=b"a,b\n1,2\n", path_in_repo="data/train.csv", repo_id="lab/table",
                      repo_type="dataset")
    info = alice.dataset_info("lab/table")
    assert sorted(s.rfilename for s in info.siblings) == [".gitattributes", "data/train.csv"]
    path = alice.hf_hub_download("lab/table", "data/train.csv", repo_type="dataset", cache_dir=tmp_path)
    assert Path(path).read_bytes() == b"a,b\n1,2\n"


def test_upload_file_folder_and_model_info(alice: HfApi, hub: LocalHub, card_bytes: bytes, tmp_path: Path) -> None:
    alice.create_repo("lab/uploaded")
    alice.upload_file(path_or_fileobj=card_bytes, path_in_repo="README.md", repo_id="lab/uploaded")
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_bytes(b'{"arch": "convnet-bn"}')
    (folder / "sub" / "notes.txt").write_bytes(b"notes\n")
    info_commit = alice.upload_folder(folder_path=folder, repo_id="lab/uploaded", commit_message="add folder")
    info = alice.model_info("lab/uploaded", files_metadata=True)
    assert info.sha == info_commit.oid == hub.store.resolve("lab/uploaded").commit.id
    assert [(s.rfilename, s.size, s.blob_id) for s in info.siblings] == [
        (".gitattributes", len(GITATTRIBUTES), git_blob_sha1(GITATTRIBUTES)),
        ("README.md", len(card_bytes), git_blob_sha1(card_bytes)),
        ("config.json", 22, git_blob_sha1(b'{"arch": "convnet-bn"}')),
        ("sub/notes.txt", 6, git_blob_sha1(b"notes\n")),
    ]
    assert info.card_data.license == "mit"
    assert info.card_data.to_dict()["bnconvention"] == {"spec_version": "1.0", "kind": "declaration"}
    assert info.tags == ["pytorch", "batchnorm", "image-classification", "dataset:digits", "license:mit"]
    assert info.library_name == "pytorch" and info.author == "lab" and info.private is False
    raw = alice.model_info("lab/uploaded").__dict__  # without files_metadata the Hub sends names only
    assert [s.size for s in raw["siblings"]] == [None, None, None, None]
    listed = hub.store.history("lab/uploaded")
    assert [c.title for c in listed] == ["add folder", "Upload README.md with huggingface_hub", "initial commit"]
    assert all(DATE.match(c.date) for c in listed)


def test_create_commit_with_pr_and_push_to_existing_pr(alice: HfApi, bob: HfApi, hub: LocalHub) -> None:
    hub.store.commit("lab/prs", files={"weights.txt": b"v1"}, message="v1")
    with pytest.raises(HfHubHTTPError) as forbidden:
        bob.create_commit("lab/prs", operations=[CommitOperationAdd("x.txt", b"x")], commit_message="direct")
    assert forbidden.value.response.status_code == 403
    first = bob.create_commit("lab/prs", operations=[CommitOperationAdd("annotation.json", b"{}")],
                              commit_message="Add refit annotation", commit_description="from the audit",
                              create_pr=True)
    assert first.pr_url == f"{hub.endpoint}/lab/prs/discussions/1"
    assert (first.pr_num, first.pr_revision) == (1, "refs/pr/1")
    second = bob.create_commit("lab/prs", operations=[CommitOperationAdd("annotation.json", b'{"v": 2}')],
                               commit_message="Update annotation", revision="refs/pr/1")
    at_pr = alice.model_info("lab/prs", revision="refs/pr/1")
    assert at_pr.sha == second.oid
    assert sorted(s.rfilename for s in at_pr.siblings) == [".gitattributes", "annotation.json", "weights.txt"]
    assert sorted(s.rfilename for s in alice.model_info("lab/prs").siblings) == [".gitattributes", "weights.txt"]
    details = alice.get_discussion_details("lab/prs", 1)
    assert (details.is_pull_request, details.status, details.author) == (True, "open", "bob")
    assert details.target_branch == "refs/heads/main" and details.conflicting_files == []
    assert [(e.type, getattr(e, "content", None) or getattr(e, "summary", None)) for e in details.events] == [
        ("comment", "from the audit"), ("commit", "Add refit annotation"), ("commit", "Update annotation")]
    assert "+++ b/annotation.json" in details.diff
    refs = alice.list_repo_refs("lab/prs", include_pull_requests=True)
    assert [(r.name, r.ref) for r in refs.branches] == [("main", "refs/heads/main")]
    assert [(r.ref, r.target_commit) for r in refs.pull_requests] == [("refs/pr/1", second.oid)]
    assert alice.list_repo_refs("lab/prs").pull_requests is None
    stale_parent = hub.store.history("lab/prs")[1].id
    with pytest.raises(HfHubHTTPError) as stale:
        alice.create_commit("lab/prs", operations=[CommitOperationAdd("y.txt", b"y")], commit_message="stale",
                            parent_commit=stale_parent)
    assert stale.value.response.status_code == 412


def test_delete_operations_and_unchanged_files(alice: HfApi, hub: LocalHub) -> None:
    hub.store.commit("lab/deletes", files={"keep.txt": b"k", "dir/a.txt": b"a", "dir/b.txt": b"b"})
    alice.create_commit("lab/deletes", commit_message="prune", operations=[
        CommitOperationDelete("keep.txt"), CommitOperationDelete("dir/", is_folder=True)])
    assert sorted(hub.store.resolve("lab/deletes").commit.tree) == [".gitattributes"]
    with pytest.raises(EntryNotFoundError):
        alice.delete_file("missing.txt", repo_id="lab/deletes")
    head = hub.store.resolve("lab/deletes").commit.id
    # preupload returns the remote oid, so re-uploading identical content makes no commit
    again = alice.upload_file(path_or_fileobj=GITATTRIBUTES, path_in_repo=".gitattributes", repo_id="lab/deletes")
    assert again.oid == head == hub.store.resolve("lab/deletes").commit.id


def test_discussions_filters_and_pages(alice: HfApi, bob: HfApi, hub: LocalHub) -> None:
    hub.store.commit("lab/talk", files={"a.txt": b"a"})
    assert bob.create_discussion("lab/talk", title="Question about BN").num == 1
    draft = alice.create_pull_request("lab/talk", title="Draft refit", description="empty so far")
    assert (draft.num, draft.status, draft.is_pull_request) == (2, "draft", True)
    bob.create_discussion("lab/talk", title="Closed topic")
    bob.change_discussion_status("lab/talk", 3, new_status="closed", comment="done")
    bob.create_commit("lab/talk", operations=[CommitOperationAdd("b.txt", b"b")], commit_message="Bob PR",
                      create_pr=True)

    def nums(**filters: str) -> list[int]:
        return [d.num for d in alice.get_repo_discussions("lab/talk", **filters)]

    assert nums() == [4, 3, 2, 1]  # pages of 2: the client follows p=0, p=1
    assert nums(discussion_type="pull_request") == [4, 2]
    assert nums(discussion_type="discussion") == [3, 1]
    assert nums(discussion_status="closed") == [3]
    assert nums(discussion_status="open") == [4, 2, 1]
    assert nums(author="bob") == [4, 3, 1]
    assert nums(author="bob", discussion_type="pull_request") == [4]
    assert sum(1 for r in hub.stats if r.path == "/api/models/lab/talk/discussions" and "p=1" in r.query) >= 1


def test_comment_status_and_merges(alice: HfApi, bob: HfApi, hub: LocalHub) -> None:
    hub.store.commit("lab/merge", files={"shared.txt": b"base", "other.txt": b"o"})
    fast = bob.create_commit("lab/merge", operations=[CommitOperationAdd("new.txt", b"n")], commit_message="ff",
                             create_pr=True)
    comment = bob.comment_discussion("lab/merge", fast.pr_num, "please merge")
    assert (comment.type, comment.content, comment.author) == ("comment", "please merge", "bob")
    closed = bob.change_discussion_status("lab/merge", fast.pr_num, new_status="closed")
    assert closed.new_status == "closed"
    bob.change_discussion_status("lab/merge", fast.pr_num, new_status="open")
    with pytest.raises(HfHubHTTPError) as not_owner:
        bob.merge_pull_request("lab/merge", fast.pr_num)
    assert not_owner.value.response.status_code == 403
    alice.merge_pull_request("lab/merge", fast.pr_num, comment="thanks")
    assert hub.store.resolve("lab/merge").commit.id == fast.oid  # fast-forward
    merged = alice.get_discussion_details("lab/merge", fast.pr_num)
    assert (merged.status, merged.merge_commit_oid) == ("merged", fast.oid)

    side = bob.create_commit("lab/merge", operations=[CommitOperationAdd("side.txt", b"s")],
                             commit_message="side", create_pr=True)
    clash = bob.create_commit("lab/merge", operations=[CommitOperationAdd("shared.txt", b"pr")],
                              commit_message="clash", create_pr=True)
    alice.upload_file(path_or_fileobj=b"main", path_in_repo="shared.txt", repo_id="lab/merge")
    assert alice.get_discussion_details("lab/merge", clash.pr_num).conflicting_files == ["shared.txt"]
    with pytest.raises(HfHubHTTPError) as conflict:
        alice.merge_pull_request("lab/merge", clash.pr_num)
    assert conflict.value.response.status_code == 409
    alice.merge_pull_request("lab/merge", side.pr_num)
    head = hub.store.resolve("lab/merge").commit
    assert len(head.parents) == 2 and head.parents[1] == side.oid
    assert hub.store.read_file("lab/merge", "shared.txt") == b"main"
    assert hub.store.read_file("lab/merge", "side.txt") == b"s"
    titles = [c.title for c in alice.list_repo_commits("lab/merge")]
    assert titles[:3] == [f"Merge refs/pr/{side.pr_num}: side", "Upload shared.txt with huggingface_hub", "side"]


def test_list_models_follows_link_pages(alice: HfApi, anon: HfApi, hub: LocalHub) -> None:
    for i in range(10):
        card = f"---\nlicense: apache-2.0\ntags: [zoo, n{i % 2}]\n---\n".encode()
        hub.store.commit(f"zoo/model-{i:02d}", files={"README.md": card})
    hub.store.create_repo("zoo/secret", private=True)
    expected = [f"zoo/model-{i:02d}" for i in range(10)]
    hub.reset_stats()
    assert [m.id for m in anon.list_models(author="zoo")] == expected
    pages = [r for r in hub.stats if r.path == "/api/models"]
    assert len(pages) == 3 and [r.status for r in pages] == [200, 200, 200]
    assert [m.id for m in alice.list_models(author="zoo")] == expected  # alice is not in zoo: no secret
    # a member of zoo of this test's own (made a member, alice would stay one for the tests that run after this one)
    hub.access.add_token("tok-zoo-member", "zoo-member")
    hub.access.add_org("zoo", ["zoo-member"])
    member = HfApi(endpoint=hub.endpoint, token="tok-zoo-member")
    assert "zoo/secret" in [m.id for m in member.list_models(author="zoo")]
    hub.reset_stats()
    assert [m.id for m in anon.list_models(author="zoo", limit=5)] == expected[:5]
    assert len([r for r in hub.stats if r.path == "/api/models"]) == 2
    assert [m.id for m in anon.list_models(author="zoo", search="-07")] == ["zoo/model-07"]
    assert [m.id for m in anon.list_models(author="zoo", filter="n1")] == expected[1::2]
    assert [m.id for m in anon.list_models(author="zoo", sort="last_modified")] == expected[::-1]
    with_cards = list(anon.list_models(author="zoo", cardData=True, limit=1))
    assert with_cards[0].card_data.license == "apache-2.0"
    expanded = list(anon.list_models(author="zoo", expand=["sha", "lastModified"], limit=1))[0]
    assert expanded.sha == hub.store.resolve("zoo/model-00").commit.id and expanded.tags is None
    with pytest.raises(BadRequestError):
        list(anon.list_models(author="zoo", expand=["notAProperty"]))


def _safetensors(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    return save_safetensors(tensors, metadata=metadata)


def test_safetensors_metadata_reads_headers_only(anon: HfApi, hub: LocalHub) -> None:
    record = json.dumps({"kind": "declaration"})
    single = _safetensors({"conv.weight": np.zeros(2_700_000, np.float32),
                           "bn.running_mean": np.zeros(8, np.float32)}, {"bnconvention.record": record})
    assert len(single) > 10_000_000
    hub.store.commit("lab/single", files={"model.safetensors": single})
    shards = {f"model-0000{i}-of-00002.safetensors": _safetensors({f"layer{i}.weight": np.ones(1_500_000,
                                                                                            np.float32)})
              for i in (1, 2)}
    index = json.dumps({"metadata": {"total_size": 12_000_000},
                        "weight_map": {f"layer{i}.weight": f"model-0000{i}-of-00002.safetensors"
                                       for i in (1, 2)}}).encode()
    hub.store.commit("lab/sharded", files={**shards, "model.safetensors.index.json": index})

    hub.reset_stats()
    meta = anon.get_safetensors_metadata("lab/single")
    assert meta.sharded is False
    assert meta.files_metadata["model.safetensors"].metadata == {"bnconvention.record": record}
    assert sorted(meta.weight_map) == ["bn.running_mean", "conv.weight"]
    # the client asks for bytes=0-100000 once: 100,001 bytes of a 10.8 MB file, nothing else
    assert hub.bytes_sent(repo_id="lab/single") == 100_001
    assert [(r.method, r.status) for r in hub.stats] == [("HEAD", 200), ("GET", 206)]

    hub.reset_stats()
    sharded = anon.get_safetensors_metadata("lab/sharded")
    assert sharded.sharded is True and sharded.metadata == {"total_size": 12_000_000}
    assert sorted(sharded.files_metadata) == sorted(shards)
    assert hub.bytes_sent(repo_id="lab/sharded") == len(index) + 2 * 100_001
    assert hub.bytes_sent(repo_id="lab/sharded") < 0.02 * sum(len(s) for s in shards.values())
    info = anon.model_info("lab/sharded")
    assert (info.safetensors.parameters, info.safetensors.total) == ({"F32": 3_000_000}, 3_000_000)


def test_downloads_snapshot_and_file_metadata(anon: HfApi, hub: LocalHub, tmp_path: Path) -> None:
    files = {"README.md": b"# hello\n", "weights/a.bin": bytes(range(256)) * 40, "config.json": b"{}"}
    result = hub.store.commit("lab/download", files=files)
    hub.reset_stats()
    path = anon.hf_hub_download("lab/download", "weights/a.bin", cache_dir=tmp_path / "one")
    assert Path(path).read_bytes() == files["weights/a.bin"]
    assert hub.bytes_sent(repo_id="lab/download", method="GET") == 10_240
    snapshot = Path(anon.snapshot_download("lab/download", cache_dir=tmp_path / "all"))
    for name, data in files.items():
        assert (snapshot / name).read_bytes() == data
    meta = get_hf_file_metadata(hf_hub_url("lab/download", "README.md", endpoint=hub.endpoint), token=False)
    assert (meta.commit_hash, meta.etag, meta.size) == (result.oid, git_blob_sha1(b"# hello\n"), 8)
    assert anon.file_exists("lab/download", "weights/a.bin") is True
    assert anon.file_exists("lab/download", "weights/missing.bin") is False
    assert anon.repo_exists("lab/download") and not anon.repo_exists("lab/nowhere")


def test_tree_listing_and_paths_info(anon: HfApi, hub: LocalHub) -> None:
    hub.store.commit("lab/tree", files={"a.txt": b"a", "sub/b.txt": b"bb", "sub/deep/c.txt": b"ccc"})
    top = [(type(e).__name__, e.path) for e in anon.list_repo_tree("lab/tree")]
    assert top == [("RepoFolder", "sub"), ("RepoFile", ".gitattributes"), ("RepoFile", "a.txt")]
    everything = [e.path for e in anon.list_repo_tree("lab/tree", recursive=True)]
    assert everything == ["sub", "sub/deep", ".gitattributes", "a.txt", "sub/b.txt", "sub/deep/c.txt"]
    inside = [(e.path, getattr(e, "size", None)) for e in anon.list_repo_tree("lab/tree", path_in_repo="sub")]
    assert inside == [("sub/deep", None), ("sub/b.txt", 2)]
    infos = anon.get_paths_info("lab/tree", ["a.txt", "sub", "missing.txt"])
    assert [(type(i).__name__, i.path) for i in infos] == [("RepoFile", "a.txt"), ("RepoFolder", "sub")]
    assert infos[0].blob_id == git_blob_sha1(b"a") and infos[0].lfs is None and infos[0].xet_hash is None
    assert sorted(anon.list_repo_files("lab/tree")) == [".gitattributes", "a.txt", "sub/b.txt", "sub/deep/c.txt"]
    with pytest.raises(EntryNotFoundError):
        list(anon.list_repo_tree("lab/tree", path_in_repo="nope"))


def test_tree_and_commit_listings_follow_pages(anon: HfApi, hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        hub.store.commit("lab/paged", files={f"f{i}.txt": b"x"}, message=f"c{i}")
    monkeypatch.setattr(hub.context, "tree_page_size", 2)
    monkeypatch.setattr(hub.context, "commits_page_size", 2)
    hub.reset_stats()
    assert [e.path for e in anon.list_repo_tree("lab/paged")] == [".gitattributes", "f0.txt", "f1.txt", "f2.txt"]
    assert [c.title for c in anon.list_repo_commits("lab/paged")] == ["c2", "c1", "c0", "initial commit"]
    assert [r.query for r in hub.stats if "/tree/" in r.path] == [
        "recursive=false&expand=false", "recursive=false&expand=false&cursor=2"]
    assert len([r for r in hub.stats if "/commits/" in r.path]) == 2


def test_list_repo_commits_newest_first(alice: HfApi, hub: LocalHub) -> None:
    for i in range(3):
        hub.store.commit("lab/log", files={"n.txt": str(i).encode()}, message=f"step {i}", description=f"d{i}",
                         author="alice")
    commits = alice.list_repo_commits("lab/log")
    assert [(c.title, c.message, c.authors) for c in commits] == [
        ("step 2", "d2", ["alice"]), ("step 1", "d1", ["alice"]), ("step 0", "d0", ["alice"]),
        ("initial commit", "", ["alice"])]
    formatted = alice.list_repo_commits("lab/log", formatted=True)
    assert formatted[0].formatted_title == "step 2"


def test_model_card_parsed_from_downloaded_readme(anon: HfApi, hub: LocalHub, card_bytes: bytes,
                                                  tmp_path: Path) -> None:
    hub.store.commit("lab/carded", files={"README.md": card_bytes})
    card = ModelCard.load(anon.hf_hub_download("lab/carded", "README.md", cache_dir=tmp_path))
    assert card.data.license == "mit" and card.data.library_name == "pytorch"
    assert card.data.to_dict()["bnconvention"] == {"spec_version": "1.0", "kind": "declaration"}
    assert card.text.strip().splitlines()[0] == "# Demo model"


def test_validate_yaml_rejects_alias_bombs_and_accepts_aliases(alice: HfApi, fixtures_dir: Path) -> None:
    # anchors and aliases are valid YAML (huggingface_hub loads them); only their expansion is bounded
    alice.create_repo("lab/bad-card")
    bad = (fixtures_dir / "hub" / "alias_bomb_card.md").read_bytes()
    with pytest.raises(ValueError, match="YAML aliases expand this value to more than"):
        alice.upload_file(path_or_fileobj=bad, path_in_repo="README.md", repo_id="lab/bad-card")
    assert [s.rfilename for s in alice.model_info("lab/bad-card").siblings] == [".gitattributes"]
    alice.upload_file(path_or_fileobj=(fixtures_dir / "hub" / "alias_card.md").read_bytes(), path_in_repo="README.md",
                      repo_id="lab/bad-card")
    assert sorted(s.rfilename for s in alice.model_info("lab/bad-card").siblings) == [".gitattributes", "README.md"]


def test_errors_map_to_client_exceptions(anon: HfApi, hub: LocalHub, tmp_path: Path) -> None:
    hub.store.commit("lab/errors", files={"a.txt": b"a"})
    hub.store.create_repo("lab/private", private=True)
    with pytest.raises(RepositoryNotFoundError):
        anon.model_info("lab/nothing-here")
    with pytest.raises(RepositoryNotFoundError):
        anon.model_info("lab/private")
    with pytest.raises(RevisionNotFoundError):
        anon.model_info("lab/errors", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        anon.hf_hub_download("lab/errors", "a.txt", revision="refs/pr/99", cache_dir=tmp_path)
    with pytest.raises(EntryNotFoundError):
        anon.hf_hub_download("lab/errors", "b.txt", cache_dir=tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        anon.hf_hub_download("lab/nothing-here", "a.txt", cache_dir=tmp_path)


def test_injected_4xx_reaches_the_client(anon: HfApi, hub: LocalHub, tmp_path: Path) -> None:
    hub.store.commit("lab/faulty", files={"a.txt": b"a"})
    rule = hub.faults.add(FaultRule(kind="status", status=404, path=r"^/lab/faulty/resolve/", count=1))
    try:
        with pytest.raises(EntryNotFoundError):
            anon.hf_hub_download("lab/faulty", "a.txt", cache_dir=tmp_path / "first")
        assert rule.fired == 1
        path = anon.hf_hub_download("lab/faulty", "a.txt", cache_dir=tmp_path / "second")
        assert Path(path).read_bytes() == b"a"
        hub.faults.add(FaultRule(kind="status", status=404, error_code="RepoNotFound", path=r"^/api/models/lab/",
                                 count=1))
        with pytest.raises(RepositoryNotFoundError):
            anon.model_info("lab/faulty")
        assert anon.model_info("lab/faulty").id == "lab/faulty"
    finally:
        hub.faults.clear()


def test_branches_tags_and_full_listing(alice: HfApi, anon: HfApi, hub: LocalHub) -> None:
    hub.store.commit("lab/refs", files={"a.txt": b"a"})
    alice.create_branch("lab/refs", branch="dev")
    alice.upload_file(path_or_fileobj=b"d", path_in_repo="d.txt", repo_id="lab/refs", revision="dev")
    alice.create_tag("lab/refs", tag="v1.0", revision="dev", tag_message="first release")
    with pytest.raises(HfHubHTTPError) as duplicate:
        alice.create_branch("lab/refs", branch="dev")
    assert duplicate.value.response.status_code == 409
    alice.create_branch("lab/refs", branch="dev", exist_ok=True)
    refs = anon.list_repo_refs("lab/refs")
    dev = hub.store.resolve("lab/refs", "dev").commit.id
    assert [(r.name, r.target_commit) for r in refs.branches] == [
        ("main", hub.store.resolve("lab/refs").commit.id), ("dev", dev)]
    assert [(r.name, r.ref, r.target_commit) for r in refs.tags] == [("v1.0", "refs/tags/v1.0", dev)]
    assert refs.converts == []
    assert sorted(s.rfilename for s in anon.model_info("lab/refs", revision="v1.0").siblings) == [
        ".gitattributes", "a.txt", "d.txt"]
    full = [m for m in anon.list_models(author="lab", full=True) if m.id == "lab/refs"][0]
    assert full.sha == hub.store.resolve("lab/refs").commit.id
    assert [s.rfilename for s in full.siblings] == [".gitattributes", "a.txt"]


def test_client_retries_a_transient_503(anon: HfApi, hub: LocalHub) -> None:
    """One retry costs the client's Retry-After + 1 s; larger retry tests belong at the raw level."""
    hub.store.commit("retry/model", files={"a.txt": b"a"})
    hub.faults.add(FaultRule(kind="status", status=503, retry_after=0, path="^/api/models$", count=1))
    try:
        hub.reset_stats()
        assert [m.id for m in anon.list_models(author="retry")] == ["retry/model"]
        assert [r.status for r in hub.stats if r.path == "/api/models"] == [503, 200]
    finally:
        hub.faults.clear()


def test_module_level_client_with_hf_endpoint(hub: LocalHub, card_bytes: bytes, tmp_path: Path) -> None:
    """ModelCard.load and metadata_update have no endpoint argument: HF_ENDPOINT must be set before import."""
    import os
    import subprocess
    import sys

    hub.store.commit("lab/env-card", files={"README.md": card_bytes})
    script = (
        "import json\n"
        "from huggingface_hub import ModelCard, metadata_update\n"
        "card = ModelCard.load('lab/env-card')\n"
        "url = metadata_update('lab/env-card', {'bnconvention': {'kind': 'refit_annotation'}},\n"
        "                      create_pr=True, overwrite=True)\n"
        "print(json.dumps({'license': card.data.license, 'url': url}))\n"
    )
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home"),
           "HF_TOKEN": "tok-bob", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout.strip().splitlines()[-1])
    pr_head = hub.store.resolve("lab/env-card", "refs/pr/1").commit.id
    assert reply == {"license": "mit", "url": f"{hub.endpoint}/lab/env-card/commit/{pr_head}"}
    assert hub.store.get_discussion("lab/env-card", 1)["author"] == "bob"
    pr_card = hub.store.read_file("lab/env-card", "README.md", revision="refs/pr/1").decode()
    assert "kind: refit_annotation" in pr_card
    assert hub.store.read_file("lab/env-card", "README.md") == card_bytes  # main untouched
