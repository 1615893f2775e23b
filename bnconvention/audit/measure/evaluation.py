"""Evaluation and refit mechanics shared by the audit steps: seeded streams, cells of a model, transactional refits.

Seeds: every random draw of an audit comes from ``SeedSequence(seed, spawn_key=key)`` with a fixed key per purpose
(replicate ``r``: ``(0, r)``; recoverability: ``(1,)``; provenance: ``(2,)``), so an audit depends only on its spec
and checkpoint, in one process or in several.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from bnconvention.architectures.outputs import logits
from bnconvention.audit.measure.data import AuditData, Split
from bnconvention.audit.measure.decisions import BaseCells
from bnconvention.formats.text import plural
from bnconvention.refitting import ThetaWitness, refit, restore_running_state, running_state
from bnconvention.standard.models import DatasetRef, DataSplit
from bnconvention.standard.naming import record_ids_sha256


def stream(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def torch_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**62))


def split_predictions(model: torch.nn.Module, split: Split, data: AuditData, *, batch_size: int) -> torch.Tensor:
    """Class predictions of ``model`` (eval mode) on a split under the eval transform, on the CPU; the logits are
    read out of whatever the forward returns (a transformers ``ModelOutput`` too). Batches are transformed on the
    CPU and moved to the model's device."""
    model.eval()
    device = model_device(model)
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(split.x), batch_size):
            x = data.eval_transform(split.x[start:start + batch_size], generator=None)
            outputs.append(logits(model(x.to(device))).argmax(dim=1).cpu())
    return torch.cat(outputs)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (the CPU for a model without tensors)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def split_accuracy(model: torch.nn.Module, split: Split, data: AuditData, *, batch_size: int) -> float:
    predictions = split_predictions(model, split, data, batch_size=batch_size)
    return float((predictions == split.y).sum().item()) / len(split.y)


def base_cells(model: torch.nn.Module, data: AuditData, *, batch_size: int) -> BaseCells:
    return {
        "df": split_accuracy(model, data.forget, data, batch_size=batch_size),
        "dr": split_accuracy(model, data.retain, data, batch_size=batch_size),
        "dt": split_accuracy(model, data.test, data, batch_size=batch_size),
    }


def forget_accuracy(model: torch.nn.Module, data: AuditData, *, batch_size: int) -> float:
    return split_accuracy(model, data.forget, data, batch_size=batch_size)


def _pool(x: torch.Tensor, transform: Any, *, generator: torch.Generator, batch_size: int) -> list[torch.Tensor]:
    # the transform runs batch by batch in a fixed order from one generator: deterministic for a given seed
    return [transform(chunk, generator=generator) for chunk in x.split(batch_size)]


class Refitter:
    """Runs refits for one audit, restoring the shipped φ after each and counting passes.

    ``after_refit`` settles each refit's φ as the checkpoint would store it (a float16 file's statistics rounded to
    float16: the refit cells are those of the weights a refit writes, docs/statistics.md). ``theta`` witnesses θ
    once for the whole audit (:class:`~bnconvention.refitting.ThetaWitness`): every refit proves θ unchanged by a byte
    comparison against it, and the audit's own before/after check reads its digest, so θ is digested once."""

    def __init__(self, model: torch.nn.Module, *,
                 after_refit: Callable[[torch.nn.Module], None] | None = None) -> None:
        self.model = model
        self.theta = ThetaWitness(model)
        self.shipped = running_state(model)
        self.count = 0
        self.after_refit = after_refit

    def run(self, x: torch.Tensor, *, rule: str, transform: Any, seed: int, batch_size: int,
            data_split: Any) -> Any:
        generator = torch.Generator().manual_seed(seed)
        pool = _pool(x, transform, generator=generator, batch_size=batch_size)
        self.count += 1
        report = refit(self.model, pool, rule=rule, data=data_split,  # type: ignore[arg-type]
                       transform=transform.standard(), theta=self.theta)
        if self.after_refit is not None:
            self.after_refit(self.model)
        return report

    def restore(self) -> None:
        restore_running_state(self.model, self.shipped)


def retain_split_description(*, pool_size: int, seed: int, data: AuditData) -> str:
    return (f"{plural(pool_size, 'record')} drawn without replacement for each replicate from the retain split "
            f"({data.retain.definition}; {plural(len(data.retain.ids), 'record')}); replicate r draws with "
            f"SeedSequence({seed}, spawn_key=(0, r))")


def data_split(data: AuditData, *, role: str, subset: str, ids: Iterable[int] | None, count: int,
               seed: int | None) -> Any:
    """The standard's description of a refit pool drawn from the audit's data."""
    ids_sha256 = record_ids_sha256([int(i) for i in ids]) if ids is not None else None
    dataset = DatasetRef(id=data.dataset_id, revision=data.dataset_revision)
    return DataSplit(role=role, dataset=dataset, subset=subset, record_count=count,  # type: ignore[arg-type]
                     ids_sha256=ids_sha256, sampling_seed=seed)


