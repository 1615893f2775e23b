"""The result of a refit: a declaration of the standard plus how the refit ran."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from bnconvention.standard.models import Channel, Declaration, Staleness, to_dict

# Which computation ran: the layer-major traced pass, per-layer hook passes, train-mode forwards, or nothing
# (channel absent).
RefitPath: TypeAlias = Literal["traced", "hooks", "train-mode", "none"]
# How the exact rule may run: ``auto`` traces and falls back to hooks; the others force one path.
ExactMethod: TypeAlias = Literal["auto", "traced", "hooks"]
# Default cap on the pool inputs plus live activations the layer-major pass may hold (bytes).
DEFAULT_MEMORY_BUDGET = 4 * 2**30

_PATH_WORDS: dict[str, str] = {
    "traced": "one layer-major pass",
    "hooks": "per-layer passes",
    "train-mode": "train-mode forwards",
    "none": "no pass",
}


@dataclass(frozen=True)
class RefitReport:
    """What :func:`~bnconvention.refitting.refit` did.

    ``declaration`` is a valid record of the standard describing the model *after* the refit (convention with
    ``buffer_update_mode="refit"``, deployed state, digests, and ``refit`` details: θ and φ digests before/after,
    staleness of the previous φ against the refit one, seconds, forward passes, warnings). ``path`` says which
    computation ran; ``peak_activation_bytes`` is the peak of pool inputs plus live activations the layer-major
    pass held (None on other paths).
    """

    declaration: Declaration
    channel: Channel
    path: RefitPath
    peak_activation_bytes: int | None = None

    @property
    def staleness(self) -> Staleness:
        return self._details.staleness

    @property
    def warnings(self) -> list[str]:
        return list(self._details.warnings)

    @property
    def seconds(self) -> float:
        return self._details.seconds

    @property
    def forward_passes(self) -> int | None:
        return self._details.forward_passes

    @property
    def _details(self) -> Any:
        if self.declaration.refit is None:  # cannot happen for reports built by refit(); keeps mypy and users honest
            raise ValueError("this declaration carries no refit details")
        return self.declaration.refit

    def to_dict(self) -> dict[str, Any]:
        """The declaration as a JSON-ready dict (valid against ``schema/v1/bnconvention.schema.json``)."""
        return to_dict(self.declaration)


def reporting_line(name: str, *, channel: Channel, path: RefitPath, samples: int, staleness: Staleness) -> str:
    """The one sentence a release can carry about this refit."""
    if channel == "absent":
        return (f"deployed state refit under {name} on {samples} pool samples: no BatchNorm running statistics "
                "(channel absent), the refit is the identity and every shift is exactly 0.00")
    return (f"deployed state refit under {name} on {samples} pool samples ({_PATH_WORDS[path]}); staleness of the "
            f"previous state: mean {staleness.mean_distance:.4f}, variance {staleness.var_distance:.4f} "
            "(layer averages)")
