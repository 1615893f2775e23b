"""The second deployed-state kind, added by version 1.1: static activation-quantization scales
(docs/statistics.md#activation-scales-the-second-deployed-state).

A statically quantized network ships, beside θ and the BatchNorm buffers, one scale and zero point per observed
activation site, fitted by an observer on a calibration set. Like φ, no gradient writes them: they are whatever the
last calibration left, and a calibration set that holds removed records is a deployed state fitted on data the
release says it forgot. This kind records them with what fitted them (the observer, the calibration set and its
record count) and binds them to their tensors by digests, as the BatchNorm kind binds φ.

The tensors: for each site ``S`` (the observer's module path, e.g. ``features.0.activation_post_process``) the
scales file holds ``S.scale`` (float32, one element) and ``S.zero_point`` (int64, one element). They live in a
safetensors file *beside* the weights (``activation_scales.safetensors`` by default), never inside it, so the
record's ``digests`` keep their 1.0 meaning and a refit of the scales leaves ``trainable_sha256`` and
``running_sha256`` bit-identical. Each site's ``tensors_sha256`` and the state's ``scales_sha256`` use the algorithm
``bnconvention-tensors/1`` over those tensors (one site's two, or every site's).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from bnconvention.standard.convention import DataSplit
from bnconvention.standard.deployed import BatchNormState
from bnconvention.standard.fields import Int, NonEmptyStr, Sha256Hex, StrictModel
from bnconvention.standard.versions import since

# minmax: the observed range; absmax: the symmetric range of the largest magnitude; percentile: the range clipped at
# a percentile of the observed values; mse: the clipping that minimises the mean squared quantization error over the
# observed values; histogram: torch's HistogramObserver (the same L2 search over a running histogram).
ObserverType: TypeAlias = Literal["minmax", "absmax", "percentile", "mse", "histogram"]
QuantDtype: TypeAlias = Literal["quint8", "qint8"]
QScheme: TypeAlias = Literal["per_tensor_affine", "per_tensor_symmetric"]
SCALES_FILENAME = "activation_scales.safetensors"


class ActivationSite(StrictModel):
    """One observed activation site: its per-tensor scale and zero point."""

    name: NonEmptyStr = Field(description=(
        "Site name: the observer's module path; its tensors are '<name>.scale' and '<name>.zero_point'."))
    scale: Annotated[float, Field(gt=0)] = Field(description="Quantization scale (a real number per integer step).")
    zero_point: Int = Field(description="Integer the real value 0 maps to.")
    tensors_sha256: Sha256Hex | None = Field(default=None, description=(
        "Digest of this site's two tensors (bnconvention-tensors/1); absent when the scales are not stored."))


class ActivationScalesState(StrictModel):
    """Static activation quantization: a scale and zero point per observed site, fitted on a calibration set."""

    kind: Literal["activation_scales"] = Field(description="Deployed-state kind: activation quantization scales.")
    dtype: QuantDtype = Field(description="Quantized activation type: 'quint8' (0..255) or 'qint8' (-128..127).")
    qscheme: QScheme = Field(description="Per-tensor affine (free zero point) or symmetric (zero point fixed).")
    quant_min: Int = Field(description="Smallest quantized integer.")
    quant_max: Int = Field(description="Largest quantized integer.")
    observer: ObserverType = Field(description="How the scales were fitted from the calibration activations.")
    percentile: Annotated[float, Field(gt=50, le=100)] | None = Field(default=None, description=(
        "For observer 'percentile': the percentile of the observed values the range is clipped at, e.g. 99.99."))
    calibration: DataSplit = Field(description="The calibration set the observers saw, with its record count.")
    sites: list[ActivationSite] = Field(min_length=1, description="Every observed site, in module order.")
    filename: NonEmptyStr | None = Field(default=None, description=(
        "The scales file, relative to the weights file's folder (default 'activation_scales.safetensors')."))
    scales_sha256: Sha256Hex | None = Field(default=None, description=(
        "Digest of every site's tensors together (bnconvention-tensors/1); absent when the scales are not stored."))


class BatchNormRefit(StrictModel):
    """A refit annotation whose cells were measured with the BatchNorm buffers refit: the 1.0 meaning."""

    kind: Literal["batchnorm"] = Field(description="Deployed state refit: the BatchNorm running statistics.")


class ActivationScalesRefit(StrictModel):
    """A refit annotation whose cells were measured with the activation scales refit (θ and φ bit-identical to the
    subject's digests), each replicate on its own retain-only calibration set."""

    kind: Literal["activation_scales"] = Field(description="Deployed state refit: the activation scales.")
    observer: ObserverType = Field(description="Observer of the refit scales: the shipped scales' own type.")
    percentile: Annotated[float, Field(gt=50, le=100)] | None = Field(default=None, description=(
        "For observer 'percentile': the percentile the range is clipped at."))
    calibration: DataSplit = Field(description=(
        "The retain-only calibration set of each replicate (its record count is each replicate's)."))
    calibration_seeds: list[Int] | None = Field(default=None, min_length=1, description=(
        "Seed of each replicate's calibration draw, in replicate order."))
    shipped_scales_sha256: Sha256Hex = Field(description=(
        "Digest of the shipped scales the cells were measured at (bnconvention-tensors/1 over every site)."))
    refit_scales_sha256: list[Sha256Hex] = Field(min_length=1, description=(
        "Digest of each replicate's refit scales, in replicate order."))
    median_abs_log_ratio: Annotated[float, Field(ge=0)] | None = Field(default=None, description=(
        "Median |ln(refit scale / shipped scale)| over sites and replicates: the size of the scale shift."))


# What an annotation's cells were refit on (its field refit_state, added by 1.1); absent: the BatchNorm buffers.
RefitState = Annotated[BatchNormRefit | ActivationScalesRefit, Field(discriminator="kind")]

# The deployed-state kinds, tagged by kind: 1.0's batchnorm, and the activation scales 1.1 added.
DeployedState = Annotated[BatchNormState | Annotated[ActivationScalesState, since("1.1")], Field(discriminator="kind")]


__all__ = ["SCALES_FILENAME", "ActivationScalesRefit", "ActivationScalesState", "ActivationSite", "BatchNormRefit",
           "DeployedState", "ObserverType", "QScheme", "QuantDtype", "RefitState"]
