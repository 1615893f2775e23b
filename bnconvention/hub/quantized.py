"""Statically quantized checkpoints in a census: scales files set apart, activation sites counted from headers.

A repo that ships activation scales beside its weights (``activation_scales.safetensors``, the standard's stored
form, or any file whose tensors are all ``<site>.scale`` / ``<site>.zero_point``) has one checkpoint, not two: the
scales file is the deployed state of the checkpoint in its folder. Sites inside a weights file (FakeQuantize buffers,
a prepared model's observer ranges) count too (:mod:`bnconvention.formats.quantized`).
"""

from __future__ import annotations

import posixpath
from typing import Any

from bnconvention.formats.quantized import activation_sites, is_scales_file
from bnconvention.formats.text import plural
from bnconvention.hub.headers import WeightsSet


def _shapes(weights: WeightsSet) -> dict[str, tuple[int, ...]]:
    return {name: tuple(info.shape) for name, info in weights.tensors().items()}


def split_scales_files(sets: list[Any]) -> tuple[list[Any], list[WeightsSet]]:
    """The checkpoints and the scales files among a repo's readable sets (all kept as checkpoints when every file
    is a scales file: there is nothing else for them to describe)."""
    scales = [s for s in sets if isinstance(s, WeightsSet) and s.kind == "single" and is_scales_file(_shapes(s))]
    rest = [s for s in sets if not any(s is other for other in scales)]
    if not any(isinstance(s, WeightsSet) for s in rest):
        return sets, []
    return rest, scales


def describe_quantization(report: Any, weights: WeightsSet, scales: list[WeightsSet]) -> None:
    """Count ``report``'s activation sites (its own tensors and a scales file in its folder) and say so."""
    folder = posixpath.dirname(weights.name)
    beside = [s for s in scales if posixpath.dirname(s.name) == folder]
    inside = activation_sites(_shapes(weights))
    sites = len(inside) + sum(len(activation_sites(_shapes(s))) for s in beside)
    if not sites:
        return
    report.activation_sites = sites
    report.scales_file = beside[0].name if beside else None
    where = f"in {beside[0].name}" if beside else "in the weights"
    report.reason += f"; statically quantized: {plural(sites, 'activation site')} {where}"


__all__ = ["describe_quantization", "split_scales_files"]
