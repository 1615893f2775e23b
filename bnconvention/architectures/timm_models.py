"""timm architectures, from the ``config.json`` timm itself writes, built only through timm's own registry.

timm's exporter (``timm/models/_hub.py``: ``save_config_for_hf``, called by ``save_for_hf`` and
``push_to_hf_hub``) writes::

    {"architecture": "resnet18", "num_classes": 10, "num_features": 512, "global_pool": "avg",
     "model_args": {"num_classes": 10, "in_chans": 3, "global_pool": "avg"},
     "pretrained_cfg": {"input_size": [3, 224, 224], "fixed_input_size": false, "mean": [...], ...}}

``model_args`` are the factory's reconstruction arguments; older exports lack them, and timm then takes ``in_chans``
(and ``img_size`` for fixed-size models) from ``pretrained_cfg.input_size``, as we do. ``num_features`` and the
top-level ``global_pool`` are informational (timm's comment says so) and are not passed.

What we build is ``timm.create_model(name, pretrained=False, **kwargs)`` and nothing else:

* ``name`` is a plain registry name (``timm.is_model``), optionally with a pretrained tag (``resnet18.a1_in1k``,
  dropped: the tag selects weights, never code). Source prefixes (``hf-hub:``, ``local-dir:``) and paths are
  refused before timm is asked, so timm never reads a file or the network for us.
* ``kwargs`` are plain JSON: numbers, booleans, null, short strings of name characters, and (nested) lists of
  those. timm resolves layer names in arguments (``act_layer="gelu"``, ``norm_layer="layernorm2d"``) through its
  own tables and never imports by string (no ``importlib`` in ``timm/models``, checked for timm 1.0.31). What can
  read files, fetch weights or change how the model is loaded are ``create_model``'s own options
  (``pretrained``, ``pretrained_cfg``, ``checkpoint_path``, ``cache_dir``, ``features_only``, ``device``, ...);
  they are refused, as is any key naming a path, file, directory or URL.

>>> safe_timm_kwargs({"num_classes": 10, "img_size": [32, 32], "act_layer": "gelu"}, source="r/config.json")
{'num_classes': 10, 'img_size': [32, 32], 'act_layer': 'gelu'}
>>> timm_name("resnet18.a1_in1k", source="r/config.json")
'resnet18'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from bnconvention.errors import ArchitectureConfigError, BnConventionError, FactoryCallError
from bnconvention.extras import import_extra
from bnconvention.formats.text import elide, one_line

# timm is an optional extra (bnconvention/extras.py): imported inside the functions that use it.

PREFIX = "timm/"

# create_model's own options and the builder's: loading, caching, feature extraction, placement. Never from a file.
REFUSED_KEYS = frozenset({
    "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "pretrained_strict", "pretrained_model_args",
    "checkpoint_path", "cache_dir", "scriptable", "exportable", "no_jit", "features_only", "feature_cfg",
    "feature_cls", "out_indices", "pruned", "device", "dtype", "model_name", "kwargs_filter",
})
_REFUSED_SUFFIXES = ("_path", "_file", "_dir", "_url")
_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_\-]+)?$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STRING = re.compile(r"^[A-Za-z0-9_.\-]{0,64}$")
_MAX_LIST = 1024
_MAX_DEPTH = 3


def is_timm_config(config: Mapping[str, Any]) -> bool:
    """A config in timm's shape: ``architecture`` a string beside ``num_classes`` or ``pretrained_cfg``, and no
    transformers ``model_type`` (transformers' own timm wrapper is recognised by that)."""
    return (isinstance(config.get("architecture"), str) and "model_type" not in config
            and ("pretrained_cfg" in config or "num_classes" in config))


def timm_name(name: Any, *, source: str) -> str:
    """The registry name of ``name`` (tag dropped), refused unless it is a plain name timm registers."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ArchitectureConfigError(
            f"{source}: the timm architecture {elide(name)!r} is not a plain timm model name (source prefixes such as "
            "'hf-hub:' and paths are never followed); name a model of timm's registry", source=source)
    base = name.split(".", 1)[0]
    timm = _import_timm(f"the timm architecture {elide(base)!r} (from {source})")
    if not timm.is_model(base):
        raise ArchitectureConfigError(
            f"{source}: {elide(base)!r} is not in timm's model registry (timm {timm.__version__}); nothing was "
            "imported; name a model timm.list_models() lists, or the model in the spec", source=source)
    return base


def safe_timm_kwargs(kwargs: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``kwargs`` unchanged when every key and value is one timm may take from a file; else the first problem."""
    for key, value in kwargs.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ArchitectureConfigError(f"{source}: timm argument name {key!r} is not an identifier", source=source)
        if key in REFUSED_KEYS or key.startswith("pretrained") or key.endswith(_REFUSED_SUFFIXES):
            raise ArchitectureConfigError(
                f"{source}: timm argument {key!r} is a loading option, never taken from a file; remove it",
                source=source)
        problem = _value_problem(value, depth=0)
        if problem is not None:
            raise ArchitectureConfigError(
                f"{source}: timm argument {key}={_short(value)} is not plain JSON ({problem}); only numbers, "
                "booleans, null, short name strings and lists of them are taken from a file", source=source)
    return dict(kwargs)


def _value_problem(value: Any, *, depth: int) -> str | None:
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, str):
        return None if _STRING.match(value) else "a string other than a short name"
    if isinstance(value, list):
        if depth >= _MAX_DEPTH or len(value) > _MAX_LIST:
            return "a list nested too deeply or too long"
        return next((p for p in (_value_problem(v, depth=depth + 1) for v in value) if p is not None), None)
    return f"a {type(value).__name__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def timm_architecture(config: Mapping[str, Any], *, source: str) -> tuple[str, dict[str, Any]]:
    """``(factory name, create_model kwargs)`` of a timm ``config.json`` (see the module docstring)."""
    name = timm_name(config.get("architecture"), source=source)
    model_args = config.get("model_args", {})
    if not isinstance(model_args, dict):
        raise ArchitectureConfigError(f"{source}: 'model_args' is a {type(model_args).__name__}, expected an "
                                      "object", source=source)
    kwargs = dict(model_args)
    pretrained_cfg = config.get("pretrained_cfg")
    if "model_args" not in config and isinstance(pretrained_cfg, dict):
        kwargs.update(_legacy_args(pretrained_cfg))
    num_classes = config.get("num_classes", kwargs.get("num_classes"))
    if num_classes is not None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
            raise ArchitectureConfigError(f"{source}: num_classes is {num_classes!r}, expected a non-negative "
                                          "integer", source=source)
        if kwargs.get("num_classes", num_classes) != num_classes:
            raise ArchitectureConfigError(
                f"{source}: num_classes is {num_classes} but model_args.num_classes is {kwargs['num_classes']}; "
                "the file contradicts itself", source=source)
        kwargs["num_classes"] = num_classes
    return PREFIX + name, safe_timm_kwargs(kwargs, source=source)


