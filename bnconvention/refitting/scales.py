"""Activation-quantization scales as a deployed state: read them, evaluate with them, refit them
(docs/statistics.md#activation-scales-the-second-deployed-state).

A model quantized with ``torch.ao.quantization`` (eager ``prepare`` or FX ``prepare_fx``, static post-training)
carries one observer module per activation site; its ``calculate_qparams()`` is the site's scale and zero point.
:func:`read_scales` reads them all (refusing a model without observers, an observer that never saw data, a NaN or
non-positive scale, naming the site). :func:`fake_quantized` evaluates a model at given scales: each site's output is
fake-quantized (``torch.fake_quantize_per_tensor_affine``) while weights stay float, which is what the activation
state alone changes. :func:`refit_scales` recalibrates every site with a fresh observer of the same type on a pool
(a retain-only calibration set), in eval mode under ``torch.no_grad()``: θ and the BatchNorm buffers are proven
bit-identical by their digests before and after, and every observer is restored, so the model leaves exactly as it
came; the refit scales are returned. The stored form (a safetensors file beside the weights, docs/standard.md) is
:func:`scales_tensors` / :func:`save_scales` / :func:`load_scales`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save
from torch.ao.quantization import FakeQuantizeBase, ObserverBase
from tqdm import tqdm

from bnconvention.errors import QuantizationError, WeightsChangedError
from bnconvention.formats.atomic import WRITE_TEMP_SUFFIX, atomic_write_bytes, remove_stale_temps
from bnconvention.formats.digests import bn_layer_names, state_dict_digests
from bnconvention.refitting.observers import ObserverSpec, ValueObserver, describe_observer, make_observer
from bnconvention.refitting.pool import PoolReader, run_forward


@dataclass(frozen=True)
class ScaleSet:
    """Every site's (scale, zero point), in module order, and how they were observed (one spec for all sites)."""

    spec: ObserverSpec
    sites: dict[str, tuple[float, int]]

    def log_ratios(self, other: ScaleSet) -> dict[str, float]:
        """ln(other scale / this scale) per site: the seed's measure of a scale shift (0: unchanged)."""
        return {name: math.log(other.sites[name][0] / scale) for name, (scale, _) in self.sites.items()}


def _is_observer(module: Any) -> bool:
    return isinstance(module, (ObserverBase, FakeQuantizeBase, ValueObserver))


def _identity(x: Any) -> Any:
    return x


@contextlib.contextmanager
def observers_kept(model: torch.nn.Module) -> Iterator[None]:
    """Every observer passes its input through untouched while the context is open: forwards inside it (an
    evaluation, a refit's calibration) neither feed nor change the shipped observers."""
    sites = [module for name, module in model.named_modules() if name and _is_observer(module)]
    for module in sites:
        module.forward = _identity  # an instance attribute shadows the class's forward; hooks still run
    try:
        yield
    finally:
        for module in sites:
            del module.forward


def _site_module(modules: Mapping[str, Any], name: str) -> Any:
    """The module whose output a site observes: the observer itself, or for stored scales of a float model
    (no observers) the module ``<parent>`` of a site ``<parent>.activation_post_process``."""
    if name in modules:
        return modules[name]
    parent, _, leaf = name.rpartition(".")
    if leaf == "activation_post_process" and parent in modules:
        return modules[parent]
    raise QuantizationError(f"site {name!r} of the scales is not a module of the model; the scales belong to "
                            "another model", site=name)


def observer_sites(model: torch.nn.Module) -> dict[str, Any]:
    """Every activation observer of ``model`` by module path, in module order; QuantizationError when none."""
    sites = {name: module for name, module in model.named_modules() if name and _is_observer(module)}
    if not sites:
        raise QuantizationError("the model has no activation observers: it is not a statically quantized model "
                                "prepared with torch.ao.quantization (prepare / prepare_fx), or its observers were "
                                "removed by convert; declare or refit the prepared model", site=None)
    return sites


def site_specs(model: torch.nn.Module) -> tuple[ObserverSpec, dict[str, Any]]:
    """The one observer spec every site shares, and the sites; a model mixing observer types is refused."""
    sites = observer_sites(model)
    specs = {name: describe_observer(module, site=name) for name, module in sites.items()}
    first_name, first = next(iter(specs.items()))
    for name, spec in specs.items():
        if replace(spec, percentile=None) != replace(first, percentile=None) or spec.percentile != first.percentile:
            raise QuantizationError(f"site {name!r} is observed by {spec} but site {first_name!r} by {first}; the "
                                    "standard declares one observer for all sites of a model", site=name)
    return first, sites


