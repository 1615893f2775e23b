"""The recoverability curve: forget accuracy after a refit on B proxy images, over budgets, seeds and proxy sources.

How it is read: docs/statistics.md#recoverability.

Sources: ``test`` (unlabeled test images), ``retain`` (retained records only: no removed record is ever used) and
``noise`` (out of distribution: Gaussian noise with the test split's per-element mean and standard deviation, so
it has the inputs' range but none of their structure). Draw ``s`` of budget ``B`` from source ``i`` comes from
``SeedSequence(seed, spawn_key=(3, i, B, s))``, so adding a budget or a seed leaves every other point unchanged.
A budget larger than a source is skipped, and so is B = 1 under a train-mode rule (batch statistics of one record
are undefined); each skip is listed. Cost: one refit and one forget-split evaluation per point and seed.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from bnconvention.audit.core.result import RecoverabilityMeasurement, RecoveryPoint
from bnconvention.audit.measure.data import AuditData
from bnconvention.audit.measure.evaluation import Refitter, data_split, forget_accuracy, stream, torch_seed
from bnconvention.audit.spec.audit_spec import AuditSpec, RecoverabilitySpec
from bnconvention.formats.text import plural

SOURCE_KEYS = {"test": 0, "retain": 1, "noise": 2}


def proxy_images(data: AuditData, source: str, budget: int, rng: np.random.Generator) -> torch.Tensor:
    """``budget`` proxy images of one source, drawn from ``rng``."""
    if source == "noise":
        reference = data.test.x
        mean, std = reference.mean(dim=0), reference.std(dim=0)
        generator = torch.Generator().manual_seed(torch_seed(rng))
        return mean + std * torch.randn((budget, *reference.shape[1:]), generator=generator)
    split = getattr(data, source)
    return split.x[torch.from_numpy(np.sort(rng.choice(len(split.ids), size=budget, replace=False)))]


def skip_reason(source: str, budget: int, *, data: AuditData, rule: str) -> str | None:
    """Why a point cannot run, or None."""
    if source != "noise" and budget > len(getattr(data, source).ids):
        return f"B = {budget} from {source}: the split has {plural(len(getattr(data, source).ids), 'record')}"
    if budget < 2 and rule != "exact":
        return f"B = {budget} from {source}: a train-mode rule ({rule}) needs at least 2 images"
    return None


def recovery_point(refitter: Refitter, source: str, budget: int, *, settings: RecoverabilitySpec, seeds: int,
                   spec: AuditSpec, data: AuditData, shipped_df: float, batch_size: int) -> RecoveryPoint:
    rule = settings.rule or spec.refit.rule
    transform = data.transform(settings.transform)
    after = []
    for s in range(seeds):
        rng = stream(spec.seed, 3, SOURCE_KEYS[source], budget, s)
        x = proxy_images(data, source, budget, rng)
        refitter.run(x, rule=rule, transform=transform, seed=torch_seed(rng), batch_size=budget,
                     data_split=data_split(data, role="proxy", subset=f"{plural(budget, 'proxy image')} ({source})",
                                           ids=None, count=budget, seed=spec.seed))
        after.append(forget_accuracy(refitter.model, data, batch_size=batch_size))
        refitter.restore()
    mean = statistics.fmean(after)
    return RecoveryPoint(source=source, budget=budget, forget_accuracy=after,  # type: ignore[arg-type]
                         mean_forget_accuracy=mean, mean_shift_pp=100.0 * (mean - shipped_df))


def recoverability_curve(refitter: Refitter, settings: RecoverabilitySpec, *, spec: AuditSpec, data: AuditData,
                         shipped_df: float, batch_size: int) -> RecoverabilityMeasurement | None:
    """Every (source, budget) point of ``settings.curve`` (None when the spec asks for none)."""
    curve = settings.curve
    if curve is None:
        return None
    rule = settings.rule or spec.refit.rule
    points: list[RecoveryPoint] = []
    skipped: list[str] = []
    for source in curve.sources:
        for budget in sorted(set(curve.budgets)):
            reason = skip_reason(source, budget, data=data, rule=rule)
            if reason is not None:
                skipped.append(reason)
                continue
            points.append(recovery_point(refitter, source, budget, settings=settings, seeds=curve.seeds, spec=spec,
                                         data=data, shipped_df=shipped_df, batch_size=batch_size))
    headline = next((p for p in points if p.source == settings.source and p.budget == settings.images), None)
    return RecoverabilityMeasurement(forget_accuracy_shipped=shipped_df, rule=rule, seeds=curve.seeds, points=points,
                               skipped=skipped, headline=headline)
