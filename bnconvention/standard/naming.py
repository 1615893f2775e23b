"""Derived values of the standard: canonical convention names and the digests of transforms and record ids.

>>> from bnconvention.formats.canonical import canonical_json
>>> transform_sha256({"augmentations": []}) == transform_sha256({"augmentations": []})
True
>>> record_ids_sha256([3, 1, 2]) == record_ids_sha256([1, 2, 3])
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bnconvention.errors import RecordError
from bnconvention.formats.canonical import canonical_json, canonical_sha256
from bnconvention.standard.models import FittingConvention, TransformDescription, to_dict


def canonical_name(convention: FittingConvention | Mapping[str, Any]) -> str:
    """The deterministic name of a fitting convention.

    ``<buffer_update_mode>/<data role>/<transform mode>-transform/<rule>``, with the momentum appended to ``ema``
    (``ema-m0.1``, the number in canonical JSON form). Same fields, same name.

    >>> canonical_name({"buffer_update_mode": "refit", "data": {"role": "retain"},
    ...                 "transform": {"mode": "train"}, "accumulation": {"rule": "exact"}})
    'refit/retain/train-transform/exact'
    """
    data = to_dict(convention) if isinstance(convention, FittingConvention) else convention
    try:
        accumulation = data["accumulation"]
        rule = accumulation["rule"]
        if rule == "ema":
            rule = f"ema-m{canonical_json(accumulation['momentum'])}"
        return "/".join(
            [
                str(data["buffer_update_mode"]),
                str(data["data"]["role"]),
                f"{data['transform']['mode']}-transform",
                str(rule),
            ]
        )
    except (KeyError, TypeError) as exc:
        raise RecordError(
            f"cannot derive a canonical name: the convention lacks {exc}; it needs buffer_update_mode, data.role, "
            "transform.mode and accumulation.rule (and accumulation.momentum for ema)"
        ) from exc


def transform_sha256(description: TransformDescription | Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a transform description (``None`` fields dropped)."""
    data = to_dict(description) if isinstance(description, TransformDescription) else dict(description)
    return canonical_sha256({k: v for k, v in data.items() if v is not None})


def record_ids_sha256(ids: Iterable[int | str]) -> str:
    """sha256 of the canonical JSON of the sorted record ids (all ints or all strings)."""
    id_list = list(ids)
    kinds = {type(i) for i in id_list}
    if kinds - {int, str} or len(kinds) > 1:
        found = sorted(k.__name__ for k in kinds)
        raise RecordError(f"record ids must be all integers or all strings, found types {found}")
    return canonical_sha256(sorted(id_list))