def checked_qparams(module: Any, *, site: str) -> tuple[float, int]:
    """A site's (scale, zero point) from its observer; QuantizationError when it saw no data or is NaN/≤ 0."""
    min_val = getattr(module, "min_val", None)
    if isinstance(min_val, torch.Tensor) and min_val.numel() == 1 and math.isinf(float(min_val)):
        raise QuantizationError(f"site {site!r}: the observer saw no data (min_val is inf); calibrate the model "
                                "before declaring its scales", site=site)
    scale, zero_point = module.calculate_qparams()
    return check_scale(float(scale.reshape(-1)[0]), int(zero_point.reshape(-1)[0]), site=site)


def check_scale(scale: float, zero_point: int, *, site: str) -> tuple[float, int]:
    """``(scale, zero_point)`` when the scale is a finite positive number; QuantizationError naming the site."""
    if not math.isfinite(scale) or scale <= 0:
        raise QuantizationError(f"site {site!r}: scale {scale!r} is not a finite positive number (an observer that "
                                "saw NaN/inf activations or no data); nothing was written", site=site)
    return scale, zero_point


def read_scales(model: torch.nn.Module) -> ScaleSet:
    """The scales a prepared and calibrated model would deploy."""
    spec, sites = site_specs(model)
    return ScaleSet(spec=spec, sites={name: checked_qparams(module, site=name) for name, module in sites.items()})


