"""Which architecture a checkpoint is built with, read from the repo's own files, never code from metadata.

A repo's ``config.json`` (or a checkpoint's sidecar ``<name>.json``) can name its architecture three ways, read in
this order by :func:`architecture_from_config`:

1. our own declaration, ``"architecture": {"factory": "zoo/convnet-bn", "kwargs": {...}}`` (as the digits zoo
   writes it; also the older ``"architecture": "<factory>"`` with ``"architecture_kwargs"``), when the factory is
   allowlisted (:mod:`~bnconvention.architectures.factories`) or a ``timm/``/``transformers/`` name that passes
   that library's checks;
2. transformers' ``model_type`` + ``architectures`` (:mod:`~bnconvention.architectures.transformers_models`);
3. timm's ``"architecture": "<model>"`` + ``num_classes``/``pretrained_cfg``
   (:mod:`~bnconvention.architectures.timm_models`), unless the string is one of our allowlisted factory names.

:func:`resolve_architecture` walks the files in the caller's order and falls back to the spec's ``model``: a file
that names an architecture we refuse (not allowlisted, outside the library's registry, remote code, arguments that
are not plain JSON) is passed over when a later source is usable, and its refusal is returned as a note; without
one, the first refusal is the error. Every refusal names the file and happens before anything it names is imported.

>>> architecture_from_config({"architecture": {"factory": "zoo/convnet-bn"}}, source="org/m/config.json")
Architecture(factory='zoo/convnet-bn', kwargs={}, source='org/m/config.json')
>>> architecture_from_config({"num_classes": 3}, source="org/m/config.json") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnconvention.architectures.factories import available_factories, check_allowed, plain_kwargs_problem
from bnconvention.architectures.timm_models import PREFIX as TIMM_PREFIX
from bnconvention.architectures.timm_models import is_timm_config, safe_timm_kwargs, timm_architecture, timm_name
from bnconvention.architectures.transformers_models import PREFIX as TRANSFORMERS_PREFIX
from bnconvention.architectures.transformers_models import (
    check_no_remote_code,
    check_transformers_config,
    is_transformers_config,
    transformers_architecture,
)
from bnconvention.errors import FactoryNotAllowedError, UntrustedInputError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.text import one_line

CONFIG_NAME = "config.json"
MAX_CONFIG_BYTES = 1_000_000


@dataclass(frozen=True)
class Architecture:
    """Which factory builds the architecture, with its arguments, and where that choice came from (a file, named
    by repo and path, or ``"spec"``)."""

    factory: str
    kwargs: dict[str, Any]
    source: str


@dataclass(frozen=True)
class Resolution:
    """The architecture chosen, and one line per earlier file whose architecture was refused (passed over)."""

    architecture: Architecture
    passed_over: tuple[str, ...] = field(default=())


# --- reading a config ---------------------------------------------------------------------------------------------


def parse_config(data: bytes, *, source: str, max_bytes: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    """A ``config.json``'s bytes decoded strictly: at most ``max_bytes``, UTF-8 JSON, an object."""
    if len(data) > max_bytes:
        raise UntrustedInputError(f"{source}: {len(data)} bytes, over the {max_bytes}-byte limit for a config",
                                  source=source)
    decoded = loads_strict(data, source=source)
    if not isinstance(decoded, dict):
        raise UntrustedInputError(f"{source}: a config is a JSON object, found {type(decoded).__name__}",
                                  source=source)
    return decoded


def read_config(path: Path, *, source: str | None = None, max_bytes: int = MAX_CONFIG_BYTES
                ) -> dict[str, Any] | None:
    """:func:`parse_config` of the file at ``path``, or None when there is none. Only ``max_bytes + 1`` are read."""
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    return parse_config(data, source=source or str(path), max_bytes=max_bytes)


# --- one file -----------------------------------------------------------------------------------------------------


