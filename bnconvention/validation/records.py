"""Validate one record (a decoded JSON value): the schema, the models as a cross-check, then the semantic rules.

>>> issues = validate_record({"spec_version": "2.0", "kind": "declaration"}, source="r.json")
>>> sorted({i.code for i in issues})
['schema.spec_version']
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from bnconvention.errors import RecordError
from bnconvention.standard.models import Declaration, RefitAnnotation, parse_record
from bnconvention.validation.issues import Issue, best_issue, new_issue, sort_issues
from bnconvention.validation.schema_errors import schema_issues
from bnconvention.validation.semantics import annotation_issues, declaration_issues


def check_record(data: Any, *, source: str) -> tuple[Declaration | RefitAnnotation | None, list[Issue]]:
    """The parsed record (``None`` when it fails the schema) and every issue found in it, sorted."""
    issues = schema_issues(data, source=source)
    record: Declaration | RefitAnnotation | None = None
    try:
        record = parse_record(data)
    except ValidationError as exc:
        if not issues:
            first = exc.errors()[0]
            location = "/".join(str(part) for part in first["loc"])
            issues.append(new_issue("schema.model_mismatch", file=source, message=(
                f"the JSON Schema accepts this record but the pydantic models reject it at {location}: "
                f"{first['msg']}; this is a bug in bnconvention, please report it with the record")))
    except (TypeError, ValueError, RecursionError) as exc:  # non-JSON Python values handed in by a caller
        if not issues:
            issues.append(new_issue("schema.model_mismatch", file=source, message=(
                f"the pydantic models could not read this record ({type(exc).__name__}: {exc}); pass decoded JSON")))
    if issues:
        if record is not None:
            issues.append(new_issue("schema.model_mismatch", file=source, message=(
                "the pydantic models accept this record but the JSON Schema rejects it; this is a bug in "
                "bnconvention, please report it with the record")))
        return None, sort_issues(issues)
    if isinstance(record, Declaration):
        issues = declaration_issues(record, source=source)
    elif isinstance(record, RefitAnnotation):
        issues = annotation_issues(record, source=source)
    return record, sort_issues(issues)


def validate_record(data: Any, *, source: str = "<record>") -> list[Issue]:
    """Every problem of one record (a decoded JSON value), sorted: schema errors or else semantic ones."""
    return check_record(data, source=source)[1]


def ensure_valid_record(data: Any, *, source: str = "<record>") -> Declaration | RefitAnnotation:
    """The parsed record, or :class:`~bnconvention.errors.RecordError` carrying every error (warnings pass).

    For writers (stamping, publishing) that must refuse a bad record with one clear message.
    """
    record, issues = check_record(data, source=source)
    errors = [i for i in issues if i.severity == "error"]
    if errors or record is None:
        best = best_issue(errors)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        where = f" at {best.path}" if best and best.path else ""
        text = f"{best.code}{where}: {best.message}" if best else "invalid record"
        raise RecordError(f"{source}: {text}{more}", source=source, issues=errors)
    return record


__all__ = ["check_record", "ensure_valid_record", "validate_record"]