@contextlib.contextmanager
def fake_quantized(model: torch.nn.Module, scales: ScaleSet) -> Iterator[torch.nn.Module]:
    """``model`` with each site's output fake-quantized at ``scales`` while the context is open."""
    modules = dict(model.named_modules())
    targets = {name: _site_module(modules, name) for name in scales.sites}
    spec = scales.spec

    def hook_for(scale: float, zero_point: int) -> Any:
        def hook(_module: Any, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
            return torch.fake_quantize_per_tensor_affine(output, scale, zero_point, spec.quant_min, spec.quant_max)
        return hook

    handles = [targets[name].register_forward_hook(hook_for(scale, zp)) for name, (scale, zp) in scales.sites.items()]
    try:
        with observers_kept(model):
            yield model
    finally:
        for handle in handles:
            handle.remove()


def _float_digests(model: torch.nn.Module, sites: Mapping[str, Any]) -> tuple[str, str | None]:
    """Digests of θ and of the BatchNorm buffers, leaving out the observers' own buffers (they are the scales)."""
    prefixes = tuple(f"{name}." for name in sites)
    state = {key: value for key, value in model.state_dict().items() if not key.startswith(prefixes)}
    digests = state_dict_digests(state, bn_layer_names(model))
    return digests.trainable_sha256, digests.running_sha256


@dataclass(frozen=True)
class ScalesRefit:
    """What :func:`refit_scales` did: the scales as shipped and as refit, the samples seen, and the digests."""

    shipped: ScaleSet
    refit: ScaleSet
    samples: int
    trainable_sha256: str
    running_sha256: str | None


def refit_scales(model: torch.nn.Module, pool: Any, *, input_key: str = "input",
                 shipped: ScaleSet | None = None, progress: bool = False) -> ScalesRefit:
    """Recalibrate every site on ``pool`` with a fresh observer of its type; the model is left as it came.

    ``shipped``: the scales as shipped when they are not the observers' own (loaded from a scales file). The pool's
    batches and the fresh observers follow the model's device. ``progress``: a tqdm bar of the batches on stderr."""
    spec, sites = site_specs(model)
    if shipped is None:
        shipped = ScaleSet(spec=spec, sites={name: checked_qparams(m, site=name) for name, m in sites.items()})
    elif set(shipped.sites) != set(sites):
        extra = sorted(set(shipped.sites) ^ set(sites))[0]
        raise QuantizationError(f"site {extra!r} is in only one of the shipped scales and the model's observers",
                                site=extra)
    before = _float_digests(model, sites)
    device = _device(model)
    fresh = {name: make_observer(spec).to(device) for name in sites}
    was_training = model.training
    handles = [sites[name].register_forward_hook(lambda _m, _i, out, f=fresh[name]: f(out)) for name in sites]
    reader = PoolReader(pool, dtype=_float_dtype(model), input_key=input_key, device=device)
    try:
        model.eval()
        with torch.no_grad(), observers_kept(model):
            _calibrate(model, reader, total=_length(pool), progress=progress)
        if not reader.batch_sizes:
            raise QuantizationError("the calibration pool yielded no batches", site=None)
        refit = ScaleSet(spec=spec, sites={name: checked_qparams(fresh[name], site=name) for name in sites})
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    after = _float_digests(model, sites)
    if after != before:
        raise WeightsChangedError(f"the weights or BatchNorm buffers changed while calibrating (digests {before} "
                                  f"became {after}); the scales refit cannot be trusted for this model")
    return ScalesRefit(shipped=shipped, refit=refit, samples=reader.samples, trainable_sha256=before[0],
                       running_sha256=before[1])


def _calibrate(model: torch.nn.Module, reader: PoolReader, *, total: int | None, progress: bool) -> None:
    """One eval-mode forward per pool batch (the caller holds no_grad and the hooks feeding the fresh observers)."""
    with tqdm(total=total, desc="scales refit", unit="batch", disable=not progress, leave=False) as bar:
        for index, x in enumerate(reader):
            run_forward(model, x, where=f"calibration batch {index}")
            bar.update(1)


def _length(pool: Any) -> int | None:
    try:
        return len(pool)
    except TypeError:
        return None


def _device(model: torch.nn.Module) -> torch.device:
    return next((t.device for t in model.parameters()), torch.device("cpu"))


def _float_dtype(model: torch.nn.Module) -> torch.dtype:
    floats = [t.dtype for t in model.parameters() if t.is_floating_point()]
    return floats[0] if floats else torch.float32


# --- the stored form ------------------------------------------------------------------------------------------------


def scales_tensors(scales: ScaleSet) -> dict[str, torch.Tensor]:
    """The tensors of the scales file: ``<site>.scale`` (float32, [1]) and ``<site>.zero_point`` (int64, [1])."""
    out: dict[str, torch.Tensor] = {}
    for name, (scale, zero_point) in scales.sites.items():
        check_scale(scale, zero_point, site=name)  # before anything is written
        out[f"{name}.scale"] = torch.tensor([scale], dtype=torch.float32)
        out[f"{name}.zero_point"] = torch.tensor([zero_point], dtype=torch.int64)
    return out


def scales_digests(scales: ScaleSet) -> tuple[str, dict[str, str]]:
    """The combined digest of every site's tensors and each site's own (``bnconvention-tensors/1``)."""
    tensors = scales_tensors(scales)
    per_site = {name: state_dict_digests({k: tensors[k] for k in (f"{name}.scale", f"{name}.zero_point")},
                                         []).trainable_sha256 for name in scales.sites}
    return state_dict_digests(tensors, []).trainable_sha256, per_site


def save_scales(path: Path, scales: ScaleSet) -> None:
    """Write the scales file atomically (the previous file, if any, stays intact on failure)."""
    remove_stale_temps(path, suffix=WRITE_TEMP_SUFFIX)
    atomic_write_bytes(path, save(scales_tensors(scales), metadata={"format": "pt"}))


def parse_scales_tensors(tensors: Mapping[str, torch.Tensor], *, source: str) -> dict[str, tuple[float, int]]:
    """Sites of a scales file's tensors, each checked; QuantizationError naming the first bad site."""
    sites: dict[str, tuple[float, int]] = {}
    for key in tensors:
        site, _, leaf = key.rpartition(".")
        if leaf not in ("scale", "zero_point") or not site:
            raise QuantizationError(f"{source}: tensor {key!r} is not '<site>.scale' or '<site>.zero_point'",
                                    site=site or None)
        partner = f"{site}.zero_point" if leaf == "scale" else f"{site}.scale"
        if partner not in tensors:
            raise QuantizationError(f"{source}: site {site!r} has {leaf} but no {partner.rpartition('.')[2]}",
                                    site=site)
        if leaf == "scale":
            scale, zero_point = tensors[key], tensors[partner]
            if scale.numel() != 1 or zero_point.numel() != 1 or zero_point.is_floating_point():
                raise QuantizationError(f"{source}: site {site!r}: a scale and an integer zero point have one "
                                        "element each (per-tensor quantization)", site=site)
            sites[site] = check_scale(float(scale.reshape(-1)[0]), int(zero_point.reshape(-1)[0]), site=site)
    return sites


def load_scales(path: Path) -> dict[str, tuple[float, int]]:
    """The sites of a scales file (safetensors; never a pickle)."""
    return parse_scales_tensors(load_file(str(path)), source=str(path))


__all__ = ["ScaleSet", "ScalesRefit", "check_scale", "checked_qparams", "fake_quantized", "load_scales",
           "observer_sites", "observers_kept", "parse_scales_tensors", "read_scales", "refit_scales", "save_scales",
           "scales_digests", "scales_tensors", "site_specs"]
