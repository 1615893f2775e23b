"""The headline recoverability: forget accuracy after a refit on B = 10 unlabeled images.

This is the ten-image attack of Kalani et al. (docs/statistics.md#recoverability).

The curve over budgets is :mod:`.recovery`; the provenance contrast of Shen and Li is :mod:`.provenance`. Both use
the audit's :class:`~bnconvention.audit.measure.evaluation.Refitter`, so φ is back to the shipped state afterwards.
"""

from __future__ import annotations

import numpy as np
import torch

from bnconvention.audit.measure.data import AuditData, Split
from bnconvention.audit.measure.decisions import BaseCells
from bnconvention.audit.measure.evaluation import Refitter, data_split, forget_accuracy, stream, torch_seed
from bnconvention.audit.spec.audit_spec import AuditSpec, RecoverabilitySpec
from bnconvention.formats.text import plural
from bnconvention.standard.models import Recoverability


def recoverability(refitter: Refitter, settings: RecoverabilitySpec, *, spec: AuditSpec, data: AuditData,
                   shipped: BaseCells, batch_size: int) -> Recoverability:
    """Forget accuracy after a refit on ``settings.images`` unlabeled images of the source split (Kalani et al.'s
    attack); the images are drawn from ``SeedSequence(seed, spawn_key=(1,))``."""
    source: Split = getattr(data, settings.source)
    rng = stream(spec.seed, 1)
    chosen = np.sort(rng.choice(len(source.ids), size=settings.images, replace=False))
    rule = settings.rule or spec.refit.rule
    transform = data.transform(settings.transform)
    refitter.run(source.x[torch.from_numpy(chosen)], rule=rule, transform=transform, seed=torch_seed(rng),
                 batch_size=settings.images,
                 data_split=data_split(data, role="proxy",
                                       subset=f"{plural(settings.images, 'unlabeled image')} from the "
                                              f"{settings.source} split", ids=source.ids[chosen],
                                       count=settings.images, seed=spec.seed))
    after = forget_accuracy(refitter.model, data, batch_size=batch_size)
    refitter.restore()
    return Recoverability(images=settings.images, source=settings.source, rule=rule,
                          forget_accuracy_shipped=shipped["df"], forget_accuracy_after=after,
                          shift_pp=100.0 * (after - shipped["df"]))
