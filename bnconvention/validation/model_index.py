"""BatchNorm refit results in the card's ``model-index``, and the check that they agree with the refit annotation.

``bnconvention hub push`` writes each refit annotation's cells into the card's model-index too, so the Hub's
evaluation-results view shows them beside the authors' published numbers. The JSON annotation stays the source of
truth; the model-index metrics are a copy a reader of the model page sees. A metric is ours when its ``config`` is
:data:`REFIT_METRIC_CONFIG`; its ``args`` name the annotation it copies (:func:`refit_metric_args`), so the copy
can be checked against the file wherever a tool later moved the metric (``huggingface_hub``'s ``metadata_update``
regroups results by task and dataset: the metrics, with their ``config`` and ``args``, survive).

:func:`check_model_index_refits` reports ``card.model_index_refit_mismatch`` for a metric that names an annotation
the release does not hold, another version of it (digest), another convention, a cell the annotation does not
have, or another value; and for an annotation whose cells the model-index copies only in part. Values agree
within :data:`VALUE_TOLERANCE` (the four decimals the card's own table shows; ``hub push`` writes the exact
float, which YAML round-trips).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.model_index import IndexMetric, iter_index_metrics
from bnconvention.standard.models import RefitAnnotation
from bnconvention.validation.issues import Issue, new_issue
from bnconvention.validation.schema_errors import show

REFIT_METRIC_CONFIG = "bnconvention-refit"
REFIT_STATES = ("refit", "shipped")
VALUE_TOLERANCE = 5e-5
CODE = "card.model_index_refit_mismatch"

AnnotationLookup = Callable[[str], "tuple[str, Any] | None"]  # repo path -> (display, decoded JSON) or None


def refit_metric_args(*, annotation: str, sha256: str, cell: str, state: str, convention: str) -> dict[str, str]:
    """The ``args`` of one of our metrics: which annotation (repo path and digest), cell and state it copies."""
    return {"annotation": annotation, "sha256": sha256, "cell": cell, "state": state, "convention": convention}


@dataclass(frozen=True)
class RefitMetric:
    """One of our metrics read back from a model-index."""

    metric: IndexMetric
    annotation: str
    sha256: str | None
    cell: str
    state: str
    convention: str | None


def is_refit_metric(metric: IndexMetric) -> bool:
    return metric.config == REFIT_METRIC_CONFIG


def _read(metric: IndexMetric) -> RefitMetric | str:
    """Our metric's fields, or what is wrong with its ``args``."""
    args = metric.args
    if not isinstance(args, dict):
        return f"its args are {show(args)}, not a mapping naming the annotation, cell and state"
    annotation, cell, state = args.get("annotation"), args.get("cell"), args.get("state", "refit")
    if not isinstance(annotation, str) or not annotation or not isinstance(cell, str) or not cell:
        return "its args name no annotation path and cell"
    if state not in REFIT_STATES:
        return f"its args give state {show(state)}, not one of {', '.join(REFIT_STATES)}"
    sha, convention = args.get("sha256"), args.get("convention")
    for name, value in (("sha256", sha), ("convention", convention)):
        if value is not None and not isinstance(value, str):
            return f"its args give {name} {show(value)}, not a string"
    return RefitMetric(metric=metric, annotation=annotation, sha256=sha, cell=cell, state=str(state),
                       convention=convention)


