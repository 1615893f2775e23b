"""The census's running-statistics check: which byte ranges it reads, and what it compares (pure parts)."""

from __future__ import annotations

import itertools
import struct

import pytest
import torch
from safetensors.torch import save

from bnconvention.authoring.declaration import declare, make_convention, make_transform
from bnconvention.formats.safetensors_header import parse_header
from bnconvention.hub.headers import RemoteHeader, WeightsSet
from bnconvention.hub.running import MERGE_GAP, compare, plan_ranges


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 6, 3), torch.nn.BatchNorm2d(6))
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 1, 9, 9))
    return model.eval()


def _weights(model: torch.nn.Module) -> tuple[WeightsSet, bytes]:
    blob = save({k: v.contiguous() for k, v in model.state_dict().items()})
    (length,) = struct.unpack("<Q", blob[:8])
    header = parse_header(blob[8:8 + length], data_size=len(blob) - 8 - length)
    remote = RemoteHeader(filename="model.safetensors", header=header, file_size=len(blob), bytes_read=0,
                          requests=0)
    return WeightsSet(name="model.safetensors", kind="single", headers=[remote]), blob


def _record(model: torch.nn.Module):
    convention = make_convention(buffer_update_mode="train", role="train", dataset_id="x", subset="all",
                                 transform=make_transform(mode="train"), rule="ema", momentum=0.1)
    return declare(model, convention)


def _read(weights: WeightsSet, blob: bytes) -> dict:
    header = weights.headers[0].header
    names = [n for n in header.tensors if n.rsplit(".", 1)[-1] in ("running_mean", "running_var",
                                                                    "num_batches_tracked")]
    data = {}
    for byte_range in plan_ranges(weights, names):
        for name in byte_range.tensors:
            info = header.tensors[name]
            start = header.data_offset + info.begin
            data[name] = (info.dtype, info.shape, blob[start:start + info.nbytes])
    return data


def test_ranges_cover_exactly_the_running_tensors_and_merge_neighbours() -> None:
    weights, _ = _weights(_model())
    header = weights.headers[0].header
    names = ["1.running_mean", "1.running_var", "4.running_mean", "4.running_var", "1.num_batches_tracked",
             "4.num_batches_tracked"]
    ranges = plan_ranges(weights, names)
    assert sorted(n for r in ranges for n in r.tensors) == sorted(names)
    for byte_range in ranges:
        spans = sorted((header.data_offset + header.tensors[n].begin, header.data_offset + header.tensors[n].end - 1)
                       for n in byte_range.tensors)
        assert (byte_range.start, byte_range.end) == (spans[0][0], max(end for _, end in spans))
        # members of one range are never further apart than the merge gap
        assert all(b[0] - a[1] - 1 <= MERGE_GAP for a, b in itertools.pairwise(spans))
    # with the 4 KiB merge gap, this tiny model's six buffers are one request (1,200 bytes, a conv kernel
    # in between); without merging across gaps, exactly the running buffers' bytes are read
    assert len(ranges) == 1
    exact = plan_ranges(weights, names, merge_gap=0)
    running = sum(header.tensors[n].nbytes for n in names)
    assert sum(r.end - r.start + 1 for r in exact) == running == 96


def test_compare_accepts_the_declared_state_and_names_the_stale_layer() -> None:
    model = _model()
    weights, blob = _weights(model)
    record = _record(model)
    assert compare(record, _read(weights, blob)) is None

    with torch.no_grad():  # the buffers move after the declaration was written
        model.train()
        model(torch.randn(8, 1, 9, 9) + 3)
        model.eval()
    stale_weights, stale_blob = _weights(model)
    path, message = compare(record, _read(stale_weights, stale_blob))
    assert path == "/deployed_state/0/layers/0/running_sha256"
    assert "layer '1'" in message and "stale declaration" in message


def test_compare_checks_the_combined_digest_when_layers_carry_none() -> None:
    model = _model()
    weights, blob = _weights(model)
    record = _record(model)
    data = record.model_dump(mode="json", exclude_none=True)
    for layer in data["deployed_state"][0]["layers"]:
        layer.pop("running_sha256")
    data["digests"]["running_sha256"] = "0" * 64
    from bnconvention.standard.models import parse_record

    assert compare(parse_record(data), _read(weights, blob)) == (
        "/digests/running_sha256",
        "the running buffers do not match the declared digest: they changed after the declaration was written "
        "(stale declaration)")


@pytest.mark.parametrize("repos, issues_files, expected", [
    pytest.param([{"repo_id": "o/a", "sha": None, "status": "declared_inconsistent", "reason": "stale"}],
                 ["o/a/model.safetensors"], [("o/a", "census: declared_inconsistent", "stale")],
                 id="census-flag-wins"),
    pytest.param([{"repo_id": "o/a", "sha": None, "status": "declared_consistent", "reason": "ok"}],
                 ["o/a/model.safetensors", "o/a/README.md"], [("o/a", "validation: digests.trainable_mismatch", "m")],
                 id="first-validation-error"),
])
def test_one_flag_per_repo(repos, issues_files, expected) -> None:
    from bnconvention.report_html.model import flagged_repos
    from bnconvention.validation.issues import new_issue

    issues = [new_issue("digests.trainable_mismatch", file=f, message="m") for f in issues_files]
    assert flagged_repos(repos, issues) == expected


