"""The second deployed state: a quantized checkpoint's activation scales, shipped vs refit, and their 1.1 refit
annotation."""

from typing import TYPE_CHECKING

from bnconvention._lazy import lazy_exports

if TYPE_CHECKING:
    from bnconvention.audit.scales.annotation import scales_annotation
    from bnconvention.audit.scales.cells import scales_cells
_EXPORTS: dict[str, str] = {
    "scales_annotation": "bnconvention.audit.scales.annotation",
    "scales_cells": "bnconvention.audit.scales.cells",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())

__all__ = ["scales_annotation", "scales_cells"]
