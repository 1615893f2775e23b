"""Declare a statically quantized model: its BatchNorm state and its activation scales, in one 1.1 declaration.

:func:`activation_scales_state` describes a :class:`~bnconvention.refitting.scales.ScaleSet` as the standard's
``activation_scales`` kind (with the digests of its stored tensors and the calibration set that fitted it);
:func:`declare_quantized` adds it beside the BatchNorm state of a model prepared with torch.ao.quantization. The
record's ``digests`` cover the float tensors only (the observers' buffers are the scales, stored beside the weights),
so they equal the digests of the float weights file the model is saved to.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bnconvention.authoring.declaration import declare, default_producer
from bnconvention.errors import DigestMismatchError, QuantizationError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.digests import bn_layer_names, state_dict_digests
from bnconvention.refitting.observers import ObserverSpec, prepare_static
from bnconvention.refitting.scales import ScaleSet, load_scales, observer_sites, read_scales, scales_digests
from bnconvention.standard.models import (
    SCALES_FILENAME,
    ActivationScalesState,
    ActivationSite,
    DataSplit,
    Declaration,
    FittingConvention,
    Producer,
    deployed_state_kinds,
    to_dict,
)
from bnconvention.validation.records import ensure_valid_record

if TYPE_CHECKING:
    import torch


def activation_scales_state(scales: ScaleSet, *, calibration: DataSplit, stored: bool = True,
                            filename: str | None = SCALES_FILENAME) -> ActivationScalesState:
    """The ``activation_scales`` entry of ``scales``; ``stored``: with the digests of its file's tensors."""
    combined, per_site = scales_digests(scales) if stored else (None, {})
    spec = scales.spec
    return ActivationScalesState(
        kind="activation_scales", dtype=spec.dtype, qscheme=spec.qscheme, quant_min=spec.quant_min,
        quant_max=spec.quant_max, observer=spec.observer, percentile=spec.percentile, calibration=calibration,
        sites=[ActivationSite(name=name, scale=scale, zero_point=zero_point, tensors_sha256=per_site.get(name))
               for name, (scale, zero_point) in scales.sites.items()],
        filename=filename if stored else None, scales_sha256=combined)


def float_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict without its observers' buffers: what the float weights file holds."""
    prefixes = tuple(f"{name}." for name in observer_sites(model))
    return {key: value for key, value in model.state_dict().items() if not key.startswith(prefixes)}


def declare_quantized(model: torch.nn.Module, convention: FittingConvention, *, calibration: DataSplit,
                      scales: ScaleSet | None = None, reporting_line: str | None = None,
                      producer: Producer | None = None) -> Declaration:
    """A 1.1 declaration of a prepared, calibrated model: BatchNorm state and activation scales (read from its
    observers unless ``scales`` is given, e.g. a refit's), bound to the float tensors by digests."""
    scales = scales or read_scales(model)
    digests = state_dict_digests(float_state(model), bn_layer_names(model))
    base = declare(model, convention, digests=digests, producer=producer, reporting_line=reporting_line)
    data = to_dict(base)
    data["spec_version"] = deployed_state_kinds()["activation_scales"]
    data["deployed_state"].append(to_dict(activation_scales_state(scales, calibration=calibration)))
    return Declaration.model_validate(data)


def scales_state_of(record: Declaration) -> ActivationScalesState:
    """The activation-scales entry of a declaration; QuantizationError when it has none."""
    states: list[Any] = list(record.deployed_state)  # typed as 1.0's union; a 1.1 record may hold scales
    state = next((s for s in states if isinstance(s, ActivationScalesState)), None)
    if state is None:
        raise QuantizationError("the declaration has no activation_scales deployed state: it is not a declaration "
                                "of a statically quantized model", site=None)
    return state


