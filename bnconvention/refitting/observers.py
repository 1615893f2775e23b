"""Activation observers: what each observer type of the standard computes, and how a torch.ao observer is named.

The standard's ``observer`` (docs/standard.md, "What changed in 1.1") maps onto torch.ao.quantization as follows:

* ``minmax``: ``MinMaxObserver`` with ``per_tensor_affine``: the observed range [min, max];
* ``absmax``: ``MinMaxObserver`` with ``per_tensor_symmetric``: [-a, a] with a = max |x|;
* ``histogram``: ``HistogramObserver``: torch's L2-error search over a running histogram;
* ``percentile`` and ``mse``: :class:`PercentileObserver` and :class:`MSEObserver` here (torch.ao has neither).
  Both keep every observed value (float32, on the CPU) until :meth:`calculate_qparams`: calibration sets of a few
  thousand records, not streams. ``percentile`` clips at the nearest-rank percentile p of the values (of |x| when
  symmetric); ``mse`` picks, among the ranges t · [min, max] (t = 1/100, 2/100, ..., 1; t · a when symmetric), the
  one whose fake quantization has the least mean squared error over the values (over 16384 evenly spaced order
  statistics of them when there are more).

Every scale and zero point comes from torch's own ``_calculate_qparams`` for the range chosen, so the four types
agree with torch.ao on rounding, eps and the zero point. Other observers (moving averages, per-channel) are refused
by :func:`describe_observer` with the site's name: their state is not a per-tensor calibration of a set.
"""

from __future__ import annotations

import copy
import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch.ao.quantization import QConfig, default_weight_observer, prepare
from torch.ao.quantization.observer import HistogramObserver, MinMaxObserver, MovingAverageMinMaxObserver

from bnconvention.errors import QuantizationError
from bnconvention.standard.models import ObserverType, QScheme, QuantDtype

MSE_STEPS = 100
MSE_SAMPLE = 16384


@dataclass(frozen=True)
class ObserverSpec:
    """How one site is observed: the standard's observer type and the quantized range it calibrates."""

    observer: ObserverType
    dtype: QuantDtype
    qscheme: QScheme
    quant_min: int
    quant_max: int
    percentile: float | None = None


def _torch_dtype(dtype: QuantDtype) -> Any:
    return torch.quint8 if dtype == "quint8" else torch.qint8


def _torch_qscheme(qscheme: QScheme) -> Any:
    return torch.per_tensor_affine if qscheme == "per_tensor_affine" else torch.per_tensor_symmetric


def qparams_for_range(spec: ObserverSpec, low: torch.Tensor, high: torch.Tensor) -> tuple[float, int]:
    """torch.ao's scale and zero point for the range [low, high] under ``spec``'s dtype, scheme and range."""
    observer = MinMaxObserver(dtype=_torch_dtype(spec.dtype), qscheme=_torch_qscheme(spec.qscheme),
                              quant_min=spec.quant_min, quant_max=spec.quant_max)
    scale, zero_point = observer._calculate_qparams(low.reshape(()).float(), high.reshape(()).float())
    return float(scale.reshape(-1)[0]), int(zero_point.reshape(-1)[0])


def describe_observer(module: Any, *, site: str) -> ObserverSpec:
    """The :class:`ObserverSpec` of a torch.ao or bnconvention observer module, or a QuantizationError."""
    if isinstance(module, ValueObserver):
        return module.spec
    if isinstance(module, MovingAverageMinMaxObserver) or not isinstance(module, (MinMaxObserver, HistogramObserver)):
        raise QuantizationError(f"site {site!r}: observer {type(module).__name__} is not one bnconvention can "
                                "declare or refit; use MinMaxObserver (minmax, absmax), HistogramObserver, or "
                                "bnconvention's PercentileObserver or MSEObserver", site=site)
    dtypes = {torch.quint8: "quint8", torch.qint8: "qint8"}
    schemes = {torch.per_tensor_affine: "per_tensor_affine", torch.per_tensor_symmetric: "per_tensor_symmetric"}
    if module.dtype not in dtypes or module.qscheme not in schemes:
        raise QuantizationError(f"site {site!r}: {module.dtype} / {module.qscheme} is not a per-tensor 8-bit "
                                "activation scheme (quint8 or qint8, per_tensor_affine or per_tensor_symmetric)",
                                site=site)
    qscheme: QScheme = schemes[module.qscheme]  # type: ignore[assignment]
    if isinstance(module, HistogramObserver):
        kind: ObserverType = "histogram"
    else:
        kind = "minmax" if qscheme == "per_tensor_affine" else "absmax"
    return ObserverSpec(observer=kind, dtype=dtypes[module.dtype], qscheme=qscheme,  # type: ignore[arg-type]
                        quant_min=int(module.quant_min), quant_max=int(module.quant_max))


def make_observer(spec: ObserverSpec) -> Any:
    """A fresh (unobserved) observer module computing ``spec``."""
    if spec.observer in ("percentile", "mse"):
        return ValueObserver(spec)  # the spec as declared: its dtype and range, not the usual ones
    kind = HistogramObserver if spec.observer == "histogram" else MinMaxObserver
    return kind(dtype=_torch_dtype(spec.dtype), qscheme=_torch_qscheme(spec.qscheme), quant_min=spec.quant_min,
                quant_max=spec.quant_max)


