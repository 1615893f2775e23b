"""Build the population (:mod:`bnconvention.zoo.population_plan`): deterministic, cached, atomic, resumable.

``build_population(out_dir)`` writes ``task.npz`` (the noisy digits), one folder per checkpoint
(``<removal>/<name>/``: weights, sidecar, observation, ``forget.txt``, ``README.md``;
:mod:`bnconvention.zoo.population_release`), ``population.yaml`` (the audit spec,
:mod:`bnconvention.zoo.population_spec`) and ``manifest.json`` binding it all to the code, the seed and the
configuration (sha256 of every file). Each seed's base is trained once, for its first release; the other releases
of it copy those weights.

As :func:`bnconvention.zoo.build_zoo`: one torch thread while training (reproducible bytes), a file lock beside
``out_dir``, the build in ``.<out>.partial`` renamed into place when complete, an intact matching build reused,
and an interrupted one resumed: a checkpoint whose card is written is finished and never retrained.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm import tqdm

from bnconvention.authoring.recorder import BNRecorder
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import (
    PARTIAL_KEY,
    atomic_write_bytes,
    file_sha256,
    prepare_partial,
    refuse_foreign_folder,
    replace_directory,
)
from bnconvention.formats.canonical import loads_strict
from bnconvention.standard.models import Observation, to_dict
from bnconvention.zoo.population_data import TASK_FILE, noisy_digits, write_task
from bnconvention.zoo.population_manifest import (
    MANIFEST_NAME,
    POPULATION_FORMAT,
    PopulationManifest,
    population_code_sha256,
    read_population_manifest,
    write_manifest,
)
from bnconvention.zoo.population_plan import Checkpoint, PopulationConfig, plan, removal
from bnconvention.zoo.population_release import FORGET_FILE, card_text, convention_for, forget_text, sidecar
from bnconvention.zoo.population_spec import SPEC_FILE, spec_text
from bnconvention.zoo.population_train import (
    RemovalData,
    batches,
    cells,
    frozen_twin,
    new_population_model,
    removal_data,
    train_base,
    train_retrain,
    unlearn,
)

Tick = Callable[[int], Any]

__all__ = ["build_population", "default_population_dir"]


def default_population_dir(cache_root: Path | str, *, seed: int = 0,
                           config: PopulationConfig | None = None) -> Path:
    """``<cache_root>/population-<code+config, 12 hex>-seed<seed>``: a name that changes with the code or config."""
    key = population_code_sha256(config or PopulationConfig())
    return Path(cache_root) / f"population-{key[:12]}-seed{seed}"


def build_population(out_dir: Path | str, *, config: PopulationConfig | None = None, seed: int = 0,
                     progress: bool = True, force: bool = False) -> PopulationManifest:
    """Build the population into ``out_dir`` (or reuse a matching, intact build there) and return its manifest."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"the population seed must be a non-negative integer, got {seed!r}")
    config = config or PopulationConfig()
    out_dir = Path(out_dir).resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    code = population_code_sha256(config)
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if not force:
            found = _reusable(out_dir, seed=seed, code=code)
            if found is not None:
                return found
        _refuse_foreign_folder(out_dir)
        partial = out_dir.parent / f".{out_dir.name}.partial"
        prepare_partial(partial, {"format": POPULATION_FORMAT, "seed": seed, "code_sha256": code}, resume=not force)
        _build_into(partial, config=config, seed=seed, progress=progress)
        (partial / SPEC_FILE).write_text(spec_text(config), "utf-8")
        write_manifest(partial, config=config, seed=seed, code=code, items=plan(config))
        (partial / PARTIAL_KEY).unlink()
        replace_directory(partial, out_dir)
    return read_population_manifest(out_dir)