def check_binds_weights(record: Declaration, *, trainable_sha256: str, running_sha256: str | None,
                        source: str) -> None:
    """DigestMismatchError when the declaration's digests are not those of the weights file's tensors."""
    for field, declared, found in (("trainable_sha256", record.digests.trainable_sha256, trainable_sha256),
                                   ("running_sha256", record.digests.running_sha256, running_sha256)):
        if declared != found:
            raise DigestMismatchError(f"{source} declares digests.{field} {str(declared)[:16]}… but the weights "
                                      f"file's tensors give {str(found)[:16]}…: the declaration describes other "
                                      "weights", field=f"/digests/{field}", expected=declared, found=found)


def refit_scales_declaration(record: Declaration, refit: ScaleSet, *, calibration: DataSplit, filename: str,
                             reporting_line: str) -> Declaration:
    """``record`` (a declaration of a quantized model) with its activation scales replaced by ``refit``, fitted on
    ``calibration`` and stored in ``filename``: every other deployed state, and the θ/φ digests, as declared (a
    scales refit changes neither)."""
    scales_state_of(record)  # a declaration without scales has nothing to replace
    data = to_dict(record)
    data["deployed_state"] = [
        to_dict(activation_scales_state(refit, calibration=calibration, filename=filename))
        if state["kind"] == "activation_scales" else state for state in data["deployed_state"]]
    data.update(spec_version=deployed_state_kinds()["activation_scales"],
                producer=to_dict(default_producer()), reporting_line=reporting_line)
    return Declaration.model_validate(data)


def read_declaration(source: Path) -> Declaration:
    """The declaration in ``source``, validated; QuantizationError for a refit annotation."""
    record = ensure_valid_record(loads_strict(source.read_bytes(), source=str(source)), source=str(source))
    if not isinstance(record, Declaration):
        raise QuantizationError(f"{source} is a refit annotation, not a declaration", site=None)
    return record


def observer_spec_of(state: ActivationScalesState) -> ObserverSpec:
    """The observer a declared ``activation_scales`` state names."""
    return ObserverSpec(observer=state.observer, dtype=state.dtype, qscheme=state.qscheme, quant_min=state.quant_min,
                        quant_max=state.quant_max, percentile=state.percentile)


def shipped_scales(state: ActivationScalesState, path: Path, *, source: str) -> ScaleSet:
    """The scales stored in ``path``, checked against the declared ``state`` (sites, values and digest)."""
    stored = load_scales(path)
    declared = {site.name: (site.scale, site.zero_point) for site in state.sites}
    if set(stored) != set(declared) or any(not math.isclose(stored[n][0], declared[n][0], rel_tol=1e-6)
                                           or stored[n][1] != declared[n][1] for n in declared):
        raise QuantizationError(f"{path} holds other sites or values than {source} declares", site=None)
    scales = ScaleSet(spec=observer_spec_of(state), sites={name: stored[name] for name in declared})  # module order
    if state.scales_sha256 is not None and scales_digests(scales)[0] != state.scales_sha256:
        raise DigestMismatchError(f"{path}: its tensors do not give the declaration's scales_sha256 "
                                  f"{state.scales_sha256[:16]}…", field="/deployed_state")
    return scales


def load_quantized(model: torch.nn.Module, declaration: Path, *,
                   scales: Path | None = None) -> tuple[torch.nn.Module, ScaleSet]:
    """A float ``model`` prepared with the observer the ``declaration`` file names, and the shipped scales from
    ``scales`` (default: the declared ``filename`` beside the declaration, as in a quantized release's folder),
    checked against the declaration (sites, values and digest) before they are used."""
    state = scales_state_of(read_declaration(declaration))
    path = scales if scales is not None else declaration.parent / (state.filename or SCALES_FILENAME)
    shipped = shipped_scales(state, path, source=str(declaration))
    return prepare_static(model, shipped.spec), shipped


__all__ = ["activation_scales_state", "check_binds_weights", "declare_quantized", "float_state", "load_quantized",
           "observer_spec_of", "read_declaration", "refit_scales_declaration", "scales_state_of",
           "shipped_scales"]
