"""Published cells as a release writes them: in a model card's ``model-index`` (the Hub's own place for a release's
numbers), or in a JSON file beside the weights (the checkpoint's sidecar ``<name>.json`` or the folder's
``config.json``: a ``published`` mapping of cell -> value, or the digits zoo's ``shipped_accuracy``). Which of these
places is read, and in which order, is one rule: :func:`bnconvention.audit.measure.checkpoint.published_places`.

The spec maps metric labels to cells (``model_index_metrics``, e.g. ``forget accuracy: df``). A metric of the card's
model-index matches a label when its ``name`` is the label, or, when no metric has that name, when its ``type`` is
(case and spacing ignored). Results an audit wrote back (metrics marked ``bnconvention-refit``) are never read as
published numbers. Two matching metrics with different values make the cell ambiguous: an error naming both, so a
card that reports the test accuracy of two datasets is never anchored against the wrong one.

Pure: front-matter mapping or JSON object in, cells out. :func:`card_published_cells` and :func:`json_published_cells`
are strict (anchoring relies on them);
:func:`cell_origins` is lenient (it only says where the authors' number sits, so ``hub push`` can put the refit
cell beside it) and never fails on someone else's card.

>>> meta = {"model-index": [{"name": "m", "results": [{"task": {"type": "image-classification"},
...         "dataset": {"type": "digits", "name": "Digits"}, "metrics": [
...         {"type": "accuracy", "name": "Forget accuracy", "value": 0.12},
...         {"type": "accuracy", "name": "test accuracy", "value": 0.95}]}]}]}
>>> card_published_cells(meta, {"forget accuracy": "df", "test accuracy": "dt"}, source="README.md")
{'df': 0.12, 'dt': 0.95}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bnconvention.audit.spec.expressions import parse_cell
from bnconvention.errors import AuditSpecError, UntrustedInputError
from bnconvention.formats.model_index import IndexMetric, iter_index_metrics, read_model_index
from bnconvention.formats.text import one_line
from bnconvention.validation.model_index import is_refit_metric


def _norm(text: Any) -> str:
    return one_line(text).casefold()


def _matches(metrics: list[IndexMetric], label: str) -> list[IndexMetric]:
    """The metrics a label names: by ``name`` first, by ``type`` only when no metric has that name."""
    wanted = _norm(label)
    by_name = [m for m in metrics if isinstance(m.name, str) and _norm(m.name) == wanted]
    return by_name or [m for m in metrics if isinstance(m.type, str) and _norm(m.type) == wanted]


def _value(metric: IndexMetric, *, source: str) -> float:
    value = metric.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UntrustedInputError(f"{source}: model-index metric {metric.label!r} at {metric.pointer} has value "
                                  f"{value!r}, not a finite number; write the published value as a number (a "
                                  "fraction, as the cells are)", source=source)
    return float(value)


def _published(metrics: list[IndexMetric]) -> list[IndexMetric]:
    return [m for m in metrics if not is_refit_metric(m)]


def card_published_cells(metadata: Mapping[str, Any], mapping: Mapping[str, str], *,
                         source: str) -> dict[str, float]:
    """Published cells (canonical cell text -> value) the card's model-index gives for the mapped labels; labels
    the card does not carry are left out. Raises :class:`~bnconvention.errors.CardError` for a malformed
    model-index and :class:`~bnconvention.errors.UntrustedInputError` for an ambiguous or non-numeric value."""
    metrics = _published(read_model_index(metadata, source=source))
    cells: dict[str, float] = {}
    chosen: dict[str, IndexMetric] = {}
    for label, cell_text in mapping.items():
        found = _matches(metrics, label)
        if not found:
            continue
        values = {_value(m, source=source) for m in found}
        if len(values) > 1:
            where = ", ".join(f"{m.pointer} ({m.value!r})" for m in found[:3])
            raise UntrustedInputError(f"{source}: the model-index has {len(found)} metrics named {label!r} with "
                                      f"different values ({where}); give each a distinct name and map that name",
                                      source=source)
        cell = parse_cell(cell_text).text
        if cell in cells and cells[cell] != next(iter(values)):
            raise UntrustedInputError(f"{source}: cell {cell} is published twice in the model-index, as "
                                      f"{chosen[cell].label!r} ({cells[cell]!r}) and {label!r} "
                                      f"({next(iter(values))!r}); map only one of them", source=source)
        cells[cell], chosen[cell] = next(iter(values)), found[0]
    return cells


JSON_PUBLISHED_KEYS = ("published", "shipped_accuracy")
ZOO_ACCURACY_CELLS = {"forget": "df", "retain": "dr", "test": "dt"}


def json_published_cells(document: Mapping[str, Any], *, source: str) -> dict[str, float] | None:
    """Published cells (canonical cell text -> value) of a sidecar or ``config.json``: its ``published`` mapping,
    else the zoo's ``shipped_accuracy`` (forget, retain and test read as df, dr and dt); None when it holds neither.
    A ``published`` that is not a mapping of cells to numbers raises
    :class:`~bnconvention.errors.UntrustedInputError` naming ``source``.

    >>> json_published_cells({"shipped_accuracy": {"forget": 0.0, "test": 0.98}}, source="config.json")
    {'df': 0.0, 'dt': 0.98}
    >>> json_published_cells({"architectures": ["ResNetForImageClassification"]}, source="config.json") is None
    True
    """
    raw = document.get("published")
    if raw is None:
        accuracy = document.get("shipped_accuracy")
        if not isinstance(accuracy, Mapping):
            return None
        raw = {ZOO_ACCURACY_CELLS[k]: v for k, v in accuracy.items() if k in ZOO_ACCURACY_CELLS}
        if not raw:
            return None
    if not isinstance(raw, Mapping) or not raw:
        raise UntrustedInputError(f"{source}: 'published' is {raw!r}; write it as {{cell: value}}, e.g. "
                                  "{\"df\": 0.02, \"dt\": 0.95}", source=source)
    cells: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UntrustedInputError(f"{source}: published cell {key!r} is {value!r}, not a number", source=source)
        try:
            text = parse_cell(key).text
        except AuditSpecError as exc:
            raise UntrustedInputError(f"{source}: published cell {key!r} is not a cell expression: {exc}",
                                      source=source) from exc
        cells[text] = float(value)
    return cells


def cell_origins(metadata: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Where the authors' number of each mapped cell sits in the model-index (its result's task and dataset, the
    metric's type and name), for cells the card names unambiguously; malformed parts are passed over."""
    metrics = _published(list(iter_index_metrics(metadata)))
    origins: dict[str, dict[str, Any]] = {}
    for label, cell_text in mapping.items():
        found = _matches(metrics, label)
        try:
            cell = parse_cell(cell_text).text
        except ValueError:
            continue
        if len({repr(m.value) for m in found}) != 1 or cell in origins:
            continue
        metric = found[0]
        origins[cell] = {"task": dict(metric.task), "dataset": dict(metric.dataset), "type": metric.type,
                         "name": metric.label}
    return origins


def merge_published(card: Mapping[str, float], spec: Mapping[str, float] | None, *,
                    found_in: str = "the card's model-index") -> tuple[dict[str, float], list[str]]:
    """The cells found in a release's file (the card's, by default) completed by the spec's; the spec's value wins
    where both give a cell (the auditor's own word), with a note for each disagreement."""
    merged = dict(card)
    notes: list[str] = []
    for cell, value in (spec or {}).items():
        if cell in merged and merged[cell] != value:
            notes.append(f"published cell {cell}: the spec's {value!r} is used, {found_in} says {merged[cell]!r}")
        merged[cell] = value
    return merged, notes


__all__ = ["JSON_PUBLISHED_KEYS", "ZOO_ACCURACY_CELLS", "card_published_cells", "cell_origins", "json_published_cells",
           "merge_published"]
