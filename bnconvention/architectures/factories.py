"""Model factories, resolved only from an allowlist.

A factory name in a model's metadata or a downloaded config is untrusted: it is looked up in :data:`REGISTRY`
(torchvision architectures, the digits zoo) and never imported. ``timm/<model>`` and ``transformers/<class>`` are
built through those libraries' own registries (:mod:`~bnconvention.architectures.timm_models`,
:mod:`~bnconvention.architectures.transformers_models`). The only way to run other code is for the user to name it
on their own command line (``--allow-factory package.module:function``), which calls :func:`allow_user_factory` for
that process.

>>> sorted(n for n in available_factories() if n.startswith("torchvision/resnet"))[:2]
['torchvision/resnet101', 'torchvision/resnet152']
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bnconvention.architectures.timm_models import PREFIX as TIMM_PREFIX
from bnconvention.architectures.timm_models import build_timm
from bnconvention.architectures.transformers_models import PREFIX as TRANSFORMERS_PREFIX
from bnconvention.architectures.transformers_models import build_transformers
from bnconvention.errors import (
    BnConventionError,
    FactoryArgumentError,
    FactoryCallError,
    FactoryImportError,
    FactoryNotAllowedError,
)
from bnconvention.extras import missing_dependency
from bnconvention.formats.text import elide, one_line

# torch is imported inside the functions that use it: importing this module does not import torch.

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
    return _load(check_allowed(name))


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


def _load(target: str) -> FactoryFn:
    """Import ``module:attribute``; every way that can fail is one :class:`FactoryImportError` naming the target
    and the fix (the original exception is chained for ``--traceback``)."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if missing_dependency(exc) is not None:
            raise  # torch & co. missing: the CLI names the extra that installs them for the command at hand
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise FactoryImportError(
                f"cannot import module {module_name!r} for factory {target!r}: no module named {exc.name!r}; install "
                "it, or run from the folder that holds it (or add that folder to PYTHONPATH)", target=target) from exc
        raise FactoryImportError(
            f"module {module_name!r} of factory {target!r} failed to import: {exc}; install what it imports",
            target=target) from exc
    except Exception as exc:  # noqa: BLE001 - the user's module may raise anything while it is imported
        raise FactoryImportError(
            f"module {module_name!r} of factory {target!r} raised {type(exc).__name__} while being imported: "
            f"{one_line(exc)}; fix the module (rerun with --traceback to see where)",
            target=target) from exc
    function = getattr(module, attribute, None)
    if function is None:
        raise FactoryImportError(
            f"module {module_name!r} has no attribute {attribute!r} (factory {target!r}); name a function it defines",
            target=target)
    if not callable(function):
        raise FactoryImportError(
            f"{target!r} is a {type(function).__name__}, not a function that builds a model", target=target)
    return function


def _check_arguments(name: str, function: FactoryFn, kwargs: Mapping[str, Any]) -> None:
    """Refuse keyword arguments the factory's signature does not take, before anything is built."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: let the call decide
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        takes = [p.name for p in signature.parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        raise FactoryArgumentError(
            f"model factory {name!r} does not accept the arguments {dict(kwargs)!r}: {exc}; it takes "
            f"{', '.join(takes) or 'no keyword arguments'}") from None


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


def build_model(name: str, kwargs: Mapping[str, Any] | None = None, *, source: str | None = None) -> torch.nn.Module:
    """Build an allowlisted architecture with JSON-scalar keyword arguments (random initialisation, no download).

    ``timm/<model>`` and ``transformers/<class>`` go to those libraries' builders, which check their own arguments
    (a transformers config has objects such as ``id2label``); ``source`` names where the name and arguments came
    from, for their errors. Whatever a factory raises becomes one :class:`FactoryCallError`, so a user's factory
    fails with one line at the CLI; what it returns must be a ``torch.nn.Module``.
    """
    if name.startswith(TIMM_PREFIX):
        return build_timm(name[len(TIMM_PREFIX):], kwargs, source=source)
    if name.startswith(TRANSFORMERS_PREFIX):
        return build_transformers(name[len(TRANSFORMERS_PREFIX):], kwargs, source=source)
    kwargs = dict(kwargs or {})
    problem = plain_kwargs_problem(kwargs)
    if problem is not None:
        raise FactoryNotAllowedError(problem)
    if name.startswith("torchvision/"):
        # never fetch pretrained weights: weights=None is forced
        kwargs["weights"] = None
    function = resolve_factory(name)
    _check_arguments(name, function, kwargs)
    try:
        model = function(**kwargs)
    except (BnConventionError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a factory is other people's code: one line, chained for --traceback
        raise FactoryCallError(f"model factory {name!r} raised {type(exc).__name__}: "
                               f"{one_line(exc)}") from exc
    import torch

    if not isinstance(model, torch.nn.Module):
        raise FactoryCallError(f"model factory {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    from bnconvention.refitting.state import ensure_materialised

    ensure_materialised(model, what=f"model factory {name!r}",
                        fix="run one forward in the factory before it returns the model")
    return model
