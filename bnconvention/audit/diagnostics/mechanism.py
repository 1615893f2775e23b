"""How a BatchNorm checkpoint's buffers ended up as shipped: corruption, misalignment or neither.

The two failure modes are Kalani et al.'s (docs/statistics.md#mechanism).

* **corruption**: the buffers were updated in train mode on data that includes removed (forget) records, so φ
  carries the forget set's statistics;
* **misalignment**: θ moved while the buffers stayed frozen (eval-mode BN, or buffers held fixed), so φ describes
  the base model's features, not the shipped θ's;
* **neither**: buffers updated on retained data only, refit, or θ and φ both as the base's.

Two kinds of evidence, each read by a pure function:

1. the checkpoint's own metadata (:func:`from_metadata`): the recorder's observation when a stamped declaration
   carries one (mode, whether θ and the buffers changed, the split tags seen during buffer updates), else the
   declared convention (buffer-update mode and the role of the data that fitted φ), from the header's stamped
   record or the sidecar's ``convention``;
2. the base, when the census holds it (:func:`from_base`, the sidecar's ``parent``): θ and φ digests compared.
   θ moved and φ bit-identical is misalignment; both bit-identical is neither; both moved says the buffers were
   updated, which is corruption or neither depending on the data, so it only has to agree with the metadata.

:func:`combine` gives the census reading: the metadata's class when there is one, else the base's when it
decides, and whether the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from bnconvention.audit.core.result import MechanismEvidence

Mechanism = Literal["corruption", "misalignment", "neither"]
BaseComparison = Literal["identical", "frozen", "updated", "buffers_only"]
REMOVED_ROLES = frozenset({"forget"})
RETAINED_ROLES = frozenset({"retain"})


def from_observation(observation: Mapping[str, Any]) -> tuple[Mechanism | None, str]:
    """The recorder's observation: mode, buffers_changed, trainable_changed, split_tags."""
    mode = observation.get("mode")
    tags = [str(t) for t in observation.get("split_tags") or []]
    if observation.get("buffers_changed") and mode in ("train", "mixed"):
        if any(t in REMOVED_ROLES for t in tags):
            return "corruption", f"observed: buffers updated in train mode on splits {tags}, forget among them"
        if tags:
            return "neither", f"observed: buffers updated in train mode on splits {tags} (no forget split)"
        return None, "observed: buffers updated in train mode, on data the recorder did not tag"
    if not observation.get("buffers_changed") and observation.get("trainable_changed"):
        return "misalignment", "observed: theta changed while the buffers did not (frozen)"
    if mode == "refit":
        return "neither", "observed: the buffers were refit"
    if observation.get("trainable_changed") is False and not observation.get("buffers_changed"):
        return "neither", "observed: neither theta nor the buffers changed"
    return None, f"observed mode {mode!r} does not decide"


def from_convention(convention: Mapping[str, Any]) -> tuple[Mechanism | None, str]:
    """A declared convention: its buffer-update mode and the role of the data that fitted φ."""
    mode = convention.get("buffer_update_mode")
    data = convention.get("data")
    role = data.get("role") if isinstance(data, Mapping) else None
    if mode == "train" and role in REMOVED_ROLES:
        return "corruption", f"declared: buffers updated in train mode on the {role} split"
    if mode == "train" and role in RETAINED_ROLES:
        return "neither", f"declared: buffers updated in train mode on the {role} split"
    if mode == "frozen":
        return "misalignment", "declared: buffers frozen while the procedure trained theta"
    if mode == "refit":
        return "neither", "declared: buffers refit"
    if mode == "train" and role == "train":
        return "neither", "declared: buffers fitted in train mode on the full training split (no removal)"
    return None, f"declared mode {mode!r} on role {role!r} does not decide"


def from_metadata(*, record: Mapping[str, Any] | None, sidecar: Mapping[str, Any] | None) -> MechanismEvidence:
    """The observation of a stamped declaration first, then its convention, then the sidecar's convention."""
    base = sidecar.get("parent") if sidecar else None
    base = base if isinstance(base, str) and base else None
    candidates: list[tuple[str, tuple[Mechanism | None, str]]] = []
    if record and record.get("kind") == "declaration":
        if isinstance(record.get("observation"), Mapping):
            candidates.append(("observation", from_observation(record["observation"])))
        if isinstance(record.get("convention"), Mapping):
            candidates.append(("declaration", from_convention(record["convention"])))
    if sidecar and isinstance(sidecar.get("convention"), Mapping):
        candidates.append(("sidecar", from_convention(sidecar["convention"])))
    for source, (mechanism, reason) in candidates:
        if mechanism is not None:
            return MechanismEvidence(mechanism=mechanism, source=source, reason=reason,  # type: ignore[arg-type]
                                     base=base)
    reason = candidates[0][1][1] if candidates else "no declaration, observation or sidecar convention"
    return MechanismEvidence(mechanism=None, source=None, reason=reason, base=base)


def from_base(*, trainable: str, running: str | None, base_trainable: str,
              base_running: str | None) -> BaseComparison:
    """θ and φ digests of a checkpoint against its base's."""
    theta_moved, phi_moved = trainable != base_trainable, running != base_running
    if theta_moved:
        return "updated" if phi_moved else "frozen"
    return "buffers_only" if phi_moved else "identical"


BASE_MECHANISM: dict[BaseComparison, Mechanism | None] = {
    "identical": "neither", "frozen": "misalignment", "updated": None, "buffers_only": None}
AGREES: dict[BaseComparison, frozenset[str]] = {
    "identical": frozenset({"neither"}), "frozen": frozenset({"misalignment"}),
    "updated": frozenset({"corruption", "neither"}), "buffers_only": frozenset({"corruption", "neither"})}


def combine(evidence: MechanismEvidence | None, comparison: BaseComparison | None, *,
            channel: str) -> dict[str, Any]:
    """The census reading of one checkpoint: its class, where it came from, and whether the evidence agrees."""
    if channel == "absent":
        return {"mechanism": None, "evidence": "channel absent", "base_comparison": comparison, "consistent": None,
                "reason": "no running statistics: the question does not arise"}
    declared = evidence.mechanism if evidence is not None else None
    consistent = None if declared is None or comparison is None else declared in AGREES[comparison]
    mechanism: Mechanism | None
    source: str | None
    if declared is not None:
        mechanism, source = declared, evidence.source if evidence is not None else None
    else:
        mechanism = BASE_MECHANISM[comparison] if comparison is not None else None
        source = "base" if mechanism is not None else None
    reason = evidence.reason if evidence is not None else "no metadata read"
    if comparison is not None:
        reason += f"; against the base: {comparison.replace('_', ' ')}"
    return {"mechanism": mechanism, "evidence": source, "base_comparison": comparison, "consistent": consistent,
            "reason": reason}
