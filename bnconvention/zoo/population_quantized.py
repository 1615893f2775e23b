"""The population with a second deployed state: static 8-bit activation scales beside every checkpoint.

``build_quantized_population(out_dir)`` is opt-in (``bnconvention zoo build --population --quantized``); the
default build (:mod:`bnconvention.zoo.population_build`) and its manifest do not change. It builds (or reuses) the
float population in ``.<out>.quantized`` beside ``out_dir``, then adds to each checkpoint folder

* ``activation_scales.safetensors``: one scale and zero point per activation site (the standard's stored form), from
  observers of one type (``minmax`` by default) on the output of every convolution, norm and the head, calibrated on
  a fixed draw (seeded by the build seed) of ``calibration_size`` records of the checkpoint's **own training data**
  with eval-mode forwards: the train split, forget records included, for the bases, the unlearned checkpoints and
  the twins (the scales a release calibrated before it unlearned); the retained records for a retrain reference
  (the data it was trained on, so it stays a known answer);
* ``declaration.json``: the 1.1 declaration of both deployed states (the sidecar's BatchNorm convention and the
  ``activation_scales`` state), bound by digests to the float weights file and the scales file. Written last: its
  presence marks the checkpoint finished, so an interrupted build resumes where it stopped.

The float weights, sidecars, cards and observations stay byte for byte. ``population.yaml`` gains the audit spec's
``quantization`` section, and ``manifest.json`` (rehashed: every file) a ``quantization`` entry naming the observer,
the calibration size, the seed and the digest of this code. The staging folder is renamed onto ``out_dir`` when
everything is written, so a reader sees a complete quantized population or none.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch
from filelock import FileLock
from tqdm import tqdm

from bnconvention.authoring.scales_sources import DECLARATION_FILE
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes, refuse_foreign_folder, replace_directory
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.json_types import JsonObject
from bnconvention.refitting.observers import observer_spec
from bnconvention.refitting.scales import save_scales
from bnconvention.standard.models import (
    SCALES_FILENAME,
    DatasetRef,
    DataSplit,
    FittingConvention,
    ObserverType,
    to_dict,
)
from bnconvention.standard.naming import record_ids_sha256
from bnconvention.zoo.population_build import build_population
from bnconvention.zoo.population_data import TASK_ID, NoisyDigits, forget_ids, noisy_digits, split_indices
from bnconvention.zoo.population_manifest import (
    MANIFEST_NAME,
    POPULATION_FORMAT,
    PopulationManifest,
    population_code_sha256,
    read_population_manifest,
    write_manifest,
)
from bnconvention.zoo.population_plan import PopulationConfig, plan, removal
from bnconvention.zoo.population_release import PopulationSidecar
from bnconvention.zoo.population_spec import SPEC_FILE
from bnconvention.zoo.quantized import calibrate_and_declare

QUANTIZATION_KEY = "quantization"
_CODE_FILES = ("zoo/population_quantized.py", "zoo/quantized.py", "refitting/observers.py", "refitting/scales.py",
               "authoring/activation_scales.py")

__all__ = ["DECLARATION_FILE", "QuantizationSettings", "build_quantized_population", "calibration_split",
           "quantize_checkpoint", "quantization_entry"]


@dataclass(frozen=True)
class QuantizationSettings:
    """How the shipped scales are calibrated: the observer type and the number of records."""

    observer: ObserverType = "minmax"
    percentile: float | None = None
    calibration_size: int = 256

    def __post_init__(self) -> None:
        if isinstance(self.calibration_size, bool) or not isinstance(self.calibration_size, int) \
                or self.calibration_size < 1:
            raise UsageError(f"--calibration-size must be a positive integer, got {self.calibration_size!r}")
        observer_spec(self.observer, percentile=self.percentile)  # the observer/percentile pair is checked


class QuantizationEntry(TypedDict):
    """The manifest's ``quantization`` entry (what a quantized population was calibrated with)."""

    observer: ObserverType
    percentile: float | None
    calibration_size: int
    seed: int
    code_sha256: str


def quantization_entry(settings: QuantizationSettings, *, seed: int) -> QuantizationEntry:
    """The manifest's ``quantization`` entry: the settings, the draw's seed and the digest of the code."""
    package = Path(__file__).resolve().parent.parent
    code = {name: hashlib.sha256((package / name).read_bytes()).hexdigest() for name in _CODE_FILES}
    return {"observer": settings.observer, "percentile": settings.percentile,
            "calibration_size": settings.calibration_size, "seed": seed, "code_sha256": canonical_sha256(code)}


