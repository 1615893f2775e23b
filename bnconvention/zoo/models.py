"""The zoo's architectures: a small 4-conv network on 1×16×16 digits with BatchNorm, and its GroupNorm twin.

Both have the same layout and the same tensor names except for the normalization layers' buffers: the GroupNorm
twin has the same affine ``weight``/``bias`` at the same names but no running statistics (channel absent), so a
refit is the identity on it. They are registered as ``zoo/convnet-bn`` and ``zoo/convnet-gn`` in
:mod:`bnconvention.architectures.factories`.

>>> model = convnet_bn()
>>> [name for name, _ in model.named_modules() if type(_).__name__ == "BatchNorm2d"]
['features.1', 'features.4', 'features.8', 'features.11']
>>> sorted(convnet_gn().state_dict()) == sorted(k for k in model.state_dict() if "running" not in k
...                                             and "num_batches" not in k)
True
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import torch
from torch import nn

from bnconvention.errors import UsageError

NormKind: TypeAlias = Literal["bn", "gn"]


def _norm(kind: NormKind, channels: int, groups: int) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    return nn.GroupNorm(num_groups=min(groups, channels), num_channels=channels)


class ConvNet(nn.Module):
    """conv-norm-ReLU ×2, max-pool, conv-norm-ReLU ×2, global average pool, linear head.

    Layout of ``features`` (indices are the module names): 0 conv, 1 norm, 2 ReLU, 3 conv, 4 norm, 5 ReLU,
    6 max-pool 2×2, 7 conv, 8 norm, 9 ReLU, 10 conv, 11 norm, 12 ReLU. ``head`` is the classifier.
    """

    def __init__(self, *, norm: NormKind, in_channels: int = 1, num_classes: int = 10, width: int = 16,
                 groups: int = 4) -> None:
        super().__init__()
        if norm not in ("bn", "gn"):
            raise UsageError(f"ConvNet norm must be 'bn' or 'gn', got {norm!r}")
        for label, value in (("in_channels", in_channels), ("num_classes", num_classes), ("width", width),
                             ("groups", groups)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"ConvNet {label} must be a positive integer, got {value!r}")
        wide = 2 * width
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False), _norm(norm, width, groups), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), _norm(norm, width, groups), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, wide, 3, padding=1, bias=False), _norm(norm, wide, groups), nn.ReLU(),
            nn.Conv2d(wide, wide, 3, padding=1, bias=False), _norm(norm, wide, groups), nn.ReLU(),
        )
        self.head = nn.Linear(wide, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def convnet_bn(*, in_channels: int = 1, num_classes: int = 10, width: int = 16) -> ConvNet:
    """The BatchNorm ConvNet of the zoo (factory ``zoo/convnet-bn``), randomly initialised."""
    return ConvNet(norm="bn", in_channels=in_channels, num_classes=num_classes, width=width)


def convnet_gn(*, in_channels: int = 1, num_classes: int = 10, width: int = 16, groups: int = 4) -> ConvNet:
    """The GroupNorm twin (factory ``zoo/convnet-gn``): same layout, no running statistics."""
    return ConvNet(norm="gn", in_channels=in_channels, num_classes=num_classes, width=width, groups=groups)
