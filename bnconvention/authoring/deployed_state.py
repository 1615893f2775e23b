"""Describe a model's deployed state (its BatchNorm layers and digests) as models of the standard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnconvention.formats.digests import DigestSet, bn_layer_names, model_digests
from bnconvention.standard.models import DIGEST_ALGORITHM, BatchNormLayer, BatchNormState, TensorDigests

if TYPE_CHECKING:
    import torch


def batchnorm_state(model: torch.nn.Module, digests: DigestSet | None = None) -> BatchNormState:
    """Every BatchNorm layer of ``model`` in module order, with its per-layer running-statistics digest.

    A model with no BatchNorm layer (GroupNorm, LayerNorm, RMSNorm) gives an empty layer list: channel absent.
    """
    digests = digests or model_digests(model)
    modules = dict(model.named_modules())
    layers = []
    for name in bn_layer_names(model):
        module = modules[name]
        layers.append(
            BatchNormLayer(
                name=name,
                type=type(module).__name__,
                num_features=int(module.num_features),
                eps=float(module.eps),
                momentum=None if module.momentum is None else float(module.momentum),
                affine=bool(module.affine),
                track_running_stats=bool(module.track_running_stats),
                running_sha256=digests.layer_running_sha256.get(name),
            )
        )
    return BatchNormState(kind="batchnorm", layers=layers)


def tensor_digests(digests: DigestSet) -> TensorDigests:
    """The record's ``digests`` object from computed digests."""
    return TensorDigests(
        algorithm=DIGEST_ALGORITHM,
        trainable_sha256=digests.trainable_sha256,
        running_sha256=digests.running_sha256,
    )
