"""Model factories, resolved only from an allowlist.

A factory name in a model's metadata or a downloaded config is untrusted: it is looked up in :data:`REGISTRY`
(torchvision architectures, the digits zoo) and never imported. The only way to run other code is for the user to
name it on their own command line (``--allow-factory package.module:function``), which calls
:func:`allow_user_factory` for that process.

>>> sorted(n for n in available_factories() if n.startswith("torchvision/resnet"))[:2]
['torchvision/resnet101', 'torchvision/resnet152']
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bnconvention.errors import FactoryNotAllowedError

if TYPE_CHECKING:
    import torch

FactoryFn = Callable[..., "torch.nn.Module"]

# Built-in entries: name -> "module:attribute" inside packages we ship or depend on. Resolved lazily.
REGISTRY: dict[str, str] = {
    "zoo/convnet-bn": "bnconvention.zoo.models:convnet_bn",
    "zoo/convnet-gn": "bnconvention.zoo.models:convnet_gn",
}

_TORCHVISION = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "resnext50_32x4d",
    "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "densenet121", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0", "regnet_y_400mf", "convnext_tiny", "vit_b_16",
)
for _arch in _TORCHVISION:
    REGISTRY[f"torchvision/{_arch}"] = f"torchvision.models:{_arch}"

_user_allowed: dict[str, str] = {}
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_JSON_SCALAR = (str, int, float, bool, type(None))


def available_factories() -> list[str]:
    """Every factory name that :func:`build_model` will resolve in this process."""
    return sorted({**REGISTRY, **_user_allowed})


def allow_user_factory(target: str, *, name: str | None = None) -> str:
    """Allow ``package.module:function``, named by the user on their own command line. Returns its factory name."""
    if not _TARGET.match(target):
        raise FactoryNotAllowedError(
            f"--allow-factory {target!r} is not of the form package.module:function"
        )
    factory_name = name or target
    _user_allowed[factory_name] = target
    return factory_name


def resolve_factory(name: str) -> FactoryFn:
    """The callable behind an allowlisted factory name; anything else is refused without importing it."""
    target = _user_allowed.get(name) or REGISTRY.get(name)
    if target is None:
        raise FactoryNotAllowedError(
            f"model factory {name!r} is not allowlisted; known: torchvision/<arch>, zoo/convnet-bn, zoo/convnet-gn. "
            "To use your own, name it on the command line: --allow-factory package.module:function"
        )
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attribute)


def build_model(name: str, kwargs: Mapping[str, Any] | None = None) -> torch.nn.Module:
    """Build an allowlisted architecture with JSON-scalar keyword arguments (random initialisation, no download)."""
    kwargs = dict(kwargs or {})
    for key, value in kwargs.items():
        if not isinstance(value, _JSON_SCALAR) and not (
            isinstance(value, (list, tuple)) and all(isinstance(v, _JSON_SCALAR) for v in value)
        ):
            raise FactoryNotAllowedError(
                f"factory argument {key}={value!r} is not a JSON scalar or list of scalars; only plain values are "
                "accepted"
            )
    if name.startswith("torchvision/"):
        # never fetch pretrained weights: weights=None is forced
        kwargs["weights"] = None
    return resolve_factory(name)(**kwargs)
