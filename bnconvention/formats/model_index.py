"""The card's ``model-index``: the Hub's own place for a model's evaluation results, flattened into metrics.

The shape is the one ``huggingface_hub.repocard_data`` parses and writes (``model_index_to_eval_results`` /
``eval_results_to_model_index``) and the Hub renders as the model page's evaluation results::

    model-index:
    - name: my-model
      results:
      - task: {type: image-classification, name: ...}
        dataset: {type: cifar10, name: CIFAR-10, config: ..., split: test, revision: ...}
        metrics:
        - {type: accuracy, value: 0.93, name: test accuracy, config: ..., args: ..., verified: false}
        source: {name: ..., url: ...}

Parsing is pure (front-matter mapping in, :class:`IndexMetric` values out) and strict where huggingface_hub is:
every entry a mapping with ``name`` and ``results``, every result with ``task.type``, ``dataset.type``,
``dataset.name`` and ``metrics``, every metric with ``type`` and ``value``. A card that breaks these rules is a
:class:`~bnconvention.errors.CardError` naming the JSON pointer of the offending value (``ModelCard.load`` would
refuse the same card). :func:`iter_index_metrics` is the lenient walk a validator uses on someone else's card: it
yields what is well formed and passes over the rest.

>>> meta = {"model-index": [{"name": "m", "results": [{"task": {"type": "image-classification"},
...         "dataset": {"type": "digits", "name": "Digits"}, "metrics": [{"type": "accuracy", "value": 0.9,
...         "name": "test accuracy"}]}]}]}
>>> [(m.pointer, m.name, m.value) for m in read_model_index(meta, source="README.md")]
[('/model-index/0/results/0/metrics/0', 'test accuracy', 0.9)]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bnconvention.errors import CardError
from bnconvention.formats.json_types import JsonObject

MODEL_INDEX_KEY = "model-index"
# metric label -> base cell: the names the papers' tables use (the audit spec's default model_index_metrics, and the
# labels hub push gives base cells the authors do not publish)
BASE_CELL_METRICS: dict[str, str] = {"forget accuracy": "df", "retain accuracy": "dr", "test accuracy": "dt"}


@dataclass(frozen=True)
class IndexMetric:
    """One metric of one result of a card's model-index, with where it sits (a JSON pointer into the front
    matter) and the task and dataset of its result."""

    pointer: str
    entry: int
    result: int
    metric: int
    model_name: Any
    task: JsonObject
    dataset: JsonObject
    type: Any
    value: Any
    name: Any = None
    config: Any = None
    args: Any = None
    source: Any = None
    raw: JsonObject = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The metric as a reader of the card names it: its ``name``, else its ``type``."""
        return str(self.name if isinstance(self.name, str) and self.name else self.type)


def _pointer(*tokens: str | int) -> str:
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def _problem(source: str, pointer: str, text: str) -> CardError:
    return CardError(f"{source}: {MODEL_INDEX_KEY} at {pointer}: {text}; fix the card's model-index (the shape "
                     "huggingface_hub's ModelCardData reads: name, results: [{task, dataset, metrics}])",
                     source=source)


def _walk(metadata: Mapping[str, Any], *, source: str, strict: bool) -> Iterator[IndexMetric]:
    index = metadata.get(MODEL_INDEX_KEY)
    if index is None:
        return
    if not isinstance(index, list):
        if strict:
            raise _problem(source, _pointer(MODEL_INDEX_KEY), f"is a {type(index).__name__}, expected a list")
        return
    for e, entry in enumerate(index):
        where = _pointer(MODEL_INDEX_KEY, e)
        if not isinstance(entry, dict) or not isinstance(entry.get("results"), list) or "name" not in entry:
            if strict:
                raise _problem(source, where, "an entry is a mapping with 'name' and a 'results' list")
            continue
        for r, result in enumerate(entry["results"]):
            yield from _result_metrics(entry, e, r, result, source=source, strict=strict)


def _result_metrics(entry: JsonObject, e: int, r: int, result: Any, *, source: str,
                    strict: bool) -> Iterator[IndexMetric]:
    where = _pointer(MODEL_INDEX_KEY, e, "results", r)
    task = result.get("task") if isinstance(result, dict) else None
    dataset = result.get("dataset") if isinstance(result, dict) else None
    metrics = result.get("metrics") if isinstance(result, dict) else None
    if not (isinstance(task, dict) and "type" in task and isinstance(dataset, dict) and "type" in dataset
            and "name" in dataset and isinstance(metrics, list)):
        if strict:
            raise _problem(source, where, "a result is a mapping with task.type, dataset.type, dataset.name and a "
                                          "'metrics' list")
        return
    for m, metric in enumerate(metrics):
        pointer = _pointer(MODEL_INDEX_KEY, e, "results", r, "metrics", m)
        if not isinstance(metric, dict) or "type" not in metric or "value" not in metric:
            if strict:
                raise _problem(source, pointer, "a metric is a mapping with 'type' and 'value'")
            continue
        yield IndexMetric(pointer=pointer, entry=e, result=r, metric=m, model_name=entry.get("name"), task=task,
                          dataset=dataset, type=metric["type"], value=metric["value"], name=metric.get("name"),
                          config=metric.get("config"), args=metric.get("args"), source=result.get("source"),
                          raw=metric)


def read_model_index(metadata: Mapping[str, Any], *, source: str = "README.md") -> list[IndexMetric]:
    """Every metric of the card's model-index (empty when it has none); a malformed one raises
    :class:`~bnconvention.errors.CardError`."""
    return list(_walk(metadata, source=source, strict=True))


def iter_index_metrics(metadata: Mapping[str, Any]) -> Iterator[IndexMetric]:
    """The well-formed metrics of a model-index, passing over malformed entries, results and metrics."""
    return _walk(metadata, source="", strict=False)


def model_index_name(metadata: Mapping[str, Any]) -> str | None:
    """The model name of the card's model-index (the last entry's, as huggingface_hub reads it), if any."""
    index = metadata.get(MODEL_INDEX_KEY)
    if isinstance(index, list):
        for entry in reversed(index):
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                return str(entry["name"])
    return None


__all__ = ["MODEL_INDEX_KEY", "IndexMetric", "iter_index_metrics", "model_index_name", "read_model_index"]