def _reusable(out_dir: Path, *, seed: int, code: str) -> PopulationManifest | None:
    if not (out_dir / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = read_population_manifest(out_dir)
    except (ValueError, OSError):
        return None
    if (manifest.format, manifest.seed, manifest.code_sha256) != (POPULATION_FORMAT, seed, code):
        return None
    return None if manifest.verify() else manifest


def _refuse_foreign_folder(out_dir: Path) -> None:
    """A build replaces ``out_dir``: never do that to a file or to a non-empty folder that is not a population."""
    refuse_foreign_folder(out_dir, what="population",
                          is_ours=lambda folder: read_population_manifest(folder).format == POPULATION_FORMAT)


def _build_into(partial: Path, *, config: PopulationConfig, seed: int, progress: bool) -> None:
    task = noisy_digits()
    write_task(partial, task)
    context = _Context(partial=partial, config=config, seed=seed, task_sha256=file_sha256(partial / TASK_FILE),
                       train_ids=tuple(int(i) for i in task.train_ids),
                       data={key: removal_data(task, removal(key)) for key in config.removals})
    items = plan(config)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: reductions run in a fixed order, so the bytes are reproducible
    try:
        total = sum(batches(i, context.data[i.removal.key], config) for i in items)
        with tqdm(total=total, unit="batch", desc="population", file=sys.stderr, disable=not progress,
                  dynamic_ncols=True) as bar:
            for item in items:
                bar.set_description(f"population {item.name}")
                context.build(item, tick=bar.update)
    finally:
        torch.set_num_threads(threads)


class _Context:
    """The build's state: where it writes, the removals' data, and each seed's base (trained once, from file)."""

    def __init__(self, *, partial: Path, config: PopulationConfig, seed: int, task_sha256: str,
                 train_ids: tuple[int, ...], data: dict[str, RemovalData]) -> None:
        self.partial, self.config, self.seed = partial, config, seed
        self.task_sha256, self.train_ids, self.data = task_sha256, train_ids, data

    def build(self, item: Checkpoint, *, tick: Tick) -> None:
        data = self.data[item.removal.key]
        if (self.partial / item.folder / "README.md").is_file():
            tick(batches(item, data, self.config))
            return
        if item.role == "base":
            model, observation = self.base(item.seed, tick=tick, count=batches(item, data, self.config))
            self.release(item, model, observation)
        elif item.role == "retrain":
            model = new_population_model(self.config, build_seed=self.seed, seed=item.seed)
            observation = _observed(model, lambda rec: train_retrain(
                model, data, config=self.config, build_seed=self.seed, seed=item.seed, observer=rec,
                progress=tick))
            self.release(item, model, observation)
        elif item.role == "unlearned" or item.arm == "online":
            model = self.base_copy(item.seed)
            observation = _observed(model, lambda rec: unlearn(
                item, model, data, build_seed=self.seed, epochs=item.level, observer=rec, progress=tick))
            self.release(item, model, observation)
        else:
            online = load_file(str(self.partial / f"{item.removal.key}/{item.twin_partner}/"
                                   f"{item.twin_partner}.safetensors"))
            model = self.base_copy(item.seed)
            model.load_state_dict(frozen_twin(online, model.state_dict()), strict=True)
            self.release(item, model, None)

    def _base_files(self, seed: int) -> tuple[Path, Path]:
        """The seed's base weights and observation: those of its first release (every release has the same)."""
        first = f"{self.config.removals[0]}-s{seed}-base"
        folder = self.partial / self.config.removals[0] / first
        return folder / f"{first}.safetensors", folder / f"{first}.observation.json"

    def base(self, seed: int, *, tick: Tick, count: int) -> tuple[nn.Module, Observation]:
        """The seed's base: trained for its first release, read from that release's files afterwards."""
        weights, observed = self._base_files(seed)
        if weights.is_file() and observed.is_file():
            tick(count)  # trained for an earlier removal (or before a resume)
            observation = Observation.model_validate(loads_strict(observed.read_bytes(), source=str(observed)))
            return self.base_copy(seed), observation
        model = new_population_model(self.config, build_seed=self.seed, seed=seed)
        first = self.data[self.config.removals[0]]
        observation = _observed(model, lambda rec: train_base(
            model, first, config=self.config, build_seed=self.seed, seed=seed, observer=rec, progress=tick))
        return model, observation

    def base_copy(self, seed: int) -> nn.Module:
        model = new_population_model(self.config, build_seed=self.seed, seed=seed)
        model.load_state_dict(load_file(str(self._base_files(seed)[0])), strict=True)
        return model

    def release(self, item: Checkpoint, model: nn.Module, observation: Observation | None) -> None:
        """Write the checkpoint's folder; the card last (it marks the checkpoint finished)."""
        data = self.data[item.removal.key]
        folder = self.partial / item.folder
        folder.mkdir(parents=True, exist_ok=True)
        model.eval()
        measured = cells(model, data)
        _save(model, folder / f"{item.name}.safetensors")
        (folder / FORGET_FILE).write_text(forget_text(data), "utf-8")
        if observation is not None:
            _write_json(folder / f"{item.name}.observation.json", to_dict(observation))
        convention = convention_for(item, observation, data, config=self.config, train_ids=self.train_ids,
                                    task_sha256=self.task_sha256)
        _write_json(folder / f"{item.name}.json", sidecar(item, data, config=self.config, build_seed=self.seed,
                                                          cells=measured, convention=convention))
        atomic_write_bytes(folder / "README.md", card_text(item, data, measured).encode("utf-8"))


def _observed(model: nn.Module, run: Callable[[BNRecorder], Any]) -> Observation:
    """Run with a recorder around the model (the observation is the measured half of the declaration)."""
    with BNRecorder(model, split="train") as recorder:
        run(recorder)
    return recorder.observation()


def _save(model: nn.Module, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(temporary))
    os.replace(temporary, path)


def _write_json(path: Path, data: Any) -> None:
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8"))
