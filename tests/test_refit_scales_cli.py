"""``bnconvention refit-scales``: a quantized release's activation scales recalibrated on a pool at bit-identical
weights and BatchNorm buffers; the new scales file and a valid 1.1 declaration of them out; bad input refused in one
line with nothing written (the second deployed state)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bnconvention.authoring.activation_scales import activation_scales_state, declare_quantized
from bnconvention.authoring.declaration import declare, make_convention, make_transform
from bnconvention.cli.main import main
from bnconvention.formats.digests import file_digests
from bnconvention.refitting.observers import observer_spec, prepare_static
from bnconvention.refitting.scales import ScaleSet, load_scales, read_scales, save_scales, scales_digests
from bnconvention.standard.models import DatasetRef, DataSplit, to_dict
from bnconvention.validation.records import validate_record
from bnconvention.zoo.models import convnet_bn

SHAPE = (1, 16, 16)


def _convention():  # -> FittingConvention
    return make_convention(buffer_update_mode="train", role="train", dataset_id="npz:train.npz", subset="all",
                           transform=make_transform(mode="eval"), rule="ema", momentum=0.1)


def _release(root: Path, model: torch.nn.Module, *, shape: tuple[int, ...] = SHAPE) -> dict[str, Path]:
    """A quantized release of ``model``: float weights, scales calibrated on random inputs, their 1.1 declaration;
    and a retain pool (.npz, uint8) to recalibrate on."""
    root.mkdir(parents=True, exist_ok=True)
    weights = root / "model.safetensors"
    save_file(model.state_dict(), str(weights))
    prepared = prepare_static(model, observer_spec("minmax"))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        prepared(torch.rand((16, *shape), generator=generator) * 2)  # calibration unlike the pool: scales move
    calibration = DataSplit(role="train", dataset=DatasetRef(id="npz:train.npz"), subset="all", record_count=16)
    record = declare_quantized(prepared, _convention(), calibration=calibration)
    save_scales(root / "activation_scales.safetensors", read_scales(prepared))
    declaration = root / "declaration.json"
    declaration.write_text(json.dumps(to_dict(record), indent=2), encoding="utf-8")
    pool = root / "retain.npz"
    x = np.random.default_rng(0).integers(0, 256, size=(20, *shape), dtype=np.uint8)
    np.savez(pool, x=x)
    return {"weights": weights, "declaration": declaration, "scales": root / "activation_scales.safetensors",
            "pool": pool, "out": root / "refit" / "scales.safetensors", "report": root / "refit" / "report.json"}


@pytest.fixture()
def release(tmp_path: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    model = convnet_bn(width=4)
    model.train()
    with torch.no_grad():
        model(torch.rand((8, *SHAPE)))  # running statistics that are not the defaults
    return _release(tmp_path / "release", model.eval())


def _argv(files: dict[str, Path], *extra: str, arch: tuple[str, ...] = ("zoo/convnet-bn", '{"width": 4}')) -> list[str]:
    return ["refit-scales", str(files["weights"]), "--arch", arch[0], "--arch-kwargs", arch[1],
            "--declaration", str(files["declaration"]), "--pool", str(files["pool"]), "--role", "retain",
            "--batch-size", "8", "--out", str(files["out"]), "--report", str(files["report"]), "--no-progress",
            *extra]


def _snapshot(files: dict[str, Path]) -> dict[str, bytes]:
    return {name: files[name].read_bytes() for name in ("weights", "declaration", "scales")}


def _hand_calibrated(files: dict[str, Path], model: torch.nn.Module) -> dict[str, tuple[float, int]]:
    """The pool's scales calibrated directly with torch.ao's observers: what the refit must reproduce."""
    prepared = prepare_static(model, observer_spec("minmax"))
    x = torch.from_numpy(np.load(files["pool"])["x"]).float() / 255
    with torch.no_grad():
        for batch in x.split(8):
            prepared(batch)
    return read_scales(prepared).sites


def test_refit_scales_writes_the_pool_s_scales_and_a_valid_1_1_declaration(release, capsys) -> None:
    files = release
    before = _snapshot(files)
    assert main(_argv(files)) == 0
    assert _snapshot(files) == before  # weights, declaration and shipped scales untouched
    model = convnet_bn(width=4)
    model.load_state_dict(load_file(str(files["weights"])))
    refit = load_scales(files["out"])
    expected = _hand_calibrated(files, model.eval())
    assert refit.keys() == expected.keys() and len(refit) == 9
    for site, (scale, zero_point) in expected.items():
        assert math.isclose(refit[site][0], scale, rel_tol=1e-6) and refit[site][1] == zero_point
    assert refit != load_scales(files["scales"])  # another pool, other scales
    report = json.loads(files["report"].read_text(encoding="utf-8"))
    assert validate_record(report) == [] and report["spec_version"] == "1.1"
    assert main(["validate", str(files["report"])]) == 0
    declared = json.loads(before["declaration"])
    digests = file_digests(files["weights"])
    assert report["digests"] == declared["digests"]
    assert report["digests"]["trainable_sha256"] == digests.trainable_sha256
    assert report["digests"]["running_sha256"] == digests.running_sha256
    assert report["deployed_state"][0] == declared["deployed_state"][0]  # the BatchNorm state as declared
    state = report["deployed_state"][1]
    assert state["kind"] == "activation_scales" and state["filename"] == "refit/scales.safetensors"
    assert state["scales_sha256"] == file_digests(files["out"]).trainable_sha256
    assert state["calibration"]["role"] == "retain" and state["calibration"]["record_count"] == 20
    assert state["calibration"]["dataset"]["id"] == "npz:retain.npz"
    assert state["calibration"]["dataset"]["revision"].startswith("sha256:")
    assert "9 sites (minmax) recalibrated on 20 records" in capsys.readouterr().out


def _expect_refused(files: dict[str, Path], capsys, *, code: int, words: str, argv: list[str] | None = None) -> None:
    before = _snapshot(files)
    assert main(argv or _argv(files)) == code
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bnconvention: ") and words in line, line
    assert not files["out"].exists() and not files["report"].exists()
    assert _snapshot(files) == before


def test_a_declaration_without_activation_scales_is_refused(release, capsys) -> None:
    model = convnet_bn(width=4)
    model.load_state_dict(load_file(str(release["weights"])))
    record = declare(model, _convention())  # a 1.0 declaration: BatchNorm state only
    release["declaration"].write_text(json.dumps(to_dict(record)), encoding="utf-8")
    _expect_refused(release, capsys, code=1, words="has no activation_scales deployed state")


@pytest.mark.parametrize("bad", [0.0, float("nan")], ids=["zero", "nan"])
def test_a_zero_or_nan_scale_is_refused(release, capsys, bad: float) -> None:
    tensors = load_file(str(release["scales"]))
    site = next(key for key in tensors if key.endswith(".scale"))
    tensors[site] = torch.full_like(tensors[site], bad)
    save_file(tensors, str(release["scales"]))
    _expect_refused(release, capsys, code=1, words="is not a finite positive number")


def test_sites_missing_in_the_model_are_refused(release, capsys) -> None:
    record = json.loads(release["declaration"].read_text(encoding="utf-8"))
    scales = load_scales(release["scales"])
    scales["head.missing.activation_post_process"] = (0.5, 3)  # a site this architecture does not have
    renamed = ScaleSet(spec=observer_spec("minmax"), sites=scales)
    calibration = DataSplit.model_validate(record["deployed_state"][1]["calibration"])
    record["deployed_state"][1] = to_dict(activation_scales_state(renamed, calibration=calibration))
    release["declaration"].write_text(json.dumps(record), encoding="utf-8")
    save_scales(release["scales"], renamed)
    _expect_refused(release, capsys, code=1, words="'head.missing.activation_post_process'")


def test_scales_that_do_not_give_the_declared_digest_are_refused(release, capsys) -> None:
    record = json.loads(release["declaration"].read_text(encoding="utf-8"))
    record["deployed_state"][1]["scales_sha256"] = scales_digests(ScaleSet(
        spec=observer_spec("minmax"), sites={"other": (1.0, 0)}))[0]
    release["declaration"].write_text(json.dumps(record), encoding="utf-8")
    _expect_refused(release, capsys, code=1, words="do not give the declaration's scales_sha256")


def test_weights_the_declaration_does_not_describe_are_refused(release, capsys) -> None:
    torch.manual_seed(7)
    save_file(convnet_bn(width=4).state_dict(), str(release["weights"]))  # other weights, same architecture
    _expect_refused(release, capsys, code=1, words="declares digests.trainable_sha256")


def test_outputs_that_name_an_input_are_bad_usage(release, capsys) -> None:
    release["out"] = release["scales"]
    before = _snapshot(release)
    assert main(_argv(release)) == 2  # the default scales file, the declared filename beside WEIGHTS
    assert "name the shipped scales file" in capsys.readouterr().err
    argv = _argv(release, "--scales", str(release["scales"]))
    assert main(argv) == 2 and "names the input --scales" in capsys.readouterr().err
    release["out"] = release["weights"]
    assert main(_argv(release)) == 2 and "names the input WEIGHTS" in capsys.readouterr().err
    assert _snapshot(release) == before


@pytest.mark.slow  # builds a torchvision resnet18 (11 M parameters, random init) and runs it on 32x32 inputs
def test_refit_scales_on_an_allowlisted_torchvision_resnet18(tmp_path: Path) -> None:
    import torchvision

    torch.manual_seed(0)
    files = _release(tmp_path, torchvision.models.resnet18(num_classes=4).eval(), shape=(3, 32, 32))
    assert main(_argv(files, arch=("torchvision/resnet18", '{"num_classes": 4}'))) == 0
    report = json.loads(files["report"].read_text(encoding="utf-8"))
    assert validate_record(report) == []
    assert load_scales(files["out"]).keys() == load_scales(files["scales"]).keys()
    assert report["digests"]["trainable_sha256"] == file_digests(files["weights"]).trainable_sha256
