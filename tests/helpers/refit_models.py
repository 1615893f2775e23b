"""Tiny models and a naive exact-refit reference for ``tests/test_refit*.py``.

The reference is deliberately the obvious algorithm: for each BatchNorm layer in forward order, run *full* eval-mode
forwards over the whole pool, capture the layer's input, concatenate everything as float64 and compute the mean and
``sum((x - mean)**2) / (n - 1)``; write it and move to the next layer.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


class SmallConvNet(nn.Module):
    """Conv-BN-ReLU twice with a residual add, dropout, a BatchNorm1d head: the common shapes in a few channels."""

    def __init__(self, *, channels: int = 4, classes: int = 3, dropout: float = 0.5) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels, eps=1e-3, momentum=None)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(channels, 8)
        self.bn3 = nn.BatchNorm1d(8, affine=False)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        y = self.drop(y.mean(dim=(2, 3)))
        return self.head(self.bn3(self.fc(y)))


class SequenceNet(nn.Module):
    """BatchNorm1d on 3-D input (N, C, L), then a 3-D BatchNorm on a reshaped volume, and a SyncBatchNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm1d(4, momentum=0.3)
        self.conv3d = nn.Conv3d(1, 2, 3, padding=1)
        self.bn3d = nn.BatchNorm3d(2)
        self.sync = nn.SyncBatchNorm(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))  # (N, 4, 8)
        v = y.reshape(y.shape[0], 1, 4, 2, 4)
        v = self.bn3d(self.conv3d(v))
        return self.sync(v * 2.0 + 1.0)


class GroupNormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))


class LayerNormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 6)
        self.norm = nn.LayerNorm(6)
        self.fc2 = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.fc1(x)))


class ControlFlowNet(nn.Module):
    """Data-dependent Python control flow: torch.fx cannot trace it, so the exact rule falls back to hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn1(self.conv(x))
        if float(y.abs().sum()) >= 0:  # always true, but only known at run time
            y = torch.relu(y) * 1.5
        return self.bn2(y)


class OrderFlipNet(nn.Module):
    """The order of its BatchNorm layers depends on the sign of the input mean: the exact rule is undefined."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.BatchNorm1d(3)
        self.b = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.mean()) > 0:
            return self.b(self.a(x))
        return self.a(self.b(x))


class SharedBatchNormNet(nn.Module):
    """One BatchNorm module called twice per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(self.bn(x)))


class UnusedBatchNormNet(nn.Module):
    """A BatchNorm layer the forward never calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.used = nn.BatchNorm1d(3)
        self.unused = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(self.fc(x))


class WeightWritingNet(nn.Module):
    """A forward that changes a non-BatchNorm buffer (a call counter): the trainable digest must catch it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1.0)
        return self.bn(self.fc(x))


class ExactArithmeticNet(nn.Module):
    """Two BatchNorm layers whose inputs are exact in float32 on an :func:`exact_pool`, so that an exact refit is
    the same bytes on every CPU and for every power-of-two batching of that pool.

    ``bn2d`` normalizes the input itself; ``bn1d`` the output of a Linear with weights in {-1, 0, 1} on two input
    channels at one pixel (integers of at most 4 bits, summed exactly by any BLAS kernel). The branches are
    parallel: no BatchNorm input passes through another layer's (inexact) normalization.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bn2d = nn.BatchNorm2d(3)
        self.fc = nn.Linear(2, 3, bias=False)
        self.bn1d = nn.BatchNorm1d(3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[1.0, -1.0], [0.0, 1.0], [1.0, 1.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2d(x).mean(dim=(1, 2, 3)) + self.bn1d(self.fc(x[:, :2, 0, 0])).sum(dim=1)


def exact_pool(samples: int = 64, *, seed: int = 5) -> torch.Tensor:
    """``samples`` inputs of shape (3, 4, 4) for :class:`ExactArithmeticNet`, integers in [-2, 4].

    Every sample's every channel has positional mean exactly 1 (values ``1 + w`` and ``1 - w`` in pairs), so the
    moments' shift (the first block's mean) is 1 whatever the batching and every deviation and square is a small
    integer. For ``bn1d`` (one position, inputs of at most 4 bits) the shift is a multiple of 1/64 when the first
    batch has a power-of-two size, so its deviations have at most 11 bits and their squares at most 22: every sum
    is exact in float32 and float64, and with a power-of-two pool size so is every division but the last
    ``M2 / (n - 1)``, which is one correctly rounded operation on identical operands.
    """
    generator = torch.Generator().manual_seed(seed)
    half = torch.randint(-3, 4, (samples, 3, 8), generator=generator).float()
    return (1.0 + torch.cat([half, -half], dim=2)).reshape(samples, 3, 4, 4)


def seeded(model_cls: type[nn.Module], seed: int = 0, **kwargs: object) -> nn.Module:
    torch.manual_seed(seed)
    return model_cls(**kwargs)


def make_pool(shape: tuple[int, ...], sizes: list[int], *, seed: int = 1, mean: float = 0.5,
              std: float = 2.0) -> list[torch.Tensor]:
    """Batches of the given sizes with per-sample ``shape`` (not zero-mean, so the mean matters)."""
    generator = torch.Generator().manual_seed(seed)
    data = torch.randn((sum(sizes), *shape), generator=generator) * std + mean
    return list(data.split(sizes))


def forward_order(model: nn.Module, x: torch.Tensor) -> list[str]:
    """BatchNorm layers with running statistics in the order one eval forward calls them."""
    names = {m: n for n, m in model.named_modules() if isinstance(m, _BatchNorm) and m.running_mean is not None}
    order: list[str] = []
    hooks = [m.register_forward_pre_hook(lambda mod, args: order.append(names[mod])) for m in names]
    was = model.training
    model.eval()
    with torch.no_grad():
        model(x)
    model.train(was)
    for h in hooks:
        h.remove()
    return list(dict.fromkeys(order))


def reference_exact(model: nn.Module, pool: list[torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Naive sequential layerwise exact refit of a deep copy; returns float64 (mean, unbiased var) per layer."""
    model = copy.deepcopy(model).eval()
    modules = dict(model.named_modules())
    result: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in forward_order(model, pool[0]):
        layer = modules[name]
        captured: list[torch.Tensor] = []
        hook = layer.register_forward_pre_hook(lambda mod, args, into=captured: into.append(args[0].detach().double()))
        with torch.no_grad():
            for x in pool:
                model(x)
        hook.remove()
        columns = torch.cat([c.transpose(0, 1).reshape(c.shape[1], -1) for c in captured], dim=1)
        n = columns.shape[1]
        mean = columns.sum(dim=1) / n
        var = ((columns - mean[:, None]) ** 2).sum(dim=1) / (n - 1)
        with torch.no_grad():
            layer.running_mean.copy_(mean)
            layer.running_var.copy_(var)
        result[name] = (mean, var)
    return result
