"""Build a model from an allowlisted factory name (:mod:`~bnconvention.architectures.factories`): import the
factory, check its arguments against its signature, call it, and check that it returned a ``torch.nn.Module`` with
every parameter materialised. ``timm/<model>`` and ``transformers/<class>`` go to those libraries' builders.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from bnconvention.architectures.factories import check_allowed, plain_kwargs_problem
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
from bnconvention.formats.text import one_line
from bnconvention.refitting.state import ensure_materialised

FactoryFn = Callable[..., torch.nn.Module]


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
    if not isinstance(model, torch.nn.Module):
        raise FactoryCallError(f"model factory {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    ensure_materialised(model, what=f"model factory {name!r}",
                        fix="run one forward in the factory before it returns the model")
    return model


def resolve_factory(name: str) -> FactoryFn:
    """The callable behind an allowlisted factory name; anything else is refused without importing it."""
    return _load(check_allowed(name))


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
