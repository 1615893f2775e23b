"""Check a declaration's running-statistics digests from the running buffers' bytes alone, over HTTP.

A header-only census sees names and shapes, so a declaration written before the buffers changed (stale φ: the
failure this project is about) looks consistent, and a re-push that keeps the card and replaces the weights (a real
workflow) passes as ``declared_consistent``. The running buffers themselves are small (two vectors of
``num_features`` floats and one integer per BatchNorm layer: 38,560 bytes for timm's resnet18, 212,904 for resnet50,
about 0.08 % and 0.2 % of the weights), so reading just their byte ranges lets the census compare them with the
declared ``running_sha256`` digests without downloading the weights.

The ranges are coalesced (:func:`plan_ranges`): ranges closer than :data:`MERGE_GAP` are read as one (the bytes in
between cost less than another round trip; safetensors stores a layer's ``running_mean`` and ``running_var`` side by
side, its affine tensors next to them), and when more than :data:`MAX_REQUESTS` ranges remain, the smallest gaps are
closed until that many are left. One ranged GET per merged range. A checkpoint whose planned bytes exceed the
budget (:data:`RUNNING_CHECK_BYTES`, 1 MiB: ResNet-50 needs 261 KB in 28 requests, ResNet-152 about 0.7 MB) is not
read; the reason says so. ``benchmarks/hub_census.py`` measures the bytes per repo against the weights.

``plan_ranges`` is pure (which byte ranges to read); :func:`check_running_statistics` does the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bnconvention.formats.digests import running_digests_from_bytes, running_names_for_layer
from bnconvention.formats.safetensors_header import SafetensorsHeader
from bnconvention.hub.client import HubClient
from bnconvention.hub.headers import WeightsSet
from bnconvention.standard.models import BatchNormState, Declaration
from bnconvention.validation.consistency import RunningDigests, digest_issues

RUNNING_CHECK_BYTES = 1024 * 1024  # bytes read per checkpoint at most: covers ResNet-50-class models (~0.2 %)
MERGE_GAP = 4096  # ranges closer than this are read as one (a few KB beat another round trip)
MAX_REQUESTS = 64  # ranged GETs per checkpoint at most: beyond, the smallest gaps are read too


@dataclass(frozen=True)
class ByteRange:
    filename: str
    start: int  # absolute file offsets, inclusive
    end: int
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class RunningCheck:
    """The outcome: ``None`` mismatch when the digests agree; ``checked`` False when over the budget."""

    checked: bool
    running_bytes: int
    bytes_read: int = 0
    requests: int = 0  # ranged GETs sent
    mismatch: str | None = None  # a JSON pointer into the record and a message
    mismatch_path: str = ""


def declared_layers(record: Declaration) -> list[tuple[str, str | None]]:
    """(layer name, declared per-layer running digest) of every layer that tracks running statistics."""
    return [(layer.name, layer.running_sha256) for state in record.deployed_state
            if isinstance(state, BatchNormState) for layer in state.layers if layer.track_running_stats]


def plan_ranges(weights: WeightsSet, names: list[str], *, merge_gap: int = MERGE_GAP,
                max_requests: int = MAX_REQUESTS) -> list[ByteRange]:
    """Byte ranges covering the tensors ``names`` of ``weights``, per file: every gap of at most ``merge_gap`` bytes
    closed, then the smallest remaining gaps until at most ``max_requests`` ranges are left (closing the smallest
    gaps adds the fewest bytes for a given number of requests); shards are never merged with each other."""
    located: dict[str, list[tuple[int, int, str]]] = {}
    for item in weights.headers:
        for name in names:
            info = item.header.tensors.get(name)
            if info is not None and info.nbytes:
                offset = item.header.data_offset
                located.setdefault(item.filename, []).append((offset + info.begin, offset + info.end - 1, name))
    files = sorted(located)
    for filename in files:
        located[filename].sort()
    gaps = [(spans[i + 1][0] - spans[i][1] - 1, filename, i) for filename in files
            for spans in [located[filename]] for i in range(len(spans) - 1)]
    closed = {(f, i) for gap, f, i in gaps if gap <= merge_gap}
    count = sum(len(located[f]) for f in files) - len(closed)
    extra = sorted(g for g in gaps if (g[1], g[2]) not in closed)[: max(0, count - max(max_requests, len(files)))]
    closed.update((f, i) for _, f, i in extra)
    ranges: list[ByteRange] = []
    for filename in files:
        spans = located[filename]
        start, end, members = spans[0][0], spans[0][1], [spans[0][2]]
        for i, (s_start, s_end, name) in enumerate(spans[1:]):
            if (filename, i) in closed:
                end, members = max(end, s_end), [*members, name]
            else:
                ranges.append(ByteRange(filename, start, end, tuple(members)))
                start, end, members = s_start, s_end, [name]
        ranges.append(ByteRange(filename, start, end, tuple(members)))
    return ranges


def compare(record: Declaration, tensors: Mapping[str, tuple[str, tuple[int, ...], bytes]]) -> tuple[str, str] | None:
    """The first declared running digest that the bytes contradict, as (JSON pointer, message); None if all agree.

    The comparison is the validator's (:func:`~bnconvention.validation.consistency.digest_issues`, without the
    trainable digest, which needs every weight); a stale layer is named before the combined digest."""
    layers = declared_layers(record)
    combined, per_layer = running_digests_from_bytes(tensors, [name for name, _ in layers])
    issues = digest_issues(record, RunningDigests(running_sha256=combined, layer_running_sha256=per_layer),
                           display="the running buffers", source="")
    stale = next((i for i in issues if i.code == "digests.layer_mismatch"), None)
    if stale is not None:
        state, layer = int(stale.pointer_tokens[1]), int(stale.pointer_tokens[3])  # /deployed_state/i/layers/j/...
        deployed = record.deployed_state[state]  # a layer digest mismatch points into a BatchNorm state
        name = deployed.layers[layer].name if isinstance(deployed, BatchNormState) else stale.path
        return (stale.path, f"the running buffers of layer {name!r} do not match the declared digest: they changed "
                            "after the declaration was written (stale declaration)")
    if any(i.code == "digests.running_mismatch" for i in issues):
        return ("/digests/running_sha256", "the running buffers do not match the declared digest: they changed "
                                           "after the declaration was written (stale declaration)")
    return None


def check_running_statistics(client: HubClient, repo_id: str, weights: WeightsSet, record: Declaration, *,
                             revision: str, budget: int = RUNNING_CHECK_BYTES) -> RunningCheck:
    """Read the running buffers of ``weights`` (coalesced ranges, within ``budget`` bytes) and compare them with
    ``record``."""
    tensors = weights.tensors()
    names = [n for layer, _ in declared_layers(record) for n in running_names_for_layer(layer, tensors)]
    running_bytes = sum(tensors[n].nbytes for n in names)
    ranges = plan_ranges(weights, names)
    planned = sum(r.end - r.start + 1 for r in ranges)
    if budget <= 0 or planned > budget:
        return RunningCheck(checked=False, running_bytes=running_bytes)
    data: dict[str, tuple[str, tuple[int, ...], bytes]] = {}
    bytes_read = requests = 0
    by_file = {item.filename: item.header for item in weights.headers}
    for byte_range in ranges:
        url = client.file_url(repo_id, byte_range.filename, revision=revision)
        size = byte_range.end - byte_range.start + 1
        fetched = client.fetch_with_retry(url, byte_range=(byte_range.start, byte_range.end), max_bytes=size,
                                          what=f"GET {repo_id}/{byte_range.filename} (running statistics)")
        bytes_read += len(fetched.body)
        requests += 1
        if fetched.status != 206 and byte_range.start != 0:  # the server ignored Range: these are other bytes
            return RunningCheck(checked=False, running_bytes=running_bytes, bytes_read=bytes_read, requests=requests)
        if len(fetched.body) != size:
            return RunningCheck(checked=True, running_bytes=running_bytes, bytes_read=bytes_read, requests=requests,
                                mismatch=f"{byte_range.filename}: the server sent {len(fetched.body)} of {size} bytes "
                                         "of the running buffers", mismatch_path="/digests/running_sha256")
        data.update(_slice(by_file[byte_range.filename], byte_range, fetched.body))
    found = compare(record, data)
    return RunningCheck(checked=True, running_bytes=running_bytes, bytes_read=bytes_read, requests=requests,
                        mismatch=None if found is None else found[1], mismatch_path="" if found is None else found[0])


def _slice(header: SafetensorsHeader, byte_range: ByteRange, body: bytes
           ) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Each tensor of a fetched range: (dtype, shape, its bytes)."""
    out = {}
    for name in byte_range.tensors:
        info = header.tensors[name]
        begin = header.data_offset + info.begin - byte_range.start
        out[name] = (info.dtype, info.shape, body[begin:begin + info.nbytes])
    return out
