"""Images are decoded within a pixel budget: each image's size is read from its header before it
is decoded, one over the per-image limit (MAX_BATCH_PIXELS) is refused naming it, images are decoded one at a time,
and a dataset whose decoded records would be over MAX_DATASET_PIXELS is refused before the first is decoded. The
hostile cases (twelve 13000² and 11000² single-colour PNGs, a few hundred KB each) run through the audit CLI in a
child process under an 8 GiB address-space limit, as in tests/test_budgets.py, and their peak memory is measured."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

datasets = pytest.importorskip("datasets")
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402

from bnconvention.data import images as images_module  # noqa: E402
from bnconvention.data.images import ImageBudget, stack_images  # noqa: E402
from bnconvention.data.pools import load_dataset  # noqa: E402
from bnconvention.errors import UntrustedInputError, UsageError  # noqa: E402

LIMIT = 8 * 1024**3  # torch with its CUDA libraries maps ~4 GiB of address space on import
ROWS = 12  # train images; the test split has two more
# The audit CLI in a child that reports its peak resident memory (KiB) in a file: RUSAGE_CHILDREN of this wrapper.
MEASURED = ("import os, resource, subprocess, sys\n"
            "code = subprocess.call([sys.executable, '-m', 'bnconvention', *sys.argv[1:]])\n"
            "with open(os.environ['BNC_TEST_PEAK_FILE'], 'w') as f:\n"
            "    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
            "sys.exit(code)\n")


@pytest.fixture(scope="session")
def big_pngs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Single-colour PNGs: 13000² grey (169M pixels: over the per-image limit) and 11000² RGB (121M: within it)."""
    made = {}
    for name, mode, side, colour in (("13000-L", "L", 13000, 200), ("11000-RGB", "RGB", 11000, (200, 100, 50))):
        buffer = io.BytesIO()
        Image.new(mode, (side, side), colour).save(buffer, format="PNG")
        made[name] = buffer.getvalue()
    return made


def _hf_disk(root: Path, png: bytes) -> dict[str, object]:
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    split = datasets.Dataset.from_dict({"img": [{"bytes": png, "path": None}] * ROWS,
                                        "label": [i % 10 for i in range(ROWS)]}, features=features)
    datasets.DatasetDict({"train": split, "test": split.select(range(2))}).save_to_disk(str(root))
    return {"kind": "hf_disk", "path": str(root), "image_column": "img", "label_column": "label"}


def _folder(root: Path, png: bytes, kind: str) -> dict[str, object]:
    for split, count in (("train", ROWS), ("test", 2)):
        for i in range(count):
            (root / split / str(i % 10)).mkdir(parents=True, exist_ok=True)
            (root / split / str(i % 10) / f"{i}.png").write_bytes(png)
    return ({"kind": "image_folder", "path": str(root)} if kind == "image_folder"
            else {"kind": "torchvision", "format": "image_folder", "path": str(root)})


def _source(kind: str, root: Path, png: bytes) -> dict[str, object]:
    return _hf_disk(root, png) if kind == "hf_disk" else _folder(root, png, kind)


def _audit(zoo, tmp_path: Path, dataset: dict[str, object]) -> tuple[subprocess.CompletedProcess[str], float]:
    """The audit CLI on ``dataset`` in a child under the address-space limit: its result and peak memory in MiB."""
    spec = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
            "criteria": ["df <= 0.05"], "published_source": "spec", "replicates": 2, "refit": {"pool_size": 8},
            "recoverability": None, "model": {"factory": "zoo/convnet-bn"}, "dataset": dataset}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    peak_file = tmp_path / "peak-kib"
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, "audit", str(zoo.root / "bn-retrain.safetensors"), "--spec",
         str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "out"), "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "BNC_TEST_PEAK_FILE": str(peak_file)},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT)))
    return done, int(peak_file.read_text()) / 1024


def _where(kind: str, root: Path) -> str:
    return (f"dataset {root} split 'train' row 0: " if kind == "hf_disk"
            else f"{root / 'train' / '0' / '0.png'}: ")


SOURCES = [pytest.param(kind, id=kind) for kind in ("hf_disk", "image_folder", "torchvision")]


# Before: datasets decoded each batch of 256 rows in full and the readers decoded every image at full size before
# any resize; twelve 13000² grey PNGs with image_size [8, 8] were read (exit 0) at a peak of 2.9 GB (hf_disk,
# 11.7 s), 1.1 GB (image_folder, 9.8 s), 1.6 GB (torchvision, 23.7 s). Now refused from the first image's header
# (about 0.8 GB, the CLI with torch imported; 3-5 s).
@pytest.mark.parametrize("kind", SOURCES)
def test_an_image_over_the_limit_is_refused_from_its_header(zoo, tmp_path, big_pngs, kind):
    dataset = {**_source(kind, tmp_path / "data", big_pngs["13000-L"]), "channels": 1, "image_size": [8, 8]}
    done, peak = _audit(zoo, tmp_path, dataset)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (f"{_where(kind, tmp_path / 'data')}the image is 13000×13000 (169,000,000 pixels), over the "
            "134,217,728-pixel limit of one decoded image (read from its header; nothing decoded)") in done.stderr
    assert peak < 1536, f"peak {peak:.0f} MiB"


