"""Statically quantized checkpoints recognised from tensor names and shapes alone (a safetensors header suffices).

An activation-quantization *site* ``S`` shows in a header in one of two ways:

* its quantization parameters: ``S.scale`` and ``S.zero_point``, one element each (torch.ao's FakeQuantize buffers,
  and the scales file the standard keeps beside the weights, ``activation_scales.safetensors``);
* its observer's range, when a prepared model was saved as it stood: ``S.min_val`` and ``S.max_val``, one element
  each, with ``S`` an observer module (``...activation_post_process`` in eager mode, ``activation_post_process_N``
  in FX mode).

A file all of whose tensors are ``S.scale`` / ``S.zero_point`` pairs is a *scales file*: the deployed state of a
checkpoint beside it, not a checkpoint of its own.

>>> site = "conv.activation_post_process"
>>> shapes = {"conv.weight": (4, 1, 3, 3), f"{site}.min_val": (), f"{site}.max_val": ()}
>>> activation_sites(shapes)
['conv.activation_post_process']
>>> is_scales_file({"a.scale": (1,), "a.zero_point": (1,)}), is_scales_file(shapes)
(True, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

_PAIRS = (("scale", "zero_point"), ("min_val", "max_val"))


def _one_element(shape: tuple[int, ...]) -> bool:
    return math.prod(shape) == 1


def _is_observer_path(site: str) -> bool:
    return site.rpartition(".")[2].startswith("activation_post_process")


def activation_sites(shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """The activation-quantization sites of a checkpoint's tensors, in the order their tensors appear."""
    sites: list[str] = []
    for name, shape in shapes.items():
        site, _, leaf = name.rpartition(".")
        for first, second in _PAIRS:
            partner = f"{site}.{second}"
            if (leaf == first and site and site not in sites and partner in shapes and _one_element(tuple(shape))
                    and _one_element(tuple(shapes[partner])) and (first == "scale" or _is_observer_path(site))):
                sites.append(site)
    return sites


def is_scales_file(shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether every tensor is one of a site's ``scale`` / ``zero_point`` (and there is at least one)."""
    sites = set(activation_sites(shapes))
    return bool(shapes) and all(name.rpartition(".")[0] in sites and name.rpartition(".")[2] in _PAIRS[0]
                                for name in shapes)


__all__ = ["activation_sites", "is_scales_file"]
