"""Describe a transform object (torchvision v1 or v2, and timm's ``timm.data.transforms`` that timm's
``create_transform`` puts in its pipelines) as the standard's ``Transform``: class names and parameters.

The running statistics depend on what the input pipeline did to each image (its scale, crop, normalization and
random augmentation), so a record names the transform by a canonical description and its sha256. For a
torchvision pipeline the description is read off the objects themselves: every step becomes one string of
:attr:`TransformDescription.steps`, ``<public class path>(<param>=<canonical JSON value>, ...)`` with the parameters
of the class's ``__init__`` in sorted order and the values the object actually holds (so ``RandomHorizontalFlip()``
and ``RandomHorizontalFlip(p=0.5)`` are the same step). ``Compose`` and ``torch.nn.Sequential`` are flattened;
``RandomApply``/``RandomChoice``/``RandomOrder`` keep their inner steps as a parameter. The summary fields are
filled from the steps: ``resize`` (``Resize``, timm's ``ResizeKeepRatio``), ``crop`` (a class named ``...Crop...``,
e.g. timm's ``RandomResizedCropAndInterpolation``), ``normalize`` (one ``Normalize``) and
``augmentations`` (the other random steps); the mode is ``train`` when any step is random, else ``eval``.

The same pipeline gives the same bytes, hence the same sha256, on every machine and run: nothing but the objects'
parameters enters (no memory addresses, no reprs). A step that cannot be described faithfully is refused with an
error that says what to pass instead: a ``Lambda`` (its function's behaviour is not in its parameters), a class
outside torchvision's public ``transforms`` / ``transforms.v2`` namespaces and ``timm.data.transforms``, or a
parameter of a type with no
canonical JSON form.

>>> import torchvision.transforms as T
>>> t = describe_transform(T.Compose([T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize([0.5], [0.25])]))
>>> t.mode, t.description.augmentations
('train', ['torchvision.transforms.RandomHorizontalFlip(p=0.5)'])
>>> t.description.steps[-1]
'torchvision.transforms.Normalize(inplace=false, mean=[0.5], std=[0.25])'
"""

from __future__ import annotations

import enum
import importlib
import inspect
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bnconvention.authoring.declaration import make_transform
from bnconvention.errors import RecordError
from bnconvention.formats.canonical import canonical_json
from bnconvention.standard.models import Normalization, Transform, TransformMode

__all__ = ["as_standard_transform", "describe_transform"]

_PUBLIC_MODULES = ("torchvision.transforms.v2", "torchvision.transforms", "timm.data.transforms")  # specific first
_RESIZES = {"Resize", "ResizeKeepRatio"}
_CONTAINERS = {"Compose", "Sequential"}
# Random steps whose names do not start with "Random" (torchvision 0.15 - 0.29).
_RANDOM = {"ColorJitter", "GaussianBlur", "GaussianNoise", "AutoAugment", "RandAugment", "TrivialAugmentWide",
           "AugMix", "ElasticTransform", "JPEG", "ScaleJitter", "FixedSizeCrop", "MixUp", "CutMix"}
_MAX_TENSOR_VALUES = 1024
_WHAT_TO_PASS = ("pass a torchvision transform (torchvision.transforms or torchvision.transforms.v2, Compose "
                 "included) or describe it with bnconvention.make_transform(mode='train', "
                 "reference='train.py:train_transform', augmentations=[...], normalize_mean=[...], "
                 "normalize_std=[...])")


def describe_transform(transform: Any, *, mode: TransformMode | None = None,
                       reference: str | None = None) -> Transform:
    """The standard's ``Transform`` of a torchvision transform (or pipeline): its steps, summary fields and sha256.

    ``mode`` overrides the inferred one (``train`` when a step is random); ``reference`` says where the transform is
    defined (e.g. ``train.py:train_transform``). Raises :class:`RecordError` naming the step that cannot be described.
    """
    leaves = _leaves(transform, where="transform")
    steps = [(type(leaf).__name__, _step(leaf, where=where)) for where, leaf in leaves]
    names = [name for name, _ in steps]
    normalizers = [leaf for _, leaf in leaves if type(leaf).__name__ == "Normalize"]
    normalize = _normalization(normalizers[0]) if len(normalizers) == 1 else None
    inferred: TransformMode = "train" if any(_is_random(name) for name in names) else "eval"
    return make_transform(
        mode=mode or inferred, reference=reference,
        resize=_joined(text for name, text in steps if name in _RESIZES),
        crop=_joined(text for name, text in steps if _is_crop(name)),
        augmentations=[text for name, text in steps if _is_random(name) and not _is_crop(name)],
        normalize_mean=normalize.mean if normalize else None, normalize_std=normalize.std if normalize else None,
        steps=[text for _, text in steps])


