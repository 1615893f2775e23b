"""The JSON Schema of the standard, generated from the models (the source of truth).

``schema/v1/bnconvention.schema.json`` in the repository is this function's output, written by
``bnconvention schema --write``; ``tests/test_schema.py`` proves the two agree.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from bnconvention.standard.models import RECORD_ADAPTER, SCHEMA_ID, SPEC_VERSIONS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
REPO_SCHEMA_PATH = Path("schema") / "v1" / "bnconvention.schema.json"


def generate_schema() -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of a version-1 record (a declaration or a refit annotation, 1.0 or 1.1)."""
    body = _hoist_version_unions(RECORD_ADAPTER.json_schema(mode="validation"))
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


def schema_text() -> str:
    """The schema as it is committed: 2-space indented JSON with a trailing newline."""
    return json.dumps(generate_schema(), indent=2, ensure_ascii=False) + "\n"


@lru_cache(maxsize=1)
def schema_validator() -> Draft202012Validator:
    """A cached ``Draft202012Validator`` for the generated schema."""
    schema = generate_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