# Before: twelve 11000² RGB PNGs (within the limit) in a save_to_disk folder, image_size [8, 8]: datasets decoded
# the batch at once, MemoryError under the 8 GiB limit after 14 s at 4.1 GB ("rows 0 to 255: cannot be decoded").
# Now decoded one at a time and resized at once: exit 0 at 1.3 GB in 18 s.
def test_large_images_within_the_limit_are_decoded_one_at_a_time(zoo, tmp_path, big_pngs):
    dataset = {**_hf_disk(tmp_path / "data", big_pngs["11000-RGB"]), "channels": 1, "image_size": [8, 8]}
    done, peak = _audit(zoo, tmp_path, dataset)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "DecompressionBombWarning" not in done.stderr  # the budget decides, not Pillow's warning
    assert peak < 2048, f"peak {peak:.0f} MiB"


# Before: the same images with no image_size were decoded at full size to be stacked (14 × 11000² × 3 float32:
# 20 GB): MemoryError under the limit after 14 s at 4.1 GB. Now refused before the first image is decoded.
@pytest.mark.parametrize("kind", SOURCES)
def test_a_full_size_stack_over_the_budget_is_refused_before_decoding(zoo, tmp_path, big_pngs, kind):
    dataset = {**_source(kind, tmp_path / "data", big_pngs["11000-RGB"]), "channels": 3}
    done, peak = _audit(zoo, tmp_path, dataset)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    source = f"dataset {tmp_path / 'data'}" if kind == "hf_disk" else str(tmp_path / "data")
    assert (f"{source}: 14 images of 11000×11000 (the first image's size, with no image_size) are 1,694,000,000 "
            "pixels, over the 1,073,741,824-pixel budget of a dataset's decoded records; set image_size: "
            "[height, width] in the dataset spec to resize them when decoded") in done.stderr
    assert peak < 1536, f"peak {peak:.0f} MiB"


# --- the rule itself, in process -----------------------------------------------------------------------------------


def _png(size: tuple[int, int], colour: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_image_size_over_the_per_image_limit_is_refused_before_decoding(tmp_path):
    # before: every image was resized to 20000×20000 (400M pixels each) when decoded
    root = tmp_path / "imgs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.png").write_bytes(_png((4, 4)))
    with pytest.raises(UsageError, match=r"^image_size \[20000, 20000\] is 400,000,000 pixels an image, over the "
                                         r"134,217,728-pixel limit of one image"):
        load_dataset({"kind": "image_folder", "path": root, "image_size": [20000, 20000]})


def test_images_that_differ_in_size_are_refused_from_the_header_naming_the_file(tmp_path, monkeypatch):
    # before: every image was decoded, then the stack was refused naming only the folder
    root = tmp_path / "imgs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "1.png").write_bytes(_png((4, 4)))
    (root / "a" / "2.png").write_bytes(_png((8, 8)))
    decoded = []

    def image_array(image, **_):
        decoded.append(image.size)
        return np.zeros((1, 4, 4), np.uint8)

    monkeypatch.setattr(images_module, "image_array", image_array)
    with pytest.raises(UntrustedInputError, match=rf"^{root / 'a' / '2.png'}: the image is 8×8, the first image is "
                                                  r"4×4: images differ in size; set image_size"):
        load_dataset({"kind": "image_folder", "path": root, "channels": 1})
    assert decoded == [(4, 4)]


def test_the_dataset_budget_counts_every_split_with_image_size(tmp_path, monkeypatch):
    monkeypatch.setattr(images_module, "MAX_DATASET_PIXELS", 5 * 16 * 16)
    with pytest.raises(UntrustedInputError, match=r": 6 images of 16×16 \(image_size\) are 1,536 pixels, over the "
                                                  r"1,280-pixel budget .*; set a smaller image_size"):
        ImageBudget(6, channels=1, image_size=(16, 16), where="somewhere")
    ImageBudget(5, channels=1, image_size=(16, 16), where="somewhere")


def test_hf_images_are_decoded_as_datasets_decodes_them(tmp_path):
    """EXIF rotation and mode as the column's own Image feature: the same pixels as datasets' decoding."""
    buffer = io.BytesIO()
    pixels = np.arange(6 * 4 * 3, dtype=np.uint8).reshape(6, 4, 3) * 3
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise when shown
    Image.fromarray(pixels).save(buffer, format="PNG", exif=exif)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=2)})
    split = datasets.Dataset.from_dict({"img": [{"bytes": buffer.getvalue(), "path": None}] * 2, "label": [0, 1]},
                                       features=features)
    split.save_to_disk(str(tmp_path / "ds"))
    dataset = load_dataset({"kind": "hf_disk", "path": tmp_path / "ds", "image_column": "img",
                            "label_column": "label", "test_split": None})
    expected = np.asarray(split[0]["img"].convert("RGB"), dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
    assert expected.shape == (3, 4, 6)  # rotated by datasets' decode_example
    assert np.array_equal(dataset.x[0].numpy(), expected)


def test_stacking_is_unchanged_and_in_place():
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (3, 5, 7), dtype=np.uint8) for _ in range(4)]
    assert np.array_equal(stack_images(images, where="x"), np.stack(images).astype(np.float32) / np.float32(255.0))
