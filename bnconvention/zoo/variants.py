"""The zoo's variants: which model is trained or unlearned how, from which parent, and what its config says.

Every BatchNorm variant ``bn-<method>`` has a GroupNorm twin ``gn-<method>`` trained with the same hyperparameters,
the same seed, batch order, augmentation draws and random labels. Names end in the BatchNorm mode used while the
weights were updated where it matters (``-train``: buffers written by the forget data, BN *corruption*; ``-eval``:
buffers frozen while the weights drift, BN *misalignment*).

>>> [spec.name for spec in VARIANTS if spec.arch == "bn"]  # doctest: +NORMALIZE_WHITESPACE
['bn-base', 'bn-retrain', 'bn-ga-train', 'bn-relabel-train', 'bn-finetune', 'bn-badteacher-eval',
 'bn-relabel-eval']
>>> variant("gn-badteacher-eval").buffer_update_mode
'untouched'
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import numpy as np
import torch
from torch import nn

import bnconvention.zoo.methods as methods
from bnconvention.architectures.build import build_model
from bnconvention.authoring.declaration import make_convention
from bnconvention.data.digits import (
    DIGITS_DATASET_ID,
    DIGITS_NUM_CLASSES,
    DIGITS_TRAIN_TRANSFORM,
    digits_arrays,
    digits_split_masks,
)
from bnconvention.errors import UsageError
from bnconvention.formats.json_types import JsonObject
from bnconvention.standard.models import BufferUpdateMode, SplitRole, to_dict
from bnconvention.standard.naming import record_ids_sha256
from bnconvention.zoo.manifest import FittingStep, VariantConfig
from bnconvention.zoo.methods import BnMode, batches_per_epoch
from bnconvention.zoo.models import NormKind

ZOO_FORMAT = "bnconvention-zoo/1"
FORGET_CLASSES: tuple[int, ...] = (3,)
MODEL_KWARGS: Mapping[str, Any] = {"width": 16}
FACTORIES: Mapping[str, str] = {"bn": "zoo/convnet-bn", "gn": "zoo/convnet-gn"}
MethodName: TypeAlias = Literal["train", "retrain", "gradient_ascent", "random_relabel", "finetune", "bad_teacher"]
BN_MOMENTUM = 0.1  # PyTorch's default, used by every BatchNorm layer of the zoo


@dataclass(frozen=True)
class VariantSpec:
    """One model of the zoo. ``key`` (the name without the architecture prefix) seeds its randomness."""

    key: str
    arch: NormKind
    method: MethodName
    parent: str | None
    bn_mode: BnMode
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    trained_on: tuple[SplitRole, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.arch}-{self.key}"

    @property
    def factory(self) -> str:
        return FACTORIES[self.arch]

    @property
    def buffer_update_mode(self) -> BufferUpdateMode:
        if self.arch == "gn":
            return "untouched"  # no running statistics at all
        return "train" if self.bn_mode == "train" else "frozen"


# Hyperparameters chosen by sweeps on this data (see the build notes in bnconvention/zoo/build.py).
_TRAIN = {"optimizer": "adam", "lr": 3e-3, "epochs": 20, "batch_size": 64}
_METHODS: tuple[tuple[str, MethodName, str | None, BnMode, dict[str, Any], tuple[SplitRole, ...]], ...] = (
    ("base", "train", None, "train", _TRAIN, ("train",)),
    ("retrain", "retrain", None, "train", _TRAIN, ("retain",)),
    ("ga-train", "gradient_ascent", "base", "train",
     {"optimizer": "sgd", "lr": 1e-2, "steps": 16, "batch_size": 64}, ("forget",)),
    ("relabel-train", "random_relabel", "base", "train",
     {"optimizer": "adam", "lr": 1e-3, "epochs": 3, "batch_size": 32}, ("forget",)),
    ("finetune", "finetune", "base", "train",
     {"optimizer": "adam", "lr": 1e-3, "epochs": 2, "batch_size": 64}, ("retain",)),
    ("badteacher-eval", "bad_teacher", "base", "eval",
     {"optimizer": "adam", "lr": 1e-3, "epochs": 3, "batch_size": 64, "retain_fraction": 0.3,
      "temperature": 1.0}, ("retain", "forget")),
    ("relabel-eval", "random_relabel", "base", "eval",
     {"optimizer": "adam", "lr": 1e-3, "epochs": 3, "batch_size": 32}, ("forget",)),
)

VARIANTS: tuple[VariantSpec, ...] = tuple(
    VariantSpec(key=key, arch=arch, method=method, parent=f"{arch}-{parent}" if parent else None, bn_mode=bn_mode,
                hyperparameters=dict(hyper), trained_on=trained_on)
    for arch in ("bn", "gn")
    for key, method, parent, bn_mode, hyper, trained_on in _METHODS
)
_BY_NAME = {spec.name: spec for spec in VARIANTS}


def variant(name: str) -> VariantSpec:
    """The spec of variant ``name``; a clear error naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"unknown zoo variant {name!r}; known: {', '.join(_BY_NAME)}") from None


