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

from bnconvention._lazy import lazy_exports
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
    "canonical_json": "bnconvention.formats.canonical",
    # authors
    "BNRecorder": "bnconvention.authoring.recorder",
    "make_transform": "bnconvention.authoring.declaration",
    "describe_transform": "bnconvention.authoring.transforms",
    "make_convention": "bnconvention.authoring.declaration",
    "declare": "bnconvention.authoring.declaration",
    "model_digests": "bnconvention.formats.digests",
    "file_digests": "bnconvention.formats.digests",
    "stamp_file": "bnconvention.authoring.stamp",
    "read_stamped_record": "bnconvention.authoring.stamp",
    "stamp_card_text": "bnconvention.authoring.card_stamp",
    "stamp_card_file": "bnconvention.authoring.card_stamp",
    # pipelines
    "validate_paths": "bnconvention.validation",
    "validate_record": "bnconvention.validation",
    # auditors
    "refit": "bnconvention.refitting",
    "RefitReport": "bnconvention.refitting",
    "staleness_distance": "bnconvention.refitting",
    "load_spec": "bnconvention.audit.spec",
    "audit_checkpoint": "bnconvention.audit.run",
    "run_census": "bnconvention.audit.census",
    "decide": "bnconvention.audit.measure",
    # errors
    "BnConventionError": "bnconvention.errors",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())
