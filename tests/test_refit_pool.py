"""Pool reading: batch forms, validation messages, chunking; float64 moments with Chan's merge."""

from __future__ import annotations

import pytest
import torch

from bnconvention.errors import RefitError
from bnconvention.refitting.moments import ChannelMoments
from bnconvention.refitting.pool import PoolReader, materialize


@pytest.mark.parametrize("batch", [
    pytest.param(torch.ones(2, 3), id="tensor"),
    pytest.param((torch.ones(2, 3), torch.tensor([0, 1])), id="tuple-with-labels"),
    pytest.param([torch.ones(2, 3), "meta"], id="list"),
    pytest.param({"pixels": torch.ones(2, 3), "label": 1}, id="dict-with-input-key"),
])
def test_batch_forms(batch) -> None:
    reader = PoolReader([batch, batch], dtype=torch.float32, input_key="pixels")
    assert [x.tolist() for x in reader] == [[[1.0] * 3] * 2] * 2
    assert (reader.batch_sizes, reader.samples, reader.sample_shape) == ([2, 2], 4, (3,))


def test_generator_pools_are_read_once_and_lazily() -> None:
    seen = []

    def pool():
        for i in range(3):
            seen.append(i)
            yield torch.full((2, 1), float(i))

    reader = PoolReader(pool(), dtype=torch.float32)
    assert seen == []
    assert [x[0, 0].item() for x in reader] == [0.0, 1.0, 2.0]


def test_dict_value_must_be_a_tensor() -> None:
    with pytest.raises(RefitError, match=r"pool batch 0\['input'\] is a list, not a tensor"):
        list(PoolReader([{"input": [1.0, 2.0]}], dtype=torch.float32))


def test_empty_tuple_batch() -> None:
    with pytest.raises(RefitError, match="pool batch 0 is an empty tuple"):
        list(PoolReader([()], dtype=torch.float32))


def test_materialize_keeps_batches_or_recuts() -> None:
    pool = [torch.arange(6.0).reshape(3, 2), torch.arange(6.0, 10.0).reshape(2, 2)]
    assert [c.shape[0] for c in materialize(PoolReader(pool, dtype=torch.float32))] == [3, 2]
    chunks = materialize(PoolReader(pool, dtype=torch.float32), chunk_size=2)
    assert [c.shape[0] for c in chunks] == [2, 2, 1]
    assert torch.equal(torch.cat(chunks), torch.arange(10.0).reshape(5, 2))


def test_materialize_empty_pool() -> None:
    with pytest.raises(RefitError, match="the pool yielded no batches"):
        materialize(PoolReader(iter([]), dtype=torch.float32))


# Measured (tests/helpers/measure_refit_errors.py, moments/*: this seed and 30 others, every setting): float32 mean 0,
# variance 2.3e-8; float64 mean 4.3e-16, variance 4.9e-15 (relative).
@pytest.mark.parametrize(("dtype", "mean_rtol", "var_rtol"), [
    pytest.param(torch.float32, 1e-9, 1e-7, id="float32-activations"),
    pytest.param(torch.float64, 1e-13, 1e-12, id="float64-activations"),
])
def test_moments_chan_merge_equals_one_shot_float64(dtype, mean_rtol, var_rtol) -> None:
    # mean/std = 33: raw float32 sums of squares would lose about 10 bits here
    data = (torch.randn(50, 3, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
            + 100).to(dtype)
    moments = ChannelMoments()
    for chunk in data.split([1, 7, 30, 12]):
        moments.update(chunk)
    mean, var = moments.mean_and_unbiased_var()
    columns = data.double().transpose(0, 1).reshape(3, -1)
    assert moments.count == 50 * 16 and mean.dtype == var.dtype == torch.float64
    torch.testing.assert_close(mean, columns.mean(dim=1), rtol=mean_rtol, atol=0.0)
    torch.testing.assert_close(var, columns.var(dim=1, unbiased=True), rtol=var_rtol, atol=0.0)


def test_moments_need_two_values() -> None:
    moments = ChannelMoments()
    moments.update(torch.ones(1, 2))
    with pytest.raises(ValueError, match="at least 2 values per channel, got 1"):
        moments.mean_and_unbiased_var()


def test_single_value_layer_is_a_refit_error() -> None:
    from bnconvention.refitting import refit

    model = torch.nn.Sequential(torch.nn.BatchNorm1d(2))
    with pytest.raises(RefitError, match="BatchNorm layer '0' saw 1 value per channel over the whole pool"):
        refit(model, [torch.ones(1, 2)])


def test_moments_blocks_within_a_chunk_merge_exactly(monkeypatch) -> None:
    from bnconvention.refitting import moments as moments_module

    data = torch.randn(13, 4, 3, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 2 - 7
    whole = ChannelMoments()
    whole.update(data)
    monkeypatch.setattr(moments_module, "_BLOCK_ELEMENTS", 2 * 4 * 15)  # two samples per block: 7 blocks
    blocked = ChannelMoments()
    blocked.update(data)
    assert len(blocked._counts) == 7 and len(whole._counts) == 1
    # measured on this data and 200 other seeds (OMP_NUM_THREADS=1/2, ATEN_CPU_CAPABILITY=default): blocked vs whole
    # 3.9e-16 (mean) and 4.4e-16 (variance), against torch.var 1.5e-15, relative
    for got, expected in zip(blocked.mean_and_unbiased_var(), whole.mean_and_unbiased_var(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-13, atol=0.0)
    columns = data.transpose(0, 1).reshape(4, -1)
    torch.testing.assert_close(blocked.mean_and_unbiased_var()[1], columns.var(dim=1), rtol=1e-13, atol=0.0)
