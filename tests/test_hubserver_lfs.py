"""The local Hub's LFS upload path (``LocalHub(lfs=True)``): preupload answers like the Hub, the classic
batch API, signed upload URLs, ``lfsFile`` commit lines, and what the client reads back (tree ``lfs`` entries,
``X-Linked-Etag``). Regression: without it, ``datasets.Dataset.push_to_hub`` failed on the local Hub with
``FileNotFoundError`` for its deleted temporary parquet shard (it pre-uploads each shard through LFS and commits
later; a ``regular`` answer left nothing uploaded). The libraries themselves are in ``test_hubserver_libraries.py``.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationCopy, HfApi
from huggingface_hub.errors import BadRequestError, HfHubHTTPError

from bnconvention.hubserver import LocalHub
from bnconvention.hubserver.lfs import LFS_MIN_SIZE, UPLOAD_URL_LIFETIME_S
from bnconvention.hubserver.lfs_endpoints import LfsObjectAnswer
from bnconvention.hubserver.trees import lfs_pointer
from bnconvention.hubserver.wire import git_blob_sha1

TOKEN = "tok-alice"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BINARY = bytes(range(256)) * 16  # 4 KiB with NUL bytes: binary by git's test
TEXT = b"plain text, no NUL byte\n" * 10


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with LocalHub(tmp_path_factory.mktemp("lfs"), tokens={TOKEN: "alice", "tok-bob": "bob"}, durable=False,
                  lfs=True) as server:
        yield server


@pytest.fixture(scope="module")
def alice(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token=TOKEN)


def request(hub: LocalHub, method: str, path: str, *, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict | list) else body
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def preupload(hub: LocalHub, repo: str, files: list[dict[str, Any]]) -> dict[str, str]:
    status, _, body = request(hub, "POST", f"/api/models/{repo}/preupload/main", body={"files": files}, headers=AUTH)
    assert status == 200, body
    return {f["path"]: f["uploadMode"] for f in json.loads(body)["files"]}


def sample(data: bytes) -> str:
    return base64.b64encode(data[:512]).decode()


def batch(hub: LocalHub, repo: str, objects: list[dict[str, Any]], **extra: Any) -> tuple[int, Any]:
    body = {"operation": "upload", "transfers": ["basic", "multipart"], "objects": objects, "hash_algo": "sha256",
            **extra}
    status, _, answer = request(hub, "POST", f"/{repo}.git/info/lfs/objects/batch", body=body,
                                headers={**AUTH, "Content-Type": "application/vnd.git-lfs+json"})
    return status, json.loads(answer)


# --- preupload -----------------------------------------------------------------------------------------------------


def test_preupload_answers_like_the_hub(hub: LocalHub) -> None:
    hub.store.commit("alice/modes", files={"README.md": b"# modes\n"})
    modes = preupload(hub, "alice/modes", [
        {"path": "README.md", "sample": sample(TEXT), "size": len(TEXT)},
        {"path": "data/shard.parquet", "sample": sample(BINARY), "size": len(BINARY)},  # binary: a NUL byte
        {"path": "weights/model.safetensors", "sample": sample(TEXT), "size": len(TEXT)},  # .gitattributes
        {"path": "big.txt", "sample": sample(TEXT), "size": LFS_MIN_SIZE},  # 10 MiB and more
        {"path": "almost.txt", "sample": sample(TEXT), "size": LFS_MIN_SIZE - 1},
    ])
    assert modes == {"README.md": "regular", "data/shard.parquet": "lfs", "weights/model.safetensors": "lfs",
                     "big.txt": "lfs", "almost.txt": "regular"}


def test_preupload_follows_the_repos_own_gitattributes(hub: LocalHub) -> None:
    hub.store.commit("alice/attrs", files={".gitattributes": b"*.csv filter=lfs diff=lfs merge=lfs -text\n"})
    modes = preupload(hub, "alice/attrs", [{"path": "t/x.csv", "sample": sample(TEXT), "size": 9},
                                           {"path": "w.safetensors", "sample": sample(TEXT), "size": 9}])
    assert modes == {"t/x.csv": "lfs", "w.safetensors": "regular"}  # its .gitattributes replaced the default one


def test_without_lfs_every_file_is_regular_and_no_batch_api(tmp_path: Path) -> None:
    with LocalHub(tmp_path / "plain", tokens={TOKEN: "alice"}, durable=False) as plain:
        plain.store.commit("alice/plain", files={"README.md": b"# x\n"})
        modes = preupload(plain, "alice/plain", [{"path": "w.bin", "sample": sample(BINARY), "size": 10 ** 9}])
        assert modes == {"w.bin": "regular"}
        status, answer = batch(plain, "alice/plain", [{"oid": "0" * 64, "size": 1}])
        assert (status, "lfs=True" in answer["error"]) == (404, True)


def test_preupload_refuses_a_sample_that_is_not_base64(hub: LocalHub) -> None:
    hub.store.commit("alice/sample", files={"README.md": b"# x\n"})
    status, _, body = request(hub, "POST", "/api/models/alice/sample/preupload/main",
                              body={"files": [{"path": "a", "sample": "!!", "size": 1}]}, headers=AUTH)
    assert status == 400 and "sample is not base64" in json.loads(body)["error"]


# --- the client's LFS upload, end to end ---------------------------------------------------------------------------


def test_a_binary_upload_goes_through_lfs_and_reads_back(hub: LocalHub, alice: HfApi, tmp_path: Path) -> None:
    # bytes no other test uploads: the store does not hold them yet, whichever test ran first, so the client PUTs them
    data = BINARY[::-1]
    alice.create_repo("alice/binary")
    hub.reset_stats()
    alice.upload_file(path_or_fileobj=data, path_in_repo="w/blob.bin", repo_id="alice/binary")
    paths = [(r.method, r.path) for r in hub.stats]
    assert ("POST", "/alice/binary.git/info/lfs/objects/batch") in paths
    assert [path for method, path in paths if method == "PUT" and path.startswith("/api/lfs-objects/")]
    assert ("POST", "/alice/binary.git/info/lfs/objects/verify") in paths

    sha = hashlib.sha256(data).hexdigest()
    (entry,) = [e for e in alice.list_repo_tree("alice/binary", recursive=True) if e.path == "w/blob.bin"]
    assert (entry.lfs.sha256, entry.lfs.size, entry.size) == (sha, len(data), len(data))
    assert entry.blob_id == git_blob_sha1(lfs_pointer(sha, len(data)))  # the pointer's git id, as on the Hub
    (info,) = alice.get_paths_info("alice/binary", ["w/blob.bin"])
    assert info.lfs.sha256 == sha
    siblings = {s.rfilename: s for s in alice.model_info("alice/binary", files_metadata=True).siblings}
    assert siblings["w/blob.bin"].lfs.sha256 == sha
    status, headers, _ = request(hub, "HEAD", "/alice/binary/resolve/main/w/blob.bin")
    assert status == 200 and headers["X-Linked-Etag"] == f'"{sha}"' and headers["X-Linked-Size"] == str(len(data))
    path = alice.hf_hub_download("alice/binary", "w/blob.bin", cache_dir=tmp_path)
    assert Path(path).read_bytes() == data and Path(path).resolve().name == sha  # cached under the sha256


def test_an_unchanged_lfs_file_is_not_uploaded_again(hub: LocalHub, alice: HfApi) -> None:
    alice.create_repo("alice/again")
    alice.upload_file(path_or_fileobj=BINARY, path_in_repo="a.bin", repo_id="alice/again")
    commits = len(alice.list_repo_commits("alice/again"))
    hub.reset_stats()
    alice.upload_file(path_or_fileobj=BINARY, path_in_repo="a.bin", repo_id="alice/again")  # same path, same bytes
    assert len(alice.list_repo_commits("alice/again")) == commits  # preupload's sha256 oid let the client drop it
    alice.upload_file(path_or_fileobj=BINARY, path_in_repo="copy.bin", repo_id="alice/again")  # new path
    assert not [r for r in hub.stats if r.method == "PUT"]  # the batch API said the store holds it
    assert hub.store.read_file("alice/again", "copy.bin") == BINARY


def test_a_copied_lfs_file_names_no_size_and_is_committed(hub: LocalHub, alice: HfApi) -> None:
    alice.create_repo("alice/copy")
    alice.upload_file(path_or_fileobj=BINARY, path_in_repo="src.bin", repo_id="alice/copy")
    alice.create_commit("alice/copy", operations=[CommitOperationCopy("src.bin", "dst.bin")],
                        commit_message="copy")
    assert hub.store.read_file("alice/copy", "dst.bin") == BINARY


def test_lfs_entries_survive_a_restart(tmp_path: Path) -> None:
    with LocalHub(tmp_path / "store", tokens={TOKEN: "alice"}, durable=False, lfs=True) as first:
        api = HfApi(endpoint=first.endpoint, token=TOKEN)
        api.create_repo("alice/kept")
        api.upload_file(path_or_fileobj=BINARY, path_in_repo="a.bin", repo_id="alice/kept")
    with LocalHub(tmp_path / "store", tokens={TOKEN: "alice"}, durable=False) as second:
        (entry,) = [e for e in HfApi(endpoint=second.endpoint).list_repo_tree("alice/kept") if e.path == "a.bin"]
        assert entry.lfs is not None and entry.lfs.sha256 == hashlib.sha256(BINARY).hexdigest()


# --- refusals ------------------------------------------------------------------------------------------------------


def test_the_batch_api_reports_bad_objects_one_by_one(hub: LocalHub) -> None:
    hub.store.commit("alice/objects", files={"README.md": b"# x\n"})
    good = {"oid": hashlib.sha256(b"new object").hexdigest(), "size": 10}
    status, answer = batch(hub, "alice/objects", [{"oid": "XYZ", "size": 1}, {"oid": "0" * 64, "size": -1}, good,
                                                  {"oid": "1" * 64, "size": 10 ** 12}])
    assert status == 200
    errors = [o.get("error", {}).get("code") for o in answer["objects"]]
    assert errors == [422, 422, None, 413]
    assert set(answer["objects"][2]["actions"]) == {"upload", "verify"}
    assert answer["transfer"] == "basic" and "header" not in answer["objects"][2]["actions"]["upload"]


@pytest.mark.parametrize(("body", "auth", "status"), [
    pytest.param({"operation": "download", "objects": []}, True, 400, id="download"),
    pytest.param({"operation": "upload", "transfers": ["multipart"], "objects": []}, True, 400, id="no-basic"),
    pytest.param({"operation": "upload", "objects": "x"}, True, 400, id="objects-not-a-list"),
    pytest.param({"operation": "upload", "objects": []}, False, 401, id="anonymous"),
])
def test_the_batch_api_refuses_what_it_does_not_serve(hub: LocalHub, body: dict[str, Any], auth: bool,
                                                      status: int) -> None:
    hub.store.commit("alice/refuse", files={"README.md": b"# x\n"})
    got, _, _ = request(hub, "POST", "/alice/refuse.git/info/lfs/objects/batch", body=body,
                        headers=AUTH if auth else {})
    assert got == status


def _upload_href(hub: LocalHub, repo: str, data: bytes) -> str:
    _, answer = batch(hub, repo, [{"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}])
    href = answer["objects"][0]["actions"]["upload"]["href"]
    return href.removeprefix(hub.endpoint)


def test_an_upload_url_is_bound_to_its_object(hub: LocalHub) -> None:
    hub.store.commit("alice/signed", files={"README.md": b"# x\n"})
    data = b"\0signed object"
    href = _upload_href(hub, "alice/signed", data)
    forged = href[:-4] + ("0000" if not href.endswith("0000") else "1111")
    assert request(hub, "PUT", forged, body=data)[0] == 403
    assert request(hub, "PUT", href, body=data + b"x")[0] == 422  # not the announced content
    sha = hashlib.sha256(data).hexdigest()
    assert not hub.store.has_blob(sha, len(data))
    status, _, body = request(hub, "POST", "/alice/signed.git/info/lfs/objects/verify",
                              body={"oid": sha, "size": len(data)}, headers=AUTH)
    assert status == 422 and "PUT it first" in json.loads(body)["error"]
    assert request(hub, "PUT", href, body=data)[0] == 200  # no token: the URL is the permission
    assert hub.store.has_blob(sha, len(data))


def test_a_commit_naming_an_object_never_uploaded_is_refused(hub: LocalHub, alice: HfApi) -> None:
    hub.store.commit("alice/missing", files={"README.md": b"# x\n"})
    line = {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "2" * 64, "size": 5}}
    body = b"\n".join(json.dumps(x).encode() for x in ({"key": "header", "value": {"summary": "x"}}, line))
    before = hub.store.resolve("alice/missing").commit.id
    status, _, answer = request(hub, "POST", "/api/models/alice/missing/commit/main", body=body,
                                headers={**AUTH, "Content-Type": "application/x-ndjson"})
    assert status == 400 and "was never uploaded" in json.loads(answer)["error"]
    assert hub.store.resolve("alice/missing").commit.id == before


def test_a_xet_client_is_told_to_disable_xet(hub: LocalHub) -> None:
    hub.store.commit("alice/xet", files={"README.md": b"# x\n"})
    status, _, body = request(hub, "GET", "/api/models/alice/xet/xet-write-token/main", headers=AUTH)
    assert status == 400 and "HF_HUB_DISABLE_XET=1" in json.loads(body)["error"]


def test_a_pull_request_from_a_non_member_uploads_through_lfs(hub: LocalHub, alice: HfApi) -> None:
    alice.create_repo("alice/pr-lfs")
    bob = HfApi(endpoint=hub.endpoint, token="tok-bob")
    info = bob.create_commit("alice/pr-lfs", operations=[CommitOperationAdd("w.bin", BINARY)],
                             commit_message="weights", create_pr=True)
    assert hub.store.read_file("alice/pr-lfs", "w.bin", revision=f"refs/pr/{info.pr_num}") == BINARY
    with pytest.raises((BadRequestError, HfHubHTTPError)):  # and without create_pr, bob may not write
        bob.upload_file(path_or_fileobj=BINARY + b"2", path_in_repo="x.bin", repo_id="alice/pr-lfs")


def test_the_cli_serves_lfs_when_asked(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from helpers.processes import sigint_default

    repo_root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen([sys.executable, "-m", "bnconvention", "hubserver", "--root", str(tmp_path / "hub"),
                                "--token", f"alice={TOKEN}", "--lfs"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=repo_root,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=sigint_default)
    try:
        endpoint = process.stdout.readline().strip().split(" ", 1)[1] if process.stdout else ""
        api = HfApi(endpoint=endpoint, token=TOKEN)
        api.create_repo("alice/cli")
        api.upload_file(path_or_fileobj=BINARY, path_in_repo="w.bin", repo_id="alice/cli")
        (entry,) = [e for e in api.list_repo_tree("alice/cli") if e.path == "w.bin"]
        assert entry.lfs is not None
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0


def test_batch_object_answers_keep_the_wire_shape() -> None:
    assert LfsObjectAnswer(oid="a" * 64, size=3).to_json() == {"oid": "a" * 64, "size": 3}
    assert LfsObjectAnswer(oid="x", size=0, error=(422, "bad oid")).to_json() == {
        "oid": "x", "size": 0, "error": {"code": 422, "message": "bad oid"}}
    answer = LfsObjectAnswer(oid="a" * 64, size=3, upload_href="u", verify_href="v").to_json()
    assert json.dumps(answer) == json.dumps({
        "oid": "a" * 64, "size": 3, "authenticated": True,
        "actions": {"upload": {"href": "u", "expires_in": UPLOAD_URL_LIFETIME_S},
                    "verify": {"href": "v", "expires_in": UPLOAD_URL_LIFETIME_S}}})
