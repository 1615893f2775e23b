"""The diagnostics of seed 003 and seed 001 beyond the replicate cells: recoverability and the provenance contrast.

Both use the audit's :class:`~bnconvention.audit.evaluation.Refitter`, so φ is back to the shipped state afterwards.
"""

from __future__ import annotations

# torch is imported inside the functions that use it: importing this module does not import torch.
import numpy as np

from bnconvention.audit.data import AuditData, Split
from bnconvention.audit.evaluation import BaseCells, Refitter, data_split, forget_accuracy, stream, torch_seed
from bnconvention.audit.spec import AuditSpec, ProvenanceSpec, RecoverabilitySpec
from bnconvention.formats.text import plural
from bnconvention.standard.models import ProvenanceContrast, Recoverability


def recoverability(refitter: Refitter, settings: RecoverabilitySpec, *, spec: AuditSpec, data: AuditData,
                   shipped: BaseCells, batch_size: int) -> Recoverability:
    """Forget accuracy after a refit on ``settings.images`` unlabeled images of the source split (seed 003's
    attack); the images are drawn from ``SeedSequence(seed, spawn_key=(1,))``."""
    import torch

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


def provenance_contrast(refitter: Refitter, settings: ProvenanceSpec, *, spec: AuditSpec, data: AuditData,
                        batch_size: int) -> ProvenanceContrast:
    """Refit on a fixed-size retained pool and on the same pool with ``exchanged`` records swapped for forget
    records (same size, same augmentation seed); report the distance between the two fitted states and the shift
    of forget accuracy (seed 001, appendix P). Draws from ``SeedSequence(seed, spawn_key=(2,))``."""
    import torch

    from bnconvention.refit import running_state, staleness_distance

    rng = stream(spec.seed, 2)
    retained = np.sort(rng.choice(len(data.retain.ids), size=settings.pool_size, replace=False))
    exchanged = np.sort(rng.choice(len(data.forget.ids), size=settings.exchanged, replace=False))
    seed = torch_seed(rng)
    transform = data.transform(spec.refit.transform)
    pool_a = data.retain.x[torch.from_numpy(retained)]
    # the same pool with its first k retained records exchanged for forget records: same size, same seed
    pool_b = torch.cat([data.forget.x[torch.from_numpy(exchanged)], pool_a[settings.exchanged:]])
    results = []
    for label, pool in (("retain", pool_a), ("exchanged", pool_b)):
        refitter.run(pool, rule=spec.refit.rule, transform=transform, seed=seed, batch_size=spec.refit.batch_size,
                     data_split=data_split(data, role="other", subset=f"provenance pool ({label})", ids=None,
                                            count=settings.pool_size, seed=spec.seed))
        results.append((running_state(refitter.model), forget_accuracy(refitter.model, data, batch_size=batch_size)))
        refitter.restore()
    distance = staleness_distance(results[1][0], results[0][0])
    return ProvenanceContrast(pool_size=settings.pool_size, exchanged=settings.exchanged,
                              mean_distance=distance.mean_distance, var_distance=distance.var_distance,
                              forget_shift_pp=100.0 * (results[1][1] - results[0][1]))
