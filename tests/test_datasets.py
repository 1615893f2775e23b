"""Tests of bnconvention.data.pools: digits, .npz and image-folder sources, splits, transforms, malformed input."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from bnconvention.authoring.declaration import make_convention
from bnconvention.data.digits import DIGITS_TRAIN_TRANSFORM, digits_arrays, is_test_id, random_shift_batch
from bnconvention.data.pools import (
    DatasetSource,
    iter_batches,
    load_dataset,
    read_index_file,
    split_by_classes,
    split_by_index_files,
)
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.standard.models import DataSplit
from bnconvention.standard.naming import record_ids_sha256, transform_sha256

# Golden values: they change only if the digits preparation or the split definition changes (a breaking change).
DIGITS_X_SHA256 = "b4cfd0a317bd58ca282d034e1c8abc0a8729b30ed54f3a343bab78b90ac8fd67"
SPLITS_CLASS_3 = {
    "train": (1334, "c10c8c6f1440f97b575e9935f9060d1022f91060adb5a80090a3485392dc9ca4"),
    "retain": (1199, "17197ef7c934fe9525491e05d8cd70f31b8a40fa8c588c13b0521afe9621a460"),
    "forget": (135, "546a950b0550a0207d2964a68ce76cbb00f0d545e4492abc066547018f6b28bc"),
    "test": (463, "a1cf430e3efcdfec1944908565648804c47e23e32fce57b1a98f522f84195c7d"),
}


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.fixture()
def datasets_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "datasets"


# --- digits -----------------------------------------------------------------------------------------------------------


def test_digits_preparation_is_pinned() -> None:
    arrays = digits_arrays()
    assert hashlib.sha256(arrays.x.tobytes()).hexdigest() == DIGITS_X_SHA256
    assert arrays.x.dtype == np.float32 and arrays.x.shape == (1797, 1, 16, 16)
    assert float(arrays.x.min()) == 0.0 and float(arrays.x.max()) == 1.0


def test_digits_upsampling_equals_torch_bilinear() -> None:
    from sklearn.datasets import load_digits

    images = torch.tensor(load_digits().images / 16.0)[:, None]
    expected = torch.nn.functional.interpolate(images, size=16, mode="bilinear", align_corners=False).float()
    assert torch.equal(expected, torch.from_numpy(np.array(digits_arrays().x)))


def test_digits_test_split_is_the_hash_rule(digits) -> None:
    assert [int(i) for i in digits.ids[digits.is_test][:6]] == [0, 7, 10, 11, 15, 16]
    assert all(bool(t) == is_test_id(int(i)) for i, t in zip(digits.ids, digits.is_test, strict=True))


def test_split_by_classes_digits(digits) -> None:
    splits = split_by_classes(digits, forget_classes=[3])
    assert {role: (splits[role].record_count, splits[role].ids_sha256) for role in SPLITS_CLASS_3} == SPLITS_CLASS_3
    assert set(splits.forget.y.tolist()) == {3}
    assert 3 not in set(splits.retain.y.tolist())
    assert splits.forget.subset == "train records of classes 3"
    assert splits.test.subset == "test split"
    # ids are sorted and the rows follow them
    assert torch.equal(splits.forget.ids, torch.sort(splits.forget.ids).values)
    assert torch.equal(splits.forget.x[0], digits.x[3])


def test_split_ids_fingerprint_matches_record_ids_sha256(digits) -> None:
    splits = split_by_classes(digits, forget_classes=[3, 5])
    train_ids = [i for i in range(1797) if not is_test_id(i)]
    forget_ids = [i for i in train_ids if int(digits.y[i]) in (3, 5)]
    assert splits.forget.ids_sha256 == record_ids_sha256(forget_ids)
    assert splits.retain.record_count + splits.forget.record_count == len(train_ids)
    assert splits.retain.subset == "train split without classes 3, 5"


def test_split_data_split_and_convention(digits) -> None:
    retain = split_by_classes(digits, forget_classes=[3]).retain
    data = retain.data_split(sampling_seed=4)
    assert isinstance(data, DataSplit)
    assert (data.role, data.dataset.id, data.record_count, data.sampling_seed) == ("retain", "sklearn/digits", 1199, 4)
    convention = make_convention(buffer_update_mode="refit", transform=DIGITS_TRAIN_TRANSFORM.standard(),
                                 rule="exact", **retain.convention_fields())
    assert convention.name == "refit/retain/train-transform/exact"
    assert convention.data.ids_sha256 == SPLITS_CLASS_3["retain"][1]


@pytest.mark.parametrize("classes, message", [
    pytest.param([], "at least one forget class", id="none"),
    pytest.param([10], "have no train records", id="absent-class"),
])
def test_split_by_classes_rejects(digits, classes, message) -> None:
    with pytest.raises(UsageError, match=message):
        split_by_classes(digits, forget_classes=classes)


# --- transforms -------------------------------------------------------------------------------------------------------


def test_digits_transforms_describe_themselves(digits) -> None:
    train, evaluation = digits.train_transform.standard(), digits.eval_transform.standard()
    assert (train.mode, evaluation.mode) == ("train", "eval")
    assert train.reference == "bnconvention.data.digits:DIGITS_TRAIN_TRANSFORM"
    assert train.description.augmentations == ["random shift by -1, 0 or +1 pixels on each axis, zero fill"]
    assert evaluation.description.augmentations == []
    assert train.sha256 == transform_sha256(train.description) != evaluation.sha256
    assert digits.train_transform.description == train.description
    assert train.description.resize == "8x8 to 16x16 bilinear (align_corners=False), values scaled to [0, 1]"


def test_eval_transform_is_identity(digits) -> None:
    batch = digits.x[:8]
    assert digits.eval_transform(batch) is batch


def test_random_shift_is_seeded_and_shifts_by_at_most_one_pixel() -> None:
    x = torch.zeros(64, 1, 7, 7)
    x[:, 0, 3, 3] = 1.0  # one lit pixel in the middle of each image
    first = random_shift_batch(x, torch.Generator().manual_seed(5))
    again = random_shift_batch(x, torch.Generator().manual_seed(5))
    other = random_shift_batch(x, torch.Generator().manual_seed(6))
    assert torch.equal(first, again) and not torch.equal(first, other)
    positions = {tuple(int(v) for v in torch.nonzero(img[0])[0]) for img in first}
    assert positions == {(r, c) for r in (2, 3, 4) for c in (2, 3, 4)}  # all nine offsets occur in 64 draws
    assert torch.equal(first.sum(dim=(1, 2, 3)), torch.ones(64))


def test_random_shift_zero_fills_the_border() -> None:
    x = torch.ones(200, 1, 3, 3)
    shifted = random_shift_batch(x, torch.Generator().manual_seed(0))
    sums = sorted(set(shifted.sum(dim=(1, 2, 3)).tolist()))
    assert sums == [4.0, 6.0, 9.0]  # diagonal, axis and zero shifts of a 3×3 block


def test_iter_batches_with_train_transform_is_reproducible(digits) -> None:
    def pool(seed: int) -> list[torch.Tensor]:
        return list(iter_batches(digits.x[:50], batch_size=16, transform=digits.train_transform,
                                 generator=torch.Generator().manual_seed(seed), shuffle=True))

    first, again = pool(1), pool(1)
    assert [len(b) for b in first] == [16, 16, 16, 2]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    with pytest.raises(UsageError, match="batch_size must be positive"):
        next(iter_batches(digits.x, batch_size=0))


# --- specs ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, kind, path", [
    pytest.param("digits", "digits", None, id="digits"),
    pytest.param("sklearn/digits", "digits", None, id="dataset-id"),
    pytest.param("npz:data/a.npz", "npz", Path("data/a.npz"), id="npz"),
    pytest.param("folder:imgs", "image_folder", Path("imgs"), id="folder"),
])
def test_spec_strings(text, kind, path) -> None:
    spec = DatasetSource.parse(text)
    assert (spec.kind, spec.path) == (kind, path)


def test_spec_mapping() -> None:
    spec = DatasetSource.parse({"kind": "image_folder", "path": "x", "image_size": [8, 6], "channels": 1})
    assert spec == DatasetSource(kind="image_folder", path=Path("x"), image_size=(8, 6), channels=1)


@pytest.mark.parametrize("spec, message", [
    pytest.param("mnist", "not understood", id="unknown-string"),
    pytest.param("npz:", "not understood", id="empty-path"),
    pytest.param({"kind": "npz", "path": "a", "colour": 1}, "unknown keys", id="unknown-key"),
    pytest.param({"path": "a"}, "needs at least 'kind'", id="no-kind"),
    pytest.param({"kind": "csv", "path": "a"}, "kind 'csv' is unknown", id="bad-kind"),
    pytest.param({"kind": "npz"}, "needs a path", id="no-path"),
    pytest.param({"kind": "image_folder", "path": "a", "channels": 2}, "channels must be 1 or 3", id="channels"),
    pytest.param({"kind": "image_folder", "path": "a", "image_size": [8]}, "image_size", id="size"),
    pytest.param(42, "not int", id="wrong-type"),
])
def test_spec_rejects(spec, message) -> None:
    with pytest.raises(UsageError, match=message):
        DatasetSource.parse(spec)


def test_missing_path_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(f"npz:{tmp_path / 'absent.npz'}")


# --- npz --------------------------------------------------------------------------------------------------------------


def _save_npy(path: Path, array: np.ndarray) -> None:
    """A single ``.npy`` array under the given name (``np.save`` on a path would append ``.npy``)."""
    with open(path, "wb") as handle:
        np.save(handle, array)


def _save_npz(path: Path, **arrays: np.ndarray) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


def test_npz_uint8_with_ids_and_test_mask(tmp_path: Path) -> None:
    x = np.arange(4 * 2 * 3, dtype=np.uint8).reshape(4, 2, 3) * 10
    path = _save_npz(tmp_path / "d.npz", images=x, labels=np.array([0, 2, 1, 2]), rid=np.array([40, 10, 30, 20]),
                     holdout=np.array([0, 0, 1, 0]))
    dataset = load_dataset({"kind": "npz", "path": str(path), "x_key": "images", "y_key": "labels",
                            "ids_key": "rid", "test_key": "holdout", "dataset_id": "me/toy"})
    assert dataset.x.shape == (4, 1, 2, 3) and dataset.x.dtype == torch.float32
    assert torch.equal(dataset.x[1, 0], torch.from_numpy(x[1].astype(np.float32) / 255))
    assert dataset.classes == ("0", "1", "2")
    assert dataset.ref.id == "me/toy"
    assert dataset.ref.revision == hashlib.sha256(path.read_bytes()).hexdigest()
    splits = split_by_classes(dataset, forget_classes=[2])
    assert splits.forget.ids.tolist() == [10, 20]  # sorted by id
    assert splits.retain.ids.tolist() == [40]
    assert splits.test.ids.tolist() == [30]
    assert dataset.train_transform.standard().description.augmentations == []


def test_npz_float_defaults(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(3, 3, 2, 2))
    path = _save_npz(tmp_path / "f.npz", x=x, y=np.array([1, 0, 1], dtype=np.uint8))
    dataset = load_dataset(f"npz:{path}")
    assert torch.equal(dataset.x, torch.from_numpy(x.astype(np.float32)))
    assert dataset.ids.tolist() == [0, 1, 2] and not bool(dataset.is_test.any())
    assert dataset.dataset_id == "file:f.npz"


class _Boom:
    """Unpickling this would run code: the loader must refuse before that."""

    def __reduce__(self):  # pragma: no cover - only called when pickling in the test setup
        return (print, ("unpickled!",))


@pytest.mark.parametrize("make, message", [
    pytest.param(lambda p: p.write_bytes(b"PK\x03\x04 truncated zip"), "not a readable .npz", id="bad-zip"),
    pytest.param(lambda p: p.write_bytes(b""), "not a readable .npz", id="empty-file"),
    pytest.param(lambda p: p.write_bytes(pickle.dumps(_Boom())), "not a readable .npz", id="pickle-file"),
    pytest.param(lambda p: _save_npy(p, np.zeros(3)), "single .npy array", id="npy-not-npz"),
    pytest.param(lambda p: _save_npz(p, x=np.array([_Boom()], dtype=object), y=np.zeros(1, np.int64)),
                 "cannot read its arrays", id="object-array"),
    pytest.param(lambda p: _save_npz(p, images=np.zeros((2, 2, 2))), "no array named 'x'", id="missing-key"),
    # an N×F array is a tabular pool now; a 1-d array is still no pool
    pytest.param(lambda p: _save_npz(p, x=np.zeros(2), y=np.zeros(2, np.int64)), "N×F", id="x-1d"),
    pytest.param(lambda p: _save_npz(p, x=np.zeros((2, 0)), y=np.zeros(2, np.int64)), "non-empty", id="x-no-features"),
    pytest.param(lambda p: _save_npz(p, x=np.zeros((0, 2, 2)), y=np.zeros(0, np.int64)), "non-empty", id="x-empty"),
    pytest.param(lambda p: _save_npz(p, x=np.array([[[np.nan]]]), y=np.zeros(1, np.int64)), "NaN", id="x-nan"),
    pytest.param(lambda p: _save_npz(p, x=np.zeros((1, 1, 1), np.int32), y=np.zeros(1, np.int64)), "uint8 or",
                 id="x-int32"),
    pytest.param(lambda p: _save_npz(p, x=np.zeros((2, 1, 1)), y=np.zeros(3, np.int64)), "labels must be 2",
                 id="y-length"),
    pytest.param(lambda p: _save_npz(p, x=np.zeros((1, 1, 1)), y=np.array([0.5])), "labels must be 1", id="y-float"),
    pytest.param(lambda p: _save_npz(p, x=np.zeros((1, 1, 1)), y=np.array([-1])), "non-negative", id="y-negative"),
])
def test_npz_malformed(tmp_path: Path, make, message, capsys) -> None:
    path = tmp_path / "bad.npz"
    make(path)
    with pytest.raises(UntrustedInputError, match=message) as info:
        load_dataset(f"npz:{path}")
    assert info.value.source is not None and str(path) in info.value.source
    assert "unpickled!" not in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    pytest.param({"ids": np.array([1, 1])}, "unique; 1 are repeated", id="duplicate-ids"),
    pytest.param({"ids": np.array([1.0, 2.0])}, "record ids must be 2 integers", id="float-ids"),
    pytest.param({"test": np.array([0, 2])}, "test mask", id="mask-values"),
    pytest.param({"test": np.array([True])}, "test mask must be 2", id="mask-length"),
])
def test_npz_bad_ids_and_mask(tmp_path: Path, extra, message) -> None:
    path = _save_npz(tmp_path / "d.npz", x=np.zeros((2, 1, 1)), y=np.array([0, 1]), **extra)
    spec = {"kind": "npz", "path": path, "ids_key": "ids" if "ids" in extra else None,
            "test_key": "test" if "test" in extra else None}
    with pytest.raises(UntrustedInputError, match=message):
        load_dataset(spec)


# --- image folders ----------------------------------------------------------------------------------------------------


def test_image_folder_with_train_and_test(datasets_dir: Path) -> None:
    dataset = load_dataset({"kind": "image_folder", "path": datasets_dir / "images"})
    assert dataset.classes == ("circle", "square")
    # ids number train/circle, train/square, test/circle, test/square in file-name order; hidden and .txt ignored
    assert dataset.y.tolist() == [0, 0, 1, 1, 0, 1]
    assert dataset.is_test.tolist() == [False, False, False, False, True, True]
    assert dataset.x.shape == (6, 3, 4, 4)
    assert dataset.x[0, :, 0, 0].tolist() == [1.0, 0.0, 0.0]  # the red corner pixel, channels first
    assert dataset.x[0, 0, 1, 1] == pytest.approx(10 / 255)
    assert dataset.x[1, 0, 1, 1] == pytest.approx(20 / 255)
    assert dataset.dataset_id == "folder:images"
    assert dataset.revision is not None and len(dataset.revision) == 64


def test_image_folder_grey_and_resized(datasets_dir: Path) -> None:
    dataset = load_dataset({"kind": "image_folder", "path": datasets_dir / "images", "channels": 1,
                            "image_size": [2, 3]})
    assert dataset.x.shape == (6, 1, 2, 3)
    assert dataset.eval_transform.standard().description.resize == "3x2 bilinear"
    splits = split_by_classes(dataset, forget_classes=[1])
    assert (splits.forget.record_count, splits.retain.record_count, splits.test.record_count) == (2, 2, 2)


def test_image_folder_flat_layout(datasets_dir: Path) -> None:
    dataset = load_dataset(f"folder:{datasets_dir / 'images' / 'test'}")
    assert dataset.classes == ("circle", "square") and not bool(dataset.is_test.any())


@pytest.mark.parametrize("folder, message", [
    pytest.param("broken", "bad.png: not a readable image", id="corrupt-png"),
    pytest.param("mixed_sizes", "images differ in size", id="mixed-sizes"),
    pytest.param("index", "no class folders", id="no-classes"),
])
def test_image_folder_malformed(datasets_dir: Path, folder, message) -> None:
    with pytest.raises(UntrustedInputError, match=message):
        load_dataset(f"folder:{datasets_dir / folder}")


def test_image_folder_without_images(tmp_path: Path) -> None:
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "readme.txt").write_text("x")
    with pytest.raises(UntrustedInputError, match="no PNG or JPEG images"):
        load_dataset(f"folder:{tmp_path}")


def test_image_folder_path_is_a_file(datasets_dir: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        load_dataset(f"folder:{datasets_dir / 'index' / 'forget.txt'}")


# --- index files ------------------------------------------------------------------------------------------------------


def test_read_index_file(datasets_dir: Path) -> None:
    assert read_index_file(datasets_dir / "index" / "forget.txt") == [1, 3, 5, 13]


@pytest.mark.parametrize("name, message", [
    pytest.param("duplicate.txt", r"duplicate.txt:3: record id 1 is listed twice", id="duplicate"),
    pytest.param("not_integer.txt", r"not_integer.txt:2: expected one integer record id, found '2.5'", id="float"),
    pytest.param("empty.txt", "no record ids found", id="empty"),
    pytest.param("latin1.txt", "not UTF-8 text at byte 7", id="latin1"),
])
def test_read_index_file_malformed(datasets_dir: Path, name, message) -> None:
    with pytest.raises(UntrustedInputError, match=message):
        read_index_file(datasets_dir / "index" / name)


def test_split_by_index_files(digits, datasets_dir: Path) -> None:
    index = datasets_dir / "index"
    splits = split_by_index_files(digits, forget=index / "forget.txt", retain=index / "retain.txt")
    assert splits.forget.ids.tolist() == [1, 3, 5, 13]
    assert splits.retain.ids.tolist() == [2, 4, 6, 8]
    assert splits.train.ids.tolist() == [1, 2, 3, 4, 5, 6, 8, 13]
    assert splits.test.record_count == 463
    assert splits.forget.subset == "index file forget.txt"
    assert splits.forget.ids_sha256 == record_ids_sha256([13, 5, 3, 1])


def test_split_by_index_files_defaults(digits, datasets_dir: Path) -> None:
    index = datasets_dir / "index"
    splits = split_by_index_files(digits, forget=index / "forget.txt", test=index / "test.txt")
    assert splits.test.ids.tolist() == [0, 7]
    # retain = train records (the dataset's own split) not in forget nor in the test file
    assert splits.retain.record_count == 1334 - 4
    assert splits.retain.subset == "train records not in index file forget.txt"


@pytest.mark.parametrize("kwargs, error, message", [
    pytest.param({"forget": "forget.txt", "retain": "overlap.txt"}, UsageError, "share record ids \\[3\\]",
                 id="forget-retain-overlap"),
    pytest.param({"forget": "test.txt"}, UsageError, "forget and test splits share record ids \\[0, 7\\]",
                 id="forget-in-test"),
    pytest.param({"forget": "unknown_id.txt"}, UntrustedInputError, "record ids \\[99999\\] are not in",
                 id="unknown-id"),
])
def test_split_by_index_files_rejects(digits, datasets_dir: Path, kwargs, error, message) -> None:
    paths = {key: datasets_dir / "index" / value for key, value in kwargs.items()}
    with pytest.raises(error, match=message):
        split_by_index_files(digits, **paths)
