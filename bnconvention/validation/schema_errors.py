"""Turn JSON Schema errors into issues with stable codes, JSON-pointer paths and fix-it messages.

Tagged unions (``oneOf`` with a ``discriminator``: the record ``kind``, the accumulation ``rule``, the deployed-state
``kind``) report the errors of the branch their tag selects, not "is not valid under any of the given schemas"; an
unknown tag value is its own code (``schema.discriminator``). Optional values (``anyOf [X, null]``) report the
errors of ``X``.

>>> issues = schema_issues({"spec_version": "1.0", "kind": "note"}, source="r.json")
>>> [(i.code, i.path) for i in issues]
[('schema.discriminator', '/kind')]
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from typing import Any

from jsonschema import ValidationError
from jsonschema.exceptions import best_match

from bnconvention.standard.models import (
    LATEST_SPEC_VERSION,
    SPEC_VERSION,
    SPEC_VERSIONS,
    deployed_state_kinds,
    fields_added_in,
)
from bnconvention.standard.schema import schema_validator
from bnconvention.validation.issues import Issue, make_pointer, new_issue

_RANGE = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}


def show(value: Any, *, limit: int = 60) -> str:
    """A value as (possibly shortened) JSON text, for the start of a message."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=False, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _where(pointer: str) -> str:
    return pointer or "the record"


