"""Reading safetensors headers over HTTP: exact byte ranges, the cost against get_safetensors_metadata, malformed
files, shard indexes, and the client's raw reads (ranges, truncated bodies, missing files, the token)."""

from __future__ import annotations

import contextlib
import json
import pickle
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import numpy as np
import pytest
from safetensors.numpy import save as save_numpy

from bnconvention.errors import HubError, JSONInputError, SafetensorsHeaderError, UsageError
from bnconvention.formats.safetensors_header import parse_header
from bnconvention.hub.client import Secret, make_client
from bnconvention.hub.headers import (
    SPECULATIVE_BYTES,
    parse_index,
    read_remote_header,
    read_sharded,
    weights_files,
)
from bnconvention.hub.retry import RetryPolicy, TransientHubError, is_retryable
from bnconvention.hubserver import FaultRule, LocalHub

ORG = "hdr"
TOKEN = "hf_headers_test_secret_7f3a"


def _file(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    return save_numpy(tensors, metadata=metadata)


def _header_size(data: bytes) -> int:
    return 8 + struct.unpack("<Q", data[:8])[0]


SMALL = _file({"w": np.arange(3000, dtype=np.float32)})  # ~12 kB, header of ~80 bytes
LARGE_HEADER = _file({f"layer{i}.weight": np.zeros(4, dtype=np.float32) for i in range(150)},
                     metadata={"note": "x" * 3000})  # header well over 4096 bytes
TINY = _file({"b": np.zeros(2, dtype=np.float32)})  # shorter than the speculative range
BIG = _file({"big.weight": np.ones(1_250_000, dtype=np.float32), "bn.running_mean": np.zeros(8, dtype=np.float32),
             "bn.running_var": np.ones(8, dtype=np.float32)})  # 5 MB of tensor bytes



@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"}, durable=False) as server:
        store = server.store
        store.commit(f"{ORG}/small", files={"model.safetensors": SMALL})
        store.commit(f"{ORG}/large-header", files={"model.safetensors": LARGE_HEADER})
        store.commit(f"{ORG}/tiny", files={"model.safetensors": TINY})
        store.commit(f"{ORG}/big", files={"model.safetensors": BIG})
        store.commit(f"{ORG}/empty", files={"model.safetensors": b""})
        store.commit(f"{ORG}/overlong", files={"model.safetensors": struct.pack("<Q", 10_000) + b"{}"})
        store.commit(f"{ORG}/not-json", files={"model.safetensors": struct.pack("<Q", 4) + b"{no}"})
        store.commit(f"{ORG}/trailing", files={"model.safetensors": SMALL + b"\0" * 8})
        store.commit(f"{ORG}/card", files={"README.md": b"# card\n" * 10})
        shard_a = _file({"a": np.zeros(4, dtype=np.float32)})
        shard_b = _file({"b": np.zeros(4, dtype=np.float32)})
        index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
        store.commit(f"{ORG}/sharded", files={"model-00001-of-00002.safetensors": shard_a,
                                              "model-00002-of-00002.safetensors": shard_b,
                                              "model.safetensors.index.json": json.dumps(index).encode()})
        lying = {"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
        store.commit(f"{ORG}/sharded-lying", files={"model-00001-of-00002.safetensors": shard_a,
                                                    "model-00002-of-00002.safetensors": shard_b,
                                                    "model.safetensors.index.json": json.dumps(lying).encode()})
        yield server


@pytest.fixture(scope="module")
def client(hub: LocalHub):
    return make_client(endpoint=hub.endpoint, token=TOKEN, retry=RetryPolicy(attempts=4, base_delay=0.001,
                                                                           max_delay=0.005))


def _head(hub: LocalHub, repo: str) -> str:
    return hub.store.resolve(f"{ORG}/{repo}").commit.id


# --- exact ranges ------------------------------------------------------------------------------------------------


def test_small_header_costs_one_speculative_range(hub: LocalHub, client) -> None:
    hub.reset_stats()
    result = read_remote_header(client, f"{ORG}/small", "model.safetensors", revision=_head(hub, "small"))
    requests = [r for r in hub.stats if r.repo_id == f"{ORG}/small"]
    assert [(r.method, r.status, r.bytes_sent) for r in requests] == [("GET", 206, SPECULATIVE_BYTES)]
    assert result.bytes_read == SPECULATIVE_BYTES and result.requests == 1
    assert result.file_size == len(SMALL)
    expected = parse_header(SMALL[8:_header_size(SMALL)], data_size=len(SMALL) - _header_size(SMALL))
    assert result.header.tensors == expected.tensors


def test_large_header_reads_exactly_the_header(hub: LocalHub, client) -> None:
    assert _header_size(LARGE_HEADER) > SPECULATIVE_BYTES
    hub.reset_stats()
    result = read_remote_header(client, f"{ORG}/large-header", "model.safetensors",
                                revision=_head(hub, "large-header"))
    sent = [r.bytes_sent for r in hub.stats if r.repo_id == f"{ORG}/large-header"]
    assert sent == [SPECULATIVE_BYTES, _header_size(LARGE_HEADER) - SPECULATIVE_BYTES]
    assert result.bytes_read == _header_size(LARGE_HEADER)
    assert len(result.header.tensors) == 150 and result.header.metadata == {"note": "x" * 3000}


def test_file_shorter_than_the_speculative_range(hub: LocalHub, client) -> None:
    hub.reset_stats()
    result = read_remote_header(client, f"{ORG}/tiny", "model.safetensors", revision=_head(hub, "tiny"))
    assert hub.bytes_sent(repo_id=f"{ORG}/tiny") == len(TINY) == result.bytes_read
    assert list(result.header.tensors) == ["b"]


def test_census_bytes_against_get_safetensors_metadata(hub: LocalHub, client) -> None:
    """The measurement of the issue: what a header read costs on a repo whose tensors are 5 MB."""
    revision = _head(hub, "big")
    hub.reset_stats()
    ours = read_remote_header(client, f"{ORG}/big", "model.safetensors", revision=revision)
    our_bytes = hub.bytes_sent(repo_id=f"{ORG}/big")
    hub.reset_stats()
    client.api.get_safetensors_metadata(f"{ORG}/big", revision=revision)
    their_bytes = hub.bytes_sent(repo_id=f"{ORG}/big")
    header = _header_size(BIG)
    assert our_bytes == ours.bytes_read == SPECULATIVE_BYTES  # the header (~200 bytes) plus a few kB at most
    assert our_bytes <= header + SPECULATIVE_BYTES
    assert their_bytes == 100_001  # bytes=0-100000, whatever the header size


# --- malformed files ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("repo", "message"), [
    pytest.param("empty", "file is 0 bytes long", id="empty-file"),
    pytest.param("overlong", "header length 10000 exceeds the 2 bytes after the length field", id="length-too-big"),
    pytest.param("not-json", "header is not valid JSON", id="not-json"),
    pytest.param("trailing", "the file is truncated or has trailing bytes", id="trailing-bytes"),
])
def test_malformed_files_are_refused_with_the_repo_path(hub: LocalHub, client, repo: str, message: str) -> None:
    with pytest.raises(SafetensorsHeaderError) as caught:
        read_remote_header(client, f"{ORG}/{repo}", "model.safetensors", revision=_head(hub, repo))
    assert message in str(caught.value)
    assert caught.value.source == f"{ORG}/{repo}/model.safetensors"


