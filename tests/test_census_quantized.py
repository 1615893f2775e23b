"""Quantized checkpoints recognised from headers alone: activation sites in the weights or in a scales
file beside them, which the census sets apart instead of counting it as a checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save as save_numpy

from bnconvention.audit.census.run import discover_checkpoints
from bnconvention.formats.quantized import activation_sites, is_scales_file
from bnconvention.formats.safetensors_header import parse_header
from bnconvention.hub.classify import classify_checkpoint
from bnconvention.hub.headers import RemoteHeader, WeightsSet
from bnconvention.hub.quantized import describe_quantization, split_scales_files

ONE = np.ones(1, dtype=np.float32)
ZP = np.zeros(1, dtype=np.int64)


def _bn(**extra: np.ndarray) -> bytes:
    tensors = {"conv.weight": np.zeros((4, 1, 3, 3), dtype=np.float32), "bn.weight": np.ones(4, dtype=np.float32),
               "bn.bias": np.zeros(4, dtype=np.float32), "bn.running_mean": np.zeros(4, dtype=np.float32),
               "bn.running_var": np.ones(4, dtype=np.float32), "bn.num_batches_tracked": np.zeros((), np.int64)}
    return save_numpy({**tensors, **extra})


def _scales(*sites: str) -> bytes:
    return save_numpy({f"{s}.{leaf}": (ONE if leaf == "scale" else ZP) for s in sites for leaf in ("scale",
                                                                                                   "zero_point")})


def _weights(data: bytes, name: str) -> WeightsSet:
    length = int.from_bytes(data[:8], "little")
    header = parse_header(data[8:8 + length], data_size=len(data) - 8 - length)
    return WeightsSet(name=name, kind="single", headers=[RemoteHeader(filename=name, header=header,
                                                                      file_size=len(data), bytes_read=8 + length,
                                                                      requests=1)])


def test_sites_from_names_and_shapes() -> None:
    shapes = {"conv.weight": (4, 1, 3, 3), "conv.activation_post_process.min_val": (),
              "conv.activation_post_process.max_val": (), "activation_post_process_3.scale": (1,),
              "activation_post_process_3.zero_point": (1,), "layer.scale": (4,), "gamma.min_val": (),
              "gamma.max_val": ()}
    # a 4-element 'scale' (a LayerScale) and min/max buffers outside an observer are not sites
    assert activation_sites(shapes) == ["conv.activation_post_process", "activation_post_process_3"]
    assert not is_scales_file(shapes) and not is_scales_file({})
    assert is_scales_file({"a.activation_post_process.scale": (1,), "a.activation_post_process.zero_point": ()})


def test_a_scales_file_is_the_deployed_state_of_the_checkpoint_beside_it() -> None:
    weights = _weights(_bn(), "model.safetensors")
    scales = _weights(_scales("conv.activation_post_process", "bn.activation_post_process"),
                      "activation_scales.safetensors")
    other = _weights(_bn(), "sub/model.safetensors")
    checkpoints, found = split_scales_files([weights, scales, other])
    assert checkpoints == [weights, other] and found == [scales]
    report = classify_checkpoint(weights, card_record=None, card_bound=False, source="org/m")
    describe_quantization(report, weights, found)
    assert (report.activation_sites, report.scales_file) == (2, "activation_scales.safetensors")
    assert report.status == "undeclared"
    assert report.reason.endswith("; statically quantized: 2 activation sites in activation_scales.safetensors")
    elsewhere = classify_checkpoint(other, card_record=None, card_bound=False, source="org/m")
    describe_quantization(elsewhere, other, found)  # another folder: not its scales
    assert (elsewhere.activation_sites, elsewhere.scales_file) == (0, None)
    assert split_scales_files([scales]) == ([scales], [])  # nothing else to describe: kept


def test_observer_buffers_inside_the_weights() -> None:
    data = _bn(**{"conv.activation_post_process.min_val": np.zeros((), np.float32),
                  "conv.activation_post_process.max_val": np.ones((), np.float32)})
    weights = _weights(data, "model.safetensors")
    report = classify_checkpoint(weights, card_record=None, card_bound=False, source="org/m")
    describe_quantization(report, weights, [])
    assert report.activation_sites == 1 and report.reason.endswith("1 activation site in the weights")


def test_the_local_census_does_not_take_a_scales_file_for_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(_bn())
    (tmp_path / "activation_scales.safetensors").write_bytes(_scales("conv.activation_post_process"))
    assert discover_checkpoints([tmp_path]) == [tmp_path / "model.safetensors"]