def _article(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _did_you_mean(value: Any, choices: list[str]) -> str:
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f" (did you mean {show(close[0])}?)" if close else ""


def schema_issues(data: Any, *, source: str, base: str = "") -> list[Issue]:
    """Every schema problem of ``data`` (a decoded JSON value) as issues of file ``source``.

    ``base`` is prefixed to every path (for records embedded in a larger document).
    """
    issues: list[Issue] = []
    for error in schema_validator().iter_errors(data):
        issues.extend(_flatten(error, source, base))
    return _drop_shadowed(issues)


# An issue of the first code makes one of the second code at the same path redundant: a 65-character "sha256"
# fails both the pattern and the length bounds, a spec_version of 1.0 both the constant and the type.
_SHADOWS = {"schema.pattern": "schema.length", "schema.spec_version": "schema.type", "schema.const": "schema.type"}


def _drop_shadowed(issues: list[Issue]) -> list[Issue]:
    shadowed = {(_SHADOWS[i.code], i.path) for i in issues if i.code in _SHADOWS}
    return [i for i in issues if (i.code, i.path) not in shadowed]


def _pointer(error: ValidationError, base: str) -> str:
    return base + make_pointer(error.absolute_path)


def _flatten(error: ValidationError, source: str, base: str) -> Iterator[Issue]:
    if error.validator in ("oneOf", "anyOf"):
        yield from _union(error, source, base)
    else:
        yield from _leaf(error, source, base)


def _branch_errors(error: ValidationError, index: int) -> list[ValidationError]:
    return [e for e in error.context or [] if e.relative_schema_path and e.relative_schema_path[0] == index]


def _union(error: ValidationError, source: str, base: str) -> Iterator[Issue]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    branches: list[Any] = list(schema.get(str(error.validator), []))
    instance = error.instance
    pointer = _pointer(error, base)
    discriminator = schema.get("discriminator")
    if isinstance(discriminator, dict):
        tag = discriminator["propertyName"]
        mapping: dict[str, str] = discriminator.get("mapping", {})
        known = sorted(mapping)
        if not isinstance(instance, dict):
            yield new_issue("schema.type", file=source, path=pointer, message=(
                f"{show(instance)} is not of type object: {_where(pointer)} must be an object with a {show(tag)} "
                f"property ({', '.join(known)}); found {_article(json_type(instance))}"))
            return
        if tag not in instance:
            yield new_issue("schema.required", file=source, path=pointer, message=(
                f"{show(tag)} is a required property of {_where(pointer)}: it says which kind of object this is; "
                f"add \"{tag}\": one of {', '.join(known)}"))
            return
        value = instance[tag]
        if not isinstance(value, str) or value not in mapping:
            if tag == "spec_version":
                yield _unknown_version(value, source=source, pointer=pointer + make_pointer([tag]))
                return
            added = deployed_state_kinds().get(value) if tag == "kind" and isinstance(value, str) else None
            if added is not None and added != SPEC_VERSION:
                yield new_issue("schema.discriminator", file=source, path=pointer + make_pointer([tag]), message=(
                    f"{show(value)} is a deployed-state kind of spec version {added}, not of this "
                    f"record's version: declare \"spec_version\": \"{added}\" (bnconvention migrate "
                    f"upgrades a {SPEC_VERSION} record without changing its meaning)"))
                return
            yield new_issue("schema.discriminator", file=source, path=pointer + make_pointer([tag]), message=(
                f"{show(value)} is not a known {tag}{_did_you_mean(value, known)}: {pointer}/{tag} must be "
                f"one of {', '.join(known)}; records of versions {', '.join(SPEC_VERSIONS)} know no other {tag}"))
            return
        index = next((i for i, b in enumerate(branches) if isinstance(b, dict) and b.get("$ref") == mapping[value]),
                     None)
        selected = _branch_errors(error, index) if index is not None else []
        if selected:
            for sub in selected:
                yield from _flatten(sub, source, base)
            return
    else:
        # Optional values are anyOf [X, {"type": "null"}]; a non-null value is meant as X: report X's errors.
        candidates = [i for i, b in enumerate(branches) if not (instance is not None and b == {"type": "null"})]
        if len(candidates) == 1:
            selected = _branch_errors(error, candidates[0])
            if selected:
                for sub in selected:
                    yield from _flatten(sub, source, base)
                return
        if error.context:
            best = best_match(error.context)
            if best is not None:
                yield from _flatten(best, source, base)
                return
    yield new_issue("schema.invalid", file=source, path=pointer, message=(
        f"{show(instance)} does not match any allowed form of {_where(pointer)}; see docs/standard.md"))


def _unknown_version(value: Any, *, source: str, pointer: str) -> Issue:
    versions = " and ".join(show(v) for v in SPEC_VERSIONS)
    return new_issue("schema.spec_version", file=source, path=pointer, message=(
        f"{show(value)} is not a spec_version this validator reads: it reads versions {versions} (a quoted "
        f"string); write \"spec_version\": \"{SPEC_VERSION}\" or \"{LATEST_SPEC_VERSION}\", or validate with a "
        "bnconvention release that knows this version (older records stay valid: see the versioning policy in "
        "docs/standard.md)"))


def _later_version_hint(title: Any, name: str) -> str:
    """The hint for a first-version object carrying a property that the latest version adds to it."""
    if isinstance(title, str) and name in fields_added_in(LATEST_SPEC_VERSION).get(title, ()):
        latest = LATEST_SPEC_VERSION
        return (f" in a spec_version {SPEC_VERSION} record: {show(name)} is a field of spec version {latest}; "
                f"declare \"spec_version\": \"{latest}\" (bnconvention migrate upgrades a {SPEC_VERSION} record "
                "without changing its meaning), or remove it")
    return ""


def _additional_properties(instance: Any, schema: dict[str, Any], *, source: str, pointer: str, of: str,
                           title: Any) -> Iterator[Issue]:
    """One issue per property the schema does not allow: a later spec version's field says so, else a typo hint."""
    allowed = sorted(schema.get("properties", {}))
    extras = [k for k in instance if k not in allowed] if isinstance(instance, dict) else []
    for name in extras:
        later = _later_version_hint(title, name)
        if later:
            yield new_issue("schema.additional_property", file=source, path=pointer, message=(
                f"{show(name)} is not a property of {of}{later}"))
            continue
        yield new_issue("schema.additional_property", file=source, path=pointer, message=(
            f"{show(name)} is not a property of {of}{_did_you_mean(name, allowed)}; remove it or fix its "
            f"spelling (allowed: {', '.join(allowed)})"))


def _leaf(error: ValidationError, source: str, base: str) -> Iterator[Issue]:
    keyword = str(error.validator)
    value: Any = error.validator_value  # the schema keyword's own value (jsonschema types it loosely)
    instance = error.instance
    pointer = _pointer(error, base)
    where = _where(pointer)
    schema = error.schema if isinstance(error.schema, dict) else {}
    title = schema.get("title")
    of = f"{title} at {where}" if title and pointer else (title or where)

    if keyword == "type":
        expected = value if isinstance(value, str) else " or ".join(value)
        hint = ""
        if expected in ("number", "integer") and isinstance(instance, str):
            hint = (" (in a model card, YAML 1.1 reads a number such as 1e-5 as a string: write 1.0e-05, or "
                    "regenerate the card with bnconvention)")
        elif expected == "integer" and isinstance(instance, float):
            hint = "; write a whole number"
        yield new_issue("schema.type", file=source, path=pointer, message=(
            f"{show(instance)} is not of type {expected}: {where} must be {_article(expected)}; found "
            f"{_article(json_type(instance))}{hint}"))
    elif keyword == "required":
        props = schema.get("properties", {})
        missing = [p for p in value if isinstance(instance, dict) and p not in instance]
        for name in missing or [error.message]:
            description = props.get(name, {}).get("description") if isinstance(props.get(name), dict) else None
            what = f" ({description.rstrip('.')})" if description else ""
            yield new_issue("schema.required", file=source, path=pointer, message=(
                f"{show(name)} is a required property of {of}; add it{what}"))
    elif keyword == "additionalProperties":
        yield from _additional_properties(instance, schema, source=source, pointer=pointer, of=of, title=title)
    elif keyword == "enum":
        choices = [str(c) for c in value]
        yield new_issue("schema.enum", file=source, path=pointer, message=(
            f"{show(instance)} is not an allowed value{_did_you_mean(instance, choices)}: {where} must be one of "
            f"{', '.join(choices)}"))
    elif keyword == "const":
        if error.absolute_path and list(error.absolute_path)[-1] == "spec_version" and len(error.absolute_path) == 1:
            yield _unknown_version(instance, source=source, pointer=pointer)
        else:
            yield new_issue("schema.const", file=source, path=pointer, message=(
                f"{show(instance)} is not the allowed value: {where} must be exactly {show(value)}"))
    elif keyword == "pattern":
        if value == r"^[0-9a-f]{64}$" and isinstance(instance, str):
            found = f"{len(instance)} characters"
            if instance.lower() != instance:
                found += ", with uppercase letters"
            yield new_issue("schema.pattern", file=source, path=pointer, message=(
                f"{show(instance)} is not a lowercase hex sha256: {where} must be 64 characters 0-9a-f; found "
                f"{found}"))
        else:
            yield new_issue("schema.pattern", file=source, path=pointer, message=(
                f"{show(instance)} does not match {show(value)}: fix {where}"))
    elif keyword in ("minLength", "maxLength"):
        limit = "at least" if keyword == "minLength" else "at most"
        need = "a non-empty string" if keyword == "minLength" and value == 1 else f"{limit} {value} characters"
        yield new_issue("schema.length", file=source, path=pointer, message=(
            f"{show(instance)} is too {'short' if keyword == 'minLength' else 'long'}: {where} must be {need}; "
            f"found {len(instance) if isinstance(instance, str) else '?'} characters"))
    elif keyword in ("minItems", "maxItems"):
        limit = "at least" if keyword == "minItems" else "at most"
        yield new_issue("schema.items", file=source, path=pointer, message=(
            f"{show(instance)} has {len(instance) if isinstance(instance, list) else '?'} items: {where} needs "
            f"{limit} {value}"))
    elif keyword in _RANGE:
        relation = {"minimum": f"at least {value}", "maximum": f"at most {value}",
                    "exclusiveMinimum": f"greater than {value}", "exclusiveMaximum": f"less than {value}"}[keyword]
        yield new_issue("schema.range", file=source, path=pointer, message=(
            f"{show(instance)} is out of range: {where} must be {relation}"))
    else:
        yield new_issue("schema.invalid", file=source, path=pointer, message=f"{error.message}: fix {where}")


__all__ = ["json_type", "schema_issues", "show"]
