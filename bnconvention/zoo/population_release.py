"""What each population checkpoint is released with, beside its ``<name>.safetensors``:

* ``forget.txt``: the forget record ids (one per line; :mod:`bnconvention.data.ids`), bound by its
  ``record_ids_sha256`` in the sidecar and the card;
* ``<name>.json`` (the sidecar the audit reads the architecture from): role, family, variant (BN buffer treatment),
  removal, seed, parent, twin partner, hyperparameters, the forget ids' digest, the cells as measured, and the
  declaration of the running statistics' fitting convention, derived from the recorder's observation of the run
  (:func:`bnconvention.authoring.observation.convention_from_observation`; the twins' frozen arm, assembled rather
  than run, is declared from its known history);
* ``README.md``: a model card whose ``model-index`` (``huggingface_hub.ModelCardData(eval_results=...)``) publishes
  "forget accuracy", "retain accuracy" and "test accuracy" as the producer measured them at release time, so an
  audit with ``published_source: model_index`` anchors against the card. Written last: its presence marks the
  checkpoint finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from huggingface_hub import EvalResult, ModelCardData

from bnconvention.authoring.declaration import make_convention
from bnconvention.authoring.observation import convention_from_observation
from bnconvention.data.digits import BatchTransform, identity_batch
from bnconvention.formats.json_types import JsonObject
from bnconvention.standard.models import FittingConvention, Observation, to_dict
from bnconvention.standard.naming import record_ids_sha256
from bnconvention.zoo.methods import batches_per_epoch
from bnconvention.zoo.population_data import TASK_ID
from bnconvention.zoo.population_plan import FAMILY_HYPERPARAMETERS, Checkpoint, PopulationConfig, RemovalEntry
from bnconvention.zoo.population_train import FACTORY, RemovalData
from bnconvention.zoo.variants import BN_MOMENTUM

POPULATION_FORMAT = "bnconvention-population/1"
FORGET_FILE = "forget.txt"
CARD_METRICS = {"forget": "forget accuracy", "retain": "retain accuracy", "test": "test accuracy"}
# The audit reads task.npz with the identity transform of bnconvention.data.pools: training used the same.
TRAIN_TRANSFORM = BatchTransform(mode="train", reference="bnconvention.data.pools:identity_batch", fn=identity_batch)

__all__ = ["CARD_METRICS", "FORGET_FILE", "POPULATION_FORMAT", "MethodEntry", "PopulationSidecar", "card_text",
           "convention_for", "forget_text", "sidecar"]


class ArchitectureRef(TypedDict):
    factory: str
    kwargs: dict[str, int]


class ForgetIdsRef(TypedDict):
    file: str
    count: int
    record_ids_sha256: str


class TwinRef(TypedDict):
    arm: str
    level: int | None
    partner: str | None


class MethodEntry(TypedDict):
    """How the checkpoint was trained: the method, its function, the BatchNorm mode, hyperparameters and data."""

    name: str | None
    function: str
    bn_mode: str | None
    hyperparameters: JsonObject
    data: str


class PopulationSidecar(TypedDict):
    """``<name>.json``, the sidecar of one population checkpoint (see the module docstring)."""

    format: str
    name: str
    architecture: ArchitectureRef
    weights: str
    build_seed: int
    seed: int
    role: str
    family: str | None
    variant: str | None
    buffer_update_mode: str
    removal: RemovalEntry
    forget_ids: ForgetIdsRef
    parent: str | None
    twin: TwinRef | None
    method: MethodEntry
    split_sizes: dict[str, int]
    measured_at_release: dict[str, float]
    convention: JsonObject  # the standard's FittingConvention, as JSON


class _BaseFit(TypedDict):
    """How the base's training fitted its buffers (the arguments of the convention it declares)."""

    role: Literal["train"]
    rule: Literal["ema"]
    momentum: float
    batch_size: int
    num_batches: int


def forget_text(data: RemovalData) -> str:
    """The ids file: a comment naming the removal and its digest, then one record id per line."""
    head = (f"# forget set {data.removal.key} of {TASK_ID}: {len(data.forget_ids)} records, record_ids_sha256 "
            f"{record_ids_sha256(data.forget_ids)}\n")
    return head + "".join(f"{i}\n" for i in data.forget_ids)


def _subset(role: str, data: RemovalData) -> str:
    return {"train": "train split", "retain": f"train split without forget set {data.removal.key}",
            "forget": f"forget set {data.removal.key} of the train split"}[role]


def _split_digest(role: str, data: RemovalData, train_ids: tuple[int, ...]) -> str:
    removed = set(data.forget_ids)
    ids = {"train": train_ids, "forget": data.forget_ids,
           "retain": tuple(i for i in train_ids if i not in removed)}[role]
    return record_ids_sha256(ids)