def read_refit_metrics(metadata: Mapping[str, Any]) -> tuple[list[RefitMetric], list[tuple[IndexMetric, str]]]:
    """Our metrics of a card's model-index, and those marked ours whose ``args`` are malformed (with why)."""
    good: list[RefitMetric] = []
    bad: list[tuple[IndexMetric, str]] = []
    for metric in iter_index_metrics(metadata):
        if is_refit_metric(metric):
            read = _read(metric)
            if isinstance(read, str):
                bad.append((metric, read))
            else:
                good.append(read)
    return good, bad


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _metric_issues(ours: RefitMetric, annotation: RefitAnnotation, digest: str, *, card: str,
                   display: str) -> list[Issue]:
    pointer = ours.metric.pointer

    def issue(where: str, text: str) -> Issue:
        return new_issue(CODE, file=card, path=pointer + where, message=(
            f"{text}; the annotation {display} is the source of truth: push the audit again (bnconvention hub "
            "push) or remove the stale metric"))

    if ours.sha256 is not None and ours.sha256 != digest:
        return [issue("/args/sha256", f"{show(ours.sha256[:16])} is not the digest of {display} "
                                      f"({digest[:16]}): the metric copies another version of the annotation")]
    found: list[Issue] = []
    if ours.convention is not None and ours.convention != annotation.convention.name:
        found.append(issue("/args/convention", f"{show(ours.convention)} is not the refit convention of {display} "
                                               f"({annotation.convention.name})"))
    cell = next((c for c in annotation.cells if c.metric == ours.cell), None)
    if cell is None:
        found.append(issue("/args/cell", f"cell {show(ours.cell)} is not one of the cells of {display} "
                                         f"({', '.join(c.metric for c in annotation.cells)})"))
        return found
    expected = cell.refit if ours.state == "refit" else cell.shipped
    value = _number(ours.metric.value)
    if value is None or abs(value - expected) > VALUE_TOLERANCE:
        found.append(issue("/value", f"{show(ours.metric.value)} is not the {ours.state} value of cell "
                                     f"{ours.cell} in {display} ({expected!r})"))
    return found


def _load(lookup: AnnotationLookup, path: str) -> tuple[str, RefitAnnotation, str] | None | str:
    """(display, annotation, digest); None when the release lacks the file; a display when it is not a valid
    annotation (its own issues say why)."""
    found = lookup(path)
    if found is None:
        return None
    display, data = found
    try:
        return display, RefitAnnotation.model_validate(data), canonical_sha256(data)
    except (ValidationError, ValueError, TypeError):
        return display


def check_model_index_refits(metadata: Mapping[str, Any], *, card: str, lookup: AnnotationLookup) -> list[Issue]:
    """Every disagreement between the card's model-index refit metrics and the annotations they name."""
    ours, malformed = read_refit_metrics(metadata)
    issues = [new_issue(CODE, file=card, path=metric.pointer + "/args", message=(
        f"a model-index metric marked {show(REFIT_METRIC_CONFIG)} cannot be checked: {why}; push the audit "
        "again (bnconvention hub push) or remove the metric")) for metric, why in malformed]
    annotations: dict[str, tuple[str, RefitAnnotation, str] | None | str] = {}
    copied: dict[str, tuple[tuple[str, RefitAnnotation, str], RefitMetric, set[str]]] = {}
    for item in ours:
        if item.annotation not in annotations:
            annotations[item.annotation] = _load(lookup, item.annotation)
        loaded = annotations[item.annotation]
        if loaded is None:
            issues.append(new_issue(CODE, file=card, path=item.metric.pointer + "/args/annotation", message=(
                f"{show(item.annotation)} is not a refit annotation of this release: the model-index copies "
                "results that are not here; push the annotation with it or remove the metric")))
        elif not isinstance(loaded, str):
            issues += _metric_issues(item, loaded[1], loaded[2], card=card, display=loaded[0])
            seen = copied.setdefault(item.annotation, (loaded, item, set()))[2]
            if item.state == "refit":
                seen.add(item.cell)
    for (display, annotation, _), first, cells in copied.values():
        missing = [c.metric for c in annotation.cells if c.metric not in cells]
        if missing:
            issues.append(new_issue(CODE, file=card, path=first.metric.pointer.rsplit("/metrics/", 1)[0], message=(
                f"the model-index copies the refit cells of {display} only in part: {', '.join(missing)} "
                "missing; push the audit again (bnconvention hub push)")))
    return issues


__all__ = [
    "CODE",
    "REFIT_METRIC_CONFIG",
    "REFIT_STATES",
    "VALUE_TOLERANCE",
    "RefitMetric",
    "check_model_index_refits",
    "is_refit_metric",
    "read_refit_metrics",
    "refit_metric_args",
]
