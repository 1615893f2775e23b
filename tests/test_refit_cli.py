"""``bnconvention refit``: weights in, refit weights and a valid report out, θ byte-identical, failures atomic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bnconvention.cli.main import main
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.digests import file_digests
from bnconvention.formats.safetensors_header import read_header
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY
from bnconvention.standard.schema import schema_validator
from bnconvention.zoo.models import convnet_bn


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    model = convnet_bn(width=4)
    weights = tmp_path / "model.safetensors"
    save_file(model.state_dict(), str(weights), metadata={"author": "someone", SAFETENSORS_METADATA_KEY: "{}"})
    pool = tmp_path / "pool.npz"
    rng = np.random.default_rng(0)
    np.savez(pool, x=rng.integers(0, 256, size=(20, 1, 16, 16), dtype=np.uint8), y=np.zeros(20, dtype=np.int64))
    return {"weights": weights, "pool": pool, "out": tmp_path / "out.safetensors", "report": tmp_path / "r.json"}


def argv(files: dict[str, Path], *extra: str) -> list[str]:
    return ["refit", str(files["weights"]), "--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}',
            "--pool", str(files["pool"]), "--out", str(files["out"]), "--report", str(files["report"]), *extra]


def test_refit_writes_weights_and_a_valid_report(files, capsys) -> None:
    source_bytes = files["weights"].read_bytes()
    assert main(argv(files, "--role", "retain", "--batch-size", "8")) == 0
    assert files["weights"].read_bytes() == source_bytes  # the input is untouched
    before, after = file_digests(files["weights"]), file_digests(files["out"])
    assert after.trainable_sha256 == before.trainable_sha256
    assert after.running_sha256 != before.running_sha256
    report = json.loads(files["report"].read_text())
    assert list(schema_validator().iter_errors(report)) == []
    assert report["digests"] == {"algorithm": "bnconvention-tensors/1", "trainable_sha256": after.trainable_sha256,
                                 "running_sha256": after.running_sha256}
    assert report["refit"]["running_sha256_before"] == before.running_sha256
    data = report["convention"]["data"]
    assert data["role"] == "retain" and data["record_count"] == 20
    assert data["dataset"]["id"] == "npz:pool.npz" and data["dataset"]["revision"].startswith("sha256:")
    assert report["convention"]["accumulation"]["batch_size"] == 8
    assert report["convention"]["accumulation"]["num_batches"] == 3
    metadata = read_header(files["out"]).metadata
    assert metadata["author"] == "someone"  # foreign metadata survives
    assert loads_strict(metadata[SAFETENSORS_METADATA_KEY].encode()) == report  # the stale record is replaced
    assert "refit/retain/eval-transform/exact" in capsys.readouterr().out


def test_digits_split_with_train_transform(files) -> None:
    args = ["refit", str(files["weights"]), "--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}',
            "--pool", "digits", "--split", "retain", "--forget-classes", "3", "--transform", "train", "--seed", "5",
            "--rule", "cumulative", "--out", str(files["out"]), "--report", str(files["report"])]
    assert main(args) == 0
    convention = json.loads(files["report"].read_text())["convention"]
    assert convention["name"] == "refit/retain/train-transform/cumulative"
    assert convention["data"]["subset"] == "train split without classes 3"
    assert convention["data"]["record_count"] == 1199 and convention["data"]["sampling_seed"] == 5
    assert convention["transform"]["mode"] == "train"


def test_out_may_name_the_input_explicitly(files) -> None:
    before = file_digests(files["weights"])
    files["out"] = files["weights"]
    assert main(argv(files)) == 0
    after = file_digests(files["weights"])
    assert after.trainable_sha256 == before.trainable_sha256 and after.running_sha256 != before.running_sha256


@pytest.mark.parametrize(("extra", "code", "message"), [
    pytest.param(("--arch-kwargs", '{"width": 8}'), 1, "do not fit the model built by factory 'zoo/convnet-bn'",
                 id="wrong-architecture"),
    pytest.param(("--pool-key", "pixels"), 2, "no array 'pixels' in the archive (arrays: ['x', 'y'])",
                 id="missing-pool-key"),
    pytest.param(("--rule", "cumulative", "--batch-size", "19"), 1, "pool batch 1 has 1 sample",
                 id="batch-of-one"),
    pytest.param(("--arch", "evil.module:build"), 2, "model factory 'evil.module:build' is not allowlisted",
                 id="factory-not-allowlisted"),
    pytest.param(("--arch-kwargs", "[1]"), 2, "--arch-kwargs must be a JSON object", id="kwargs-not-object"),
    pytest.param(("--transform", "train"), 2, "use them with --split", id="transform-without-split"),
    pytest.param(("--split", "retain", "--pool", "digits"), 2, "needs --forget-classes", id="split-without-classes"),
])
def test_failures_write_nothing(files, capsys, extra, code, message) -> None:
    assert main(argv(files, *extra)) == code
    assert message in " ".join(capsys.readouterr().err.split())
    assert not files["out"].exists() and not files["report"].exists()


def test_report_cannot_overwrite_a_weights_file(files, capsys) -> None:
    files["report"] = files["weights"]
    assert main(argv(files)) == 2
    assert "names a weights file" in capsys.readouterr().err


def test_unreadable_inputs(files, capsys, tmp_path) -> None:
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    files["weights"] = broken
    assert main(argv(files)) == 2
    assert "unreadable input" in capsys.readouterr().err
    files["weights"] = tmp_path / "missing.safetensors"
    assert main(argv(files)) == 2
    bad_pool = tmp_path / "bad.npz"
    bad_pool.write_bytes(b"not a zip")
    files["weights"], files["pool"] = tmp_path / "model.safetensors", bad_pool
    assert main(argv(files)) == 2
    assert "not a readable .npz archive" in capsys.readouterr().err
    assert not files["out"].exists()