# --- real models, coalesced ranges, the budget -----------------------------------------------------------------------


def _timm_weights(name: str) -> tuple[WeightsSet, list[str], int]:
    """A random-initialised timm model as timm saves it, the names of its running buffers, their bytes."""
    import timm

    from bnconvention.formats.digests import bn_layer_names, running_names_for_layer

    model = timm.create_model(name, pretrained=False)
    weights, _ = _weights(model)
    state = model.state_dict()
    names = [n for layer in bn_layer_names(model) for n in running_names_for_layer(layer, state)]
    return weights, names, sum(state[n].numel() * state[n].element_size() for n in names)


@pytest.mark.slow
def test_the_budget_covers_resnet50_in_a_few_dozen_requests() -> None:
    from bnconvention.hub.running import MAX_REQUESTS, RUNNING_CHECK_BYTES

    weights, names, running = _timm_weights("resnet50")
    assert running == 212_904  # 0.21 % of resnet50's 102.5 MB of weights
    ranges = plan_ranges(weights, names)
    planned = sum(r.end - r.start + 1 for r in ranges)
    assert sorted(n for r in ranges for n in r.tensors) == sorted(names)
    assert len(ranges) == 28 and planned == 261_288 <= RUNNING_CHECK_BYTES  # measured; the old budget was 16 KiB
    # without merging across gaps: each layer's mean/var pair, and the counters (some in runs)
    assert len(plan_ranges(weights, names, merge_gap=0)) == 54 <= MAX_REQUESTS


def test_beyond_max_requests_the_smallest_gaps_are_read_too() -> None:
    weights, names, running = _timm_weights("resnet18")
    spread = plan_ranges(weights, names, merge_gap=0)
    assert sum(r.end - r.start + 1 for r in spread) == running == 38_560 and len(spread) == 21
    capped = plan_ranges(weights, names, merge_gap=0, max_requests=5)
    assert len(capped) == 5 and sorted(n for r in capped for n in r.tensors) == sorted(names)
    header = weights.headers[0].header
    gaps = sorted(b.start - a.end - 1 for a, b in itertools.pairwise(spread))
    # closing the 16 smallest gaps is the cheapest way down to 5 requests
    assert sum(r.end - r.start + 1 for r in capped) == running + sum(gaps[:16])
    assert all(r.end < header.data_offset + header.data_size + 8 for r in capped)


@pytest.mark.slow
def test_a_timm_repush_keeping_the_card_is_declared_inconsistent(tmp_path) -> None:
    """A timm resnet18 release whose card declares its convention, then a re-push with new weights and the same card
    (a real workflow). Its running buffers are 38,560 bytes: over the old 16 KiB budget, the re-push was
    declared_consistent (the regression)."""
    import timm

    from bnconvention.authoring.card_stamp import stamp_card_text
    from bnconvention.hub.classify import classify_repo
    from bnconvention.hub.client import make_client
    from bnconvention.hubserver import LocalHub
    from bnconvention.standard.models import to_dict

    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False).eval()
    card = stamp_card_text("---\nlicense: mit\nlibrary_name: timm\n---\n# resnet18\n", to_dict(_record(model)))
    first = save({k: v.contiguous() for k, v in model.state_dict().items()})
    with torch.no_grad():
        model.train()
        model(torch.randn(4, 3, 64, 64))
    second = save({k: v.contiguous() for k, v in model.eval().state_dict().items()})
    with LocalHub(tmp_path / "hub", tokens={}, durable=False) as hub:
        client = make_client(endpoint=hub.endpoint)
        names = ["README.md", "model.safetensors"]
        release = hub.store.commit("lab/resnet18", files={"README.md": card.encode(), "model.safetensors": first})
        consistent = classify_repo(client, "lab/resnet18", sha=release.oid, filenames=names)
        repush = hub.store.commit("lab/resnet18", files={"README.md": card.encode(), "model.safetensors": second})
        hub.reset_stats()
        stale = classify_repo(client, "lab/resnet18", sha=repush.oid, filenames=names)
        sent = hub.bytes_sent(repo_id="lab/resnet18")
        old = classify_repo(client, "lab/resnet18", sha=repush.oid, filenames=names, running_check_bytes=16 * 1024)
    assert consistent.status == "declared_consistent"
    assert consistent.reason.endswith("running statistics match the declared digests (61344 bytes read)")
    assert stale.status == "declared_inconsistent"
    assert stale.reason.startswith("the declaration is stale: the running buffers of layer 'bn1' do not match")
    assert stale.checkpoints[0].findings[0].code == "digests.running_mismatch"
    assert sent < 0.002 * len(second)  # header, card and running ranges: 0.17 % of the weights
    assert old.status == "declared_consistent" and "running digests not checked (38560 bytes" in old.reason
