"""Model factories, resolved only from an allowlist.

A factory name in a model's metadata or a downloaded config is untrusted: it is looked up in :data:`REGISTRY`
(torchvision architectures, the digits zoo) and never imported. ``timm/<model>`` and ``transformers/<class>`` are
built through those libraries' own registries (:mod:`~bnconvention.architectures.timm_models`,
:mod:`~bnconvention.architectures.transformers_models`). The only way to run other code is for the user to name it
on their own command line (``--allow-factory package.module:function``), which calls :func:`allow_user_factory` for
that process. Building a model (:mod:`~bnconvention.architectures.build`) imports torch; this allowlist does not,
so the audit resolves an architecture from a repo's files before anything needs torch.

>>> sorted(n for n in available_factories() if n.startswith("torchvision/resnet"))[:2]
['torchvision/resnet101', 'torchvision/resnet152']
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bnconvention.architectures.timm_models import PREFIX as TIMM_PREFIX
from bnconvention.architectures.transformers_models import PREFIX as TRANSFORMERS_PREFIX
from bnconvention.errors import FactoryNotAllowedError
from bnconvention.formats.text import elide

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
    """Every factory name that :func:`~bnconvention.architectures.build.build_model` will resolve in this process."""
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


def check_allowed(name: str) -> str:
    """The ``module:attribute`` target of an allowlisted factory name (nothing imported); refused otherwise."""
    target = _user_allowed.get(name) or REGISTRY.get(name)
    if target is None:
        raise FactoryNotAllowedError(
            f"model factory {elide(name)!r} is not allowlisted; known: torchvision/<arch>, timm/<model>, "
            "transformers/<image classifier class>, zoo/convnet-bn, zoo/convnet-gn. "
            "To use your own, name it on the command line: --allow-factory package.module:function"
        )
    return target


def plain_kwargs_problem(kwargs: Mapping[str, Any]) -> str | None:
    """Why ``kwargs`` are not plain factory arguments (JSON scalars or lists of them), or None when they are."""
    for key, value in kwargs.items():
        if not isinstance(value, _JSON_SCALAR) and not (
            isinstance(value, (list, tuple)) and all(isinstance(v, _JSON_SCALAR) for v in value)
        ):
            return (f"factory argument {key}={value!r} is not a JSON scalar or list of scalars; only plain values are "
                    "accepted")
    return None


def is_library_factory(name: str) -> bool:
    """Whether ``name`` is built by timm or transformers (``timm/<model>``, ``transformers/<class>``)."""
    return name.startswith((TIMM_PREFIX, TRANSFORMERS_PREFIX))
