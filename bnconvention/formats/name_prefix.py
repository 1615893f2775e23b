"""Layer names across a wrapper: the same network seen through ``module.`` (DDP, DataParallel), ``_orig_mod.``
(``torch.compile``), ``model.``/``net.`` (a LightningModule or an unlearning library's wrapper attribute).

A recorder that watched the wrapper names a layer ``net.bn1``; the released weights of the inner network name it
``bn1``. :func:`prefix_mapping` finds the one leading prefix on each side that maps every layer of one list onto the
same layer of the other (same order), or says which layer first differs. Pure: names in, mapping out.

>>> prefix_mapping(["net.bn1", "net.layer1.0.bn1"], ["bn1", "layer1.0.bn1"])
PrefixMapping(observed='net.', weights='')
>>> prefix_mapping(["bn1"], ["bn1"]) is None
True
>>> prefix_mapping(["module._orig_mod.bn1"], ["bn1"]).describe()
"'module._orig_mod.<name>' in the run is '<name>' in the weights"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bnconvention.errors import DigestMismatchError

__all__ = ["PrefixMapping", "prefix_mapping"]


@dataclass(frozen=True)
class PrefixMapping:
    """``observed + name`` in the run's model is ``weights + name`` in the weights file (either prefix may be
    empty, and each is empty or ends with a dot)."""

    observed: str
    weights: str

    def to_weights(self, name: str) -> str | None:
        """The weights' name of a run's name; ``None`` when the name lies outside the mapped prefix."""
        return self.weights + name[len(self.observed):] if name.startswith(self.observed) else None

    def to_observed(self, name: str) -> str | None:
        """The run's name of a weights' name; ``None`` when the name lies outside the mapped prefix."""
        return self.observed + name[len(self.weights):] if name.startswith(self.weights) else None

    def describe(self) -> str:
        return f"{self.observed + '<name>'!r} in the run is {self.weights + '<name>'!r} in the weights"


def _split_common_suffix(a: str, b: str) -> tuple[str, str]:
    """The prefixes left of ``a`` and ``b`` once their longest common suffix made of whole name parts is removed."""
    a_parts, b_parts = a.split("."), b.split(".")
    k = 0
    while k < min(len(a_parts), len(b_parts)) and a_parts[-1 - k] == b_parts[-1 - k]:
        k += 1
    head = lambda parts: ".".join(parts[:len(parts) - k]) + ("." if len(parts) > k else "")  # noqa: E731
    return head(a_parts), head(b_parts)


def prefix_mapping(observed: Sequence[str], weights: Sequence[str]) -> PrefixMapping | None:
    """The prefix mapping between the BatchNorm layer names a run saw (in module order) and those of a weights file
    (any order); ``None`` when they are the same names. :class:`~bnconvention.errors.DigestMismatchError` naming
    the first layer that differs when no single pair of prefixes maps one set onto the other."""
    held = set(weights)
    if set(observed) == held and len(observed) == len(held):
        return None
    candidates = [PrefixMapping(*_split_common_suffix(observed[0], w)) for w in weights] if observed else []
    for mapping in candidates:
        mapped = [mapping.to_weights(o) for o in observed]
        if (mapping.observed or mapping.weights) and len(mapped) == len(held) and set(mapped) == held:
            return mapping
    # no mapping: name the first layer of the run that no candidate (or the names as they are) finds
    best = max(candidates, key=lambda m: sum(m.to_weights(o) in held for o in observed), default=None)
    use = best if best is not None and sum(best.to_weights(o) in held for o in observed) else PrefixMapping("", "")
    missing = [o for o in observed if use.to_weights(o) not in held]
    extra = sorted(held - {use.to_weights(o) for o in observed})
    via = f" (mapping {use.describe()})" if use.observed or use.weights else ""
    if missing:
        what = f"layer {missing[0]!r} of the run has no counterpart in the weights{via}"
    else:
        what = f"the weights hold layer {extra[0]!r}, which the run did not see{via}"
    raise DigestMismatchError(
        f"{what}: the run's {len(observed)} BatchNorm layers and the weights' {len(held)} are not the same network "
        "under one prefix", field="deployed_state.layers", expected=missing[0] if missing else "",
        found=extra[0] if extra else "")
