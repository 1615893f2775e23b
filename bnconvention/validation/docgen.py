"""Generate the reference parts of ``docs/standard.md`` from the schema, the issue codes and the vectors.

The document keeps hand-written prose; the parts between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->`` are produced here, so the field tables cannot drift from the models:

    .venv/bin/python -m bnconvention.validation.docgen docs/standard.md          # rewrite the generated parts
    .venv/bin/python -m bnconvention.validation.docgen docs/standard.md --check  # exit 1 when out of date
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from bnconvention.formats.atomic import sync_generated_file
from bnconvention.formats.text import table_cell
from bnconvention.standard.models import (
    LATEST_SPEC_VERSION,
    RECORD_KINDS,
    SPEC_VERSION,
    VERSIONS,
    deployed_state_kinds,
    fields_added_in,
)
from bnconvention.standard.schema import changed_in, generate_schema
from bnconvention.standard.versions import reachable, schema_suffix
from bnconvention.validation.issues import CODES

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = {
    "example-declaration": "schema/tests/valid/declaration-exact-refit.json",
    "example-annotation": "schema/tests/valid/refit-annotation-full.json",
}
# Objects in reading order: the two record kinds first, then what they contain.
ORDER = [
    "DeclarationRecord", "RefitAnnotationRecord", "Declaration", "RefitAnnotation", "FittingConvention", "DataSplit",
    "DatasetRef", "Transform", "TransformDescription", "Normalization", "EmaAccumulation", "CumulativeAccumulation",
    "ExactAccumulation",
    "OtherModules", "BatchNormState", "BatchNormLayer", "TensorDigests", "Producer", "RefitDetails", "Staleness",
    "LayerStaleness", "StalenessBand", "Observation", "LayerObservation", "Contradiction", "AuditedFile", "Anchoring",
    "AnchorCell", "Cell", "CellDecision", "Verdict", "ProvenanceContrast", "Recoverability",
    # spec version 1.1: the extended objects, then their new parts
    "DeclarationV11", "RefitAnnotationV11", "CellV11", "CellDecisionV11", "CheckpointFamily", "ProvenanceArm",
    "NullBand", "RecoverabilityCurve", "RecoverabilityPoint", "TwinReference",
]
# An object as the latest version changed it (CellV11) extends its first version's (Cell): its table lists only what
# differs.
EXTENDS = {model.__name__ + schema_suffix(LATEST_SPEC_VERSION): model.__name__ + schema_suffix(SPEC_VERSION)
           for model in reachable(RECORD_KINDS) if LATEST_SPEC_VERSION in changed_in(model)}
_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
                    re.DOTALL)


def _anchor(name: str) -> str:
    return name.lower()


def _bounds(schema: dict[str, Any]) -> list[str]:
    if schema.get("pattern") == "^[0-9a-f]{64}$":
        return ["lowercase hex sha256"]
    out = []
    for key, text in (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"),
                      ("exclusiveMaximum", "< {}"), ("minLength", "length ≥ {}"), ("maxLength", "length ≤ {}"),
                      ("minItems", "≥ {} items")):
        if key in schema:
            out.append(text.format(schema[key]))
    if "pattern" in schema:
        out.append(f"pattern `{schema['pattern']}`")
    return out


def type_text(schema: dict[str, Any]) -> str:
    """A short, human-readable type of a property schema (markdown)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    for union in ("oneOf", "anyOf"):
        if union in schema:
            parts = [type_text(s) for s in schema[union] if s != {"type": "null"}]
            text = " or ".join(parts)
            return text + (" or null" if {"type": "null"} in schema[union] else "")
    kind = schema.get("type", "any")
    if kind == "array":
        items = schema.get("items", {})
        text = f"array of {type_text(items)}"
    else:
        text = str(kind)
    bounds = _bounds(schema)
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _description(schema: dict[str, Any]) -> str:
    for union in ("anyOf", "oneOf"):
        for sub in schema.get(union, []):
            if isinstance(sub, dict) and sub.get("description"):
                return str(sub["description"])
    return str(schema.get("description", ""))


