"""The provenance contrast, with both arms, several draws and a null band.

Shen and Li, appendix P; how it is read: docs/statistics.md#provenance-contrast.

Design (per draw ``d``, from ``SeedSequence(seed, spawn_key=(2, d))``): a base pool A of ``pool_size`` retained
records; for each arm, pool B = A with its first k records exchanged for k removed (forget) records, and the null
pool C = A with the same k records exchanged for k *other retained* records. Every pool is refit with the same
augmentation seed under the audit's refit convention, so B and C differ from A only in which records fill the
first k places, and C measures what any exchange of k records does when provenance cannot matter.

Arms: ``deployment`` exchanges the removed share of the training data (``forget / (forget + retain)`` of the
pool, or ``provenance.exchanged``); ``ceiling`` exchanges every removed record that fits (``min(forget,
pool_size)``). An arm's distance is the combined distance (:func:`bnconvention.audit.diagnostics.band.combined`) of B's
state from A's, averaged over draws; its null band is the largest combined distance of C from A over the draws, and the
arm "exceeds the null" when its mean distance is above that band (the same reading for the forget-accuracy shift).
Cost: ``draws * (1 + 2 * arms)`` refits.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from bnconvention.audit.core.result import ProvenanceArmMeasurement, ProvenanceDraw
from bnconvention.audit.diagnostics.band import combined, pair_distance
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.measure.evaluation import Refitter, data_split, forget_accuracy, stream, torch_seed
from bnconvention.audit.spec.audit_spec import AuditSpec, ProvenanceSpec
from bnconvention.refitting import running_state
from bnconvention.standard.models import ProvenanceContrast


def arm_sizes(settings: ProvenanceSpec, *, forget: int, retain: int) -> list[tuple[str, int]]:
    """``[(arm, k)]``: the deployment share (rounded, at least 1) and, when asked and different, the ceiling."""
    deployment = settings.exchanged if settings.exchanged is not None else max(
        1, min(forget, settings.pool_size, round(settings.pool_size * forget / (forget + retain))))
    arms = [("deployment", deployment)]
    ceiling = min(forget, settings.pool_size)
    if settings.ceiling and ceiling != deployment:
        arms.append(("ceiling", ceiling))
    return arms


def retained_needed(settings: ProvenanceSpec, *, forget: int, retain: int) -> int:
    """Retained records one draw uses: the base pool plus the other records the null swaps bring in."""
    return settings.pool_size + max(k for _, k in arm_sizes(settings, forget=forget, retain=retain))


def _refit(refitter: Refitter, pool: Any, *, spec: AuditSpec, data: AuditData, seed: int, label: str,
           batch_size: int) -> tuple[Any, float]:
    refitter.run(pool, rule=spec.refit.rule, transform=data.transform(spec.refit.transform), seed=seed,
                 batch_size=spec.refit.batch_size,
                 data_split=data_split(data, role="other", subset=f"provenance pool ({label})", ids=None,
                                       count=len(pool), seed=spec.seed))
    result = running_state(refitter.model), forget_accuracy(refitter.model, data, batch_size=batch_size)
    refitter.restore()
    return result


def _draw(refitter: Refitter, d: int, arms: list[tuple[str, int]], *, settings: ProvenanceSpec, spec: AuditSpec,
          data: AuditData, batch_size: int) -> dict[str, ProvenanceDraw]:
    rng = stream(spec.seed, 2, d)
    k_max = max(k for _, k in arms)
    retained = rng.choice(len(data.retain.ids), size=settings.pool_size + k_max, replace=False)
    removed = rng.permutation(len(data.forget.ids))
    seed = torch_seed(rng)
    base_pool = data.retain.x[torch.from_numpy(np.sort(retained[:settings.pool_size]))]
    others = data.retain.x[torch.from_numpy(retained[settings.pool_size:])]
    def fit(pool: Any, label: str) -> tuple[Any, float]:
        return _refit(refitter, pool, spec=spec, data=data, seed=seed, label=label, batch_size=batch_size)

    base_state, base_df = fit(base_pool, "retain")
    out = {}
    for arm, k in arms:
        exchanged = torch.cat([data.forget.x[torch.from_numpy(np.sort(removed[:k]))], base_pool[k:]])
        swapped = torch.cat([others[:k], base_pool[k:]])
        state_b, df_b = fit(exchanged, f"{arm}, {k} removed records")
        state_c, df_c = fit(swapped, f"{arm} null, {k} other retained records")
        (mb, vb), (mc, vc) = pair_distance(state_b, base_state), pair_distance(state_c, base_state)
        out[arm] = ProvenanceDraw(draw=d, mean_distance=mb, var_distance=vb, forget_shift_pp=100.0 * (df_b - base_df),
                                  null_mean_distance=mc, null_var_distance=vc,
                                  null_forget_shift_pp=100.0 * (df_c - base_df))
    return out


def summarize_arm(arm: str, *, pool_size: int, exchanged: int, draws: list[ProvenanceDraw],
                  staleness: float | None) -> ProvenanceArmMeasurement:
    """An arm's means over draws against its null band (the largest null value over the draws); pure."""
    distance = statistics.fmean(combined(x.mean_distance, x.var_distance) for x in draws)
    shift = statistics.fmean(x.forget_shift_pp for x in draws)
    band = max(combined(x.null_mean_distance, x.null_var_distance) for x in draws)
    shift_band = max(abs(x.null_forget_shift_pp) for x in draws)
    return ProvenanceArmMeasurement(
        arm=arm, pool_size=pool_size, exchanged=exchanged, draws=draws,  # type: ignore[arg-type]
        distance=distance, forget_shift_pp=shift, null_band=band, null_shift_band_pp=shift_band,
        exceeds_null=distance > band, shift_exceeds_null=abs(shift) > shift_band,
        staleness_ratio=None if staleness is None or distance == 0 else staleness / distance)


def provenance_arms(refitter: Refitter, *, spec: AuditSpec, data: AuditData, batch_size: int,
                    staleness: float | None) -> list[ProvenanceArmMeasurement]:
    """Every arm over ``provenance.draws`` draws; φ is the shipped state again afterwards. ``staleness``: the
    shipped state's combined distance from a retain refit, for the per-arm ratio."""
    settings = spec.provenance
    if settings is None:
        return []
    arms = arm_sizes(settings, forget=len(data.forget.ids), retain=len(data.retain.ids))
    per_draw = [_draw(refitter, d, arms, settings=settings, spec=spec, data=data, batch_size=batch_size)
                for d in range(settings.draws)]
    return [summarize_arm(arm, pool_size=settings.pool_size, exchanged=k, draws=[draw[arm] for draw in per_draw],
                          staleness=staleness) for arm, k in arms]


def annotation_contrast(arms: list[ProvenanceArmMeasurement]) -> ProvenanceContrast | None:
    """The annotation's one contrast: the deployment arm, its parts and forget shift averaged over the draws."""
    arm = next((a for a in arms if a.arm == "deployment"), None)
    if arm is None:
        return None
    return ProvenanceContrast(pool_size=arm.pool_size, exchanged=arm.exchanged,
                              mean_distance=statistics.fmean(x.mean_distance for x in arm.draws),
                              var_distance=statistics.fmean(x.var_distance for x in arm.draws),
                              forget_shift_pp=arm.forget_shift_pp)
