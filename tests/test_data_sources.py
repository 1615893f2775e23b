"""Data sources beyond numpy arrays: Hugging Face ``datasets`` folders and parquet files, torchvision roots in their
on-disk formats (written here, tiny), and tabular ``.npz`` pools for BatchNorm1d models. The Hub source is in
``test_data_hub.py``."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from bnconvention.audit.measure.data import load_audit_data
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.data.pools import load_dataset, split_by_classes
from bnconvention.errors import AuditSpecError, UntrustedInputError, UsageError
from bnconvention.standard.naming import record_ids_sha256

datasets = pytest.importorskip("datasets")


def _pixels(n: int, *, seed: int, size: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _hf_split(n: int, *, seed: int, first_id: int) -> datasets.Dataset:
    from PIL import Image

    features = datasets.Features({"img": datasets.Image(), "fine": datasets.ClassLabel(names=["cat", "dog", "owl"]),
                                  "rid": datasets.Value("int64"), "caption": datasets.Value("string")})
    return datasets.Dataset.from_dict({
        "img": [Image.fromarray(p) for p in _pixels(n, seed=seed)], "fine": [i % 3 for i in range(n)],
        "rid": list(range(first_id, first_id + n)), "caption": [f"image {i}" for i in range(n)],
    }, features=features)


@pytest.fixture(scope="module")
def hf_dict() -> datasets.DatasetDict:
    return datasets.DatasetDict({"train": _hf_split(9, seed=1, first_id=100), "test": _hf_split(4, seed=2,
                                                                                                first_id=500)})


def _hf_spec(kind: str, path: Path, **changes) -> dict:
    return {"kind": kind, "path": path, "image_column": "img", "label_column": "fine", **changes}


# --- datasets: save_to_disk and parquet -------------------------------------------------------------------------------


def test_save_to_disk_dict_is_read_with_its_columns_and_splits(tmp_path, hf_dict) -> None:
    hf_dict.save_to_disk(str(tmp_path / "disk"))
    dataset = load_dataset(_hf_spec("hf_disk", tmp_path / "disk", id_column="rid"))
    assert dataset.classes == ("cat", "dog", "owl")
    assert dataset.ids.tolist() == list(range(100, 109)) + list(range(500, 504))
    assert dataset.is_test.tolist() == [False] * 9 + [True] * 4
    assert dataset.y.tolist() == [i % 3 for i in range(9)] + [i % 3 for i in range(4)]
    # pixels as the Image feature decodes them, channels first, scaled to [0, 1]
    expected = torch.from_numpy(_pixels(9, seed=1)[3].transpose(2, 0, 1).astype(np.float32) / 255)
    assert torch.equal(dataset.x[3], expected)
    assert dataset.dataset_id == "hf_disk:disk" and len(dataset.revision or "") == 64
    splits = split_by_classes(dataset, forget_classes=[1])
    assert splits.forget.ids.tolist() == [101, 104, 107]


def test_save_to_disk_single_dataset_is_the_train_split(tmp_path, hf_dict) -> None:
    hf_dict["train"].save_to_disk(str(tmp_path / "one"))
    dataset = load_dataset(_hf_spec("hf_disk", tmp_path / "one", test_split=None))
    assert dataset.ids.tolist() == list(range(9)) and not bool(dataset.is_test.any())
    with pytest.raises(UsageError, match="holds one Dataset.*set test_split: null"):
        load_dataset(_hf_spec("hf_disk", tmp_path / "one"))


def test_save_to_disk_with_a_link_is_refused_before_reading(tmp_path, hf_dict) -> None:
    hf_dict.save_to_disk(str(tmp_path / "disk"))
    arrow = next((tmp_path / "disk" / "train").glob("*.arrow"))
    outside = tmp_path / "elsewhere.arrow"
    arrow.rename(outside)
    arrow.symlink_to(outside)  # the bytes datasets would read live outside the folder the digest covers
    with pytest.raises(UntrustedInputError, match=r"train/.*\.arrow -> .*elsewhere\.arrow: links are not followed"):
        load_dataset(_hf_spec("hf_disk", tmp_path / "disk"))


def _write_parquet(hf_dict: datasets.DatasetDict, folder: Path) -> Path:
    (folder / "data").mkdir(parents=True)
    for split, part in hf_dict.items():
        part.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return folder


def test_parquet_folder_splits_follow_the_file_names(tmp_path, hf_dict) -> None:
    folder = _write_parquet(hf_dict, tmp_path / "pq")
    dataset = load_dataset(_hf_spec("parquet", folder))
    assert dataset.ids.tolist() == list(range(13))  # the row index: train rows, then test rows
    assert int(dataset.is_test.sum()) == 4 and dataset.classes == ("cat", "dog", "owl")
    again = load_dataset(_hf_spec("parquet", folder))
    assert again.revision == dataset.revision
    # the same images as the save_to_disk copy
    hf_dict.save_to_disk(str(tmp_path / "disk"))
    assert torch.equal(load_dataset(_hf_spec("hf_disk", tmp_path / "disk")).x, dataset.x)


def test_one_parquet_file_is_the_train_split(tmp_path, hf_dict) -> None:
    folder = _write_parquet(hf_dict, tmp_path / "pq")
    dataset = load_dataset(_hf_spec("parquet", folder / "data" / "test-00000-of-00001.parquet", test_split=None,
                                    channels=1, image_size=[3, 2]))
    assert dataset.x.shape == (4, 1, 3, 2)
    assert dataset.eval_transform.standard().description.resize == "2x3 bilinear"


@pytest.mark.parametrize("changes, message", [
    pytest.param({"image_column": "image"}, "split 'train' has no column 'image'; its columns are "
                 r"\['caption', 'fine', 'img', 'rid'\]; set image_column", id="image-column"),
    pytest.param({"label_column": "label"}, "no column 'label'.*set label_column", id="label-column"),
    pytest.param({"id_column": "uid"}, "no column 'uid'.*set id_column", id="id-column"),
    pytest.param({"test_split": "validation"}, r"has no split 'validation'; its splits are \['test', 'train'\]",
                 id="missing-split"),
    pytest.param({"train_split": "training"}, "has no split 'training'", id="missing-train-split"),
])
def test_missing_columns_and_splits_are_one_line(tmp_path, hf_dict, changes, message) -> None:
    folder = _write_parquet(hf_dict, tmp_path / "pq")
    with pytest.raises(UsageError, match=message) as caught:
        load_dataset(_hf_spec("parquet", folder, **changes))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("changes, message", [
    pytest.param({"label_column": "caption"}, "labels are a ClassLabel or integers", id="string-labels"),
    pytest.param({"image_column": "caption"}, "is Value, not an Image feature", id="not-an-image"),
    pytest.param({"id_column": "fine"}, "record ids must be unique", id="repeated-ids"),
])
def test_columns_of_the_wrong_kind(tmp_path, hf_dict, changes, message) -> None:
    hf_dict.save_to_disk(str(tmp_path / "disk"))
    with pytest.raises(UntrustedInputError, match=message):
        load_dataset(_hf_spec("hf_disk", tmp_path / "disk", **changes))


def test_not_a_save_to_disk_folder(tmp_path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    with pytest.raises(UntrustedInputError, match="not a datasets save_to_disk folder"):
        load_dataset(_hf_spec("hf_disk", tmp_path / "plain"))


def _audit_spec(tmp_path: Path, dataset: dict, **changes) -> dict:
    return {"spec_version": "1.0", "kind": "audit_spec", "dataset": dataset, "splits": {"forget_classes": [1]},
            "recoverability": None, **changes}


@pytest.mark.parametrize("changes, field", [
    pytest.param({"image_column": "image"}, "/dataset/image_column", id="column"),
    pytest.param({"test_split": "validation"}, "/dataset/test_split", id="split"),
])
def test_audit_spec_errors_name_the_dataset_field(tmp_path, hf_dict, changes, field) -> None:
    folder = _write_parquet(hf_dict, tmp_path / "pq")
    dataset = {"kind": "parquet", "path": str(folder), "image_column": "img", "label_column": "fine", **changes}
    with pytest.raises(AuditSpecError) as caught:
        load_audit_data(parse_spec(_audit_spec(tmp_path, dataset)))
    assert caught.value.field == field


def test_a_hub_dataset_from_another_hub_than_the_audit_is_refused() -> None:
    # datasets reads HF_ENDPOINT when imported (the default Hub here); an audit of another Hub must not read it
    spec = {"kind": "hub", "repo": "org/tiny", "revision": "main"}
    with pytest.raises(UsageError, match="set HF_ENDPOINT=http://127.0.0.1:9"):
        load_dataset(spec, endpoint="http://127.0.0.1:9")


# --- torchvision roots ------------------------------------------------------------------------------------------------


class _Boom:
    """Unpickling this prints and fails: proof that a refused root was never unpickled."""

    def __reduce__(self):
        return (print, ("unpickled!",))


def _write_cifar10(root: Path, *, n_train: int = 6, n_test: int = 3, payload: object = None) -> np.ndarray:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    data = np.random.default_rng(0).integers(0, 256, (n_train + n_test, 3072), dtype=np.uint8)
    names = [f"data_batch_{i}" for i in range(1, 6)]
    chunks = np.array_split(np.arange(n_train), 5)
    for name, rows in zip(names, chunks, strict=True):
        entry = payload or {"batch_label": name, "data": data[rows], "labels": [int(r) % 10 for r in rows],
                            "filenames": [f"{r}.png" for r in rows]}
        (folder / name).write_bytes(pickle.dumps(entry))
    test_rows = np.arange(n_train, n_train + n_test)
    (folder / "test_batch").write_bytes(pickle.dumps({"batch_label": "test", "data": data[test_rows],
                                                      "labels": [int(r) % 10 for r in test_rows]}))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
    return data


def test_cifar10_root_is_read_by_torchvision(tmp_path) -> None:
    data = _write_cifar10(tmp_path / "cifar")
    dataset = load_dataset({"kind": "torchvision", "format": "cifar10", "path": tmp_path / "cifar", "verify": False})
    assert dataset.classes == tuple(f"c{i}" for i in range(10))
    assert dataset.ids.tolist() == list(range(9)) and dataset.is_test.tolist() == [False] * 6 + [True] * 3
    assert dataset.y.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    # CIFAR rows are 1024 red, 1024 green, 1024 blue values: channels first, as stored
    assert torch.equal(dataset.x[7], torch.from_numpy(data[7].reshape(3, 32, 32).astype(np.float32) / 255))
    assert dataset.dataset_id == "torchvision/cifar10" and len(dataset.revision or "") == 64


def test_cifar_checksums_are_torchvisions_unless_verify_is_off(tmp_path) -> None:
    _write_cifar10(tmp_path / "cifar")
    with pytest.raises(UntrustedInputError, match="published dataset's md5: set verify: false") as caught:
        load_dataset({"kind": "torchvision", "format": "cifar10", "path": tmp_path / "cifar"})
    assert "\n" not in str(caught.value)


def test_cifar100_root(tmp_path) -> None:
    folder = tmp_path / "c100" / "cifar-100-python"
    folder.mkdir(parents=True)
    rows = np.random.default_rng(1).integers(0, 256, (5, 3072), dtype=np.uint8)
    for name, part, labels in (("train", rows[:3], [5, 99, 0]), ("test", rows[3:], [7, 7])):
        entry = {"data": part, "fine_labels": labels, "coarse_labels": [0] * len(labels)}
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": [f"f{i}" for i in range(100)]}))
    dataset = load_dataset({"kind": "torchvision", "format": "cifar100", "path": tmp_path / "c100",
                            "verify": False})
    assert dataset.y.tolist() == [5, 99, 0, 7, 7] and len(dataset.classes) == 100


def test_pickled_roots_from_a_hub_repo_are_never_unpickled(tmp_path, capsys) -> None:
    _write_cifar10(tmp_path / "cifar", payload=_Boom())
    spec = {"kind": "torchvision", "format": "cifar10", "path": tmp_path / "cifar", "verify": False}
    with pytest.raises(UntrustedInputError, match="stored as Python pickles, and this one came from a Hub repo"):
        load_dataset(spec, origin="hub")
    assert "unpickled!" not in capsys.readouterr().out


def test_svhn_root_reads_its_mat_files(tmp_path) -> None:
    from scipy.io import savemat

    root = tmp_path / "svhn"
    root.mkdir()
    images = np.random.default_rng(2).integers(0, 256, (32, 32, 3, 4), dtype=np.uint8)
    savemat(str(root / "train_32x32.mat"), {"X": images[..., :3], "y": np.array([[10], [1], [2]], np.uint8)})
    savemat(str(root / "test_32x32.mat"), {"X": images[..., 3:], "y": np.array([[3]], np.uint8)})
    dataset = load_dataset({"kind": "torchvision", "format": "svhn", "path": root, "verify": False})
    assert dataset.y.tolist() == [0, 1, 2, 3]  # SVHN's label 10 is the digit 0
    assert torch.equal(dataset.x[3], torch.from_numpy(images[..., 3].transpose(2, 0, 1).astype(np.float32) / 255))


def _write_image_root(root: Path) -> None:
    from PIL import Image

    for split, classes in (("train", ("ant", "bee", "cow")), ("val", ("bee",))):
        for label in classes:
            (root / split / label).mkdir(parents=True)
            for i in range(2):
                Image.fromarray(_pixels(1, seed=len(label) + i, size=5)[0]).save(root / split / label / f"{i}.png")


def test_image_folder_root_maps_test_classes_by_name(tmp_path) -> None:
    _write_image_root(tmp_path / "inet")
    dataset = load_dataset({"kind": "torchvision", "format": "image_folder", "path": tmp_path / "inet",
                            "test_split": "val"})
    assert dataset.classes == ("ant", "bee", "cow")
    # val holds only 'bee': torchvision numbers it 0 there; it is class 1 of the train split
    assert dataset.y.tolist() == [0, 0, 1, 1, 2, 2, 1, 1]
    assert dataset.is_test.tolist() == [False] * 6 + [True] * 2


@pytest.mark.parametrize("fmt, make, message", [
    pytest.param("cifar10", _write_image_root, "not a cifar10 root in torchvision's format \\(expected .*"
                 "cifar-10-batches-py/ with data_batch_1..data_batch_5", id="cifar10-on-images"),
    pytest.param("svhn", _write_image_root, "not a svhn root in torchvision's format", id="svhn-on-images"),
    pytest.param("image_folder", lambda root: _write_cifar10(root), "no split folder 'train'", id="folder-on-cifar"),
])
def test_a_root_in_the_wrong_format_is_one_line(tmp_path, fmt, make, message) -> None:
    make(tmp_path / "root")
    with pytest.raises(UntrustedInputError, match=message) as caught:
        load_dataset({"kind": "torchvision", "format": fmt, "path": tmp_path / "root", "verify": False})
    assert "\n" not in str(caught.value)


# --- tabular .npz pools for BatchNorm1d models ------------------------------------------------------------------------


def _tabular_npz(path: Path, *, n: int = 400, features: int = 64) -> Path:
    rng = np.random.default_rng(3)
    x = rng.normal(2.0, 3.0, (n, features)).astype(np.float32)
    np.savez(path, x=x, y=(np.arange(n) % 4).astype(np.int64), test=np.arange(n) % 5 == 0)
    return path


def test_tabular_npz_is_a_pool_of_features(tmp_path) -> None:
    # "images must be a non-empty N×H×W or N×C×H×W array, found shape (400, 64)"
    path = _tabular_npz(tmp_path / "tab.npz")
    dataset = load_dataset({"kind": "npz", "path": path, "test_key": "test"})
    assert dataset.x.shape == (400, 64) and dataset.is_tabular
    assert torch.equal(dataset.x, torch.from_numpy(np.load(path)["x"]))  # features are taken as they are
    ints = tmp_path / "ints.npz"
    np.savez(ints, x=np.array([[0, 255], [7, 1]], np.uint8), y=np.array([0, 1]))
    assert load_dataset(f"npz:{ints}").x.tolist() == [[0.0, 255.0], [7.0, 1.0]]  # never rescaled


def _tabular_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def test_a_batchnorm1d_model_is_audited_on_a_tabular_pool(tmp_path, monkeypatch) -> None:
    from safetensors.torch import save_file

    from bnconvention.architectures import factories
    from bnconvention.audit.run.runner import prepare_audit, run_audit

    monkeypatch.setattr(factories, "_user_allowed", {})
    name = factories.allow_user_factory("test_data_sources:_tabular_model")
    _tabular_npz(tmp_path / "tab.npz")
    weights = tmp_path / "mlp.safetensors"
    save_file(_tabular_model().state_dict(), str(weights))
    spec = parse_spec({"spec_version": "1.0", "kind": "audit_spec", "model": {"factory": name},
                       "dataset": {"kind": "npz", "path": "tab.npz", "test_key": "test"},
                       "splits": {"forget_classes": [2]}, "replicates": 2, "refit": {"pool_size": 64},
                       "recoverability": None, "published": {"df": 0.25}}, base_dir=tmp_path)
    result = run_audit(prepare_audit(weights, spec))
    assert result.annotation.convention.data.dataset.id == "file:tab.npz"
    assert result.annotation.convention.data.record_count == 64
    # the shipped statistics (zeros and ones) are far from the features' (mean 2, std 3): the refit moves them
    staleness = result.annotation.staleness
    assert staleness is not None and staleness.mean_distance > 0.1
    assert {c.metric for c in result.annotation.cells} >= {"df", "dr", "dt"}


def test_index_ids_hash_like_the_standard(tmp_path) -> None:
    path = _tabular_npz(tmp_path / "tab.npz")
    (tmp_path / "forget.txt").write_text("4\n8\n")
    spec = parse_spec(_audit_spec(tmp_path, {"kind": "npz", "path": str(path), "test_key": "test"},
                                  splits={"forget_index": str(tmp_path / "forget.txt"),
                                          "forget_ids_sha256": record_ids_sha256([8, 4])}))
    assert load_audit_data(spec).forget.ids.tolist() == [4, 8]
    wrong = json.loads(spec.model_dump_json())
    wrong["splits"]["forget_ids_sha256"] = record_ids_sha256([4])
    with pytest.raises(AuditSpecError, match="forget.txt: its 2 record ids hash to ids_sha256") as caught:
        load_audit_data(parse_spec(wrong))
    assert caught.value.field == "/splits/forget_ids_sha256" and "\n" not in str(caught.value)