def _markdown(text: str) -> str:
    """Plain description text made safe for a markdown table cell."""
    return table_cell(text)


def field_tables() -> str:
    defs = generate_schema()["$defs"]
    names = [n for n in ORDER if n in defs] + sorted(n for n in defs if n not in ORDER)
    out = []
    for name in names:
        schema = defs[name]
        out.append(f"#### {name}\n")
        if schema.get("description"):
            out.append(_markdown(schema["description"]) + "\n")
        if "properties" not in schema:  # a union by spec_version (DeclarationRecord): no fields of its own
            mapping = schema["discriminator"]["mapping"]
            out.append(", ".join(f"`{json.dumps(v)}`: {type_text({'$ref': ref})}" for v, ref in mapping.items())
                       + "\n")
            continue
        properties: dict[str, Any] = schema["properties"]
        base = EXTENDS.get(name)
        if base is not None:
            out.append(f"Every field of [{base}](#{_anchor(base)}), with these added or changed:\n")
            inherited = defs[base]["properties"]
            properties = {k: v for k, v in properties.items() if inherited.get(k) != v}
        out.append("| field | type | required | description |")
        out.append("|---|---|---|---|")
        required = set(schema.get("required", []))
        for prop, sub in properties.items():
            description = _markdown(_description(sub))
            out.append(f"| `{prop}` | {type_text(sub)} | {'yes' if prop in required else 'no'} | {description} |")
        out.append("")
    return "\n".join(out)


def code_table() -> str:
    out = ["| code | severity | exit | meaning |", "|---|---|---|---|"]
    for code, info in CODES.items():
        out.append(f"| `{code}` | {info.severity} | {2 if info.unreadable else (1 if info.severity == 'error' else 0)} "
                   f"| {info.description} |")
    return "\n".join(out) + "\n"


def example(rel: str, root: Path) -> str:
    data = json.loads((root / rel).read_text(encoding="utf-8"))
    return f"From `{rel}`:\n\n```json\n{json.dumps(data, indent=2, ensure_ascii=False)}\n```\n"


def version_table() -> str:
    """The table of versions (``bnconvention.standard.versions.VERSIONS``) with the fields and kinds each added."""
    out = ["| version | what it added | fields and deployed-state kinds added to earlier objects |", "|---|---|---|"]
    for version in VERSIONS:
        if version.number == SPEC_VERSION:
            added = []
        else:
            added = [f"{owner}: {', '.join(f'`{name}`' for name in names)}"
                     for owner, names in fields_added_in(version.number).items()]
            added += [f"deployed-state kind `{kind}`" for kind, since in deployed_state_kinds().items()
                      if since == version.number]
        out.append(f"| `{version.number}` | {table_cell(version.adds)} | {'; '.join(added) or '—'} |")
    return "\n".join(out) + "\n"


def sections(root: Path = REPO_ROOT) -> dict[str, str]:
    out = {"fields": field_tables(), "codes": code_table(), "versions": version_table()}
    for name, rel in EXAMPLES.items():
        out[name] = example(rel, root)
    return out


def update_document(text: str, generated: dict[str, str]) -> str:
    """``text`` with every generated block replaced; unknown block names are an error."""
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in generated:
            raise KeyError(f"docs block {name!r} has no generator; known: {', '.join(sorted(generated))}")
        return match.group(1) + generated[name] + match.group(4)
    return _BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the generated parts of docs/standard.md.")
    parser.add_argument("document", type=Path, help="the markdown file (docs/standard.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the document is out of date")
    args = parser.parse_args(argv)
    text = args.document.read_text(encoding="utf-8")
    return sync_generated_file(args.document, update_document(text, sections()), check=args.check,
                               command=f"python -m bnconvention.validation.docgen {args.document}")


if __name__ == "__main__":
    raise SystemExit(main())
