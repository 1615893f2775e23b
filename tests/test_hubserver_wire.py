"""The local Hub at the HTTP level: fault injection, counters, ranges, malformed and hostile requests."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import random
import socket
import time
from pathlib import Path

import pytest

from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.hubserver import FaultRule, LocalHub
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.wire import git_blob_sha1
from bnconvention.hubserver.write_endpoints import CommitHeader, PreuploadFile

TOKEN = "tok-alice"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BLOB = bytes(range(256)) * 8  # 2048 bytes


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with LocalHub(tmp_path_factory.mktemp("wire"), tokens={TOKEN: "alice"}, durable=False, seed=7) as server:
        server.store.commit("alice/files", files={"blob.bin": BLOB, "README.md": b"---\nlicense: mit\n---\n"})
        yield server


@pytest.fixture(autouse=True)
def _no_leftover_faults(hub: LocalHub):
    yield
    hub.faults.clear()


def request(hub: LocalHub, method: str, path: str, *, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response, response.read()
    finally:
        connection.close()


def store_snapshot(root: Path) -> dict[str, str]:
    """Every file under the store with its sha256: equal snapshots mean nothing changed on disk."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# --- fault injection ------------------------------------------------------------------------------------------------


def test_latency_delays_the_response(hub: LocalHub) -> None:
    hub.faults.add(FaultRule(kind="latency", latency_s=0.3, path="^/api/models/alice/files$", count=1))
    started = time.monotonic()
    response, body = request(hub, "GET", "/api/models/alice/files")
    assert response.status == 200 and json.loads(body)["id"] == "alice/files"
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    request(hub, "GET", "/api/models/alice/files")
    assert time.monotonic() - started < 0.3  # count=1: only the next matching request


@pytest.mark.parametrize("status, code", [
    pytest.param(404, "EntryNotFound", id="404"),
    pytest.param(429, "RateLimited", id="429"),
    pytest.param(500, "InternalError", id="500"),
    pytest.param(502, "BadGateway", id="502"),
    pytest.param(503, "ServiceUnavailable", id="503"),
])
def test_injected_status_has_the_right_headers(hub: LocalHub, status: int, code: str) -> None:
    hub.faults.add(FaultRule(kind="status", status=status, retry_after=3, path="/resolve/", count=1))
    response, body = request(hub, "GET", "/alice/files/resolve/main/blob.bin")
    assert response.status == status
    assert response.getheader("X-Error-Code") == code
    assert json.loads(body) == {"error": f"injected fault: HTTP {status}"}
    assert response.getheader("Retry-After") == ("3" if status in (429, 503) else None)
    assert response.getheader("RateLimit") == ('"api";r=0;t=3' if status == 429 else None)
    assert hub.stats[-1].fault == "status" and hub.stats[-1].status == status
    response, body = request(hub, "GET", "/alice/files/resolve/main/blob.bin")
    assert (response.status, body) == (200, BLOB)


def test_dropped_connection_sends_nothing(hub: LocalHub) -> None:
    hub.faults.add(FaultRule(kind="drop", path="/resolve/", count=1))
    with pytest.raises(http.client.RemoteDisconnected):
        request(hub, "GET", "/alice/files/resolve/main/blob.bin")
    record = hub.stats[-1]
    assert (record.status, record.bytes_sent, record.fault, record.repo_id) == (None, 0, "drop", "alice/files")


def test_truncated_body_announces_full_length(hub: LocalHub) -> None:
    hub.faults.add(FaultRule(kind="truncate", truncate_fraction=0.25, path="/resolve/", count=1))
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    connection.request("GET", "/alice/files/resolve/main/blob.bin")
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == "2048"
    with pytest.raises(http.client.IncompleteRead) as caught:
        response.read()
    assert caught.value.partial == BLOB[:512]
    connection.close()
    assert (hub.stats[-1].bytes_sent, hub.stats[-1].fault) == (512, "truncate")


def test_probability_uses_the_seeded_rng(hub: LocalHub) -> None:
    hub.faults.reseed(123)
    hub.faults.add(FaultRule(kind="status", status=503, probability=0.3, path="^/api/models/alice/files$"))
    statuses = [request(hub, "GET", "/api/models/alice/files")[0].status for _ in range(20)]
    rng = random.Random(123)
    assert statuses == [503 if rng.random() < 0.3 else 200 for _ in range(20)]
    assert 0 < statuses.count(503) < 20


