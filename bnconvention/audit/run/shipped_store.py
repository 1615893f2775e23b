"""Shipped cells evaluated once: stored by (θ, φ, architecture, split digest), reused by every audit that shares them.

The shipped state's df/dr/dt depend on the weights file (its trainable and running digests), the architecture it is
loaded into (factory and arguments), and the splits under the eval transform; never on the refit design, the
margin, R or the criteria. So a census rerun under another refit design, a sweep, or two census members with the
same weights under the same data evaluate the shipped state once: :class:`ShippedStore` keeps one JSON file per key
under ``OUT/shipped/`` (written atomically; an unreadable or foreign file is a miss, never an error).

The **split digest** is sha256 over every split's role, record ids, labels and input bytes (before any transform)
and the eval transform's description: the data themselves, not their names, so a dataset file edited between runs
is a miss rather than stale cells. It is computed once per loaded :class:`~bnconvention.audit.measure.data.AuditData`
(about 1 GB/s; a census shares one).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from bnconvention.audit.core.files import write_json
from bnconvention.audit.measure.data import AuditData, Split
from bnconvention.audit.run.prepared import PreparedAudit
from bnconvention.formats.canonical import canonical_json_bytes, canonical_sha256, loads_strict

SHIPPED_DIR = "shipped"
SHIPPED_FORMAT = "bnconvention-shipped-cells/1"
BASE_CELLS = ("df", "dr", "dt")

__all__ = ["SHIPPED_DIR", "ShippedStore", "shipped_key", "split_digest"]


def _split_bytes(digest: Any, split: Split) -> None:
    digest.update(canonical_json_bytes({"ids": [int(i) for i in split.ids], "role": split.role,
                                        "x_dtype": str(split.x.dtype), "x_shape": list(split.x.shape),
                                        "y_dtype": str(split.y.dtype)}))
    for tensor in (split.x, split.y):
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        if flat.numel():
            digest.update(flat.view(torch.uint8).numpy().data)


def split_digest(data: AuditData) -> str:
    """sha256 of the forget, retain and test splits' records (ids, labels, inputs) and the eval transform."""
    digest = hashlib.sha256(b"bnconvention-split-digest/1\n")
    for split in (data.forget, data.retain, data.test):
        _split_bytes(digest, split)
    describe = getattr(data.eval_transform, "standard", None)
    transform = describe().model_dump(mode="json") if callable(describe) else repr(data.eval_transform)
    digest.update(canonical_json_bytes({"eval_transform": transform}))
    return digest.hexdigest()


def shipped_key(prepared: PreparedAudit, *, splits: str) -> str:
    """The identity of one checkpoint's shipped cells: weights digests, architecture, split digest."""
    checkpoint = prepared.checkpoint
    digests = checkpoint.file_digests
    return canonical_sha256({
        "format": SHIPPED_FORMAT, "splits": splits,
        "weights": {"trainable_sha256": digests.trainable_sha256, "running_sha256": digests.running_sha256},
        "architecture": {"factory": checkpoint.choice.factory, "kwargs": checkpoint.choice.kwargs},
    })


class ShippedStore:
    """Stored shipped base cells, one JSON file per key; the split digest is computed once per loaded data."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._digests: dict[int, tuple[AuditData, str]] = {}  # id(data) -> (data, digest); data kept alive

    def key(self, prepared: PreparedAudit) -> str:
        data = prepared.data
        known = self._digests.get(id(data))
        if known is None or known[0] is not data:
            known = (data, split_digest(data))
            self._digests[id(data)] = known
        return shipped_key(prepared, splits=known[1])

    def _path(self, key: str) -> Path:
        return self.folder / f"{key[:32]}.json"

    def get(self, key: str) -> dict[str, float] | None:
        try:
            entry = loads_strict(self._path(key).read_bytes(), source=str(self._path(key)))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("format") != SHIPPED_FORMAT or entry.get("key") != key:
            return None
        cells = entry.get("base_cells")
        if not isinstance(cells, dict) or sorted(cells) != sorted(BASE_CELLS) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in cells.values()):
            return None
        return {name: float(cells[name]) for name in BASE_CELLS}

    def put(self, key: str, cells: dict[str, float]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self._path(key), {"format": SHIPPED_FORMAT, "key": key,
                                     "base_cells": {name: float(cells[name]) for name in BASE_CELLS}})
