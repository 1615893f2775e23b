"""Refit cells written into the card's ``model-index`` (``bnconvention hub push``), beside the authors' numbers.

The Hub shows a card's ``model-index`` as the model's evaluation results. ``hub push`` adds one entry of its own at
the end of the model-index, under the same model name, holding each pushed annotation's cells as results
(:func:`refit_index_results`): a cell the authors publish in the model-index (found through the spec's
``model_index_metrics`` when the repo was audited) gets its refit value in a result with the same task and
dataset and a metric of the same type, named ``<their name> (BatchNorm refit: <convention>)``, so the two stand
side by side; a cell they do not publish gets its shipped and its refit value, both as measured by the audit.
Every metric of ours carries ``config: bnconvention-refit`` and ``args`` naming the annotation file, its digest,
the cell, the state and the convention (:func:`bnconvention.validation.model_index.refit_metric_args`), which is
how ``bnconvention validate`` checks the copy against the annotation, the source of truth.

The edit is surgical, like every card edit (:mod:`bnconvention.authoring.card_edit`): everything outside the
``model-index`` block stays byte-for-byte, and inside it the authors' entries keep their text (comments, quoting,
order) when the model-index is a block sequence at the root's indentation, as huggingface_hub and transformers
write it. Only a flow-style model-index (``model-index: [...]``) is written out again as data (its values kept,
its formatting not). Our own entry is rewritten on each push: results of an annotation pushed again are replaced,
those of other annotations kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import yaml

from bnconvention.authoring.card_edit import ParsedCard, apply_edit, block_span, parse_for_edit
from bnconvention.authoring.card_refit import REFIT_MARKERS
from bnconvention.errors import CardError
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.card import CARD_NAME
from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.formats.model_index import BASE_CELL_METRICS, MODEL_INDEX_KEY
from bnconvention.standard.models import RefitAnnotation
from bnconvention.validation.model_index import REFIT_METRIC_CONFIG, refit_metric_args

DEFAULT_TASK_TYPE = "image-classification"
# A base cell the authors do not publish gets the label the papers' tables use, so the Hub's eval-results view reads
# "forget accuracy (...)" rather than "df (...)".
_BASE_CELL_LABELS = {cell: label for label, cell in BASE_CELL_METRICS.items()}


class RefitIndexMetric(TypedDict):
    """One metric of ours in a model-index result: its type, value and label, ``config: bnconvention-refit`` and
    the ``args`` naming the annotation, its digest, the cell, the state and the convention."""

    type: JsonValue  # the authors' metric type where they publish the cell, else ours
    value: float
    name: str
    config: str
    args: dict[str, str]


class RefitIndexResult(TypedDict):
    """One model-index result of ours: a task, a dataset (the authors' where they publish the cell) and metrics."""

    task: JsonObject
    dataset: JsonObject
    metrics: list[RefitIndexMetric]


def _default_dataset(annotation: RefitAnnotation) -> JsonObject:
    dataset = annotation.convention.data.dataset
    found: JsonObject = {"type": dataset.id, "name": dataset.id}
    if dataset.revision:
        found["revision"] = dataset.revision
    return found


def refit_index_results(annotation: RefitAnnotation, *, path: str, sha256: str,
                        origins: Mapping[str, Mapping[str, Any]] | None = None,
                        task_type: str = DEFAULT_TASK_TYPE) -> list[RefitIndexResult]:
    """The model-index results of one annotation stored at ``path`` (``sha256``: of its canonical JSON).
    ``origins``: cell -> where the authors publish it (``task``, ``dataset``, metric ``type`` and ``name``, as
    :func:`bnconvention.audit.measure.published.cell_origins` finds them)."""
    convention = annotation.convention.name
    groups: dict[str, RefitIndexResult] = {}
    for cell in annotation.cells:
        origin = (origins or {}).get(cell.metric)
        if origin is not None:
            task, dataset = dict(origin["task"]), dict(origin["dataset"])
            kind, label = origin["type"], str(origin.get("name") or origin["type"])
        else:
            label = _BASE_CELL_LABELS.get(cell.metric, cell.metric)
            kind = "accuracy" if cell.metric in _BASE_CELL_LABELS else cell.metric
            task, dataset = {"type": task_type}, _default_dataset(annotation)
        result = groups.setdefault(repr((sorted(task.items()), sorted(dataset.items()))),
                                   {"task": task, "dataset": dataset, "metrics": []})
        names = {"annotation": path, "sha256": sha256, "cell": cell.metric, "convention": convention}
        if origin is None:
            result["metrics"].append(_metric(kind, cell.shipped, "shipped", names,
                                             f"{label} (shipped, measured by the BatchNorm refit audit)"))
        result["metrics"].append(_metric(kind, cell.refit, "refit", names, f"{label} (BatchNorm refit: {convention})"))
    return list(groups.values())


def _metric(kind: JsonValue, value: float, state: str, names: Mapping[str, str], label: str) -> RefitIndexMetric:
    return {"type": kind, "value": value, "name": label, "config": REFIT_METRIC_CONFIG,
            "args": refit_metric_args(state=state, **names)}


# --- reading our entry back ---------------------------------------------------------------------------------------


def _ours(metric: Any) -> bool:
    return isinstance(metric, dict) and metric.get("config") == REFIT_METRIC_CONFIG


def _our_entry(entry: Any) -> bool:
    """An entry of the model-index that holds only our metrics (the one ``hub push`` writes)."""
    results = entry.get("results") if isinstance(entry, dict) else None
    return (isinstance(results, list) and bool(results)
            and all(isinstance(r, dict) and isinstance(r.get("metrics"), list) and r["metrics"]
                    and all(_ours(m) for m in r["metrics"]) for r in results))


def _result_annotation(result: Mapping[str, Any]) -> Any:
    args = result["metrics"][0].get("args")
    return args.get("annotation") if isinstance(args, dict) else None


def _authors_name(entries: list[Any]) -> str | None:
    for entry in reversed(entries):
        if isinstance(entry, dict) and not _our_entry(entry) and isinstance(entry.get("name"), str):
            return str(entry["name"])
    return None


# --- the text edit ------------------------------------------------------------------------------------------------


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False, width=2**16)


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _item_starts(yaml_text: str, items: list[yaml.Node]) -> list[tuple[int, int]] | None:
    """(line start, dash column) of each block-sequence item, or None when an item's dash cannot be found."""
    found = []
    for item in items:
        dash = item.start_mark.index - 1
        while dash >= 0 and yaml_text[dash] in " \t\r\n":
            dash -= 1
        if dash < 0 or yaml_text[dash] != "-":
            return None
        line = max(yaml_text.rfind("\n", 0, dash), yaml_text.rfind("\r", 0, dash)) + 1
        found.append((line, dash - line))
    return found


