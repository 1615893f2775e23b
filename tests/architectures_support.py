"""Releases written by timm's and transformers' own saving code, for the architecture tests (imported by
tests/test_architectures_*.py): random-initialised tiny models, nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


def timm_release(folder: Path, name: str, **kwargs: Any) -> torch.nn.Module:
    """``timm.create_model(name, pretrained=False, **kwargs)`` saved by ``timm.models._hub.save_for_hf`` (the
    writer ``push_to_hf_hub`` uses) as ``model.safetensors`` + ``config.json``; returns the model (eval mode)."""
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    save_for_hf(model, str(folder), safe_serialization=True)
    return model


def transformers_resnet(folder: Path, *, num_labels: int = 3, num_channels: int = 3) -> torch.nn.Module:
    """A tiny transformers ResNet image classifier saved by ``save_pretrained``; returns the model (eval mode)."""
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                          num_labels=num_labels, num_channels=num_channels)
    model = ResNetForImageClassification(config).eval()
    model.save_pretrained(folder)
    return model


def transformers_convnext(folder: Path, *, num_labels: int = 3) -> torch.nn.Module:
    """A tiny transformers ConvNeXt (LayerNorm, no running statistics) saved by ``save_pretrained``."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    torch.manual_seed(0)
    config = ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=num_labels)
    model = ConvNextForImageClassification(config).eval()
    model.save_pretrained(folder)
    return model


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def fixed_input(*, channels: int = 3, size: int = 32, count: int = 4) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1234)
    return torch.randn(count, channels, size, size, generator=generator)
