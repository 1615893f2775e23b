"""Cells shipped vs refit on the second deployed state: activation-quantization scales.

See docs/statistics.md#activation-scales-the-second-deployed-state.

The same measurement as for φ, on another state: each cell (accuracy on a split) is evaluated with the model's
activations fake-quantized at the scales as shipped, and again at the scales refit on each replicate's
retain-only calibration pool (:func:`bnconvention.refitting.scales.refit_scales`: θ and the BatchNorm buffers
bit-identical, proven by digests). Shifts are in pp and decided by the standard's rules (exact sign test, TOST,
the same ``decide`` as every BatchNorm cell), so a displaced scales cell means what a displaced BatchNorm cell
means. Each replicate also gives each site's log scale ratio ln(refit / shipped).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bnconvention.audit.scales.decisions import scales_decision
from bnconvention.errors import QuantizationError
from bnconvention.refitting.scales import ScaleSet, fake_quantized, read_scales, refit_scales
from bnconvention.standard.models import Cell, SplitRole

SPLIT_CELLS: dict[str, SplitRole] = {"df": "forget", "dr": "retain", "dt": "test"}


@dataclass(frozen=True)
class ScalesAudit:
    """One checkpoint's scales cells, the shipped scales, each replicate's refit scales and per-site log scale
    ratios, and the digests of θ and φ every refit left bit-identical (``trainable_sha256``, ``running_sha256``)."""

    cells: list[Cell]
    shipped: ScaleSet
    log_ratios: list[dict[str, float]]
    refits: list[ScaleSet]
    trainable_sha256: str
    running_sha256: str | None

    @property
    def median_abs_log_ratio(self) -> float:
        """Median |ln(refit / shipped)| over sites and replicates: the size of the scale shift."""
        return statistics.median(abs(v) for ratios in self.log_ratios for v in ratios.values())


def quantized_accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, scales: ScaleSet, *,
                       batch_size: int = 512) -> float:
    """Top-1 accuracy of ``model`` in eval mode with its activations fake-quantized at ``scales``."""
    was_training = model.training
    model.eval()
    correct = 0
    try:
        with torch.no_grad(), fake_quantized(model, scales):
            for start in range(0, len(x), batch_size):
                logits = model(x[start:start + batch_size])
                correct += int((logits.argmax(dim=1) == y[start:start + batch_size]).sum())
    finally:
        model.train(was_training)
    return correct / len(x)


def scales_cells(model: torch.nn.Module, *, splits: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
                 calibration_pools: Sequence[Any], margin_pp: float = 1.2,
                 shipped: ScaleSet | None = None) -> ScalesAudit:
    """Cells df/dr/dt (those whose split is in ``splits``) at shipped scales and refit on each pool (a replicate).

    ``shipped``: the scales as shipped, when they are not the observers' own (loaded from a scales file)."""
    if len(calibration_pools) < 1:
        raise QuantizationError("scales cells need at least one calibration pool (a replicate)", site=None)
    shipped = shipped or read_scales(model)
    metrics = [(metric, role) for metric, role in SPLIT_CELLS.items() if role in splits]
    if not metrics:
        raise QuantizationError(f"no split to evaluate: splits holds {sorted(splits)}, cells need forget, retain "
                                "or test", site=None)
    at_shipped = {metric: quantized_accuracy(model, *splits[role], shipped) for metric, role in metrics}
    values: dict[str, list[float]] = {metric: [] for metric, _ in metrics}
    runs = [refit_scales(model, pool, shipped=shipped) for pool in calibration_pools]
    for run in runs:
        for metric, role in metrics:
            values[metric].append(quantized_accuracy(model, *splits[role], run.refit))
    return ScalesAudit(cells=[_cell(metric, role, at_shipped[metric], values[metric], margin_pp=margin_pp)
                              for metric, role in metrics], shipped=shipped,
                       log_ratios=[shipped.log_ratios(run.refit) for run in runs], refits=[run.refit for run in runs],
                       trainable_sha256=runs[0].trainable_sha256, running_sha256=runs[0].running_sha256)


def _cell(metric: str, role: SplitRole, shipped: float, values: list[float], *, margin_pp: float) -> Cell:
    shifts = [100.0 * (v - shipped) for v in values]
    return Cell(metric=metric, split=role, shipped=shipped, refit=math.fsum(values) / len(values),
                shift_pp=math.fsum(shifts) / len(shifts), replicate_values=values, replicate_shifts_pp=shifts,
                margin_pp=margin_pp, decision=scales_decision(shifts, margin_pp=margin_pp))


__all__ = ["SPLIT_CELLS", "ScalesAudit", "quantized_accuracy", "scales_cells"]