def derived_seed(seed: int, *parts: str) -> int:
    """A 63-bit seed from the zoo seed and labels (stable across platforms and Python versions)."""
    digest = hashlib.sha256(":".join(["bnconvention-zoo", str(seed), *parts]).encode()).hexdigest()
    return int(digest[:16], 16) >> 1


@dataclass(frozen=True)
class SplitTensors:
    """The digits splits of the zoo as tensors, with the sorted record ids of each split."""

    x: Mapping[str, torch.Tensor]
    y: Mapping[str, torch.Tensor]
    ids: Mapping[str, list[int]]

    @property
    def sizes(self) -> dict[str, int]:
        return {role: len(ids) for role, ids in self.ids.items()}

    def ids_sha256(self, role: str) -> str:
        return record_ids_sha256(self.ids[role])


def split_tensors(forget_classes: tuple[int, ...] = FORGET_CLASSES) -> SplitTensors:
    """Train, retain, forget and test tensors of the prepared digits, in record-id order."""
    arrays = digits_arrays()
    masks = digits_split_masks(forget_classes)
    return SplitTensors(
        x={role: torch.tensor(np.array(arrays.x[mask])) for role, mask in masks.items()},
        y={role: torch.tensor(np.array(arrays.y[mask])) for role, mask in masks.items()},
        ids={role: [int(i) for i in arrays.ids[mask]] for role, mask in masks.items()},
    )