def _without_break(chunk: str) -> str:
    return chunk[:-1] if chunk.endswith("\n") else chunk


def _surgical_block(parsed: ParsedCard, drop: set[int], entry: Mapping[str, object]) -> str | None:
    """The model-index block's text (LF) with the items ``drop`` cut and ``entry`` appended, the other items'
    text kept; None when the block is not a block sequence at the root's indentation (then it is dumped anew)."""
    front, root = parsed.front, parsed.doc.root
    if front is None or not isinstance(root, yaml.MappingNode) or not parsed.doc.keys:
        return None
    if parsed.doc.keys[0].start_mark.column != 0:
        return None
    value = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == MODEL_INDEX_KEY), None)
    if not isinstance(value, yaml.SequenceNode) or value.flow_style or not value.value:
        return None
    text = front.yaml_text
    span = block_span(text, parsed.doc, key_name=MODEL_INDEX_KEY)
    starts = _item_starts(text, list(value.value))
    if span is None or starts is None:
        return None
    bounds = [line for line, _ in starts] + [span[1]]
    chunks = [_without_break(_lf(text[span[0]: bounds[0]]))]
    chunks += [_without_break(_lf(text[bounds[i]: bounds[i + 1]])) for i in range(len(starts)) if i not in drop]
    indent = " " * starts[0][1]
    chunks.append("\n".join(indent + line if line else line for line in _dump([entry]).rstrip("\n").split("\n")))
    return "\n".join(chunks) + "\n"


def _merged(existing: list[Mapping[str, Any]],
            results: Mapping[str, list[RefitIndexResult]]) -> list[Mapping[str, Any]]:
    """Our results with those of ``results``' annotations replaced where the first of them was (new annotations
    appended), so stamping the same results again changes nothing. ``existing``: our results as the card has them."""
    merged: list[Mapping[str, Any]] = []
    placed: set[str] = set()
    for result in existing:
        path = _result_annotation(result)
        if path not in results:
            merged.append(result)
        elif path not in placed:
            merged += results[path]
            placed.add(path)
    return merged + [r for path, found in results.items() if path not in placed for r in found]


def stamp_model_index_text(text: str, results: Mapping[str, list[RefitIndexResult]], *, model_name: str,
                           source: str = CARD_NAME) -> str:
    """``text`` with our model-index entry holding ``results`` (annotation path -> its results, from
    :func:`refit_index_results`), replacing earlier results of the same annotations. Pure; idempotent.

    ``model_name`` names a model-index the card does not have yet; an existing one keeps the authors' name. A
    model-index that is not a list raises :class:`CardError` (the caller decides whether to push without it)."""
    parsed = parse_for_edit(text, source=source)
    index = parsed.metadata.get(MODEL_INDEX_KEY)
    if index is not None and not isinstance(index, list):
        raise CardError(f"{source}: the card's {MODEL_INDEX_KEY} is a {type(index).__name__}, not a list of "
                        "entries; fix it so refit results can be added beside the published ones", source=source)
    entries: list[Any] = list(index or [])
    drop = {i for i, entry in enumerate(entries) if _our_entry(entry)}
    entry = {"name": _authors_name(entries) or model_name,
             "results": _merged([r for i in sorted(drop) for r in entries[i]["results"]], results)}
    new_index = [e for i, e in enumerate(entries) if i not in drop] + [entry]
    block = _surgical_block(parsed, drop, entry) if entries else None
    if block is None:
        block = _dump({MODEL_INDEX_KEY: new_index})
    try:
        canonical_json(new_index)
    except ValueError as exc:
        raise CardError(f"{source}: the card's {MODEL_INDEX_KEY} holds values JSON cannot represent ({exc}); fix it "
                        "so refit results can be added", source=source) from exc
    return apply_edit(text, parsed, block=block, data=new_index, section=None, source=source,
                      key_name=MODEL_INDEX_KEY, markers=REFIT_MARKERS)


__all__ = ["DEFAULT_TASK_TYPE", "RefitIndexMetric", "RefitIndexResult", "refit_index_results", "stamp_model_index_text"]