# --- shards ---------------------------------------------------------------------------------------------------------


def test_sharded_checkpoint_reads_index_and_every_shard(hub: LocalHub, client) -> None:
    files = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}
    weights = read_sharded(client, f"{ORG}/sharded", "model.safetensors.index.json",
                           revision=_head(hub, "sharded"), available=files)
    assert weights.kind == "sharded"
    assert [h.filename for h in weights.headers] == sorted(files - {"model.safetensors.index.json"})
    assert sorted(weights.tensors()) == ["a", "b"]


def test_index_that_disagrees_with_the_shards(hub: LocalHub, client) -> None:
    files = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}
    with pytest.raises(SafetensorsHeaderError) as caught:
        read_sharded(client, f"{ORG}/sharded-lying", "model.safetensors.index.json",
                     revision=_head(hub, "sharded-lying"), available=files)
    assert "maps 'a' to model-00002-of-00002.safetensors, but that shard does not hold it" in str(caught.value)


@pytest.mark.parametrize(("data", "message"), [
    pytest.param(b"[1]", "an index is a JSON object, found list", id="not-object"),
    pytest.param(b'{"metadata": {}}', "'weight_map' is missing or empty", id="no-weight-map"),
    pytest.param(b'{"weight_map": {"a": "../x.safetensors"}}', "is not a plain path inside the repo", id="traversal"),
    pytest.param(b'{"weight_map": {"a": "/abs.safetensors"}}', "is not a plain path inside the repo", id="absolute"),
    pytest.param(b'{"weight_map": {"a": "x.bin"}}', "not a .safetensors file name", id="not-safetensors"),
    pytest.param(b'{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}', "duplicate", id="duplicate-key"),
    pytest.param(b'{"weight_map": ', "not valid JSON", id="truncated-json"),
])
def test_malformed_index(data: bytes, message: str) -> None:
    with pytest.raises(JSONInputError) as caught:
        parse_index(data, filename="model.safetensors.index.json", source="org/m/model.safetensors.index.json")
    assert message in str(caught.value)


