"""The population's structure: which checkpoints exist, with which role, family, BN variant, removal and seed.

The paper's primary population is families × procedure variants × removal ratios × seeds. Ours (the default
:class:`PopulationConfig`):

* removals: instance-wise ``r02``, ``r05``, ``r10`` (2 %, 5 %, 10 % of the train split) and ``c3`` (class 3);
* seeds 0, 1, 2; per seed one no-removal **base** (trained on the whole train split), released once per removal
  (same weights, its own forget set and published cells: a known-answer control), and per seed and removal one
  **retrain** reference (trained from scratch on the retained records);
* **unlearned**: three families from the base, each in two variants that differ only in how BatchNorm runs while
  the weights move (``train``: buffers updated online by the unlearning data; ``eval``: buffers frozen, the
  normalisation uses them): ``finetune`` (on retain), ``gradascent`` (on forget), ``relabel`` (forget with random
  wrong labels). A family's two variants share every random draw (batch order, labels);
* **twins** (on ``r10``): ``relabel`` with train-mode BN at weight-movement levels 1, 2 and 4 epochs; the ``online``
  arm keeps the buffers the run updated, the ``frozen`` arm has bit-identical θ and the base's buffers.

Names are unique across the population (``r05-s1-relabel-eval``); a checkpoint lives in ``<removal>/<name>/``.

>>> counts = plan_counts(plan(PopulationConfig()))
>>> counts["total"], counts["base"], counts["retrain"], counts["unlearned"], counts["twin"]
(114, 12, 12, 72, 18)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypedDict

from bnconvention.errors import UsageError
from bnconvention.formats.json_types import JsonObject

Role: TypeAlias = Literal["base", "retrain", "unlearned", "twin"]
Variant: TypeAlias = Literal["train", "eval"]
Arm: TypeAlias = Literal["online", "frozen"]


# The sidecar's ``removal``: what is removed ("class" is a Python keyword, hence this form).
RemovalEntry = TypedDict("RemovalEntry", {"name": str, "kind": str, "ratio": float | None, "class": int | None})

@dataclass(frozen=True)
class Removal:
    """What is removed: a ``ratio`` of the train split (instance-wise) or a whole ``forget_class``."""

    key: str
    ratio: float | None = None
    forget_class: int | None = None

    def to_dict(self) -> RemovalEntry:
        kind = "instances" if self.ratio is not None else "class"
        return {"name": self.key, "kind": kind, "ratio": self.ratio, "class": self.forget_class}


REMOVALS: tuple[Removal, ...] = (Removal("r02", ratio=0.02), Removal("r05", ratio=0.05),
                                 Removal("r10", ratio=0.10), Removal("c3", forget_class=3))
FAMILIES: tuple[str, ...] = ("finetune", "gradascent", "relabel")
VARIANTS: tuple[Variant, ...] = ("train", "eval")
TWIN_FAMILY = "relabel"
TWIN_REMOVAL = "r10"
WIDTH = 12

# Hyperparameters (measured on this task, r10, seed 0: base 0.94 retain / 0.81 test; see docs/zoo.md).
TRAINING: Mapping[str, Any] = {"optimizer": "adam", "lr": 3e-3, "epochs": 12, "anneal_lr": 3e-4, "anneal_epochs": 3,
                               "batch_size": 64}
FAMILY_HYPERPARAMETERS: Mapping[str, Mapping[str, Any]] = {
    "finetune": {"optimizer": "adam", "lr": 1e-3, "epochs": 2, "batch_size": 64, "data": "retain"},
    "gradascent": {"optimizer": "sgd", "lr": 3e-4, "steps": 10, "batch_size": 32, "data": "forget"},
    "relabel": {"optimizer": "adam", "lr": 3e-4, "epochs": 2, "batch_size": 32, "data": "forget"},
}


@dataclass(frozen=True)
class PopulationConfig:
    """Which part of the population to build (the default is the whole of it; tests use a tiny one)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    removals: tuple[str, ...] = tuple(r.key for r in REMOVALS)
    families: tuple[str, ...] = FAMILIES
    variants: tuple[Variant, ...] = VARIANTS
    twin_levels: tuple[int, ...] = (1, 2, 4)
    training: Mapping[str, Any] = field(default_factory=lambda: dict(TRAINING))
    width: int = WIDTH

    def __post_init__(self) -> None:
        known = {r.key for r in REMOVALS}
        for label, values, allowed in (("removal", self.removals, known), ("family", self.families, set(FAMILIES)),
                                       ("variant", self.variants, set(VARIANTS))):
            unknown = [v for v in values if v not in allowed]
            if unknown or not values:
                raise UsageError(f"population {label}s {list(values)}: choose from {sorted(allowed)}")
        if not self.seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds):
            raise UsageError(f"population seeds must be non-negative integers, got {list(self.seeds)}")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in self.twin_levels):
            raise UsageError(f"twin levels are positive epoch counts, got {list(self.twin_levels)}")

    def to_dict(self) -> JsonObject:
        return {"seeds": list(self.seeds), "removals": list(self.removals), "families": list(self.families),
                "variants": list(self.variants), "twin_levels": list(self.twin_levels),
                "training": dict(self.training), "width": self.width}


