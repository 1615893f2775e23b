"""Models and checkpoints of real layouts for the layout tests (imported by tests/test_checkpoint_*.py).

timm and transformers models are built here directly, random-initialised (never downloaded): timm's ``test_resnet``
(15 BatchNorm layers, 0.37 M parameters) and a two-stage transformers ``ResNetForImageClassification`` for the
digits dataset (one channel, ten classes). :data:`FACTORY_SOURCE` is a user factory module for the CLI tests (named
with ``--allow-factory``); its transformers model returns logits, as the audit's evaluation reads them.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import torch

FACTORY_SOURCE = '''\
import timm
from transformers import ResNetConfig, ResNetForImageClassification


class LogitsResNet(ResNetForImageClassification):
    def forward(self, pixel_values, **kwargs):
        return super().forward(pixel_values=pixel_values, **kwargs).logits


def tiny_resnet(**kwargs):
    config = ResNetConfig(num_channels=1, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10,
                          layer_type="basic")
    return LogitsResNet(config)


def timm_resnet(**kwargs):
    return timm.create_model("test_resnet", pretrained=False, num_classes=10, in_chans=1)
'''


def factory_module(folder: Path) -> str:
    """A fresh importable module holding :data:`FACTORY_SOURCE` (on ``sys.path``); returns its name."""
    name = f"bnc_layout_factories_{uuid.uuid4().hex[:10]}"
    (folder / f"{name}.py").write_text(FACTORY_SOURCE, encoding="utf-8")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return name


def tiny_transformers_resnet(seed: int = 0) -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(seed)
    config = ResNetConfig(num_channels=1, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10,
                          layer_type="basic")
    return ResNetForImageClassification(config).eval()


def timm_test_resnet(seed: int = 0) -> torch.nn.Module:
    import timm

    torch.manual_seed(seed)
    return timm.create_model("test_resnet", pretrained=False, num_classes=10, in_chans=1).eval()


def moved_buffers(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """The model after a few training-mode forwards: running statistics that are not the initial 0 and 1."""
    generator = torch.Generator().manual_seed(seed)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 1, 16, 16, generator=generator) * 2 + 0.5)
    return model.eval()


def save_state(model: torch.nn.Module, path: Path, *, dtype: torch.dtype | None = None, prefix: str = "") -> Path:
    """The model's ``state_dict`` as one safetensors file (as timm's ``save_for_hf`` writes it), floats in
    ``dtype``, names behind ``prefix``."""
    from safetensors.torch import save_file

    state = {}
    for name, tensor in model.state_dict().items():
        value = tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor
        state[prefix + name] = value.contiguous()
    save_file(state, str(path), metadata={"format": "pt"})
    return path