def as_standard_transform(value: Any) -> Transform:
    """What the recorder and the refit engine accept as a transform, as the standard's ``Transform``.

    A ``Transform`` as is; an object with a ``standard()`` method (e.g. the zoo's ``BatchTransform``) by calling it;
    a torchvision transform by :func:`describe_transform`. Anything else is a :class:`RecordError` saying what to pass.
    """
    if isinstance(value, Transform):
        return value
    standard = getattr(value, "standard", None)
    if callable(standard) and not _is_torchvision(value):
        result = standard()
        if not isinstance(result, Transform):
            raise RecordError(f"{type(value).__name__}.standard() returned a {type(result).__name__}, not a "
                              "bnconvention Transform; " + _WHAT_TO_PASS)
        return result
    if isinstance(value, (str, bytes)):
        raise RecordError(f"transform={value!r} is a string, not a transform: a record needs the transform's "
                          "description, not only its name; " + _WHAT_TO_PASS)
    if _is_transform(value):
        return describe_transform(value)
    raise RecordError(f"cannot describe transform: {_unknown_class(type(value))}; " + _WHAT_TO_PASS)


# --- steps ---------------------------------------------------------------------------------------------------------


def _leaves(transform: Any, *, where: str) -> list[tuple[str, Any]]:
    """``(where, step)`` of every step, containers (Compose, nn.Sequential) flattened in order."""
    name = type(transform).__name__
    if name in _CONTAINERS and (_is_torchvision(transform) or _is_sequential(transform)):
        inner = transform.transforms if name == "Compose" else list(transform)
        return [leaf for index, item in enumerate(inner) for leaf in _leaves(item, where=f"{where}[{index}]")]
    return [(where, transform)]


def _step_strings(transform: Any, *, where: str) -> list[str]:
    return [_step(leaf, where=at) for at, leaf in _leaves(transform, where=where)]


def _step(transform: Any, *, where: str) -> str:
    cls = type(transform)
    public = _public_path(cls)
    if public is None:
        raise RecordError(f"cannot describe {where}: {_unknown_class(cls)}; " + _WHAT_TO_PASS)
    params = {}
    for parameter in inspect.signature(cls.__init__).parameters.values():
        if parameter.name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if not hasattr(transform, parameter.name):
            raise RecordError(f"cannot describe {where} ({public}): its parameter {parameter.name!r} is not stored "
                              "on the object, so its value is unknown; " + _WHAT_TO_PASS)
        params[parameter.name] = _canonical_value(getattr(transform, parameter.name),
                                                  where=f"{where} ({public}) parameter {parameter.name!r}")
    return f"{public}({', '.join(f'{key}={canonical_json(params[key])}' for key in sorted(params))})"


