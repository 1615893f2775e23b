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

from bnconvention.standard.models import RECORD_ADAPTER, SCHEMA_ID, SPEC_VERSION

DRAFT = "https://json-schema.org/draft/2020-12/schema"
REPO_SCHEMA_PATH = Path("schema") / "v1" / "bnconvention.schema.json"


def generate_schema() -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of a version-1 record (a declaration or a refit annotation)."""
    body = RECORD_ADAPTER.json_schema(mode="validation")
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        "title": f"bnconvention record, spec version {SPEC_VERSION}",
        "description": (
            "How a batch-normalized network's running statistics were fitted (a declaration), or what an auditor "
            "measured when refitting them (a refit annotation). Generated from bnconvention.standard.models."
        ),
        **body,
    }


def schema_text() -> str:
    """The schema as it is committed: 2-space indented JSON with a trailing newline."""
    return json.dumps(generate_schema(), indent=2, ensure_ascii=False) + "\n"


@lru_cache(maxsize=1)
def schema_validator() -> Draft202012Validator:
    """A cached ``Draft202012Validator`` for the generated schema."""
    schema = generate_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
