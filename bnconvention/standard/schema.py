"""The JSON Schema of the standard, generated from the models (the source of truth), one version at a time.

Each object is one model holding every version's fields (:mod:`.versions`). For a target version the generator
makes, of each object that a later version changed, the model as it stood then: the fields and union members
marked newer dropped, the record's ``spec_version`` the target's; objects no version changed are used as they
are. A version's model of a changed object is named after it with the version's suffix (``Cell`` for 1.0,
``CellV11`` for 1.1), which is its name in the schema's ``$defs``.

``schema/v1/bnconvention.schema.json`` in the repository is :func:`schema_text`, written by
``bnconvention schema --write``: every version's record, each kind a union by ``spec_version``;
``tests/test_schema.py`` proves the two agree.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path
from types import GenericAlias
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, TypeAdapter, create_model

from bnconvention.standard.fields import StrictModel, VersionedRecord
from bnconvention.standard.models import RECORD_KINDS, SCHEMA_ID
from bnconvention.standard.versions import (
    SPEC_VERSIONS,
    Since,
    SpecVersion,
    field_since,
    member_since,
    models_in,
    order,
    schema_suffix,
    union_members,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
REPO_SCHEMA_PATH = Path("schema") / "v1" / "bnconvention.schema.json"


@cache
def changed_in(model: type[BaseModel]) -> frozenset[SpecVersion]:
    """The versions after the first that changed ``model``: added a field or union member to it or to an object it
    holds (every version changes a record kind: its ``spec_version``)."""
    if issubclass(model, VersionedRecord):
        return frozenset(SPEC_VERSIONS[1:])
    out: set[SpecVersion] = set()
    for name, field in model.model_fields.items():
        out.add(field_since(model, name))
        for inner, added in models_in(field.annotation):
            out.add(added)
            out |= changed_in(inner)
    return frozenset(out - {SPEC_VERSIONS[0]})


def model_at(model: type[BaseModel], version: SpecVersion) -> type[BaseModel]:
    """``model`` as it stood at ``version``: itself when no version changed it."""
    if not changed_in(model):
        return model
    changes = [v for v in changed_in(model) if order(v) <= order(version)]
    return _variant(model, max(changes, key=order, default=SPEC_VERSIONS[0]), version)


@cache
def _variant(model: type[BaseModel], changed: SpecVersion, version: SpecVersion) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if order(field_since(model, name)) > order(version):
            continue
        annotation = Literal[version] if name == "spec_version" else _at(field.annotation, version)
        fields[name] = (annotation, field)
    variant: type[BaseModel] = create_model(
        model.__name__ + schema_suffix(changed), __base__=StrictModel, __doc__=model.__doc__,
        __module__=model.__module__, **fields)
    return variant


def _at(annotation: Any, version: SpecVersion) -> Any:
    """An annotation as it stood at ``version``: models replaced by their version's, newer union members dropped."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_at(annotation, version)
    if get_origin(annotation) is Annotated:
        inner, *metadata = get_args(annotation)
        kept = [m for m in metadata if not isinstance(m, Since)]
        rewritten = _at(inner, version)
        return Annotated.__class_getitem__((rewritten, *kept)) if kept else rewritten
    members = union_members(annotation)
    if members is not None:
        kept_members = tuple(_at(m, version) for m in members if order(member_since(m)) <= order(version))
        return Union[kept_members]  # noqa: UP007 (a runtime tuple of members)
    if get_origin(annotation) is list:
        return GenericAlias(list, (_at(get_args(annotation)[0], version),))
    return annotation


@cache
def version_adapter(version: SpecVersion) -> TypeAdapter[Any]:
    """A record of ``version`` only (a union by kind), as the models stood at that version."""
    kinds: Any = Union[tuple(model_at(kind, version) for kind in RECORD_KINDS)]  # noqa: UP007
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[kinds, Field(discriminator="kind")])
    return adapter


def _every_version() -> TypeAdapter[Any]:
    """Each kind a union by spec_version of its model at every version, inside the union by kind."""
    by_kind: list[Any] = []
    for kind in RECORD_KINDS:
        versions: Any = Union[tuple(model_at(kind, v) for v in SPEC_VERSIONS)]  # noqa: UP007
        by_kind.append(Annotated[versions, Field(discriminator="spec_version")])
    kinds: Any = Union[tuple(by_kind)]  # noqa: UP007
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[kinds, Field(discriminator="kind")])
    return adapter


def generate_version_schema(version: SpecVersion) -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of a record of one spec version."""
    return {"$schema": DRAFT, "title": f"bnconvention record, spec version {version}",
            **version_adapter(version).json_schema(mode="validation")}


def generate_schema() -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of a version-1 record (a declaration or a refit annotation, every version)."""
    body = _hoist_version_unions(_every_version().json_schema(mode="validation"))
    versions = " or ".join(SPEC_VERSIONS)
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        "title": f"bnconvention record, spec version {versions}",
        "description": (
            "How a batch-normalized network's running statistics were fitted (a declaration), or what an auditor "
            "measured when refitting them (a refit annotation). Generated from bnconvention.standard.models."
        ),
        **body,
    }


def _hoist_version_unions(body: dict[str, Any]) -> dict[str, Any]:
    """Name each kind's spec_version union in ``$defs`` (``DeclarationRecord``, ``RefitAnnotationRecord``).

    pydantic writes the inner unions inline, in the kind mapping and again in ``oneOf``; a mapping whose values are
    references, as at every other tagged union of the schema, is what readers (and our error reporting) expect.
    """
    mapping: dict[str, Any] = body["discriminator"]["mapping"]
    defs: dict[str, Any] = body["$defs"]
    for kind, union in list(mapping.items()):
        if not isinstance(union, dict):
            continue
        first = union["oneOf"][0]["$ref"].rsplit("/", 1)[-1]
        name = f"{first}Record"
        defs[name] = {"title": name, "description": f"A {kind} record, by spec version.", **union}
        mapping[kind] = f"#/$defs/{name}"
        body["oneOf"] = [{"$ref": f"#/$defs/{name}"} if branch == union else branch for branch in body["oneOf"]]
    body["$defs"] = dict(sorted(defs.items()))
    return body


def model_schema(model: type[BaseModel], *, schema_id: str, title: str) -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of one model (the audit spec, the census result), with its ``$id`` and title."""
    body = model.model_json_schema(mode="validation")
    return {"$schema": DRAFT, "$id": schema_id, "title": title, **{k: v for k, v in body.items() if k != "title"}}


def committed_text(schema: dict[str, Any]) -> str:
    """A schema as it is committed: 2-space indented JSON with a trailing newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema_text() -> str:
    """The record schema as it is committed."""
    return committed_text(generate_schema())


@lru_cache(maxsize=1)
def schema_validator() -> Draft202012Validator:
    """A cached ``Draft202012Validator`` for the generated schema."""
    schema = generate_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