def test_method_filter_and_rule_order(hub: LocalHub) -> None:
    first = hub.faults.add(FaultRule(kind="status", status=500, method="HEAD", path="/resolve/", count=1))
    second = hub.faults.add(FaultRule(kind="status", status=502, path="/resolve/", count=1))
    assert request(hub, "GET", "/alice/files/resolve/main/blob.bin")[0].status == 502
    assert request(hub, "HEAD", "/alice/files/resolve/main/blob.bin")[0].status == 500
    assert request(hub, "HEAD", "/alice/files/resolve/main/blob.bin")[0].status == 200
    assert (first.fired, second.fired) == (1, 1)


def test_trickled_body_arrives_slowly_but_whole(hub: LocalHub) -> None:
    hub.faults.add(FaultRule(kind="trickle", rate_bps=200.0, path="/resolve/", count=1))
    started = time.monotonic()
    response, body = request(hub, "GET", "/alice/files/resolve/main/blob.bin", headers={"Range": "bytes=0-59"})
    elapsed = time.monotonic() - started
    assert (response.status, body) == (206, BLOB[:60])
    assert elapsed >= 0.15  # 60 bytes at 200 B/s: three pieces 0.1 s apart; no upper bound (loaded machines)
    assert hub.stats[-1].fault == "trickle"


def test_endless_listing_always_links_to_a_new_page(hub: LocalHub) -> None:
    hub.faults.add(FaultRule(kind="endless", path="^/api/models$"))
    links = []
    for _ in range(3):
        response, body = request(hub, "GET", "/api/models?author=alice")
        assert response.status == 200 and isinstance(json.loads(body), list)
        links.append(response.getheader("Link"))
    assert all(link.endswith('>; rel="next"') and "endless_page=" in link for link in links)
    assert len(set(links)) == 3


@pytest.mark.parametrize("spec, message", [
    pytest.param("kind=trickle,rate_bps=0", "rate_bps must be positive", id="no-rate"),
    pytest.param("kind=sideways", "latency|status|drop|truncate|trickle|endless", id="kind"),
])
def test_new_fault_specs_are_checked(spec: str, message: str) -> None:
    from bnconvention.errors import UsageError

    with pytest.raises(UsageError, match=message):
        FaultRule.from_spec(spec)


def test_a_client_that_hangs_up_is_one_log_line_not_a_traceback(hub: LocalHub, capsys: pytest.CaptureFixture[str],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    # Regression: http.server printed a ConnectionResetError traceback whenever a client hung up
    import logging
    import struct

    caplog.set_level(logging.INFO, logger="bnconvention.hubserver")
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", hub.port), timeout=10)
        sock.sendall(b"GET /api/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers not finished
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        sock.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len([r for r in caplog.records if "hung up" in r.getMessage()]) < 3:
        time.sleep(0.05)
    hung_up = [r.getMessage() for r in caplog.records if "hung up" in r.getMessage()]
    assert len(hung_up) == 3 and all(m.endswith("hung up (ConnectionResetError)") for m in hung_up), hung_up
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err


# --- counters -------------------------------------------------------------------------------------------------------


def test_counters_record_method_path_status_and_bytes(hub: LocalHub) -> None:
    hub.reset_stats()
    request(hub, "HEAD", "/alice/files/resolve/main/blob.bin")
    request(hub, "GET", "/alice/files/resolve/main/blob.bin", headers={"Range": "bytes=0-99"})
    request(hub, "GET", "/alice/files/resolve/main/missing.bin")
    records = [(r.method, r.path, r.status, r.bytes_sent, r.repo_id) for r in hub.stats]
    missing_body = len(request(hub, "GET", "/alice/files/resolve/main/missing.bin")[1])
    assert records == [
        ("HEAD", "/alice/files/resolve/main/blob.bin", 200, 0, "alice/files"),
        ("GET", "/alice/files/resolve/main/blob.bin", 206, 100, "alice/files"),
        ("GET", "/alice/files/resolve/main/missing.bin", 404, missing_body, "alice/files"),
    ]
    assert hub.bytes_sent("/alice/files/resolve/main/blob.bin") == 100
    assert hub.bytes_sent(repo_id="alice/files", method="HEAD") == 0


# --- ranges, ETag, HEAD ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("range_header, status, content_range, expected", [
    pytest.param("bytes=0-9", 206, "bytes 0-9/2048", BLOB[:10], id="first-ten"),
    pytest.param("bytes=2040-", 206, "bytes 2040-2047/2048", BLOB[2040:], id="open-ended"),
    pytest.param("bytes=-5", 206, "bytes 2043-2047/2048", BLOB[-5:], id="suffix"),
    pytest.param("bytes=100-100000", 206, "bytes 100-2047/2048", BLOB[100:], id="clipped-end"),
    pytest.param("bytes=0-1,5-6", 200, None, BLOB, id="multi-range-ignored"),
    pytest.param("items=0-1", 200, None, BLOB, id="other-unit-ignored"),
])
def test_range_requests(hub: LocalHub, range_header: str, status: int, content_range: str | None,
                        expected: bytes) -> None:
    response, body = request(hub, "GET", "/alice/files/resolve/main/blob.bin", headers={"Range": range_header})
    assert (response.status, response.getheader("Content-Range"), body) == (status, content_range, expected)
    assert response.getheader("Content-Length") == str(len(expected))


