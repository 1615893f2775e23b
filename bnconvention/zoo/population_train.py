"""Training and unlearning of the population's checkpoints, with the zoo's methods (:mod:`bnconvention.zoo.methods`).

Every run draws its randomness from generators seeded by ``(build seed, population seed, labels)`` through
:func:`bnconvention.zoo.variants.derived_seed`: a family's ``train`` and ``eval`` variants share the label (so the same
batches and random labels), the twins' arms come from one run. Training uses no augmentation: the task's
difficulty is in its records (:mod:`bnconvention.zoo.population_data`), and the audit's identity transform is the
one the buffers were fitted under.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import bnconvention.zoo.methods as methods
from bnconvention.architectures.build import build_model
from bnconvention.data.digits import DIGITS_NUM_CLASSES
from bnconvention.errors import UsageError
from bnconvention.zoo.population_data import NoisyDigits, forget_ids, split_indices
from bnconvention.zoo.population_plan import FAMILY_HYPERPARAMETERS, Checkpoint, PopulationConfig, Removal
from bnconvention.zoo.variants import derived_seed

FACTORY = "zoo/convnet-bn"
BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


@dataclass(frozen=True)
class RemovalData:
    """One removal's splits as tensors (row order = record-id order) and its forget ids."""

    removal: Removal
    x: Mapping[str, torch.Tensor]
    y: Mapping[str, torch.Tensor]
    forget_ids: tuple[int, ...]

    @property
    def sizes(self) -> dict[str, int]:
        return {role: len(v) for role, v in self.y.items()}


def removal_data(task: NoisyDigits, removal: Removal) -> RemovalData:
    ids = forget_ids(task, ratio=removal.ratio, forget_class=removal.forget_class)
    x, y = torch.from_numpy(task.x.copy()), torch.from_numpy(task.y.copy())
    rows = split_indices(task, ids)
    return RemovalData(removal=removal, x={r: x[torch.from_numpy(i)] for r, i in rows.items()},
                       y={r: y[torch.from_numpy(i)] for r, i in rows.items()}, forget_ids=tuple(ids))


def new_population_model(config: PopulationConfig, *, build_seed: int, seed: int) -> nn.Module:
    """A fresh model for population seed ``seed`` (the base and every retrain of that seed start from it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derived_seed(build_seed, "population", str(seed), "init"))
        return build_model(FACTORY, {"width": config.width})


def _generator(build_seed: int, *labels: str) -> torch.Generator:
    return torch.Generator().manual_seed(derived_seed(build_seed, "population", *labels))


def train_from_scratch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, config: PopulationConfig,
                       generator: torch.Generator, split_tag: str, observer: Any = None,
                       progress: methods.Progress | None = None) -> None:
    """Adam at ``lr`` for ``epochs``, then at ``anneal_lr`` for ``anneal_epochs`` (the buffers settle)."""
    h = config.training
    for lr, epochs in ((h["lr"], h["epochs"]), (h["anneal_lr"], h["anneal_epochs"])):
        methods.train_classifier(model, x, y, epochs=epochs, lr=lr, generator=generator,
                                 batch_size=h["batch_size"], split_tag=split_tag, observer=observer,
                                 progress=progress)


def train_base(model: nn.Module, data: RemovalData, *, config: PopulationConfig, build_seed: int, seed: int,
               observer: Any = None, progress: methods.Progress | None = None) -> None:
    train_from_scratch(model, data.x["train"], data.y["train"], config=config, split_tag="train",
                       generator=_generator(build_seed, str(seed), "base"), observer=observer, progress=progress)


def train_retrain(model: nn.Module, data: RemovalData, *, config: PopulationConfig, build_seed: int, seed: int,
                  observer: Any = None, progress: methods.Progress | None = None) -> None:
    train_from_scratch(model, data.x["retain"], data.y["retain"], config=config, split_tag="retain",
                       generator=_generator(build_seed, str(seed), data.removal.key, "retrain"), observer=observer,
                       progress=progress)


def unlearn(item: Checkpoint, model: nn.Module, data: RemovalData, *, build_seed: int, epochs: int | None = None,
            observer: Any = None, progress: methods.Progress | None = None) -> None:
    """Run ``item``'s family on ``model`` (loaded with the base) in its BN variant; ``epochs`` overrides (twins)."""
    if item.family is None or item.variant is None:
        raise UsageError(f"{item.name} is not an unlearned checkpoint")
    h = FAMILY_HYPERPARAMETERS[item.family]
    generator = _generator(build_seed, str(item.seed), item.removal.key, item.family, str(epochs or ""))
    x, y = data.x, data.y
    common: dict[str, Any] = {"generator": generator, "observer": observer, "progress": progress,
                              "batch_size": h["batch_size"], "bn_mode": item.variant}
    if item.family == "finetune":
        methods.train_classifier(model, x["retain"], y["retain"], epochs=h["epochs"], lr=h["lr"],
                                 split_tag="retain", **common)
    elif item.family == "gradascent":
        methods.gradient_ascent(model, x["forget"], y["forget"], steps=h["steps"], lr=h["lr"], **common)
    elif item.family == "relabel":
        methods.random_relabel(model, x["forget"], y["forget"], epochs=epochs or h["epochs"], lr=h["lr"],
                               num_classes=DIGITS_NUM_CLASSES, **common)
    else:
        raise UsageError(f"unknown population family {item.family!r}")


def batches(item: Checkpoint, data: RemovalData, config: PopulationConfig) -> int:
    """Training batches ``item`` takes (for the progress bar); a twin pair counts once, on its online arm."""
    h = config.training
    if item.role in ("base", "retrain"):
        n = data.sizes["train" if item.role == "base" else "retain"]
        return (h["epochs"] + h["anneal_epochs"]) * methods.batches_per_epoch(n, h["batch_size"])
    if item.role == "twin" and item.arm == "frozen":
        return 0
    f = FAMILY_HYPERPARAMETERS[str(item.family)]
    if item.family == "gradascent":
        return int(f["steps"])
    epochs = item.level if item.role == "twin" and item.level is not None else f["epochs"]
    return int(epochs) * methods.batches_per_epoch(data.sizes[f["data"]], f["batch_size"])


def is_buffer(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in BUFFER_SUFFIXES


def frozen_twin(online: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The frozen arm: the online arm's θ (the same tensors, bit for bit) with the base's running statistics."""
    if set(online) != set(base):
        raise UsageError("the twin's arms must have the same tensor names")
    return {name: (base[name] if is_buffer(name) else online[name]).clone() for name in online}


def cells(model: nn.Module, data: RemovalData) -> dict[str, float]:
    """Forget, retain and test accuracy (fractions) as the producer measures them at release."""
    return {role: methods.accuracy(model, data.x[role], data.y[role]) for role in ("forget", "retain", "test")}


__all__ = ["FACTORY", "RemovalData", "batches", "cells", "frozen_twin", "is_buffer", "new_population_model",
           "removal_data", "train_base", "train_retrain", "unlearn"]
