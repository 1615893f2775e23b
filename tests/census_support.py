"""Hand-made census documents as the census model: a test writes the keys its reading needs, and
:func:`typed_census` fills every other required key of :class:`~bnconvention.audit.population.CensusResult` with an
empty value of its type (``""``, 0, ``[]``, ``{}``, None where null is allowed), at every depth."""

from __future__ import annotations

import copy
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from bnconvention.audit.population import CensusResult


def _empty(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = get_args(annotation)
        return None if type(None) in args else _empty(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return filled(annotation, {})
    return {list: [], dict: {}}.get(origin, {str: "", int: 0, float: 0.0, bool: False}.get(annotation))


def _fill_value(annotation: Any, value: Any) -> Any:
    """``value`` with the keys its model needs filled in, through lists, mappings and optional types."""
    origin = get_origin(annotation)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        return _fill_value(next(a for a in get_args(annotation) if a is not type(None)), value)
    if origin is list:
        return [_fill_value(get_args(annotation)[0], v) for v in value]
    if origin is dict:
        return {k: _fill_value(get_args(annotation)[1], v) for k, v in value.items()}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return filled(annotation, value)
    return value


def filled(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every required field of ``model`` present, nested models filled too."""
    out = dict(data)
    for name, field in model.model_fields.items():
        if name in out:
            out[name] = _fill_value(field.annotation, out[name])
        elif field.is_required():
            out[name] = _empty(field.annotation)
    return out


def typed_census(doc: dict[str, Any]) -> CensusResult:
    """``doc`` as the census model, the keys it leaves out filled with empty values (a margin left out is the
    spec's, at ``doc``'s ``margin_pp``)."""
    doc = copy.deepcopy(doc)
    doc.setdefault("margin", {"margin_pp": doc.get("margin_pp", 0.0), "source": "spec"})
    return CensusResult.model_validate(filled(CensusResult, doc))
