"""Training and unlearning methods of the zoo, as public functions over tensors.

Every method modifies ``model`` in place, draws all randomness from the ``generator`` it is given (batch order,
augmentation, random labels), and calls ``observer.set_split(tag)`` before each batch when the observer has that
method (the recorder uses it to attribute buffer updates to "train", "retain" or "forget").

``bn_mode`` says how BatchNorm layers run while the weights are updated, which decides which failure mode (Kalani
et al., docs/statistics.md#references) a method exhibits: ``"train"`` (forwards update the running statistics: BN
*corruption* when the data is the forget set) or ``"eval"`` (running statistics frozen while the weights drift: BN
*misalignment*). GroupNorm has no running statistics, so the mode changes nothing there.

>>> import torch
>>> from bnconvention.zoo.models import convnet_bn
>>> model = convnet_bn(width=4)
>>> x, y = torch.rand(8, 1, 16, 16), torch.arange(8) % 10
>>> 0.0 <= accuracy(model, x, y) <= 1.0
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeAlias

import torch
import torch.nn.functional as F
from torch import nn

from bnconvention.errors import UsageError

BnMode: TypeAlias = Literal["train", "eval"]
Transform: TypeAlias = Callable[..., torch.Tensor]
Progress: TypeAlias = Callable[[int], Any]  # called with the number of batches just done

_BN_TYPES = (nn.modules.batchnorm._BatchNorm,)


def set_bn_mode(model: nn.Module, bn_mode: BnMode) -> None:
    """Put ``model`` in training mode, then its BatchNorm layers in ``bn_mode`` (``eval`` freezes their buffers)."""
    if bn_mode not in ("train", "eval"):
        raise UsageError(f"bn_mode must be 'train' or 'eval', got {bn_mode!r}")
    model.train()
    if bn_mode == "eval":
        for module in model.modules():
            if isinstance(module, _BN_TYPES):
                module.eval()


def _tag(observer: Any, split: str) -> None:
    set_split = getattr(observer, "set_split", None)
    if callable(set_split):
        set_split(split)


def _batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Index batches of a random permutation; the last one may be short but never has a single sample."""
    order = torch.randperm(n, generator=generator)
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] == 1:  # a batch of one crashes train-mode BN: merge it
        starts.pop()
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else n
        yield order[start:end]


