"""Tensor digests (bnconvention.formats.digests): the documented algorithm, memory vs file agreement, the running
split."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bnconvention.errors import DigestMismatchError
from bnconvention.formats.digests import (
    TensorSetDigest,
    bn_layer_names,
    bn_layers_from_tensor_names,
    file_digests,
    model_digests,
    state_dict_digests,
)


def reference_digest(tensors: dict[str, tuple[str, list[int], bytes]]) -> str:
    """The algorithm as docs/standard.md states it, written independently of the library."""
    h = hashlib.sha256(b"bnconvention-tensors/1\n")
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        dtype, shape, data = tensors[name]
        entry = json.dumps({"dtype": dtype, "name": name, "shape": shape}, separators=(",", ":")).encode()
        h.update(struct.pack("<Q", len(entry)) + entry + struct.pack("<Q", len(data)) + data)
    return h.hexdigest()


def test_matches_the_documented_algorithm() -> None:
    state = {"w": torch.tensor([1.0, -2.0]), "bn.running_mean": torch.tensor([0.5]),
             "bn.running_var": torch.tensor([2.0]), "bn.num_batches_tracked": torch.tensor(3)}
    digests = state_dict_digests(state, ["bn"])
    assert digests.trainable_sha256 == reference_digest({"w": ("F32", [2], struct.pack("<2f", 1.0, -2.0))})
    running = {"bn.running_mean": ("F32", [1], struct.pack("<f", 0.5)),
               "bn.running_var": ("F32", [1], struct.pack("<f", 2.0)),
               "bn.num_batches_tracked": ("I64", [], struct.pack("<q", 3))}
    assert digests.running_sha256 == reference_digest(running)
    assert digests.layer_running_sha256 == {"bn": reference_digest(running)}
    assert (digests.trainable_count, digests.running_count) == (1, 3)


def test_empty_set_digest_is_the_prefix_hash() -> None:
    assert TensorSetDigest().hexdigest() == hashlib.sha256(b"bnconvention-tensors/1\n").hexdigest()


DTYPES = [
    pytest.param(torch.float32, id="f32"), pytest.param(torch.float64, id="f64"),
    pytest.param(torch.float16, id="f16"), pytest.param(torch.bfloat16, id="bf16"),
    pytest.param(torch.int64, id="i64"), pytest.param(torch.int8, id="i8"), pytest.param(torch.uint8, id="u8"),
    pytest.param(torch.bool, id="bool"),
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_and_file_agree_across_dtypes(tmp_path: Path, dtype: torch.dtype) -> None:
    state = {
        "full": (torch.arange(12).reshape(3, 4) % 3).to(dtype),
        "scalar": torch.tensor(1).to(dtype),
        "empty": torch.zeros(0, 5).to(dtype),
        "bn.running_mean": torch.tensor([0.25, 4.0]), "bn.running_var": torch.tensor([1.0, 9.0]),
        "bn.num_batches_tracked": torch.tensor(7),
    }
    path = tmp_path / "m.safetensors"
    save_file(state, str(path))
    memory = state_dict_digests(state, ["bn"])
    disk = file_digests(path)  # layers recognised from the header's tensor names
    assert disk == memory


def test_order_independent(tmp_path: Path) -> None:
    a = {"x": torch.ones(2), "y": torch.zeros(3), "bn.running_mean": torch.ones(2), "bn.running_var": torch.ones(2)}
    b = dict(reversed(list(a.items())))
    assert state_dict_digests(a, ["bn"]) == state_dict_digests(b, ["bn"])


def test_non_contiguous_tensor_digests_like_its_copy() -> None:
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert state_dict_digests({"t": base.t()}, []) == state_dict_digests({"t": base.t().contiguous()}, [])


def test_running_split_and_model_digests(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2), torch.nn.GroupNorm(1, 2),
                                torch.nn.BatchNorm2d(2, track_running_stats=False))
    assert bn_layer_names(model) == ["1", "3"]
    digests = model_digests(model)
    assert digests.running_count == 3  # 1.running_mean, 1.running_var, 1.num_batches_tracked
    assert digests.trainable_count == 8  # conv w/b, bn1 w/b, gn w/b, bn3 w/b
    assert digests.layer_running_sha256["3"] is None
    # changing a running buffer changes only the running digests
    before = digests
    with torch.no_grad():
        model[1].running_mean += 1
    after = model_digests(model)
    assert after.trainable_sha256 == before.trainable_sha256
    assert after.running_sha256 != before.running_sha256
    # the same model saved to a file gives the same digests
    path = tmp_path / "m.safetensors"
    save_file(model.state_dict(), str(path))
    assert file_digests(path, bn_layers=bn_layer_names(model)) == after


def test_group_norm_has_no_running_digest() -> None:
    digests = model_digests(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.GroupNorm(1, 2)))
    assert digests.running_sha256 is None
    assert digests.layer_running_sha256 == {}


def test_bn_layers_from_tensor_names() -> None:
    shapes = {"a.running_mean": (4,), "a.running_var": (4,), "b.running_mean": (4,), "b.running_var": (3,),
              "c.running_mean": (2, 2), "c.running_var": (2, 2), "running_mean": (1,), "running_var": (1,),
              "d.running_var": (4,)}
    assert bn_layers_from_tensor_names(shapes) == ["a", ""]


def test_out_of_order_add_is_refused() -> None:
    digest = TensorSetDigest()
    digest.add("b", "F32", (0,), b"")
    with pytest.raises(ValueError, match="out of canonical order"):
        digest.add("a", "F32", (0,), b"")


def test_check_against_names_the_field() -> None:
    digests = state_dict_digests({"w": torch.ones(1)}, [])
    digests.check_against(trainable_sha256=digests.trainable_sha256, running_sha256=None)
    with pytest.raises(DigestMismatchError) as info:
        digests.check_against(trainable_sha256="0" * 64, running_sha256=None)
    assert info.value.field == "digests.trainable_sha256"
    assert info.value.found == digests.trainable_sha256


@pytest.mark.parametrize("piece", [1, 7, 64, 1 << 20])
def test_the_digest_in_pieces_is_the_digest_of_the_tensors(piece: int) -> None:
    # the θ witness hashes in pieces so that the caller can take over from its background thread
    import torch

    from bnconvention.formats.digests import tensor_digest_steps

    state = {"b.weight": torch.arange(10.0), "a": torch.tensor([True, False]), "empty": torch.zeros(0, 3),
             "c.h": torch.tensor([1.0, -0.0], dtype=torch.float16), "d": torch.arange(6).reshape(2, 3).t()}
    steps = tensor_digest_steps(state, piece=piece)
    hashed = []
    while True:
        try:
            hashed.append(next(steps))
        except StopIteration as done:
            result = done.value
            break
    assert result == state_dict_digests(state, []).trainable_sha256
    assert max(hashed) <= piece and sum(hashed) == sum(t.numel() * t.element_size() for t in state.values())