def test_unsatisfiable_range_is_416(hub: LocalHub) -> None:
    response, body = request(hub, "GET", "/alice/files/resolve/main/blob.bin", headers={"Range": "bytes=4096-"})
    assert response.status == 416 and response.getheader("Content-Range") == "bytes */2048"
    assert response.getheader("X-Error-Code") == "RangeNotSatisfiable" and "error" in json.loads(body)


def test_head_and_get_headers(hub: LocalHub) -> None:
    commit = hub.store.resolve("alice/files").commit.id
    response, body = request(hub, "HEAD", "/alice/files/resolve/main/blob.bin")
    assert body == b"" and response.status == 200
    assert response.getheader("Content-Length") == "2048"
    assert response.getheader("ETag") == f'"{git_blob_sha1(BLOB)}"'
    assert response.getheader("X-Repo-Commit") == commit
    assert response.getheader("X-Xet-Hash") is None and response.getheader("Link") is None
    response, _ = request(hub, "HEAD", "/alice/files/resolve/main/nothing.bin")
    assert (response.status, response.getheader("X-Error-Code"), response.getheader("X-Repo-Commit")) == (
        404, "EntryNotFound", commit)
    response, _ = request(hub, "GET", f"/alice/files/resolve/{commit}/blob.bin")
    assert response.status == 200


