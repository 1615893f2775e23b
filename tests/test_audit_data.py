"""The audit's data: datasets other than the built-in digits, and the record of which data was used."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from bnconvention.audit.measure.data import load_audit_data
from bnconvention.audit.run.runner import prepare_audit, run_audit
from bnconvention.audit.spec.audit_spec import load_spec, parse_spec
from bnconvention.data.digits import digits_arrays
from bnconvention.errors import AuditSpecError


@pytest.fixture()
def digits_npz(tmp_path):
    arrays = digits_arrays()
    path = tmp_path / "digits.npz"
    np.savez(path, images=arrays.x, labels=arrays.y, ids=arrays.ids, test=arrays.is_test)
    return path


def npz_spec(tmp_path, **changes):
    spec = {
        "spec_version": "1.0", "kind": "audit_spec",
        "dataset": {"kind": "npz", "path": "digits.npz", "x_key": "images", "y_key": "labels", "ids_key": "ids",
                    "test_key": "test"},
        "splits": {"forget_classes": [3]}, "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}},
        "replicates": 2, "refit": {"pool_size": 64}, "staleness": False, "recoverability": None, **changes,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return load_spec(tmp_path / "spec.json")


def test_an_npz_dataset_reproduces_the_zoo_published_accuracies(zoo, tmp_path, digits_npz):
    # the same images as the built-in digits, read from an .npz: the shipped cells are the zoo's own numbers
    spec = npz_spec(tmp_path)
    result = run_audit(prepare_audit(zoo.root / "bn-retrain.safetensors", spec))
    published = json.loads((zoo.root / "bn-retrain.json").read_text())["shipped_accuracy"]
    shipped = {c.metric: c.shipped for c in result.annotation.cells}
    assert shipped == {"df": published["forget"], "dr": published["retain"], "dt": published["test"]}
    dataset = result.annotation.convention.data.dataset
    assert (dataset.id, dataset.revision) == ("file:digits.npz", hashlib.sha256(digits_npz.read_bytes()).hexdigest())
    assert result.annotation.convention.transform.mode == "train"


def test_npz_split_sizes_follow_the_test_mask(tmp_path, digits_npz):
    data = load_audit_data(npz_spec(tmp_path))
    assert (len(data.forget.ids), len(data.retain.ids), len(data.test.ids)) == (135, 1199, 463)
    assert data.num_classes == 10


def test_npz_with_a_wrong_key_names_the_dataset_field(tmp_path, digits_npz):
    spec = npz_spec(tmp_path, dataset={"kind": "npz", "path": "digits.npz", "x_key": "pixels"})
    with pytest.raises(AuditSpecError, match="no array named 'pixels'") as caught:
        load_audit_data(spec)
    assert caught.value.field == "/dataset"


def test_relative_dataset_path_is_resolved_against_the_spec(tmp_path, digits_npz):
    spec = npz_spec(tmp_path)
    assert spec.dataset.path == str(tmp_path / "digits.npz")
    assert parse_spec(json.loads((tmp_path / "spec.json").read_text())).dataset.path == "digits.npz"
