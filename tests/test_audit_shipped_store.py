"""Shipped cells evaluated once per (weights, architecture, split digest) and reused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bnconvention.audit.census.run import run_census
from bnconvention.audit.measure import evaluation
from bnconvention.audit.run import stages
from bnconvention.audit.run.runner import prepare_audit, run_audit
from bnconvention.audit.run.shipped_store import ShippedStore, split_digest
from bnconvention.audit.spec.audit_spec import load_spec
from bnconvention.zoo.models import convnet_bn


def _write_case(folder: Path, *, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    np.savez(folder / "data.npz", x=rng.integers(0, 256, size=(120, 3, 8, 8), dtype=np.uint8),
             y=rng.integers(0, 4, size=120), test=rng.random(120) < 0.25)
    torch.manual_seed(seed)
    model = convnet_bn(in_channels=3, num_classes=4, width=4)
    weights = folder / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    spec = {"spec_version": "1.0", "kind": "audit_spec", "name": "store",
            "dataset": {"kind": "npz", "path": "data.npz", "test_key": "test"}, "splits": {"forget_classes": [3]},
            "model": {"factory": "zoo/convnet-bn", "kwargs": {"in_channels": 3, "num_classes": 4, "width": 4}},
            "cells": ["df", "dr", "dt"], "replicates": 2, "refit": {"pool_size": 32, "batch_size": 16}}
    (folder / "spec.json").write_text(json.dumps(spec))
    return weights, folder / "spec.json"


def _count_shipped_evaluations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = evaluation.base_cells

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(stages, "base_cells", counting)
    return calls


def test_a_rerun_with_a_store_does_not_evaluate_the_shipped_state_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    weights, spec_path = _write_case(tmp_path)
    prepared = prepare_audit(weights, load_spec(spec_path))
    store = ShippedStore(tmp_path / "shipped")
    calls = _count_shipped_evaluations(monkeypatch)
    first = run_audit(prepared, shipped_store=store)
    assert len(calls) == 1 + 2  # the shipped state, then each of the two replicates
    second = run_audit(prepared, shipped_store=store)
    assert len(calls) == 1 + 2 + 2  # only the replicates: the shipped cells came from the store
    assert second.shipped_base_cells == first.shipped_base_cells
    assert second.annotation.cells == first.annotation.cells
    assert second.seconds_shipped_eval == 0.0


def test_other_weights_or_other_data_miss(tmp_path: Path) -> None:
    weights, spec_path = _write_case(tmp_path)
    spec = load_spec(spec_path)
    store = ShippedStore(tmp_path / "shipped")
    prepared = prepare_audit(weights, spec)
    store.put(store.key(prepared), {"df": 0.5, "dr": 0.5, "dt": 0.5})
    other = tmp_path / "other"
    other.mkdir()
    other_weights, _ = _write_case(other, seed=1)
    assert store.get(store.key(prepare_audit(other_weights, spec))) is None
    edited = prepare_audit(weights, spec)
    edited.data.retain.x[0, 0, 0, 0] += 1.0  # the same names, other bytes: the split digest changes
    assert split_digest(edited.data) != split_digest(prepared.data)
    assert store.get(store.key(edited)) is None


def test_a_foreign_or_damaged_entry_is_a_miss(tmp_path: Path) -> None:
    weights, spec_path = _write_case(tmp_path)
    store = ShippedStore(tmp_path / "shipped")
    key = store.key(prepare_audit(weights, load_spec(spec_path)))
    store.put(key, {"df": 0.25, "dr": 0.5, "dt": 1.0})
    assert store.get(key) == {"df": 0.25, "dr": 0.5, "dt": 1.0}
    path = next((tmp_path / "shipped").iterdir())
    path.write_text(json.dumps({**json.loads(path.read_text()), "base_cells": {"df": 2.0, "dr": 0.5, "dt": 1.0}}))
    assert store.get(key) is None
    path.write_text("{not json")
    assert store.get(key) is None


@pytest.mark.slow
def test_census_members_sharing_weights_evaluate_the_shipped_state_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    weights, spec_path = _write_case(tmp_path)
    members = tmp_path / "members"
    members.mkdir()
    for name in ("a", "b"):
        shutil.copy(weights, members / f"{name}.safetensors")
    calls = _count_shipped_evaluations(monkeypatch)
    outcome = run_census([members], load_spec(spec_path), tmp_path / "census")
    assert len(calls) == 1 + 2 * 2  # one shipped evaluation for both members, two replicates each
    first, second = outcome.results
    assert first.shipped_base_cells == second.shipped_base_cells