def architecture_from_config(config: Mapping[str, Any] | None, *, source: str) -> Architecture | None:
    """The architecture a config names (see the module docstring), or None when it names none.

    Refusals raise :class:`~bnconvention.errors.FactoryNotAllowedError` (our form, a factory not allowlisted) or
    :class:`~bnconvention.errors.UntrustedInputError` / its
    :class:`~bnconvention.errors.ArchitectureConfigError` (everything else), naming ``source``.
    """
    if not isinstance(config, Mapping):
        return None
    check_no_remote_code(dict(config), source=source, loaders=False)
    declared = _declared(config, source=source)
    if declared is not None:
        return declared
    if is_transformers_config(config):
        factory, kwargs = transformers_architecture(config, source=source)
        return Architecture(factory=factory, kwargs=kwargs, source=source)
    named = config.get("architecture")
    if is_timm_config(config) and named not in available_factories():
        factory, kwargs = timm_architecture(config, source=source)
        return Architecture(factory=factory, kwargs=kwargs, source=source)
    if isinstance(named, str):
        return _ours(named, config.get("architecture_kwargs", {}), source=source)
    return None


def _declared(config: Mapping[str, Any], *, source: str) -> Architecture | None:
    """Our own declaration ``architecture: {factory, kwargs}`` (or the flat ``factory``/``kwargs`` of old
    sidecars), or None when the config has none."""
    arch = config.get("architecture")
    if isinstance(arch, dict):
        if not isinstance(arch.get("factory"), str) or not arch["factory"]:
            raise UntrustedInputError(f"{source}: no architecture factory name found (expected 'architecture': "
                                      "{'factory': ...}); name the model in the spec instead", source=source)
        return _ours(arch["factory"], arch.get("kwargs", {}), source=source)
    if arch is None and isinstance(config.get("factory"), str) and "model_type" not in config:
        return _ours(config["factory"], config.get("kwargs", {}), source=source)
    return None


def _ours(factory: str, kwargs: Any, *, source: str) -> Architecture:
    """Our declaration of ``factory``: allowlisted with plain arguments, or a timm/transformers name that passes
    that library's checks (so ``{"factory": "timm/resnet18"}`` is as safe as timm's own config)."""
    if not isinstance(kwargs, dict):
        raise UntrustedInputError(f"{source}: the architecture's kwargs are a {type(kwargs).__name__}, expected a "
                                  "mapping", source=source)
    if factory.startswith(TIMM_PREFIX):
        timm_name(factory[len(TIMM_PREFIX):], source=source)
        return Architecture(factory=factory, kwargs=safe_timm_kwargs(kwargs, source=source), source=source)
    if factory.startswith(TRANSFORMERS_PREFIX):
        check_transformers_config(kwargs, source=source, class_name=factory[len(TRANSFORMERS_PREFIX):])
        return Architecture(factory=factory, kwargs=dict(kwargs), source=source)
    try:
        check_allowed(factory)
    except FactoryNotAllowedError as exc:
        raise FactoryNotAllowedError(f"{source}: {exc}") from None
    problem = plain_kwargs_problem(kwargs)
    if problem is not None:
        raise UntrustedInputError(f"{source}: the architecture's kwargs are not plain JSON values ({problem})",
                                  source=source)
    return Architecture(factory=factory, kwargs=dict(kwargs), source=source)


# --- the order ----------------------------------------------------------------------------------------------------


def resolve_architecture(files: Sequence[tuple[Mapping[str, Any] | None, str]], *,
                         fallback: Architecture | None = None) -> Resolution | None:
    """The first usable architecture of ``files`` (``(decoded config or None, source)`` in order), else
    ``fallback`` (the spec's model); None when nothing names one. When only refusals are left, the first is raised.
    """
    refusals: list[UntrustedInputError | FactoryNotAllowedError] = []
    for config, source in files:
        try:
            found = architecture_from_config(config, source=source)
        except (UntrustedInputError, FactoryNotAllowedError) as exc:
            refusals.append(exc)
            continue
        if found is not None:
            return Resolution(found, passed_over=tuple(one_line(r) for r in refusals))
    if fallback is not None:
        return Resolution(fallback, passed_over=tuple(f"{one_line(r)}; the spec's model was used instead"
                                                      for r in refusals))
    if refusals:
        raise refusals[0]
    return None


__all__ = [
    "CONFIG_NAME",
    "MAX_CONFIG_BYTES",
    "Architecture",
    "Resolution",
    "architecture_from_config",
    "parse_config",
    "read_config",
    "resolve_architecture",
]