def test_header_only_read_of_a_safetensors_file(hub: LocalHub) -> None:
    """Two range reads (length prefix, then exactly the header) transfer 8 + N bytes however big the file is."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [262144], "data_offsets": [0, 1048576]}}).encode()
    header += b" " * (-len(header) % 8)
    data = len(header).to_bytes(8, "little") + header + bytes(1048576)
    hub.store.commit("alice/weights", files={"model.safetensors": data})
    hub.reset_stats()
    _, prefix = request(hub, "GET", "/alice/weights/resolve/main/model.safetensors", headers={"Range": "bytes=0-7"})
    size = int.from_bytes(prefix, "little")
    _, body = request(hub, "GET", "/alice/weights/resolve/main/model.safetensors",
                      headers={"Range": f"bytes=8-{7 + size}"})
    assert body == header
    assert hub.bytes_sent(repo_id="alice/weights") == 8 + len(header)


def test_keep_alive_serves_several_requests_on_one_connection(hub: LocalHub) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    for _ in range(3):
        connection.request("GET", "/alice/files/resolve/main/blob.bin")
        response = connection.getresponse()
        assert response.read() == BLOB
    connection.request("POST", "/api/models/alice/files/discussions", body=b"{not json", headers=AUTH)
    response = connection.getresponse()
    assert response.status == 400 and json.loads(response.read())["error"]
    connection.request("HEAD", "/alice/files/resolve/main/blob.bin")
    assert connection.getresponse().status == 200
    connection.close()


def test_chunked_request_body_is_read(hub: LocalHub) -> None:
    lines = [{"key": "header", "value": {"summary": "chunked"}},
             {"key": "file", "value": {"path": "c.txt", "content": base64.b64encode(b"chunky").decode(),
                                       "encoding": "base64"}}]
    payload = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    chunks = [payload[:10], payload[10:]]
    raw = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as sock:
        sock.sendall(b"POST /api/models/alice/files/commit/main HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: application/x-ndjson\r\nConnection: close\r\n\r\n" + raw)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200")
    assert hub.store.read_file("alice/files", "c.txt") == b"chunky"


def test_expect_100_continue_is_answered_before_the_body(hub: LocalHub) -> None:
    body = json.dumps({"content": "---\nlicense: mit\n---\n"}).encode()
    with socket.create_connection(("127.0.0.1", hub.port), timeout=5) as sock:
        sock.sendall(b"POST /api/validate-yaml HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(65536).startswith(b"HTTP/1.1 100")  # would time out if the 100 sat in a buffer
        sock.sendall(body)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b'{"errors":[],"warnings":[]}')


# --- malformed and hostile requests ---------------------------------------------------------------------------------


def _ndjson(*lines: object) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


HEADER = {"key": "header", "value": {"summary": "hostile"}}


def _file(path: str, content: bytes = b"x") -> dict[str, object]:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(content).decode(),
                                     "encoding": "base64"}}


BAD_REQUESTS = [
    pytest.param("POST", "/api/repos/create", b'{"name": "x", ', 400, id="create-repo-truncated-json"),
    pytest.param("POST", "/api/repos/create", b'{"name": "x", "name": "y"}', 400, id="create-repo-duplicate-keys"),
    pytest.param("POST", "/api/repos/create", b'["x"]', 400, id="create-repo-not-an-object"),
    pytest.param("POST", "/api/repos/create", b'{"name": "../escape"}', 400, id="create-repo-traversal-name"),
    pytest.param("POST", "/api/repos/create", b'{"name": "ok", "organization": ".."}', 400,
                 id="create-repo-traversal-org"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, b"{oops"), 400,
                 id="commit-bad-ndjson-line"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(_file("a.txt"), HEADER), 400,
                 id="commit-header-not-first"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, _file("../../hubstore.json")), 400,
                 id="commit-path-traversal"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, _file("a/../b.txt")), 400,
                 id="commit-dotdot-inside"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, _file("/etc/passwd")), 400,
                 id="commit-absolute-path"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, _file("a\\b.txt")), 400,
                 id="commit-backslash"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, _file(".git/config")), 400,
                 id="commit-dot-git"),
    pytest.param("POST", "/api/models/alice/files/commit/main",
                 _ndjson(HEADER, {"key": "file", "value": {"path": "a.txt", "content": "!!", "encoding": "base64"}}),
                 400, id="commit-bad-base64"),
    pytest.param("POST", "/api/models/alice/files/commit/main",
                 _ndjson(HEADER, {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "0" * 64}}),
                 400, id="commit-lfs-refused"),
    pytest.param("POST", "/api/models/alice/files/commit/main",
                 _ndjson(HEADER, _file("new.txt"), {"key": "deletedFile", "value": {"path": "absent.txt"}}), 404,
                 id="commit-delete-missing-file"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson(HEADER, _file("README.md/inner.txt")), 400,
                 id="commit-file-under-a-file"),
    pytest.param("POST", "/api/models/alice/files/commit/main", _ndjson({"key": "header", "value": {}}), 400,
                 id="commit-empty-summary"),
    pytest.param("POST", "/api/models/alice/files/commit/v1.0", _ndjson(HEADER, _file("x.txt")), 404,
                 id="commit-unknown-branch"),
    pytest.param("POST", "/api/models/alice/files/commit/main",
                 _ndjson({"key": "header", "value": {"summary": 3}}, _file("x.txt")), 400,
                 id="commit-summary-not-a-string"),
    pytest.param("POST", "/api/models/alice/files/commit/main",
                 _ndjson({"key": "header", "value": {"summary": "s", "parentCommit": ["a"]}}, _file("x.txt")), 400,
                 id="commit-parent-not-a-string"),
    pytest.param("POST", "/api/models/alice/files/preupload/main", b'{"files": ["a.txt"]}', 400,
                 id="preupload-file-not-an-object"),
    pytest.param("POST", "/api/models/alice/files/preupload/main", b'{"files": [{"path": "a.txt", "size": -1}]}',
                 400, id="preupload-negative-size"),
    pytest.param("POST", "/api/models/alice/files/preupload/main", b'{"files": [{"path": "../x", "size": 1}]}',
                 400, id="preupload-traversal"),
    pytest.param("POST", "/api/models/alice/files/discussions", b'{"title": "x"}', 400,
                 id="discussion-title-too-short"),
    pytest.param("POST", "/api/models/alice/files/discussions/1/status", b'{"status": "merged"}', 404,
                 id="status-on-missing-discussion"),
    pytest.param("GET", "/alice/files/resolve/main/..%2F..%2Fhubstore.json", None, 400, id="resolve-traversal"),
    pytest.param("GET", "/api/models/..%2F..%2Fetc/passwd", None, 400, id="repo-id-traversal"),
    pytest.param("GET", "/api/models/alice/files/tree/main/..%2F..", None, 400, id="tree-traversal"),
    pytest.param("GET", "/api/models/alice/files/tree/main/%ff", None, 400, id="not-utf8"),
    pytest.param("GET", "/api/models?limit=abc", None, 400, id="non-integer-limit"),
    pytest.param("GET", "/api/models?sort=bogus", None, 400, id="unknown-sort"),
    pytest.param("DELETE", "/api/models/alice/files", None, 405, id="wrong-method"),
    pytest.param("GET", "/api/unknown-endpoint", None, 404, id="unknown-route"),
]


@pytest.mark.parametrize("header", [{}, {"summary": 3}, {"summary": "s", "description": 1},
                                    {"summary": "s", "parentCommit": ["abcde"]}, {"summary": None}])
def test_commit_header_parser_rejects_missing_or_non_string_fields(header: JsonObject) -> None:
    with pytest.raises(HubRequestError, match="the commit header needs a string summary") as caught:
        CommitHeader.parse(header)
    assert caught.value.status == 400


def test_commit_header_parser_reads_the_wire_names() -> None:
    header = CommitHeader.parse({"summary": "s", "description": None, "parentCommit": "abcde", "extra": 1})
    assert (header.summary, header.description, header.parent_commit) == ("s", None, "abcde")
    assert CommitHeader.parse({"summary": "s", "parent_commit": "abcde"}).parent_commit is None


@pytest.mark.parametrize("item, message", [
    pytest.param("a.txt", r"files\[2\] must be an object", id="not-an-object"),
    pytest.param({"path": "a.txt"}, r"files\[2\]\.size must be a non-negative integer, found None", id="no-size"),
    pytest.param({"path": "a.txt", "size": True}, r"found True", id="bool-size"),
    pytest.param({"path": "a.txt", "size": 1, "sample": "!!"}, r"files\[2\]\.sample is not base64", id="bad-sample"),
])
def test_preupload_file_parser_names_the_bad_field(item: JsonValue, message: str) -> None:
    with pytest.raises(HubRequestError, match=message) as caught:
        PreuploadFile.parse(item, 2, with_sample=True)
    assert caught.value.status == 400


def test_preupload_sample_is_decoded_only_when_asked() -> None:
    item: JsonValue = {"path": "a.txt", "size": 1, "sample": "!!"}
    assert PreuploadFile.parse(item, 0, with_sample=False) == PreuploadFile(path="a.txt", size=1, sample=b"")
    assert PreuploadFile.parse({"path": "a.txt", "size": 2, "sample": "aGk="}, 0, with_sample=True).sample == b"hi"


@pytest.mark.parametrize("method, path, body, status", BAD_REQUESTS)
def test_malformed_requests_get_json_errors_and_change_nothing(hub: LocalHub, method: str, path: str,
                                                              body: bytes | None, status: int) -> None:
    before = store_snapshot(hub.store.root)
    refs_before = hub.store.repo_state("alice/files")
    response, raw = request(hub, method, path, body=body, headers=AUTH)
    assert response.status == status
    assert response.getheader("X-Error-Code")
    assert response.getheader("Content-Type").startswith("application/json")
    assert isinstance(json.loads(raw)["error"], str)
    assert store_snapshot(hub.store.root) == before
    assert hub.store.repo_state("alice/files") == refs_before


def test_writes_need_a_valid_token(hub: LocalHub) -> None:
    before = store_snapshot(hub.store.root)
    body = _ndjson(HEADER, _file("anon.txt"))
    response, raw = request(hub, "POST", "/api/models/alice/files/commit/main", body=body)
    assert response.status == 401 and response.getheader("X-Error-Code") == "Unauthorized"
    assert response.getheader("X-Error-Message") == "Invalid credentials in Authorization header"
    response, raw = request(hub, "POST", "/api/models/alice/files/commit/main", body=body,
                            headers={"Authorization": "Bearer wrong-token"})
    assert response.status == 401 and b"wrong-token" not in raw
    response, _ = request(hub, "GET", "/api/whoami-v2")
    assert response.status == 401
    assert store_snapshot(hub.store.root) == before


def test_validate_yaml_always_answers_json(hub: LocalHub) -> None:
    ok, body = request(hub, "POST", "/api/validate-yaml",
                       body=json.dumps({"content": "---\nlicense: mit\n---\n", "repoType": "model"}).encode())
    assert (ok.status, json.loads(body)) == (200, {"errors": [], "warnings": []})
    empty, body = request(hub, "POST", "/api/validate-yaml", body=json.dumps({"content": "# no yaml"}).encode())
    assert (empty.status, json.loads(body)["warnings"]) == (
        200, [{"message": "Empty or missing yaml metadata in repo card"}])
    bad, body = request(hub, "POST", "/api/validate-yaml", body=json.dumps({"content": "---\n- a\n---\n"}).encode())
    assert bad.status == 400 and "expected a mapping" in json.loads(body)["errors"][0]["message"]
    garbage, body = request(hub, "POST", "/api/validate-yaml", body=b"\xff\xfe")
    assert garbage.status == 400 and json.loads(body)["errors"][0]["message"]


def test_oversized_body_is_refused(tmp_path: Path) -> None:
    with LocalHub(tmp_path / "small", tokens={TOKEN: "alice"}, max_body_bytes=1024, durable=False) as small:
        small.store.create_repo("alice/tiny")
        before = store_snapshot(small.store.root)
        response, body = request(small, "POST", "/api/models/alice/tiny/commit/main",
                                 body=_ndjson(HEADER, _file("big.bin", bytes(4096))), headers=AUTH)
        assert response.status == 413 and response.getheader("X-Error-Code") == "PayloadTooLarge"
        assert store_snapshot(small.store.root) == before


@pytest.mark.parametrize("raw_request, status", [
    pytest.param(b"POST /api/validate-yaml HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400,
                 id="bad-content-length"),
    pytest.param(b"POST /api/validate-yaml HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400,
                 id="negative-content-length"),
    pytest.param(b"POST /api/validate-yaml HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
                 id="bad-chunk-size"),
    pytest.param(b"GET /api/whoami-v2 HTTP/1.1\r\nHost: x\r\nAuthorization: Basic abc\r\n\r\n", 401,
                 id="non-bearer-auth"),
    pytest.param(b"OPTIONS /api/models HTTP/1.1\r\nHost: x\r\n\r\n", 501, id="unsupported-method"),
    pytest.param(b"GET /api/models HTTP/1.1 extra\r\nHost: x\r\n\r\n", 400, id="bad-request-line"),
])
def test_malformed_http_framing(hub: LocalHub, raw_request: bytes, status: int) -> None:
    with socket.create_connection(("127.0.0.1", hub.port), timeout=5) as sock:
        sock.sendall(raw_request)
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 %d" % status)
    assert b"X-Error-Code:" in reply


def test_urls_ignore_a_malformed_host_header(hub: LocalHub) -> None:
    response, body = request(hub, "POST", "/api/repos/create", body=b'{"name": "hosted"}',
                             headers={**AUTH, "Host": "evil.example/<script>"})
    assert response.status == 200
    assert json.loads(body)["url"] == f"{hub.endpoint}/alice/hosted"


def test_unparsable_stored_card_and_weights_are_served_without_metadata(hub: LocalHub,
                                                                       fixtures_dir: Path) -> None:
    alias_card = (fixtures_dir / "hub" / "alias_bomb_card.md").read_bytes()  # unparsable: its aliases expand to GBs
    broken_weights = (10**9).to_bytes(8, "little") + b"{}"  # header length far beyond the file
    hub.store.commit("alice/broken", files={"README.md": alias_card, "model.safetensors": broken_weights})
    response, body = request(hub, "GET", "/api/models/alice/broken")
    info = json.loads(body)
    assert response.status == 200
    assert "cardData" not in info and "safetensors" not in info
    assert info["tags"] == ["safetensors"]
    _, served = request(hub, "GET", "/alice/broken/resolve/main/README.md")
    assert served == alias_card  # files are served as stored, whatever their content
