"""Read safetensors headers over HTTP without downloading tensor data.

``huggingface_hub.get_safetensors_metadata`` always asks for the first 100,000 bytes of every shard: for a small
header that is mostly tensor bytes (100,001 bytes per shard, measured on the local Hub). Here one speculative range
of :data:`SPECULATIVE_BYTES` is read first; it holds the 8-byte length and, for most headers, the whole header. When
the header is longer, exactly the missing bytes are read with a second range. A census therefore costs at most the
header plus :data:`SPECULATIVE_BYTES` per file. Every check of the reference parser is applied
(:func:`bnconvention.formats.safetensors_header.parse_header`), with the file size taken from ``Content-Range``.

Sharded checkpoints are read through their ``*.safetensors.index.json``: the index is checked (a JSON object whose
``weight_map`` maps tensor names to shard files next to it), then every shard's header, and the two must agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from huggingface_hub.errors import HfHubHTTPError

from bnconvention.errors import SafetensorsHeaderError, UntrustedInputError
from bnconvention.formats.safetensors_header import SafetensorsHeader, TensorInfo, header_length, parse_header
from bnconvention.formats.safetensors_index import (  # the index rule is shared with the offline validator
    INDEX_SUFFIX,
    MAX_INDEX_BYTES,
    ShardIndex,
    checkpoint_files,
    index_mismatch,
    index_missing_shards,
    parse_index,
)
from bnconvention.hub.client import HubClient

SPECULATIVE_BYTES = 4096


@dataclass(frozen=True)
class RemoteHeader:
    """One file's checked header, its size, and what reading it cost (body bytes of the successful responses)."""

    filename: str
    header: SafetensorsHeader
    file_size: int
    bytes_read: int
    requests: int


@dataclass
class WeightsSet:
    """The weights a repo ships as one checkpoint: a single ``.safetensors`` file or the shards of an index."""

    name: str  # the .safetensors file, or the index file for a sharded checkpoint
    kind: str  # "single" or "sharded"
    headers: list[RemoteHeader] = field(default_factory=list)
    index_bytes: int = 0

    @property
    def bytes_read(self) -> int:
        return self.index_bytes + sum(h.bytes_read for h in self.headers)

    @property
    def total_size(self) -> int:
        return sum(h.file_size for h in self.headers)

    def tensors(self) -> dict[str, TensorInfo]:
        """Every tensor of the checkpoint (shards merged; names are unique, checked when the set was read)."""
        merged: dict[str, TensorInfo] = {}
        for item in self.headers:
            merged.update(item.header.tensors)
        return merged


def _source(repo_id: str, filename: str) -> str:
    return f"{repo_id}/{filename}"


def read_remote_header(client: HubClient, repo_id: str, filename: str, *, revision: str,
                       speculative: int = SPECULATIVE_BYTES) -> RemoteHeader:
    """The checked header of ``filename`` at ``revision``; reads ``8 + N`` bytes plus at most ``speculative``.

    Raises :class:`SafetensorsHeaderError` (naming ``repo/file``) for a truncated or malformed file, and the
    client's errors (after retries) when the server fails.
    """
    source = _source(repo_id, filename)
    url = client.file_url(repo_id, filename, revision=revision)
    try:
        first = client.fetch_with_retry(url, byte_range=(0, speculative - 1), max_bytes=speculative,
                                        what=f"GET {source} (header)")
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 416:  # no byte 0: an empty file
            raise SafetensorsHeaderError(f"{source}: file is 0 bytes long, shorter than the 8-byte header length; "
                                         "it is truncated or not a safetensors file", source=source) from None
        raise
    total = first.total_size
    if total is None:
        raise SafetensorsHeaderError(f"{source}: the server sent no file size (Content-Range or Content-Length); "
                                     "the header cannot be bounded", source=source)
    length = header_length(first.body, file_size=total, source=source)
    needed = 8 + length
    body = first.body
    requests = 1
    bytes_read = len(first.body)
    if needed > len(body):
        rest = client.fetch_with_retry(url, byte_range=(len(body), needed - 1), max_bytes=needed - len(body),
                                       what=f"GET {source} (rest of the header)")
        requests += 1
        bytes_read += len(rest.body)
        if rest.total_size is not None and rest.total_size != total:
            raise SafetensorsHeaderError(f"{source}: the file changed size between two reads of the same revision "
                                         f"({total} then {rest.total_size} bytes)", source=source)
        body += rest.body
        if len(body) < needed:
            raise SafetensorsHeaderError(f"{source}: file ended after {len(body) - 8} of {length} header bytes",
                                         source=source)
    header = parse_header(body[8:needed], data_size=total - needed, source=source)
    return RemoteHeader(filename=filename, header=header, file_size=total, bytes_read=bytes_read,
                        requests=requests)


def read_index(client: HubClient, repo_id: str, filename: str, *, revision: str) -> ShardIndex:
    source = _source(repo_id, filename)
    data = client.read_small_file(repo_id, filename, revision=revision, max_bytes=MAX_INDEX_BYTES)
    if data is None:
        raise UntrustedInputError(f"{source}: listed by the Hub but not found at revision {revision}",
                                  source=source)
    return parse_index(data, filename=filename, source=source)


def read_single(client: HubClient, repo_id: str, filename: str, *, revision: str,
                speculative: int = SPECULATIVE_BYTES) -> WeightsSet:
    header = read_remote_header(client, repo_id, filename, revision=revision, speculative=speculative)
    return WeightsSet(name=filename, kind="single", headers=[header])


def read_sharded(client: HubClient, repo_id: str, index_file: str, *, revision: str, available: set[str],
                 speculative: int = SPECULATIVE_BYTES) -> WeightsSet:
    """The index and every shard's header; the index's tensors must be exactly the shards' tensors."""
    source = _source(repo_id, index_file)
    index = read_index(client, repo_id, index_file, revision=revision)
    missing = index_missing_shards(index, available)
    if missing:
        raise UntrustedInputError(f"{source}: {missing}", source=source)
    result = WeightsSet(name=index_file, kind="sharded", index_bytes=index.size)
    for shard in index.shards:
        result.headers.append(read_remote_header(client, repo_id, shard, revision=revision, speculative=speculative))
    mismatch = index_mismatch(index, {item.filename: list(item.header.tensors) for item in result.headers})
    if mismatch:
        raise SafetensorsHeaderError(f"{source}: {mismatch}", source=source)
    return result


def weights_files(filenames: list[str]) -> tuple[list[str], list[str]]:
    """The repo's checkpoints: index files, and ``.safetensors`` files that no index claims
    (:func:`~bnconvention.formats.safetensors_index.checkpoint_files`, the rule local folders follow too)."""
    return checkpoint_files(filenames)


__all__ = [
    "INDEX_SUFFIX",
    "MAX_INDEX_BYTES",
    "SPECULATIVE_BYTES",
    "RemoteHeader",
    "ShardIndex",
    "WeightsSet",
    "parse_index",
    "read_index",
    "read_remote_header",
    "read_sharded",
    "read_single",
    "weights_files",
]