def _base_fit(config: PopulationConfig, data: RemovalData) -> _BaseFit:
    """How the base's training fitted its buffers (the last, annealing stage: EMA over its batches)."""
    h = config.training
    return {"role": "train", "rule": "ema", "momentum": BN_MOMENTUM, "batch_size": h["batch_size"],
            "num_batches": h["anneal_epochs"] * batches_per_epoch(data.sizes["train"], h["batch_size"])}


def convention_for(item: Checkpoint, observation: Observation | None, data: RemovalData, *,
                   config: PopulationConfig, train_ids: tuple[int, ...], task_sha256: str) -> FittingConvention:
    """The declared fitting convention of ``item``'s running statistics."""
    common: dict[str, Any] = {"dataset_id": TASK_ID, "transform": TRAIN_TRANSFORM.standard(),
                              "dataset_revision": task_sha256}
    if observation is None:  # the twins' frozen arm: θ from the online run, buffers as the base left them
        fit = _base_fit(config, data)
        return make_convention(buffer_update_mode="frozen", subset=_subset("train", data),
                               record_count=data.sizes["train"],
                               ids_sha256=_split_digest("train", data, train_ids), **fit, **common)
    written = observation.mode in ("train", "refit", "mixed")
    # a run that wrote the buffers is measured; one that froze them kept the base's fit, which the author knows
    known: _BaseFit | dict[str, Any] = {} if written else _base_fit(config, data)
    role = str(observation.last_update_split or "train") if written else "train"
    return convention_from_observation(
        observation, subset=_subset(role, data), record_count=data.sizes[role],
        ids_sha256=_split_digest(role, data, train_ids), **known, **common)


def _method(item: Checkpoint, config: PopulationConfig) -> MethodEntry:
    if item.role in ("base", "retrain"):
        return {"name": "train", "function": "bnconvention.zoo.methods:train_classifier", "bn_mode": "train",
                "hyperparameters": dict(config.training), "data": "train" if item.role == "base" else "retain"}
    h = dict(FAMILY_HYPERPARAMETERS[str(item.family)])
    if item.level is not None:
        h["epochs"] = item.level
    function = {"finetune": "train_classifier", "gradascent": "gradient_ascent", "relabel": "random_relabel"}
    return {"name": item.family, "function": f"bnconvention.zoo.methods:{function[str(item.family)]}",
            "bn_mode": item.variant, "hyperparameters": h, "data": h.pop("data")}


def _buffer_treatment(item: Checkpoint) -> str:
    if item.role in ("base", "retrain"):
        return "train"
    if item.role == "twin":
        return "train" if item.arm == "online" else "frozen"
    return "train" if item.variant == "train" else "frozen"


def sidecar(item: Checkpoint, data: RemovalData, *, config: PopulationConfig, build_seed: int,
            cells: Mapping[str, float], convention: FittingConvention) -> PopulationSidecar:
    """The checkpoint's JSON sidecar (see the module docstring)."""
    parent = None if item.role in ("base", "retrain") else item.base_key
    return {
        "format": POPULATION_FORMAT,
        "name": item.name,
        "architecture": {"factory": FACTORY, "kwargs": {"width": config.width}},
        "weights": f"{item.name}.safetensors",
        "build_seed": build_seed,
        "seed": item.seed,
        "role": item.role,
        "family": item.family,
        "variant": item.variant,
        "buffer_update_mode": _buffer_treatment(item),
        "removal": item.removal.to_dict(),
        "forget_ids": {"file": FORGET_FILE, "count": len(data.forget_ids),
                       "record_ids_sha256": record_ids_sha256(data.forget_ids)},
        "parent": parent,
        "twin": None if item.arm is None else {"arm": item.arm, "level": item.level, "partner": item.twin_partner},
        "method": _method(item, config),
        "split_sizes": data.sizes,
        "measured_at_release": dict(cells),
        "convention": to_dict(convention),
    }


def card_text(item: Checkpoint, data: RemovalData, cells: Mapping[str, float]) -> str:
    """The model card: metadata, the ``model-index`` with the measured cells, and a short description."""
    results = [EvalResult(task_type="image-classification", dataset_type=TASK_ID, dataset_name="noisy digits",
                          dataset_split=split, metric_type="accuracy", metric_name=CARD_METRICS[split],
                          metric_value=float(cells[split])) for split in ("forget", "retain", "test")]
    card = ModelCardData(model_name=item.name, eval_results=results, library_name="pytorch",
                         tags=["machine-unlearning", "batchnorm", f"role-{item.role}"],
                         population={"role": item.role, "family": item.family, "variant": item.variant,
                                     "removal": item.removal.key, "seed": item.seed, "arm": item.arm,
                                     "level": item.level,
                                     "forget_ids_sha256": record_ids_sha256(data.forget_ids)})
    what = item.role if item.family is None else f"{item.family} ({item.variant}-mode BatchNorm)"
    return (f"---\n{card.to_yaml()}\n---\n\n# {item.name}\n\n{what} on noisy digits, removal {item.removal.key}, "
            f"seed {item.seed}. Forget ids: `{FORGET_FILE}`.\n")