def _canonical_value(value: Any, *, where: str) -> Any:
    """A parameter value as JSON data with one spelling per value (enums by value, tuples as lists, ...)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return _canonical_value(value.value, where=where)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(float(value)):
            raise RecordError(f"cannot describe {where}: {value!r} has no JSON form; " + _WHAT_TO_PASS)
        return float(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, type):
        return _class_path(value)
    if isinstance(value, torch.Tensor):
        if value.numel() > _MAX_TENSOR_VALUES:
            raise RecordError(f"cannot describe {where}: a tensor of {value.numel()} values is data, not a "
                              "parameter; " + _WHAT_TO_PASS)
        return _canonical_value(value.tolist(), where=where)
    if _is_transform(value):  # a nested pipeline: RandomApply([...]) and friends
        return _step_strings(value, where=where)
    if isinstance(value, Mapping):
        return {_key(key, where=where): _canonical_value(item, where=where) for key, item in value.items()}
    if isinstance(value, Sequence) or _is_module_list(value):
        return [_nested_item(item, where=f"{where}[{index}]") for index, item in enumerate(value)]
    kind = "a function, whose behaviour its parameters do not show" if callable(value) else (
        f"a {_class_path(type(value))}, which has no canonical JSON form")
    raise RecordError(f"cannot describe {where}: it is {kind}; " + _WHAT_TO_PASS)


def _nested_item(item: Any, *, where: str) -> Any:
    """An item of a list parameter; a transform among the choices of RandomApply/RandomChoice/RandomOrder is its step
    string, or the list of its steps when it is itself a pipeline (so ``[a, Compose([b, c])]`` keeps two choices)."""
    if not _is_transform(item):
        return _canonical_value(item, where=where)
    leaves = _leaves(item, where=where)
    steps = [_step(leaf, where=at) for at, leaf in leaves]
    return steps[0] if len(leaves) == 1 and leaves[0][1] is item else steps


def _key(key: Any, *, where: str) -> str:
    value = _canonical_value(key, where=where)
    return value if isinstance(value, str) else canonical_json(value)


# --- summary fields ------------------------------------------------------------------------------------------------


def _normalization(step: Any) -> Normalization | None:
    """Mean and std of a ``Normalize`` step (None when they are not lists of numbers with positive std)."""
    mean, std = (_canonical_value(getattr(step, name), where=f"Normalize {name}") for name in ("mean", "std"))
    mean, std = (v if isinstance(v, list) else [v] for v in (mean, std))
    if mean and std and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in [*mean, *std]) \
            and min(std) > 0:
        return Normalization(mean=[float(v) for v in mean], std=[float(v) for v in std])
    return None


def _joined(texts: Any) -> str | None:
    items = list(texts)
    return "; ".join(items) if items else None


def _is_random(name: str) -> bool:
    return name.startswith("Random") or name in _RANDOM


def _is_crop(name: str) -> bool:
    """``CenterCrop``, ``RandomResizedCrop``, and timm's ``RandomResizedCropAndInterpolation``/``CenterCropOrPad``."""
    return "Crop" in name


# --- classes -------------------------------------------------------------------------------------------------------


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _unknown_class(cls: type) -> str:
    """Why a class is not described: a user's subclass of a torchvision transform may behave differently."""
    parent = next((base for base in cls.__mro__[1:] if _public_path(base) is not None), None)
    if parent is not None:
        return (f"{_class_path(cls)} subclasses {_public_path(parent)}, and may not behave like it, so it is not "
                "described as torchvision's")
    return f"{_class_path(cls)} is not one of torchvision's public transforms"


def _is_transform(value: Any) -> bool:
    """A torchvision transform object or an nn.Sequential of them (not torchvision's enums, e.g. InterpolationMode)."""
    if isinstance(value, (enum.Enum, type)) or not callable(value):
        return False
    return _is_torchvision(value) or _is_sequential(value)


def _is_torchvision(value: Any) -> bool:
    """A transform of torchvision's, or of timm's ``timm.data.transforms`` (which timm composes with them)."""
    module = type(value).__module__
    return module.startswith("torchvision.transforms") or module == "timm.data.transforms"


def _is_sequential(value: Any) -> bool:
    return type(value).__module__ == "torch.nn.modules.container" and type(value).__name__ == "Sequential"


def _is_module_list(value: Any) -> bool:
    return type(value).__module__ == "torch.nn.modules.container" and type(value).__name__ == "ModuleList"


def _public_path(cls: type) -> str | None:
    """``torchvision.transforms[.v2].<Name>`` when that public name is this very class; None otherwise."""
    if cls.__module__ == "torch.nn.modules.container":
        return None
    for module_name in _PUBLIC_MODULES:
        if cls.__module__ == module_name or cls.__module__.startswith(f"{module_name}."):
            module = importlib.import_module(module_name)
            return f"{module_name}.{cls.__name__}" if getattr(module, cls.__name__, None) is cls else None
    return None
