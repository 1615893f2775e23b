"""bnconvention: declare, stamp, validate and audit how a BatchNorm network's running statistics were fitted.

The public API is small and explicit; everything is importable from the top level, lazily (``import bnconvention``
does not import torch, so the validator and stamping stay fast in pipelines).

>>> import bnconvention
>>> bnconvention.canonical_name({"buffer_update_mode": "refit", "data": {"role": "retain"},
...                              "transform": {"mode": "train"}, "accumulation": {"rule": "exact"}})
'refit/retain/train-transform/exact'

Authors: :class:`BNRecorder` (observe a training or unlearning run), :func:`make_convention` / :func:`declare`
(build a record; :func:`describe_transform` or :func:`make_transform` names the transform), :func:`stamp_file` /
:func:`stamp_card_file` (write it into the weights header and the card).
Auditors: :func:`refit` (exact refit at bit-identical weights), :func:`audit_checkpoint` / :func:`run_census`.
Pipelines: :func:`validate_paths` / :func:`validate_record`.
"""

from __future__ import annotations

import importlib
from typing import Any

from bnconvention._version import __version__

# public name -> module that defines it (imported on first access)
_EXPORTS: dict[str, str] = {
    # the standard
    "SPEC_VERSION": "bnconvention.standard.models",
    "Declaration": "bnconvention.standard.models",
    "RefitAnnotation": "bnconvention.standard.models",
    "FittingConvention": "bnconvention.standard.models",
    "parse_record": "bnconvention.standard.models",
    "to_dict": "bnconvention.standard.models",
    "canonical_name": "bnconvention.standard.naming",
    "generate_schema": "bnconvention.standard.schema",
    "canonical_json": "bnconvention.canonical",
    # authors
    "BNRecorder": "bnconvention.recorder",
    "make_transform": "bnconvention.declaration",
    "describe_transform": "bnconvention.transforms",
    "make_convention": "bnconvention.declaration",
    "declare": "bnconvention.declaration",
    "model_digests": "bnconvention.digests",
    "file_digests": "bnconvention.digests",
    "stamp_file": "bnconvention.stamp",
    "read_stamped_record": "bnconvention.stamp",
    "stamp_card_text": "bnconvention.card_stamp",
    "stamp_card_file": "bnconvention.card_stamp",
    # pipelines
    "validate_paths": "bnconvention.validation",
    "validate_record": "bnconvention.validation",
    # auditors
    "refit": "bnconvention.refit",
    "RefitReport": "bnconvention.refit",
    "staleness_distance": "bnconvention.refit",
    "load_spec": "bnconvention.audit",
    "audit_checkpoint": "bnconvention.audit",
    "run_census": "bnconvention.audit",
    "decide": "bnconvention.audit.stats",
    # errors
    "BnConventionError": "bnconvention.errors",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'bnconvention' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