def _legacy_args(pretrained_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What timm's builder takes from a saved ``pretrained_cfg`` when no ``model_args`` were exported."""
    size = pretrained_cfg.get("input_size")
    if not (isinstance(size, list) and len(size) == 3 and all(type(v) is int and v > 0 for v in size)):
        return {}
    args: dict[str, Any] = {"in_chans": size[0]}
    if pretrained_cfg.get("fixed_input_size") is True:
        args["img_size"] = size[1:]
    return args


def build_timm(name: str, kwargs: Mapping[str, Any] | None = None, *, source: str | None = None) -> torch.nn.Module:
    """``timm.create_model(name, pretrained=False, **kwargs)``, random initialisation, after the checks above
    (run again here: a spec's ``model: {factory: timm/...}`` is untrusted as well)."""
    where = source or f"{PREFIX}{name}"
    base = timm_name(name, source=where)
    kwargs = safe_timm_kwargs(dict(kwargs or {}), source=where)
    timm = _import_timm(f"the timm architecture {base!r}")
    try:
        return timm.create_model(base, pretrained=False, **kwargs)
    except (BnConventionError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a library building from file arguments: one line, chained
        raise FactoryCallError(f"timm.create_model({base!r}, **{_short(kwargs)}) raised {type(exc).__name__}: "
                               f"{one_line(exc)} (arguments from {where})") from exc


def _import_timm(needed_by: str) -> Any:
    return import_extra("timm", command=f"building {needed_by}")


__all__ = ["PREFIX", "REFUSED_KEYS", "build_timm", "is_timm_config", "safe_timm_kwargs", "timm_architecture",
           "timm_name"]
