"""Faster kernels for the layer-major pass where the choice of kernel cannot change a single bit of the result.

Max pooling picks one input value per window: its output is a copy of an input element, whatever order the kernel
visits the window in, so its bits do not depend on the memory layout it runs in (ties are equal values; NaN
propagates in both kernels). PyTorch's CPU ``max_pool2d`` is far slower on channels-first (NCHW) tensors than on
channels-last ones. Measured (torch 2.14, 2 threads, ``OMP_WAIT_POLICY=PASSIVE``): ResNet-18's stem pool on a
(128, 64, 16, 16) chunk took 12.4 ms NCHW and 1.9 ms converted to channels-last, pooled and converted back, ten
times per pass over 512 images: 0.18x of an eval forward saved, more than the statistics cost. With few channels
(3) the conversion costs more than it saves, hence :data:`MIN_CHANNELS`. The output is converted back to the
layout an eval forward would give, so every later node sees the same tensors as in an eval forward; the test
``tests/test_refit_kernels.py`` checks the bits on ties, signed zeros and NaN.

Convolutions, average pooling and every summing kernel are left alone: a different layout sums in a different
order and rounds differently, so the statistics would no longer be those of the eval forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# Below this many channels a channels-last copy costs more than the NCHW pooling it replaces (measured: 3 channels,
# (128, 3, 32, 32): 3.2 ms NCHW, 4.2 ms through channels-last).
MIN_CHANNELS = 16

__all__ = ["MIN_CHANNELS", "exact_fast_module"]


def exact_fast_module(module: torch.nn.Module) -> Callable[..., Any]:
    """``module`` itself, or a callable computing exactly its output faster (a max pool without indices)."""
    if type(module) is torch.nn.MaxPool2d and not module.return_indices:
        return lambda x, *rest: _pool_channels_last(module, x, *rest)
    return module


def _pool_channels_last(module: torch.nn.Module, x: Any, *rest: Any) -> Any:
    if (rest or not isinstance(x, torch.Tensor) or x.device.type != "cpu" or x.dim() != 4
            or x.shape[1] < MIN_CHANNELS or not x.is_contiguous()):
        return module(x, *rest)
    return module(x.contiguous(memory_format=torch.channels_last)).contiguous()
