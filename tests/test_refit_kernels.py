"""The layer-major pass's faster kernels compute exactly, bit for bit, what the model's own modules do."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from bnconvention.refitting import refit, running_state
from bnconvention.refitting.kernels import MIN_CHANNELS, exact_fast_module


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def _awkward_input(seed: int) -> torch.Tensor:
    """Small integers (many ties), zeros of both signs and NaNs: where a kernel's visiting order could show."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, (6, MIN_CHANNELS, 11, 13), generator=generator).float()
    zeros = x == 0
    x[zeros] = torch.where(torch.rand(int(zeros.sum()), generator=generator) < 0.5, -0.0, 0.0)
    x[x == -2] = -0.0
    x.view(-1)[::97] = float("nan")
    return x


@pytest.mark.parametrize("pool", [
    pytest.param(nn.MaxPool2d(3, 2, 1), id="resnet-stem"),
    pytest.param(nn.MaxPool2d(2), id="2x2"),
    pytest.param(nn.MaxPool2d(3, 1, 1, dilation=2, ceil_mode=True), id="dilated-ceil"),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_fast_max_pool_is_bit_identical(pool: nn.Module, seed: int) -> None:
    x = _awkward_input(seed)
    fast = exact_fast_module(pool)
    assert fast is not pool
    got, expected = fast(x), pool(x)
    assert got.is_contiguous() and got.shape == expected.shape
    assert torch.equal(_bits(got), _bits(expected))


def test_modules_without_an_exact_fast_kernel_are_returned_as_they_are() -> None:
    class MyPool(nn.MaxPool2d):
        pass

    for module in (nn.MaxPool2d(2, return_indices=True), MyPool(2), nn.AvgPool2d(2), nn.Conv2d(3, 3, 1)):
        assert exact_fast_module(module) is module


class _PoolNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, MIN_CHANNELS, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(MIN_CHANNELS)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(MIN_CHANNELS, 4, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(self.pool(torch.relu(self.bn1(self.conv(x))))))


def test_traced_pass_pools_channels_last_with_the_result_of_the_eval_forward() -> None:
    torch.manual_seed(0)
    base = _PoolNet()
    pool = list((torch.randn(12, 3, 9, 9, generator=torch.Generator().manual_seed(1)) * 2 + 0.5).split([5, 7]))
    traced, hooked = copy.deepcopy(base), copy.deepcopy(base)
    layouts: list[bool] = []
    traced.pool.register_forward_pre_hook(
        lambda _m, args: layouts.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    refit(traced, pool, method="traced")
    refit(hooked, pool, method="hooks")  # the model's own forwards: NCHW pooling
    assert layouts == [True, True]  # the traced pass ran the pool on channels-last copies, once per chunk
    for name, state in running_state(hooked).items():
        got = running_state(traced)[name]
        assert torch.equal(got.mean, state.mean) and torch.equal(got.var, state.var), name


def _moments_bits(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from bnconvention.refitting.moments import ChannelMoments

    moments = ChannelMoments()
    for chunk in x.split(50):
        moments.update(chunk)
    mean, var = moments.mean_and_unbiased_var()
    return mean.view(torch.int64), var.view(torch.int64)


@pytest.mark.parametrize("shape", [
    pytest.param((130, 64, 16, 16), id="many-positions"),
    pytest.param((130, 48, 5, 7), id="odd-positions"),
    pytest.param((130, 512, 2, 2), id="few-positions"),
])
def test_statistics_on_one_thread_are_the_statistics_on_several(shape: tuple[int, ...],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # under OMP_WAIT_POLICY=passive the statistics' small reductions run on one intra-op
    # thread, because waking a second one for every ~1 MiB block cost more than it saved; the thread count must
    # change no bit of the result
    import contextlib

    from bnconvention.refitting import moments

    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 3.0 + 1.5
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")  # where the count is lowered (read at each update)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, 3))
    try:
        seen: list[int] = []
        original = moments.ChannelMoments._add_blocks

        def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(torch.get_num_threads())
            return original(self, *args, **kwargs)

        monkeypatch.setattr(moments.ChannelMoments, "_add_blocks", spy)
        one = _moments_bits(x)
        assert set(seen) == ({1} if torch._C.has_openmp else {max(threads, 3)})
        assert torch.get_num_threads() == max(threads, 3)  # restored after every block of reductions
        monkeypatch.setattr(moments, "_one_cpu_thread", lambda _x: contextlib.nullcontext())
        several = _moments_bits(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one[0], several[0]) and torch.equal(one[1], several[1])


def test_statistics_keep_the_thread_count_when_idle_threads_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    from bnconvention.refitting import moments

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen: list[int] = []
    original = moments.ChannelMoments._add_blocks

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(moments.ChannelMoments, "_add_blocks", spy)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        moments.ChannelMoments().update(torch.randn(4, 3, 5, 5))
    finally:
        torch.set_num_threads(threads)
    assert seen == [2]