def batches_per_epoch(n: int, batch_size: int) -> int:
    """How many batches one epoch over ``n`` records has (a trailing batch of one is merged into the previous).

    >>> batches_per_epoch(129, 64), batches_per_epoch(130, 64)
    (2, 3)
    """
    count = -(-n // batch_size)
    return count - 1 if count > 1 and n % batch_size == 1 else count


def _check(x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    if x.ndim != 4 or x.dtype != torch.float32:
        raise UsageError(f"inputs must be a float32 N×C×H×W tensor, got dtype {x.dtype} and shape {tuple(x.shape)}")
    if len(x) < 2:
        raise UsageError(f"need at least 2 samples to train with BatchNorm, got {len(x)}")
    if y is not None and (y.ndim != 1 or len(y) != len(x)):
        raise UsageError(f"labels must be a 1-d tensor of {len(x)} entries, got shape {tuple(y.shape)}")


def _apply(transform: Transform | None, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return x if transform is None else transform(x, generator=generator)


def train_classifier(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float,
                     generator: torch.Generator, batch_size: int = 64, weight_decay: float = 0.0,
                     bn_mode: BnMode = "train", transform: Transform | None = None, split_tag: str = "train",
                     observer: Any = None, progress: Progress | None = None) -> list[float]:
    """Supervised cross-entropy training with Adam; returns the mean loss of each epoch.

    Used for the base model (``split_tag="train"``), the retrain reference and fine-tuning on retain
    (``split_tag="retain"``), and by random relabelling on the forget set (``split_tag="forget"``).
    """
    _check(x, y)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        set_bn_mode(model, bn_mode)
        total, count = 0.0, 0
        for index in _batches(len(x), batch_size, generator):
            _tag(observer, split_tag)
            loss = F.cross_entropy(model(_apply(transform, x[index], generator)), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(index)
            count += len(index)
            if progress is not None:
                progress(1)
        losses.append(total / count)
    model.eval()
    return losses


def finetune(model: nn.Module, x_retain: torch.Tensor, y_retain: torch.Tensor, *, epochs: int, lr: float,
             generator: torch.Generator, batch_size: int = 64, transform: Transform | None = None,
             observer: Any = None, progress: Progress | None = None) -> list[float]:
    """Fine-tune on the retained data with train-mode BN (the buffers end up fitted on retain)."""
    return train_classifier(model, x_retain, y_retain, epochs=epochs, lr=lr, generator=generator,
                            batch_size=batch_size, transform=transform, split_tag="retain", observer=observer,
                            progress=progress)


def gradient_ascent(model: nn.Module, x_forget: torch.Tensor, y_forget: torch.Tensor, *, steps: int, lr: float,
                    generator: torch.Generator, batch_size: int = 64, bn_mode: BnMode = "train",
                    transform: Transform | None = None, observer: Any = None,
                    progress: Progress | None = None) -> list[float]:
    """Maximise the cross-entropy on the forget set with plain SGD for ``steps`` batches; returns the batch losses.

    Knife-edge by nature: too few steps change nothing, a few more collapse the model (see the zoo's build notes).
    """
    _check(x_forget, y_forget)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses: list[float] = []
    set_bn_mode(model, bn_mode)
    while len(losses) < steps:
        for index in _batches(len(x_forget), batch_size, generator):
            if len(losses) == steps:
                break
            _tag(observer, "forget")
            loss = F.cross_entropy(model(_apply(transform, x_forget[index], generator)), y_forget[index])
            optimizer.zero_grad(set_to_none=True)
            (-loss).backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            if progress is not None:
                progress(1)
    model.eval()
    return losses


def random_labels(y: torch.Tensor, *, num_classes: int, generator: torch.Generator) -> torch.Tensor:
    """Labels drawn uniformly from the classes other than each record's true class."""
    offsets = torch.randint(1, num_classes, y.shape, generator=generator)
    return (y + offsets) % num_classes


def random_relabel(model: nn.Module, x_forget: torch.Tensor, y_forget: torch.Tensor, *, epochs: int, lr: float,
                   generator: torch.Generator, num_classes: int = 10, batch_size: int = 32,
                   bn_mode: BnMode = "train", transform: Transform | None = None, observer: Any = None,
                   progress: Progress | None = None) -> list[float]:
    """Fine-tune on the forget set with random wrong labels (drawn once) using Adam; returns per-epoch losses."""
    _check(x_forget, y_forget)
    wrong = random_labels(y_forget, num_classes=num_classes, generator=generator)
    return train_classifier(model, x_forget, wrong, epochs=epochs, lr=lr, generator=generator,
                            batch_size=batch_size, bn_mode=bn_mode, transform=transform, split_tag="forget",
                            observer=observer, progress=progress)


@torch.no_grad()
def _teacher_probs(teacher: nn.Module, x: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.softmax(teacher(x) / temperature, dim=1)


def bad_teacher(model: nn.Module, x_retain: torch.Tensor, x_forget: torch.Tensor, *, competent: nn.Module,
                incompetent: nn.Module, epochs: int, lr: float, generator: torch.Generator, batch_size: int = 64,
                retain_fraction: float = 0.3, temperature: float = 1.0, bn_mode: BnMode = "eval",
                transform: Transform | None = None, observer: Any = None,
                progress: Progress | None = None) -> list[float]:
    """BadTeacher-style distillation (after Chundawat et al.): the student (``model``) matches the ``competent``
    teacher (a frozen copy of the model before unlearning) on retained data and a randomly initialised
    ``incompetent`` teacher on the forget data, by KL divergence at ``temperature``. Labels are not used. The
    teachers are passed in rather than copied from ``model`` so hooks an observer put on ``model`` stay off them.

    Each epoch draws ``retain_fraction`` of the retained records; forget and retain batches alternate and are never
    mixed, so every batch has one split tag. Returns the per-epoch mean loss.
    """
    _check(x_retain)
    _check(x_forget)
    if not 0.0 < retain_fraction <= 1.0:
        raise UsageError(f"retain_fraction must be in (0, 1], got {retain_fraction}")
    competent.eval().requires_grad_(False)
    incompetent.eval().requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        set_bn_mode(model, bn_mode)
        retain_count = max(2, round(retain_fraction * len(x_retain)))
        retain_pick = torch.randperm(len(x_retain), generator=generator)[:retain_count]
        forget_batches = [("forget", x_forget, idx) for idx in _batches(len(x_forget), batch_size, generator)]
        retain_batches = [("retain", x_retain, retain_pick[idx])
                          for idx in _batches(retain_count, batch_size, generator)]
        schedule = _interleave(forget_batches, retain_batches)
        total, count = 0.0, 0
        for tag, source, index in schedule:
            _tag(observer, tag)
            inputs = _apply(transform, source[index], generator)
            teacher = incompetent if tag == "forget" else competent
            target = _teacher_probs(teacher, inputs, temperature)
            log_student = F.log_softmax(model(inputs) / temperature, dim=1)
            loss = F.kl_div(log_student, target, reduction="batchmean")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(index)
            count += len(index)
            if progress is not None:
                progress(1)
        losses.append(total / count)
    model.eval()
    return losses


def _interleave(first: list[Any], second: list[Any]) -> list[Any]:
    """Spread the shorter list evenly through the longer one (deterministic)."""
    if len(first) < len(second):
        first, second = second, first
    out: list[Any] = []
    placed = 0
    for i, item in enumerate(first):
        out.append(item)
        due = (i + 1) * len(second) // len(first)
        while placed < due:
            out.append(second[placed])
            placed += 1
    return out


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, *, batch_size: int = 512) -> torch.Tensor:
    """Predicted class of every input, with the model in eval mode (its previous mode is restored)."""
    if batch_size < 1:
        raise UsageError(f"batch_size must be positive, got {batch_size}")
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        outputs = [model(x[start:start + batch_size]).argmax(dim=1) for start in range(0, len(x), batch_size)]
    finally:
        for module, flag in flags:  # restore every module's own flag (BN may have been in eval inside train)
            module.training = flag
    return torch.cat(outputs) if outputs else torch.empty(0, dtype=torch.int64)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 512) -> float:
    """Fraction of ``x`` classified as ``y`` in eval mode (0.0 to 1.0); the model's mode is restored."""
    if len(x) != len(y):
        raise UsageError(f"accuracy needs as many labels as inputs, got {len(y)} labels for {len(x)} inputs")
    if len(x) == 0:
        raise UsageError("accuracy of an empty set is undefined; pass at least one input")
    return float((predict(model, x, batch_size=batch_size) == y).double().mean())