def test_index_in_a_folder_resolves_shards_next_to_it() -> None:
    index = parse_index(b'{"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}',
                        filename="unet/m.safetensors.index.json", source="x")
    assert index.weight_map == {"a": "unet/m-1.safetensors", "b": "unet/m-2.safetensors"}
    assert index.shards == ["unet/m-1.safetensors", "unet/m-2.safetensors"]


def test_weights_files_groups_shards_under_their_index() -> None:
    names = [".gitattributes", "README.md", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
             "model.safetensors.index.json", "extra.safetensors", "pytorch_model.bin"]
    assert weights_files(names) == (["model.safetensors.index.json"], ["extra.safetensors"])


# --- the client's raw reads -----------------------------------------------------------------------------------------


class _RangeIgnoringHandler(BaseHTTPRequestHandler):
    """A server that answers every GET with the whole file and 200, whatever the Range header says."""

    protocol_version = "HTTP/1.1"
    payload = LARGE_HEADER

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client stops reading once it has its bytes
            self.wfile.write(self.payload)

    def log_message(self, *args: object) -> None:
        pass


def test_a_server_that_ignores_ranges_still_gives_the_right_header() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RangeIgnoringHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        plain = make_client(endpoint=f"http://127.0.0.1:{server.server_address[1]}", token=None,
                            retry=RetryPolicy(attempts=1))
        result = read_remote_header(plain, "o/m", "model.safetensors", revision="main")
    finally:
        server.shutdown()
        server.server_close()
    expected = parse_header(LARGE_HEADER[8:_header_size(LARGE_HEADER)],
                            data_size=len(LARGE_HEADER) - _header_size(LARGE_HEADER))
    assert result.header.tensors == expected.tensors and result.requests == 2
    assert result.bytes_read == _header_size(LARGE_HEADER) and result.file_size == len(LARGE_HEADER)



def test_truncated_body_is_detected_and_retried(hub: LocalHub, client) -> None:
    url = client.file_url(f"{ORG}/small", "model.safetensors", revision=_head(hub, "small"))
    rule = hub.faults.add(FaultRule(kind="truncate", path=r"/hdr/small/resolve/", count=1, truncate_fraction=0.5))
    try:
        with pytest.raises((TransientHubError, httpx2.TransportError)) as caught:
            client.fetch(url, byte_range=(0, 99), max_bytes=100)
        assert is_retryable(caught.value)
        assert rule.fired == 1
        fetched = client.fetch_with_retry(url, byte_range=(0, 99), max_bytes=100, what="test")
        assert fetched.body == SMALL[:100] and fetched.status == 206 and fetched.total_size == len(SMALL)
    finally:
        hub.faults.remove(rule)


def test_read_small_file(hub: LocalHub, client) -> None:
    revision = _head(hub, "card")
    assert client.read_small_file(f"{ORG}/card", "README.md", revision=revision, max_bytes=100) == b"# card\n" * 10
    assert client.read_small_file(f"{ORG}/card", "config.json", revision=revision, max_bytes=100) is None
    with pytest.raises(HubError) as caught:
        client.read_small_file(f"{ORG}/card", "README.md", revision=revision, max_bytes=20)
    assert "over the 20-byte limit" in str(caught.value)


def test_token_is_sent_but_never_shown(hub: LocalHub, client) -> None:
    assert client.api.whoami()["name"] == "alice"
    assert client.whoami_name() == "alice"
    assert TOKEN not in repr(client) and TOKEN not in str(client.token) and TOKEN not in repr(client.token)
    assert client.scrub(f"Bearer {TOKEN} failed") == "Bearer *** failed"
    assert pickle.loads(pickle.dumps(client.token)).reveal() == TOKEN  # travels to worker processes intact


def test_token_from_environment(monkeypatch: pytest.MonkeyPatch, hub: LocalHub) -> None:
    monkeypatch.setenv("BNC_TEST_TOKEN", TOKEN)
    assert make_client(endpoint=hub.endpoint, token_env="BNC_TEST_TOKEN").whoami_name() == "alice"
    monkeypatch.delenv("BNC_TEST_TOKEN")
    anonymous = make_client(endpoint=hub.endpoint, token_env="BNC_TEST_TOKEN")
    assert not anonymous.token and anonymous.headers().get("authorization") is None
    with pytest.raises(UsageError):
        make_client(endpoint=hub.endpoint, token_env="NOT A NAME")
    with pytest.raises(UsageError):
        make_client(endpoint="ftp://hub", token_env=None)
    with pytest.raises(UsageError):
        make_client(endpoint=hub.endpoint, token="x", token_env="HF_TOKEN")
    assert Secret(None).reveal() is None and str(Secret(TOKEN)) == "***"


def test_client_never_reads_a_token_stored_on_the_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          hub: LocalHub) -> None:
    # huggingface_hub would fall back to HF_TOKEN / a saved token; the user's --token-env is the only source
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    client = make_client(endpoint=hub.endpoint, token_env=None)
    assert client.headers().get("authorization") is None