def new_model(spec: VariantSpec, *, seed: int, label: str = "init") -> nn.Module:
    """A freshly initialised model of ``spec``'s architecture, seeded without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derived_seed(seed, spec.key, label))
        return build_model(spec.factory, MODEL_KWARGS)


def batch_count(spec: VariantSpec, data: SplitTensors) -> int:
    """How many training batches ``run_variant`` will process (for progress bars)."""
    h = spec.hyperparameters
    sizes = data.sizes
    if spec.method in ("train", "retrain", "finetune"):
        n = sizes["train"] if spec.method == "train" else sizes["retain"]
        return h["epochs"] * batches_per_epoch(n, h["batch_size"])
    if spec.method == "gradient_ascent":
        return int(h["steps"])
    if spec.method == "random_relabel":
        return h["epochs"] * batches_per_epoch(sizes["forget"], h["batch_size"])
    retain_count = max(2, round(h["retain_fraction"] * sizes["retain"]))
    return h["epochs"] * (batches_per_epoch(sizes["forget"], h["batch_size"])
                          + batches_per_epoch(retain_count, h["batch_size"]))


def run_variant(spec: VariantSpec, model: nn.Module, data: SplitTensors, *, seed: int,
                parent_state: Mapping[str, torch.Tensor] | None = None, observer: Any = None,
                progress: methods.Progress | None = None) -> list[float]:
    """Train or unlearn ``model`` (already initialised, or loaded with the parent's weights) as ``spec`` says.

    Returns the method's losses. All randomness comes from a generator seeded by ``(seed, spec.key)``.
    """
    h = spec.hyperparameters
    generator = torch.Generator().manual_seed(derived_seed(seed, spec.key, "data"))
    common: dict[str, Any] = {"generator": generator, "transform": DIGITS_TRAIN_TRANSFORM, "observer": observer,
                              "progress": progress}
    x, y = data.x, data.y
    if spec.method in ("train", "retrain"):
        role = "train" if spec.method == "train" else "retain"
        return methods.train_classifier(model, x[role], y[role], epochs=h["epochs"], lr=h["lr"],
                                        batch_size=h["batch_size"], split_tag=role, **common)
    if spec.method == "finetune":
        return methods.finetune(model, x["retain"], y["retain"], epochs=h["epochs"], lr=h["lr"],
                                batch_size=h["batch_size"], **common)
    if spec.method == "gradient_ascent":
        return methods.gradient_ascent(model, x["forget"], y["forget"], steps=h["steps"], lr=h["lr"],
                                       batch_size=h["batch_size"], bn_mode=spec.bn_mode, **common)
    if spec.method == "random_relabel":
        return methods.random_relabel(model, x["forget"], y["forget"], epochs=h["epochs"], lr=h["lr"],
                                      num_classes=DIGITS_NUM_CLASSES, batch_size=h["batch_size"],
                                      bn_mode=spec.bn_mode, **common)
    if spec.method == "bad_teacher":
        if parent_state is None:
            raise UsageError(f"{spec.name} needs its parent's weights for the competent teacher")
        competent = new_model(spec, seed=seed, label="competent")
        competent.load_state_dict(parent_state)
        incompetent = new_model(spec, seed=seed, label="incompetent")
        return methods.bad_teacher(model, x["retain"], x["forget"], competent=competent, incompetent=incompetent,
                                   epochs=h["epochs"], lr=h["lr"], batch_size=h["batch_size"],
                                   retain_fraction=h["retain_fraction"], temperature=h["temperature"],
                                   bn_mode=spec.bn_mode, **common)
    raise UsageError(f"unknown zoo method {spec.method!r}")


def fitting_history(spec: VariantSpec) -> list[tuple[SplitRole, VariantSpec]]:
    """The splits whose train-mode forwards wrote this variant's running statistics, oldest first."""
    history = fitting_history(variant(spec.parent)) if spec.parent else []
    if spec.buffer_update_mode == "train":
        history.append(("train" if spec.method == "train" else spec.trained_on[-1], spec))
    return history


def variant_config(spec: VariantSpec, data: SplitTensors, *, seed: int,
                   shipped_accuracy: Mapping[str, float]) -> VariantConfig:
    """The JSON config saved next to a variant's weights."""
    sizes = data.sizes
    history = fitting_history(spec) if spec.arch == "bn" else []
    fitting: list[FittingStep] = [{"role": role, "record_count": sizes[role], "ids_sha256": data.ids_sha256(role),
                "by": fitter.name} for role, fitter in history]
    config: VariantConfig = {
        "format": ZOO_FORMAT,
        "name": spec.name,
        "architecture": {"factory": spec.factory, "kwargs": dict(MODEL_KWARGS)},
        "weights": f"{spec.name}.safetensors",
        "parent": spec.parent,
        "twin": f"{'gn' if spec.arch == 'bn' else 'bn'}-{spec.key}",
        "seed": seed,
        "data": {
            "dataset_id": DIGITS_DATASET_ID,
            "forget_classes": list(FORGET_CLASSES),
            "split_sizes": sizes,
            "split_ids_sha256": {role: data.ids_sha256(role) for role in sizes},
            "trained_on": list(spec.trained_on),
            "fitting": fitting,
        },
        "method": {
            "name": spec.method,
            "function": f"bnconvention.zoo.methods:{_FUNCTIONS[spec.method]}",
            "bn_mode": spec.bn_mode,
            "transform": DIGITS_TRAIN_TRANSFORM.reference,
            "hyperparameters": dict(spec.hyperparameters),
        },
        "buffer_update_mode": spec.buffer_update_mode,
        "channel": "present" if spec.arch == "bn" else "absent",
        "shipped_accuracy": dict(shipped_accuracy),
    }
    if history:
        config["convention"] = _convention(spec, history[-1], data)
    return config


_FUNCTIONS: Mapping[str, str] = {
    "train": "train_classifier", "retrain": "train_classifier", "finetune": "finetune",
    "gradient_ascent": "gradient_ascent", "random_relabel": "random_relabel", "bad_teacher": "bad_teacher",
}


def _convention(spec: VariantSpec, last: tuple[SplitRole, VariantSpec], data: SplitTensors) -> JsonObject:
    """The fitting convention of the running statistics: the last train-mode run that wrote them."""
    role, fitter = last
    h = fitter.hyperparameters
    batch_size = int(h["batch_size"])
    num_batches = batch_count(fitter, data)
    subsets = {"train": "all classes, train split", "retain": "train split without classes "
               + ", ".join(map(str, FORGET_CLASSES)), "forget": "train records of classes "
               + ", ".join(map(str, FORGET_CLASSES))}
    convention = make_convention(
        buffer_update_mode=spec.buffer_update_mode, role=role, dataset_id=DIGITS_DATASET_ID, subset=subsets[role],
        transform=DIGITS_TRAIN_TRANSFORM.standard(), rule="ema", momentum=BN_MOMENTUM, batch_size=batch_size,
        num_batches=num_batches, variance_estimator="unbiased", precision="float32", dropout="absent",
        record_count=data.sizes[role], ids_sha256=data.ids_sha256(role),
    )
    return to_dict(convention)
