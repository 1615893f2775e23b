"""Semantic rules of the activation-scales deployed state (spec 1.1): what the schema cannot say across fields.

Each site appears once; the quantized range is a range and holds every zero point; a symmetric scheme fixes the
zero point at the middle of the range (0 for qint8, 128 for quint8); ``percentile`` is given exactly when the
observer is ``percentile``; the digests are all there or all absent, and with one site the combined digest is that
site's (both cover the same two tensors). A refit annotation whose cells were refit on the scales
(``refit_state`` of kind ``activation_scales``) follows the same percentile rule and gives one refit digest (and
calibration seed) per replicate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bnconvention.standard.models import ActivationScalesRefit, ActivationScalesState, Declaration
from bnconvention.validation.issues import Issue, join_pointer, new_issue
from bnconvention.validation.schema_errors import show


def symmetric_zero_point(quant_min: int, quant_max: int) -> int:
    """The zero point a symmetric scheme fixes (as torch.ao computes it): 0 for a signed range, else the middle.

    >>> symmetric_zero_point(-128, 127), symmetric_zero_point(0, 255)
    (0, 128)
    """
    return 0 if quant_min < 0 else (quant_min + quant_max + 1) // 2


def activation_scales_issues(record: Declaration, *, source: str) -> Iterator[Issue]:
    """Every rule above, for each activation-scales entry of ``record``'s deployed state."""
    for index, state in enumerate(record.deployed_state):
        if isinstance(state, ActivationScalesState):
            yield from _state_issues(state, source=source, base=join_pointer("", "deployed_state", index))


def _state_issues(state: ActivationScalesState, *, source: str, base: str) -> Iterator[Issue]:
    if state.quant_min >= state.quant_max:
        yield new_issue("record.quant_range", file=source, path=join_pointer(base, "quant_max"), message=(
            f"quant_max {state.quant_max} is not above quant_min {state.quant_min}: the quantized range is empty"))
    if (state.percentile is None) == (state.observer == "percentile"):
        yield new_issue("record.observer_percentile", file=source, path=join_pointer(base, "percentile"), message=(
            f"observer {show(state.observer)} " + ("needs its percentile (e.g. 99.99)" if state.percentile is None
                                                   else "takes no percentile: remove it or say observer 'percentile'")))
    yield from _site_issues(state, source=source, base=base)
    yield from _digest_issues(state, source=source, base=base)


def _site_issues(state: ActivationScalesState, *, source: str, base: str) -> Iterator[Issue]:
    seen: set[str] = set()
    fixed = symmetric_zero_point(state.quant_min, state.quant_max)
    for j, site in enumerate(state.sites):
        where = join_pointer(base, "sites", j)
        if site.name in seen:
            yield new_issue("record.duplicate_site", file=source, path=join_pointer(where, "name"), message=(
                f"{show(site.name)} is listed twice: each observed site appears once; remove the duplicate"))
        seen.add(site.name)
        if not state.quant_min <= site.zero_point <= state.quant_max:
            yield new_issue("record.quant_range", file=source, path=join_pointer(where, "zero_point"), message=(
                f"zero point {site.zero_point} of site {show(site.name)} lies outside the quantized range "
                f"[{state.quant_min}, {state.quant_max}]"))
        elif state.qscheme == "per_tensor_symmetric" and site.zero_point != fixed:
            yield new_issue("record.quant_range", file=source, path=join_pointer(where, "zero_point"), message=(
                f"zero point {site.zero_point} of site {show(site.name)}: the symmetric scheme fixes it at {fixed}"))


def _digest_issues(state: ActivationScalesState, *, source: str, base: str) -> Iterator[Issue]:
    digests = [site.tensors_sha256 for site in state.sites]
    stored = [d for d in digests if d is not None]
    combined = state.scales_sha256
    if stored and (len(stored) != len(digests) or combined is None):
        yield new_issue("record.scales_digest_inconsistent", file=source, path=base, message=(
            f"{len(stored)} of {len(digests)} sites carry tensors_sha256 and scales_sha256 is "
            f"{'absent' if combined is None else 'present'}: stored scales give every digest, unstored ones none"))
    elif combined is not None and not stored:
        yield new_issue("record.scales_digest_inconsistent", file=source, path=join_pointer(base, "scales_sha256"),
                        message="scales_sha256 is given but no site carries tensors_sha256: add them or remove it")
    elif len(digests) == 1 and combined is not None and digests[0] != combined:
        yield new_issue("record.scales_digest_inconsistent", file=source, path=join_pointer(base, "scales_sha256"),
                        message=("with one site scales_sha256 covers exactly that site's tensors and must equal its "
                                 "tensors_sha256: recompute the digests"))


def refit_state_issues(record: Any, *, source: str) -> Iterator[Issue]:
    """The rules of a 1.1 annotation's ``refit_state`` when its cells were refit on the activation scales."""
    state = getattr(record, "refit_state", None)
    if not isinstance(state, ActivationScalesRefit):
        return
    if (state.percentile is None) == (state.observer == "percentile"):
        yield new_issue("record.observer_percentile", file=source, path="/refit_state/percentile", message=(
            f"observer {show(state.observer)} " + ("needs its percentile (e.g. 99.99)" if state.percentile is None
                                                   else "takes no percentile: remove it or say observer 'percentile'")))
    for field in ("refit_scales_sha256", "calibration_seeds"):
        values = getattr(state, field)
        if values is not None and len(values) != record.replicates:
            yield new_issue("record.replicate_count", file=source, path=join_pointer("/refit_state", field),
                            message=(f"{len(values)} entries in refit_state.{field}, but the annotation has "
                                     f"{record.replicates} replicates: give one per replicate"))


__all__ = ["activation_scales_issues", "refit_state_issues", "symmetric_zero_point"]