# A small configuration of the same code, for tests (two removals, one seed, two families, one twin level, short
# training): about 14 checkpoints in seconds.
TINY_CONFIG = PopulationConfig(
    seeds=(0,), removals=("r05", "r10"), families=("finetune", "relabel"), twin_levels=(1,),
    training={"optimizer": "adam", "lr": 3e-3, "epochs": 3, "anneal_lr": 3e-4, "anneal_epochs": 1, "batch_size": 64})


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of the plan. ``parent`` names the checkpoint whose weights it starts from."""

    name: str
    removal: Removal
    seed: int
    role: Role
    family: str | None = None
    variant: Variant | None = None
    level: int | None = None
    arm: Arm | None = None

    @property
    def folder(self) -> str:
        return f"{self.removal.key}/{self.name}"

    @property
    def base_key(self) -> str:
        """The per-seed base weights this checkpoint starts from (every unlearned one and twin)."""
        return f"s{self.seed}-base"

    @property
    def twin_partner(self) -> str | None:
        if self.arm is None:
            return None
        other = "frozen" if self.arm == "online" else "online"
        return self.name.rsplit("-", 1)[0] + f"-{other}"


def removal(key: str) -> Removal:
    for item in REMOVALS:
        if item.key == key:
            return item
    raise UsageError(f"unknown removal {key!r}; known: {', '.join(r.key for r in REMOVALS)}")


def plan(config: PopulationConfig) -> list[Checkpoint]:
    """Every checkpoint of ``config`` in build order (per seed: removals, then that seed's twins)."""
    items: list[Checkpoint] = []
    for seed in config.seeds:
        for key in config.removals:
            where = removal(key)
            prefix = f"{key}-s{seed}"
            items.append(Checkpoint(f"{prefix}-base", where, seed, "base"))
            items.append(Checkpoint(f"{prefix}-retrain", where, seed, "retrain"))
            items += [Checkpoint(f"{prefix}-{family}-{variant}", where, seed, "unlearned", family=family,
                                 variant=variant)
                      for family in config.families for variant in config.variants]
        if TWIN_REMOVAL in config.removals:
            where = removal(TWIN_REMOVAL)
            items += [Checkpoint(f"{TWIN_REMOVAL}-s{seed}-twin{level}-{arm}", where, seed, "twin",
                                 family=TWIN_FAMILY, variant="train", level=level, arm=arm)
                      for level in config.twin_levels for arm in ("online", "frozen")]
    return items


def plan_counts(items: Sequence[Checkpoint]) -> dict[str, int]:
    """How many checkpoints of each role, and in all."""
    roles = Counter(item.role for item in items)
    return {"total": len(items), **{role: roles.get(role, 0) for role in ("base", "retrain", "unlearned", "twin")}}


__all__ = ["FAMILIES", "FAMILY_HYPERPARAMETERS", "REMOVALS", "TINY_CONFIG", "TRAINING", "TWIN_FAMILY", "TWIN_REMOVAL",
           "VARIANTS", "Checkpoint", "PopulationConfig", "Removal", "plan", "plan_counts", "removal"]
