"""Read a refit pool: any iterable of batches, checked one by one.

A batch is a tensor of inputs, a tuple or list whose first item is the input tensor (labels and the rest are
ignored, as in ``torch.optim.swa_utils.update_bn``), or a mapping with the input under ``input_key``. Every input
must be a floating tensor of the model's dtype with at least one sample, and every batch must have the per-sample
shape of the first one. Violations raise :class:`~bnconvention.errors.RefitError` naming the batch.

>>> import torch
>>> reader = PoolReader([torch.zeros(2, 3), (torch.zeros(1, 3), "labels")], dtype=torch.float32)
>>> [tuple(x.shape) for x in reader], reader.batch_sizes
([(2, 3), (1, 3)], [2, 1])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from bnconvention.errors import RefitError, UnsupportedModelError


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def extract_input(item: Any, *, index: int, input_key: str) -> torch.Tensor:
    """The input tensor of one pool item (a tensor, a tuple/list led by the input, or a mapping)."""
    if isinstance(item, torch.Tensor):
        return item
    if isinstance(item, (tuple, list)):
        if not item:
            raise RefitError(f"pool batch {index} is an empty {type(item).__name__}; a tuple or list batch must "
                             "start with the input tensor, e.g. (inputs, labels)")
        first = item[0]
        if not isinstance(first, torch.Tensor):
            raise RefitError(f"pool batch {index} is a {type(item).__name__} whose first item is {_describe(first)}; "
                             "the first item must be the input tensor, e.g. (inputs, labels)")
        return first
    if isinstance(item, Mapping):
        if input_key not in item:
            keys = sorted(str(k) for k in item)
            raise RefitError(f"pool batch {index} is a mapping without the key {input_key!r} (keys: {keys}); "
                             "pass input_key= naming the entry that holds the input tensor")
        value = item[input_key]
        if not isinstance(value, torch.Tensor):
            raise RefitError(f"pool batch {index}[{input_key!r}] is {_describe(value)}, not a tensor; convert it "
                             "with torch.as_tensor in the pool")
        return value
    raise RefitError(f"pool batch {index} is {_describe(item)}; a batch must be a tensor, a tuple/list whose first "
                     "item is the input tensor, or a mapping with the input under input_key")


class PoolReader:
    """Iterate the validated input tensors of ``pool``, moved to ``device``, recording each batch size.

    ``min_batch_size`` is 2 for the train-mode rules: a training-mode BatchNorm forward normalizes a batch by its
    own statistics, and a single sample has none (``BatchNorm1d`` raises, the others fit a one-image batch).
    The reader can be iterated once; errors raised by the pool's own iterator propagate unchanged.
    """

    def __init__(self, pool: Any, *, dtype: torch.dtype, input_key: str = "input",
                 device: torch.device | None = None, min_batch_size: int = 1) -> None:
        if isinstance(pool, torch.Tensor):
            raise RefitError(f"the pool is a single tensor of shape {tuple(pool.shape)}; pass an iterable of "
                             "batches, e.g. [inputs] or inputs.split(128)")
        if isinstance(pool, (str, bytes, Mapping)):
            raise RefitError(f"the pool is {_describe(pool)}; pass an iterable of batches (tensors, (input, label) "
                             "tuples or dicts), e.g. a DataLoader")
        try:
            self._iterator = iter(pool)
        except TypeError:
            raise RefitError(f"the pool is {_describe(pool)}, which is not iterable; pass an iterable of batches, "
                             "e.g. a DataLoader or a list of tensors") from None
        self.dtype = dtype
        self.input_key = input_key
        self.device = device
        self.min_batch_size = min_batch_size
        self.batch_sizes: list[int] = []
        self.sample_shape: tuple[int, ...] | None = None

    def __iter__(self) -> Iterator[torch.Tensor]:
        for index, item in enumerate(self._iterator):
            yield self._check(extract_input(item, index=index, input_key=self.input_key), index)

    def _check(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if x.dim() < 1 or x.shape[0] == 0:
            raise RefitError(f"pool batch {index} is {_describe(x)} with no samples; every batch needs a leading "
                             "batch dimension with at least one sample")
        if not x.is_floating_point() or x.dtype != self.dtype:
            hint = "convert the pool (e.g. x.float() / 255 for uint8 images)" if not x.is_floating_point() else (
                f"convert the pool with x.to({self.dtype})")
            raise RefitError(f"pool batch {index} has dtype {x.dtype} but the model computes in {self.dtype}; {hint}")
        sample_shape = tuple(x.shape[1:])
        if self.sample_shape is None:
            self.sample_shape = sample_shape
        elif sample_shape != self.sample_shape:
            raise RefitError(f"pool batch {index} has samples of shape {sample_shape} but batch 0 had "
                             f"{self.sample_shape}; every batch must hold inputs of the same shape")
        if x.shape[0] < self.min_batch_size:
            raise RefitError(f"pool batch {index} has {x.shape[0]} sample; train-mode BatchNorm normalizes a batch "
                             "by its own statistics and one sample has none; drop the short batch "
                             "(DataLoader(drop_last=True)) or use rule='exact', which does not depend on batches")
        self.batch_sizes.append(int(x.shape[0]))
        if self.device is not None and x.device != self.device:
            x = x.to(self.device)
        return x

    @property
    def samples(self) -> int:
        return sum(self.batch_sizes)


def materialize(reader: PoolReader, *, chunk_size: int | None = None) -> list[torch.Tensor]:
    """Every input of the pool as a list of chunks: the pool's own batches, or ``chunk_size`` samples each."""
    chunks = list(reader)
    if not chunks:
        raise RefitError("the pool yielded no batches; pass at least one batch of inputs")
    if chunk_size is None:
        return chunks
    return list(torch.cat(chunks).split(chunk_size))


def run_forward(model: Any, x: torch.Tensor, *, where: str,
                passthrough: tuple[type[BaseException], ...] = ()) -> None:
    """``model(x)``, with a failure of the model's own forward reported as a :class:`RefitError` naming ``where``
    (e.g. "pool batch 3"). Our own errors and the ``passthrough`` exception types propagate unchanged."""
    propagate: tuple[type[BaseException], ...] = (RefitError, UnsupportedModelError, *passthrough)
    try:
        model(x)
    except propagate:
        raise
    except Exception as exc:  # noqa: BLE001 - the model's own forward failed on this input
        raise RefitError(f"the model's forward failed on {where} (input {tuple(x.shape)}, {x.dtype}): "
                         f"{type(exc).__name__}: {exc}; check that the pool holds the inputs the model expects"
                         ) from exc
