"""transformers image classifiers, from the ``config.json`` that ``save_pretrained`` writes, never remote code.

A transformers ``config.json`` names its config class by ``model_type`` and its model class by ``architectures[0]``.
We build it only when both are transformers' own: ``model_type`` a key of ``CONFIG_MAPPING`` and ``architectures[0]``
one of the classes ``MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES`` gives for that ``model_type``. Then

    AutoConfig.for_model(model_type, **config)  +  AutoModelForImageClassification.from_config(config)

with ``trust_remote_code`` never passed, float32 parameters and eager attention (so no kernel is fetched). A config
that asks for code or files from elsewhere is refused before transformers sees it, at any depth: ``auto_map`` and
``trust_remote_code`` (remote code), ``quantization_config`` (other libraries' loaders), a named ``backbone`` or
``use_pretrained_backbone``/``use_timm_backbone`` (a backbone fetched by name). transformers' own timm wrapper
(``model_type: timm_wrapper``) builds a timm model by name, so its ``architecture`` and ``model_args`` pass the timm
rules of :mod:`bnconvention.architectures.timm_models` as well.

The model's ``state_dict`` keys are those ``save_pretrained`` writes, and its forward returns a ``ModelOutput``;
:func:`bnconvention.architectures.outputs.logits` reads the logits out of it wherever predictions are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from bnconvention.architectures.timm_models import safe_timm_kwargs, timm_name
from bnconvention.errors import ArchitectureConfigError, BnConventionError, FactoryCallError
from bnconvention.extras import import_extra
from bnconvention.formats.text import elide, one_line

# transformers is an optional extra (bnconvention/extras.py): imported inside the functions that use it.

PREFIX = "transformers/"
# keys that make transformers run or fetch something that is not in its own package, refused at any depth
REMOTE_CODE_KEYS = ("auto_map", "trust_remote_code", "custom_pipelines")
_TRUTHY_REFUSED = ("use_pretrained_backbone", "use_timm_backbone")
_NOT_NULL_REFUSED = ("quantization_config", "backbone")
# informational keys save_pretrained writes that do not describe the architecture
_INFORMATIONAL = ("transformers_version", "_name_or_path")


def is_transformers_config(config: Mapping[str, Any]) -> bool:
    """A config in transformers' shape: it names a ``model_type``."""
    return "model_type" in config


def check_no_remote_code(config: Any, *, source: str, loaders: bool = True, path: str = "") -> None:
    """Refuse, at any depth, the keys that ask for remote code, and (``loaders``) those that would make transformers
    fetch a backbone or run another library's loader."""
    if isinstance(config, list):
        for index, item in enumerate(config):
            check_no_remote_code(item, source=source, loaders=loaders, path=f"{path}/{index}")
        return
    if not isinstance(config, dict):
        return
    for key, value in config.items():
        where = f"{path}/{key}"
        if key in REMOTE_CODE_KEYS:
            raise ArchitectureConfigError(
                f"{source}: {where} asks for remote code, which is never run (no trust_remote_code); audit it with "
                "your own factory: --allow-factory package.module:function and a model: section in the spec",
                source=source)
        if loaders and ((key in _TRUTHY_REFUSED and value) or (key in _NOT_NULL_REFUSED and value is not None)):
            raise ArchitectureConfigError(
                f"{source}: {where} = {value!r} would load code or weights from elsewhere; only a self-contained "
                "config is built", source=source)
        check_no_remote_code(value, source=source, loaders=loaders, path=where)


