"""Statically quantized variants of the zoo's models: the second deployed state on known checkpoints.

:func:`build_quantized` takes variants of a built zoo (BatchNorm and GroupNorm) and writes, for each, a folder
``<out>/<name>-q8/`` holding

* ``model.safetensors``: the zoo's float weights, byte for byte (copied; θ and φ are the zoo's own);
* ``activation_scales.safetensors``: one scale and zero point per activation site (docs/standard.md, "What changed
  in 1.1"), from observers of one type (``minmax`` by default) on the output of every convolution, norm and the head
  (9 sites), calibrated on ``size`` records of the **train** split drawn with ``seed`` (forget records included: the
  scales a release calibrated before it unlearned, which a retain-only refit then replaces);
* ``declaration.json``: the 1.1 declaration of both deployed states, bound to the two files by digests.

It is gated: the zoo build, its manifest and its code digest do not change, so every zoo-based output stays as it
was; the quantized folders are made only when asked for (``benchmarks/quant_scales.py``, the tests).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from bnconvention.authoring.activation_scales import declare_quantized
from bnconvention.authoring.declaration import make_convention
from bnconvention.data.digits import DIGITS_DATASET_ID, DIGITS_EVAL_TRANSFORM
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.refitting.observers import ObserverSpec, observer_spec, prepare_static
from bnconvention.refitting.scales import ScaleSet, read_scales, save_scales
from bnconvention.standard.models import (
    SCALES_FILENAME,
    DatasetRef,
    DataSplit,
    Declaration,
    FittingConvention,
    ObserverType,
    to_dict,
)
from bnconvention.standard.naming import record_ids_sha256
from bnconvention.zoo.manifest import ZooManifest
from bnconvention.zoo.variants import FORGET_CLASSES, split_tensors

QUANTIZED_SUFFIX = "-q8"
DEFAULT_VARIANTS = ("bn-base", "gn-base", "bn-ga-train", "gn-ga-train")


def calibration_draw(role: str, *, size: int, seed: int) -> tuple[torch.Tensor, list[int], DataSplit]:
    """``size`` records of split ``role`` drawn with ``seed``: their inputs, ids and the data split describing them."""
    data = split_tensors(FORGET_CLASSES)
    available = len(data.ids[role])
    if not 1 <= size <= available:
        raise UsageError(f"a calibration set of {size} records does not fit the {role} split ({available} records)")
    picks = np.sort(np.random.default_rng(seed).choice(available, size=size, replace=False))
    ids = [data.ids[role][i] for i in picks]
    split = DataSplit(role=role, dataset=DatasetRef(id=DIGITS_DATASET_ID),  # type: ignore[arg-type]
                      subset=f"{size} records of the {role} split drawn with seed {seed}", record_count=size,
                      ids_sha256=record_ids_sha256(ids), sampling_seed=seed)
    return data.x[role][torch.from_numpy(picks)], ids, split


def _convention(zoo: ZooManifest, name: str) -> FittingConvention:
    config = zoo.config(name)
    if "convention" in config:
        return FittingConvention.model_validate(config["convention"])
    return make_convention(buffer_update_mode="untouched", role="train", dataset_id=DIGITS_DATASET_ID,
                           subset="no running statistics (channel absent)", transform=DIGITS_EVAL_TRANSFORM.standard(),
                           rule="exact", dropout="absent")


def calibrate_and_declare(model: torch.nn.Module, spec: ObserverSpec, x: torch.Tensor, *,
                          convention: FittingConvention, calibration: DataSplit) -> tuple[ScaleSet, Declaration]:
    """The scales of the float ``model`` prepared with ``spec`` and calibrated (eval-mode forwards) on ``x``, and
    their 1.1 declaration beside the BatchNorm state ``convention`` describes: the zoo's and the population's
    quantized checkpoints are made by this one rule."""
    prepared = prepare_static(model, spec)
    with torch.no_grad():
        for batch in x.split(128):
            prepared(batch)
    scales = read_scales(prepared)
    line = f"activation scales ({spec.observer}) calibrated on {calibration.record_count} {calibration.role} records"
    return scales, declare_quantized(prepared, convention, calibration=calibration, scales=scales,
                                     reporting_line=line)


def quantize_variant(zoo: ZooManifest, name: str, out_dir: Path, *, observer: ObserverType = "minmax",
                     percentile: float | None = None, size: int = 256, seed: int = 0) -> Path:
    """Write ``<out_dir>/<name>-q8/`` (see the module docstring) and return it; written whole or not at all."""
    x, _, calibration = calibration_draw("train", size=size, seed=seed)
    scales, record = calibrate_and_declare(zoo.load_model(name), observer_spec(observer, percentile=percentile), x,
                                           convention=_convention(zoo, name), calibration=calibration)
    target = out_dir / f"{name}{QUANTIZED_SUFFIX}"
    partial = out_dir / f".{name}{QUANTIZED_SUFFIX}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.copyfile(zoo.weights_path(name), partial / "model.safetensors")
    save_scales(partial / SCALES_FILENAME, scales)
    atomic_write_bytes(partial / "declaration.json",
                       (json.dumps(to_dict(record), indent=2) + "\n").encode("utf-8"))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def build_quantized(zoo: ZooManifest, out_dir: Path | str, *, variants: Sequence[str] = DEFAULT_VARIANTS,
                    observer: ObserverType = "minmax", percentile: float | None = None, size: int = 256,
                    seed: int = 0) -> list[Path]:
    """The quantized variants of ``variants`` (default: the BatchNorm and GroupNorm base and gradient-ascent
    models), one folder each under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [quantize_variant(zoo, name, out, observer=observer, percentile=percentile, size=size, seed=seed)
            for name in variants]


__all__ = ["DEFAULT_VARIANTS", "QUANTIZED_SUFFIX", "build_quantized", "calibrate_and_declare", "calibration_draw",
           "quantize_variant"]