def observer_spec(observer: ObserverType, *, dtype: QuantDtype = "quint8", percentile: float | None = None,
                  symmetric: bool | None = None) -> ObserverSpec:
    """The usual spec of an observer type: quint8 [0, 255] affine, or qint8 [-128, 127] symmetric for absmax."""
    symmetric = observer == "absmax" if symmetric is None else symmetric
    if observer == "absmax" and not symmetric:
        raise QuantizationError("absmax is the symmetric range; use minmax for an affine one", site=None)
    if (percentile is None) == (observer == "percentile"):
        raise QuantizationError("percentile is given exactly for the percentile observer (e.g. 99.99)", site=None)
    if symmetric:
        dtype = "qint8"
    low, high = (0, 255) if dtype == "quint8" else (-128, 127)
    return ObserverSpec(observer=observer, dtype=dtype,
                        qscheme="per_tensor_symmetric" if symmetric else "per_tensor_affine",
                        quant_min=low, quant_max=high, percentile=percentile)


def prepare_static(model: torch.nn.Module, spec: ObserverSpec) -> torch.nn.Module:
    """A copy of ``model`` prepared for static post-training quantization with torch.ao.quantization's eager
    ``prepare``: an observer of ``spec`` on the output of every quantizable leaf (convolutions, norms, linear
    layers); weights and buffers are copied unchanged. Calibrate it with eval-mode forwards."""


    copy_ = copy.deepcopy(model).eval()
    copy_.qconfig = QConfig(activation=functools.partial(make_observer, spec),  # type: ignore[assignment]
                            weight=default_weight_observer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's notices that pt2e moved to torchao
        return prepare(copy_, inplace=True)


class ValueObserver(torch.nn.Module):
    """The percentile and mse observers: keep the observed values, choose the range when asked."""

    def __init__(self, spec: ObserverSpec) -> None:
        super().__init__()
        self.spec = spec
        self._values: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._values.append(x.detach().float().reshape(-1).cpu())
        return x

    def reset(self) -> None:
        self._values = []

    def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._values:
            return torch.tensor([math.nan]), torch.tensor([0])
        values = torch.cat(self._values)
        low, high = (_percentile_range if self.spec.observer == "percentile" else _mse_range)(values, self.spec)
        scale, zero_point = qparams_for_range(self.spec, low, high)
        return torch.tensor([scale]), torch.tensor([zero_point])


class PercentileObserver(ValueObserver):
    """Range clipped at the nearest-rank ``percentile`` of the observed values (of |x| when ``symmetric``)."""

    def __init__(self, percentile: float = 99.99, *, symmetric: bool = False) -> None:
        super().__init__(observer_spec("percentile", percentile=percentile, symmetric=symmetric))


class MSEObserver(ValueObserver):
    """The clipped range with the least mean squared quantization error over the observed values."""

    def __init__(self, *, symmetric: bool = False) -> None:
        super().__init__(observer_spec("mse", symmetric=symmetric))


def _nearest_rank(values: torch.Tensor, fraction: float) -> torch.Tensor:
    count = values.numel()
    rank = min(count, max(1, math.ceil(fraction * count)))
    return values.kthvalue(rank).values


def _percentile_range(values: torch.Tensor, spec: ObserverSpec) -> tuple[torch.Tensor, torch.Tensor]:
    fraction = (spec.percentile or 100.0) / 100.0
    if spec.qscheme == "per_tensor_symmetric":
        top = _nearest_rank(values.abs(), fraction)
        return -top, top
    return _nearest_rank(values, 1.0 - fraction), _nearest_rank(values, fraction)


def _mse_range(values: torch.Tensor, spec: ObserverSpec) -> tuple[torch.Tensor, torch.Tensor]:
    symmetric = spec.qscheme == "per_tensor_symmetric"
    low, high = (-values.abs().max(), values.abs().max()) if symmetric else (values.min(), values.max())
    if float(high - low) == 0.0:
        return low, high
    sample = values
    if values.numel() > MSE_SAMPLE:  # evenly spaced order statistics: the distribution, at a bounded cost
        ranks = torch.linspace(0, values.numel() - 1, MSE_SAMPLE).round().long()
        sample = values.sort().values[ranks]
    best = (math.inf, 1.0)
    for step in range(1, MSE_STEPS + 1):
        t = step / MSE_STEPS
        scale, zero_point = qparams_for_range(spec, low * t, high * t)
        quantized = torch.fake_quantize_per_tensor_affine(sample, scale, zero_point, spec.quant_min, spec.quant_max)
        error = float(torch.sum((quantized - sample) ** 2, dtype=torch.float64))
        if error < best[0]:
            best = (error, t)
    return low * best[1], high * best[1]


__all__ = ["MSEObserver", "ObserverSpec", "PercentileObserver", "ValueObserver", "describe_observer", "make_observer",
           "observer_spec", "prepare_static", "qparams_for_range"]
