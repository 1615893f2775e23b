"""Relearning susceptibility: fine-tuning steps on forget records until a stated forget accuracy (Kalani et al., §4).

The fine-tuning runs on a deep copy of the model; the audited model's tensors never change, and
:func:`steps_to_target` proves it (the trainable and running digests of the original before and after, else
:class:`~bnconvention.errors.WeightsChangedError`). BatchNorm stays in eval mode while fine-tuning, so the running
statistics are those of the state measured (shipped, or a refit) throughout: the number of steps says how far
that state's weights are from relearning, not how fast train-mode BN would re-estimate the statistics. Plain SGD
(no momentum, no weight decay), batches cycled in a fixed order over ``records`` forget records drawn with
``SeedSequence(seed, spawn_key=(10,))``: no randomness is left, so the count is deterministic.

Step 0 is the state itself: a state already at the target needs 0 steps; one that does not reach it within
``max_steps`` is censored (None).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bnconvention.architectures.outputs import logits
from bnconvention.audit.spec.diagnostics import RelearningSpec
from bnconvention.errors import AuditSpecError, WeightsChangedError
from bnconvention.formats.digests import model_digests
from bnconvention.formats.text import plural

RELEARN_STREAM = 10
FIELD = "/diagnostics/relearning"


def draw_relearn(forget: int, spec: RelearningSpec, *, seed: int) -> np.ndarray:
    """The forget records fine-tuned on (indices into the forget split), refused when the split is too small."""
    if spec.records > forget:
        raise AuditSpecError(f"relearning: records is {spec.records} but the forget split has "
                             f"{plural(forget, 'record')}; fine-tune on at most the forget split",
                             field=f"{FIELD}/records")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(RELEARN_STREAM,)))
    return rng.permutation(forget)[:spec.records]


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int) -> float:
    with torch.no_grad():
        hits = sum(int((logits(model(x[s:s + batch_size])).argmax(dim=1) == y[s:s + batch_size]).sum())
                   for s in range(0, len(x), batch_size))
    return hits / len(y)


def _trajectory(model: torch.nn.Module, train: tuple[torch.Tensor, torch.Tensor],
                evaluate: tuple[torch.Tensor, torch.Tensor], *, spec: RelearningSpec, eval_batch: int) -> list[float]:
    """Forget accuracy after each of steps 0..max_steps of fine-tuning ``model`` (in place; the caller's copy)."""
    model.eval()  # BatchNorm (and dropout) in eval mode: the running statistics stay those measured
    params = [p for p in model.parameters() if p.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.SGD(params, lr=spec.learning_rate)
    x, y = train
    accuracies = [_accuracy(model, *evaluate, batch_size=eval_batch)]
    for step in range(spec.max_steps):
        start = (step * spec.batch_size) % len(x)
        index = torch.arange(start, start + spec.batch_size) % len(x)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(logits(model(x[index])).float(), y[index].long())
        loss.backward()
        optimizer.step()
        accuracies.append(_accuracy(model, *evaluate, batch_size=eval_batch))
    return accuracies


def first_step_at(trajectory: list[float], target: float) -> int | None:
    """The first step whose forget accuracy reaches ``target`` (0: the state itself); None within the budget."""
    return next((step for step, accuracy in enumerate(trajectory) if accuracy >= target), None)


def area_under(trajectory: list[float]) -> float:
    """The mean forget accuracy over steps 0..max_steps: the area under the relearning curve, per step (a state
    that relearns at once scores near 1, one that never does near its own forget accuracy)."""
    return sum(trajectory) / len(trajectory)


@dataclass(frozen=True)
class RelearningTrajectory:
    """One state's relearning: its forget-accuracy trajectory over steps 0..max_steps, the first step at the
    target (None: censored) and the area under the trajectory. The annotation's
    :class:`~bnconvention.standard.diagnostics.Relearning` gathers the shipped state's and each refit's."""

    trajectory: list[float]
    steps: int | None
    area: float


def relearn(model: torch.nn.Module, *, train_x: torch.Tensor, train_y: torch.Tensor, eval_x: torch.Tensor,
            eval_y: torch.Tensor, spec: RelearningSpec, transform: Any, eval_batch: int = 512
            ) -> RelearningTrajectory:
    """Fine-tune a copy of ``model`` on (``train_x``, ``train_y``) for ``max_steps`` steps, its accuracy on
    (``eval_x``, ``eval_y``) measured at every step; the inputs are prepared by ``transform`` (the eval transform)
    once."""
    before = model_digests(model)
    work = copy.deepcopy(model)
    with torch.inference_mode(False):
        prepared_train = (transform(train_x, generator=None).clone(), train_y.clone())
        prepared_eval = (transform(eval_x, generator=None).clone(), eval_y.clone())
        trajectory = _trajectory(work, prepared_train, prepared_eval, spec=spec, eval_batch=eval_batch)
    after = model_digests(model)
    if (after.trainable_sha256, after.running_sha256) != (before.trainable_sha256, before.running_sha256):
        raise WeightsChangedError("relearning changed the audited model's tensors (it fine-tunes a copy); this is a "
                                  "bug, please report it")
    return RelearningTrajectory(trajectory=trajectory, steps=first_step_at(trajectory, spec.target_forget_accuracy),
                                area=area_under(trajectory))


def steps_to_target(model: torch.nn.Module, *, train_x: torch.Tensor, train_y: torch.Tensor,
                    eval_x: torch.Tensor, eval_y: torch.Tensor, spec: RelearningSpec, transform: Any,
                    eval_batch: int = 512) -> int | None:
    """Steps of fine-tuning a copy of ``model`` until its forget accuracy reaches the target (:func:`relearn`)."""
    return relearn(model, train_x=train_x, train_y=train_y, eval_x=eval_x, eval_y=eval_y, spec=spec,
                   transform=transform, eval_batch=eval_batch).steps


__all__ = ["RelearningTrajectory", "area_under", "draw_relearn", "first_step_at", "relearn", "steps_to_target"]