def calibration_split(task: NoisyDigits, sidecar: PopulationSidecar, *, size: int, seed: int
                      ) -> tuple[torch.Tensor, DataSplit]:
    """The inputs a checkpoint's shipped scales are calibrated on and the data split describing them: ``size``
    records of its own training data (the retained records for a retrain reference, else the train split)."""
    key = str(sidecar["removal"]["name"])
    item = removal(key)
    role = "retain" if sidecar.get("role") == "retrain" else "train"
    rows = split_indices(task, forget_ids(task, ratio=item.ratio, forget_class=item.forget_class))[role]
    if size > len(rows):
        raise UsageError(f"a calibration set of {size} records does not fit the {role} split of removal {key} "
                         f"({len(rows)} records)")
    picks = rows[np.sort(np.random.default_rng(seed).choice(len(rows), size=size, replace=False))]
    ids = [int(i) for i in task.ids[picks]]
    what = "train split" if role == "train" else f"train split without forget set {key}"
    split = DataSplit(role=role, dataset=DatasetRef(id=TASK_ID),  # type: ignore[arg-type]
                      subset=f"{size} records of the {what} drawn with seed {seed}", record_count=size,
                      ids_sha256=record_ids_sha256(ids), sampling_seed=seed)
    return torch.from_numpy(task.x[picks].copy()), split


def quantize_checkpoint(manifest: PopulationManifest, name: str, *, settings: QuantizationSettings, seed: int,
                        task: NoisyDigits) -> bool:
    """Write one checkpoint's scales and declaration (the declaration last); False when it was already done."""
    folder = manifest.folder(name)
    if (folder / DECLARATION_FILE).is_file():
        return False
    sidecar = manifest.sidecar(name)
    x, calibration = calibration_split(task, sidecar, size=settings.calibration_size, seed=seed)
    scales, record = calibrate_and_declare(
        manifest.load_model(name), observer_spec(settings.observer, percentile=settings.percentile), x,
        convention=FittingConvention.model_validate(sidecar["convention"]), calibration=calibration)
    save_scales(folder / SCALES_FILENAME, scales)
    atomic_write_bytes(folder / DECLARATION_FILE, (json.dumps(to_dict(record), indent=2) + "\n").encode("utf-8"))
    return True


SPEC_SECTION = """
# The activation scales beside each checkpoint (built with --quantized): audited as a second deployed state,
# recalibrated on R retain-only draws (R: the spec's replicates) at bit-identical weights and BatchNorm buffers
# (docs/population.md).
quantization:
  calibration_size: {size}
"""


def build_quantized_population(out_dir: Path | str, *, config: PopulationConfig | None = None, seed: int = 0,
                               settings: QuantizationSettings | None = None, progress: bool = True,
                               force: bool = False) -> PopulationManifest:
    """Build the quantized population into ``out_dir`` (or reuse a matching, intact one); see the module docstring."""
    config = config or PopulationConfig()
    settings = settings or QuantizationSettings()
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    wanted = quantization_entry(settings, seed=seed)
    with FileLock(str(out.parent / f".{out.name}.lock")):
        if not force and _reusable(out, config=config, seed=seed, wanted=wanted):
            return read_population_manifest(out)
        refuse_foreign_folder(out, what="population",
                              is_ours=lambda folder: read_population_manifest(folder).format == POPULATION_FORMAT)
        staging = out.parent / f".{out.name}.quantized"
        manifest = build_population(staging, config=config, seed=seed, progress=progress, force=force)
        if _entry(staging) not in (None, wanted):  # quantized before with other settings: start again
            manifest = build_population(staging, config=config, seed=seed, progress=progress, force=True)
        task = noisy_digits()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the float build: reductions in a fixed order
        try:
            for name in tqdm(manifest.names, desc="activation scales", unit="checkpoint", file=sys.stderr,
                             disable=not progress, dynamic_ncols=True):
                quantize_checkpoint(manifest, name, settings=settings, seed=seed, task=task)
        finally:
            torch.set_num_threads(threads)
        _finish(staging, config=config, seed=seed, code=manifest.code_sha256, wanted=wanted)
        replace_directory(staging, out)
    return read_population_manifest(out)


def _entry(root: Path) -> JsonObject | None:
    try:
        data = loads_strict((root / MANIFEST_NAME).read_bytes(), source=str(root / MANIFEST_NAME))
    except (OSError, ValueError):
        return None
    entry = data.get(QUANTIZATION_KEY) if isinstance(data, dict) else None
    return entry if isinstance(entry, dict) else None


def _reusable(out: Path, *, config: PopulationConfig, seed: int, wanted: QuantizationEntry) -> bool:
    if _entry(out) != wanted:
        return False
    manifest = read_population_manifest(out)
    return (manifest.format, manifest.seed, manifest.code_sha256) == (
        POPULATION_FORMAT, seed, population_code_sha256(config)) and not manifest.verify()


def _finish(staging: Path, *, config: PopulationConfig, seed: int, code: str, wanted: QuantizationEntry) -> None:
    """The spec's quantization section, then the manifest over every file with the ``quantization`` entry."""
    spec = staging / SPEC_FILE
    text = spec.read_text("utf-8")
    if f"\n{QUANTIZATION_KEY}:" not in text:
        section = SPEC_SECTION.format(size=wanted["calibration_size"])
        atomic_write_bytes(spec, (text + section).encode("utf-8"))
    write_manifest(staging, config=config, seed=seed, code=code, items=plan(config))
    path = staging / MANIFEST_NAME
    data = loads_strict(path.read_bytes(), source=str(path))
    data[QUANTIZATION_KEY] = wanted
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))
