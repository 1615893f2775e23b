"""The standard's versions as data: the ordered table, and the one mark a field carries to say which version added it.

Every object of the standard is one pydantic model holding the fields of every version. A field (or a member of a
tagged union) that a version after the first added carries :func:`since` in its ``Annotated`` metadata::

    unit: Annotated[CellUnit | None, since("1.1")] = Field(default=None, description=...)

From that mark alone come: the JSON Schema of each version (:mod:`.schema` drops what is newer than its target),
the check that a record uses only its own version's fields (:func:`version_errors`), the list of what a version
added (:func:`added_in`, docs/standard.md's tables) and ``bnconvention migrate``. A new version is a row of
:data:`VERSIONS` plus ``since`` marks on what it adds: no new module, no new class. The literal version strings
live here and nowhere else.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Final, Literal, TypeAlias, Union, get_args, get_origin

from pydantic import BaseModel

SpecVersion: TypeAlias = Literal["1.0", "1.1"]


@dataclass(frozen=True)
class Version:
    """One version of the standard: its number and what it added (docs/standard.md#versioning-and-migration)."""

    number: SpecVersion
    adds: str


VERSIONS: Final = (
    Version("1.0", "The declaration and the refit annotation."),
    Version("1.1", "Optional fields only: the census instrument's (multiplicity-adjusted p, checkpoint family, "
                   "provenance arms, recoverability curves, frozen twin), the encoder-level diagnostics (cell unit "
                   "and reference arm, linear probe, membership attack, relearning), the activation-scales "
                   "deployed state and refit, and the recorder's override, layer-name mapping and split matching."),
)
SPEC_VERSIONS: Final[tuple[SpecVersion, ...]] = tuple(v.number for v in VERSIONS)
SPEC_VERSION: Final[SpecVersion] = SPEC_VERSIONS[0]  # what producers write unless a record needs a later field
LATEST_SPEC_VERSION: Final[SpecVersion] = SPEC_VERSIONS[-1]
if get_args(SpecVersion) != SPEC_VERSIONS:  # the Literal (for the type checker) and the table must agree
    raise RuntimeError(f"VERSIONS {SPEC_VERSIONS} disagree with SpecVersion {get_args(SpecVersion)}")


@dataclass(frozen=True)
class Since:
    """``Annotated`` metadata: the version that added a field or a union member (pydantic ignores it)."""

    version: SpecVersion


def since(version: SpecVersion) -> Since:
    """The mark of a field or union member added by ``version``."""
    if version not in SPEC_VERSIONS:
        raise ValueError(f"{version!r} is not a version of the standard ({', '.join(SPEC_VERSIONS)})")
    return Since(version)


def order(version: str) -> int:
    """Position of ``version`` in :data:`VERSIONS` (0 for the first)."""
    return SPEC_VERSIONS.index(version)


def older_versions() -> tuple[SpecVersion, ...]:
    """The versions ``migrate`` upgrades from: every one before the latest."""
    return SPEC_VERSIONS[:-1]


def schema_suffix(version: SpecVersion) -> str:
    """Suffix of the schema's ``$defs`` name of an object as ``version`` changed it: '' for the first version,
    'V11' for 1.1 (``CellV11``)."""
    return "" if version == SPEC_VERSIONS[0] else "V" + version.replace(".", "")


def field_since(model: type[BaseModel], name: str) -> SpecVersion:
    """The version that added field ``name`` of ``model``."""
    marks = [m for m in model.model_fields[name].metadata if isinstance(m, Since)]
    return marks[0].version if marks else SPEC_VERSIONS[0]


@cache
def later_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` that a version after the first added."""
    return tuple(name for name in model.model_fields if field_since(model, name) != SPEC_VERSIONS[0])


def member_since(annotation: Any) -> SpecVersion:
    """The version that added a union member (``Annotated[X, since(...)]``), else the first."""
    if get_origin(annotation) is Annotated:
        marks = [m for m in annotation.__metadata__ if isinstance(m, Since)]
        if marks:
            return marks[0].version
    return SPEC_VERSIONS[0]


def union_members(annotation: Any) -> tuple[Any, ...] | None:
    """The members of a union annotation (``X | Y`` or ``Union[X, Y]``), else None."""
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return None


def models_in(annotation: Any) -> Iterator[tuple[type[BaseModel], SpecVersion]]:
    """Every model class an annotation refers to, with the version that added it there (a marked union member)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, SPEC_VERSIONS[0]
        return
    if get_origin(annotation) is Annotated:
        added = member_since(annotation)
        for model, version in models_in(get_args(annotation)[0]):
            yield model, max(added, version, key=order)
        return
    for arg in get_args(annotation):
        yield from models_in(arg)


def reachable(roots: tuple[type[BaseModel], ...]) -> list[type[BaseModel]]:
    """Every model reachable from ``roots`` through their fields, depth first, each once, in first-visit order."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for field in model.model_fields.values():
            for inner, _ in models_in(field.annotation):
                visit(inner)
    for root in roots:
        visit(root)
    return seen


def added_in(version: SpecVersion, roots: tuple[type[BaseModel], ...]) -> dict[str, tuple[str, ...]]:
    """For each object reachable from ``roots`` (by class name) the fields ``version`` added to it."""
    out: dict[str, tuple[str, ...]] = {}
    for model in reachable(roots):
        names = tuple(name for name in model.model_fields if field_since(model, name) == version)
        if names:
            out[model.__name__] = names
    return out


def version_errors(record: BaseModel, version: SpecVersion, path: str = "", *, nulls: bool = True) -> Iterator[str]:
    """Where ``record`` (a parsed record of ``version``) holds a field or object of a later version.

    ``nulls``: a later field given as null counts (as in the version's JSON Schema, whose objects admit no other
    property); without it, a null later field is read as absent (what a dump with every field, ``None`` included,
    gives back)."""
    for name in type(record).model_fields:
        if name not in record.model_fields_set:
            continue
        value = getattr(record, name)
        if value is None and not nulls:
            continue
        where = f"{path}/{name}"
        added = field_since(type(record), name)
        if order(added) > order(version):
            yield f"{where}: {name!r} is a field of spec version {added}"
            continue
        yield from _value_errors(value, type(record).model_fields[name].annotation, version, where, nulls=nulls)


def _value_errors(value: Any, annotation: Any, version: SpecVersion, path: str, *, nulls: bool) -> Iterator[str]:
    if isinstance(value, BaseModel):
        for model, added in models_in(annotation):
            if type(value) is model and order(added) > order(version):
                yield f"{path}: {type(value).__name__} is an object of spec version {added}"
                return
        yield from version_errors(value, version, path, nulls=nulls)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _value_errors(item, annotation, version, f"{path}/{index}", nulls=nulls)


__all__ = ["LATEST_SPEC_VERSION", "SPEC_VERSION", "SPEC_VERSIONS", "VERSIONS", "Since", "SpecVersion", "Version",
           "added_in", "field_since", "later_fields", "member_since", "models_in", "older_versions", "order",
           "reachable", "schema_suffix", "since", "union_members", "version_errors"]
