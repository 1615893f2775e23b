"""Declare a statically quantized model: its BatchNorm state and its activation scales, in one 1.1 declaration.

:func:`activation_scales_state` describes a :class:`~bnconvention.refit.scales.ScaleSet` as the standard's
``activation_scales`` kind (with the digests of its stored tensors and the calibration set that fitted it);
:func:`declare_quantized` adds it beside the BatchNorm state of a model prepared with torch.ao.quantization. The
record's ``digests`` cover the float tensors only (the observers' buffers are the scales, stored beside the weights),
so they equal the digests of the float weights file the model is saved to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnconvention.authoring.declaration import declare
from bnconvention.formats.digests import bn_layer_names, state_dict_digests
from bnconvention.refit.scales import ScaleSet, observer_sites, read_scales, scales_digests
from bnconvention.standard.models import (
    SCALES_FILENAME,
    ActivationScalesState,
    ActivationSite,
    DataSplit,
    DeclarationV11,
    FittingConvention,
    Producer,
    to_dict,
)

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
                      producer: Producer | None = None) -> DeclarationV11:
    """A 1.1 declaration of a prepared, calibrated model: BatchNorm state and activation scales (read from its
    observers unless ``scales`` is given, e.g. a refit's), bound to the float tensors by digests."""
    scales = scales or read_scales(model)
    digests = state_dict_digests(float_state(model), bn_layer_names(model))
    base = declare(model, convention, digests=digests, producer=producer, reporting_line=reporting_line)
    data = to_dict(base)
    data["spec_version"] = "1.1"
    data["deployed_state"].append(to_dict(activation_scales_state(scales, calibration=calibration)))
    return DeclarationV11.model_validate(data)


__all__ = ["activation_scales_state", "declare_quantized", "float_state"]