def image_classifier_classes(model_type: str) -> tuple[str, ...]:
    """The image-classification model classes transformers maps ``model_type`` to (empty when none)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    names = MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES.get(model_type, ())
    return (names,) if isinstance(names, str) else tuple(names)


def _model_type_of(class_name: str, *, source: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    types = [t for t in MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES if class_name in image_classifier_classes(t)]
    if len(types) != 1:
        raise ArchitectureConfigError(
            f"{source}: {elide(class_name)!r} is not one of transformers' image classifiers"
            + (" (several model types use it; name model_type)" if types else ""), source=source)
    return types[0]


def check_transformers_config(config: Mapping[str, Any], *, source: str, class_name: str | None = None
                              ) -> tuple[str, str]:
    """``(model_type, class name)`` once both are transformers' own and the class is an image classifier."""
    _import_transformers(f"the transformers architecture in {source}")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    check_no_remote_code(dict(config), source=source)
    architectures = config.get("architectures")
    named = architectures[0] if isinstance(architectures, list) and architectures else None
    class_name = class_name or named
    if not isinstance(class_name, str) or not class_name:
        raise ArchitectureConfigError(f"{source}: 'architectures' names no model class (expected a non-empty list "
                                      "of class names, as save_pretrained writes it)", source=source)
    if named is not None and named != class_name:
        raise ArchitectureConfigError(f"{source}: architectures[0] is {elide(named)!r}, not {elide(class_name)!r}",
                                      source=source)
    model_type = config.get("model_type")
    if model_type is None:
        model_type = _model_type_of(class_name, source=source)
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise ArchitectureConfigError(
            f"{source}: model_type {elide(model_type) if isinstance(model_type, str) else model_type!r} is unknown "
            "to transformers' config mapping; nothing was imported", source=source)
    if class_name not in image_classifier_classes(model_type):
        known = image_classifier_classes(model_type)
        raise ArchitectureConfigError(
            f"{source}: architectures[0] {elide(class_name)!r} is not an image classifier of transformers for "
            f"model_type {model_type!r}" + (f" (that is {' or '.join(known)})" if known else " (it has none)"),
            source=source)
    if model_type == "timm_wrapper":
        timm_name(config.get("architecture"), source=source)
        model_args = config.get("model_args") or {}
        if not isinstance(model_args, dict):
            raise ArchitectureConfigError(f"{source}: model_args is not an object", source=source)
        safe_timm_kwargs(model_args, source=source)
    return model_type, class_name


def transformers_architecture(config: Mapping[str, Any], *, source: str) -> tuple[str, dict[str, Any]]:
    """``(factory name, config fields)`` of a transformers ``config.json`` (see the module docstring)."""
    _, class_name = check_transformers_config(config, source=source)
    return PREFIX + class_name, {k: v for k, v in config.items() if k not in _INFORMATIONAL}


def build_transformers(class_name: str, config: Mapping[str, Any] | None = None, *, source: str | None = None
                       ) -> torch.nn.Module:
    """The image classifier ``class_name`` from its config fields, random initialisation, float32, after the checks
    above (run again here: a spec's ``model: {factory: transformers/...}`` is untrusted as well)."""
    where = source or f"{PREFIX}{class_name}"
    fields = {k: v for k, v in dict(config or {}).items() if k not in _INFORMATIONAL}
    model_type, class_name = check_transformers_config(fields, source=where, class_name=class_name)
    from transformers import AutoConfig, AutoModelForImageClassification

    fields.pop("model_type", None)
    fields["architectures"] = [class_name, *fields.get("architectures", [class_name])[1:]]
    try:
        built = AutoConfig.for_model(model_type, **fields)
        model = AutoModelForImageClassification.from_config(built, dtype=torch.float32, attn_implementation="eager")
    except (BnConventionError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a library building from file fields: one line, chained
        raise FactoryCallError(f"transformers could not build {class_name!r} from {where}: {type(exc).__name__}: "
                               f"{one_line(exc)}") from exc
    if type(model).__name__ != class_name:
        raise FactoryCallError(f"transformers built a {type(model).__name__} for {class_name!r} from {where}")
    model.eval()
    return model


def _import_transformers(needed_by: str) -> Any:
    return import_extra("transformers", command=f"building {needed_by}")


__all__ = ["PREFIX", "REMOTE_CODE_KEYS", "build_transformers", "check_no_remote_code", "check_transformers_config",
           "image_classifier_classes", "is_transformers_config", "transformers_architecture"]
