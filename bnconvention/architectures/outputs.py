"""The logits of a model's output, whatever the library returns them in.

Our factories, torchvision and timm return a logits tensor; transformers' image classifiers return a
``ModelOutput`` (``ImageClassifierOutput``, ``ImageClassifierOutputWithNoAttention``, ...) whose ``logits`` field holds
them, and ``return_dict=False`` gives a tuple whose first element they are. Evaluation reads predictions through
:func:`logits`; a BatchNorm refit only runs forwards and ignores the output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from bnconvention.errors import UnsupportedModelError


def logits(output: Any) -> torch.Tensor:
    """The ``N x classes`` logits in ``output``: a tensor, a ``ModelOutput`` (or mapping) with ``logits``, or a
    tuple/list whose first element is the tensor."""
    found: Any = None
    if isinstance(output, torch.Tensor):
        found = output
    elif isinstance(output, Mapping):  # transformers' ModelOutput is an OrderedDict
        found = output.get("logits")
    elif hasattr(output, "logits"):
        found = output.logits
    elif isinstance(output, (tuple, list)) and output:
        found = output[0]
    if not isinstance(found, torch.Tensor) or found.dim() != 2:
        raise UnsupportedModelError(
            f"the model's forward returned {_describe(output)}, not N x classes logits (a tensor, or an output with "
            "'logits'); audit a classifier")
    return found


def _describe(output: Any) -> str:
    if isinstance(output, torch.Tensor):
        return f"a tensor of shape {list(output.shape)}"
    return f"a {type(output).__name__}"


__all__ = ["logits"]
