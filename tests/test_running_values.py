"""Running statistics that cannot be: NaN, infinite or negative ``running_var`` and non-finite
``running_mean`` in float32, float16 and bfloat16 files are findings of ``validate``, refused by ``declare`` and
``stamp`` and by the audit and census, each in one line naming the file, the layer and the buffer. Before the fix
every one of them passed with no finding."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from bnconvention.authoring.declaration import declare, make_convention, make_transform
from bnconvention.cli.main import main
from bnconvention.formats.running_values import impossible_statistics, scan_buffer
from bnconvention.formats.safetensors_header import read_header
from bnconvention.standard.models import to_dict
from bnconvention.validation import validate_paths
from bnconvention.zoo.models import convnet_bn

DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.float16, id="fp16"),
          pytest.param(torch.bfloat16, id="bf16")]
ARCH = ["--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}']
DATA = ["--dataset-id", "sklearn/digits", "--subset", "all", "--transform-mode", "train"]
NEGATIVE = "layer 'features.1' running_var has 2 negative values (first at channel 2: -0.5)"
NAN_MEAN = "layer 'features.4' running_mean has 1 NaN value (first at channel 0: nan)"
INF_VAR = "layer 'features.8' running_var has 1 infinite value (first at channel 7: inf)"


def _model(*, broken: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    model = convnet_bn(width=4)
    if broken:
        state = model.state_dict()
        state["features.1.running_var"][2:4] = torch.tensor([-0.5, -2.0])
        state["features.4.running_mean"][0] = float("nan")
        state["features.8.running_var"][7] = float("inf")
    return model


def _save(model: torch.nn.Module, path: Path, dtype: torch.dtype) -> Path:
    state = {name: (t.to(dtype) if t.is_floating_point() else t) for name, t in model.state_dict().items()}
    save_file(state, str(path), metadata={"format": "pt"})
    return path


def _one_line(capsys: pytest.CaptureFixture[str], prefix: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith(prefix), err
    return err


@pytest.mark.parametrize("dtype", DTYPES)
def test_validate_reports_each_impossible_buffer(dtype: torch.dtype, tmp_path: Path) -> None:
    weights = _save(_model(broken=True), tmp_path / "model.safetensors", dtype)
    report = validate_paths([weights])
    found = [(i.code, i.severity, i.message.split(":")[0] + ":" + i.message.split(":")[1].split(")")[0] + ")")
             for i in report.issues if i.code.startswith("statistics.")]
    assert found == [
        ("statistics.negative_variance", "error", NEGATIVE),
        ("statistics.nonfinite", "error", NAN_MEAN),
        ("statistics.nonfinite", "error", INF_VAR),
    ]
    assert report.exit_code == 1
    assert all(i.file.endswith("model.safetensors") for i in report.issues)


@pytest.mark.parametrize("dtype", DTYPES)
def test_possible_statistics_give_no_finding(dtype: torch.dtype, tmp_path: Path) -> None:
    weights = _save(_model(broken=False), tmp_path / "model.safetensors", dtype)
    assert impossible_statistics((weights, read_header(weights))) == []
    assert not [i for i in validate_paths([weights]).issues if i.code.startswith("statistics.")]


def test_half_precision_bit_patterns_are_decoded_exactly() -> None:
    fp16 = struct.pack("<4e", 0.0, -0.0, float("-inf"), -65504.0)
    assert scan_buffer("F16", [fp16[:3], fp16[3:]], variance=True) == {  # chunks split inside an item
        "infinite": (1, 2, float("-inf")), "negative": (1, 3, -65504.0)}
    bf16 = bytes.fromhex("c07f") + bytes.fromhex("0000") + bytes.fromhex("80bf")  # NaN, 0, -1.0 (little-endian)
    found = scan_buffer("BF16", [bf16], variance=True)
    assert found["negative"] == (1, 2, -1.0) and found["nan"][:2] == (1, 0)
    assert scan_buffer("I64", [b"\xff" * 8], variance=True) == {}  # integers cannot be NaN; not checked


@pytest.mark.parametrize("dtype", DTYPES)
def test_stamp_refuses_in_one_line_and_leaves_the_file(dtype: torch.dtype, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(broken=True)
    weights = _save(model, tmp_path / "model.safetensors", dtype)
    convention = make_convention(buffer_update_mode="frozen", role="train", dataset_id="d", subset="s",
                                 transform=make_transform(mode="train"), rule="ema", momentum=0.1)
    record = tmp_path / "record.json"
    record.write_text(json.dumps(to_dict(declare(model, convention))), encoding="utf-8")
    before = weights.read_bytes()
    for extra in ([], ["--no-check-digests"]):
        assert main(["stamp", str(weights), "--record", str(record), *extra]) == 1
        err = _one_line(capsys, "bnconvention: impossible statistics: ")
        assert f"{weights}: {NEGATIVE}; {NAN_MEAN}; {INF_VAR}; nothing was stamped" in err
    assert weights.read_bytes() == before


@pytest.mark.parametrize("dtype", DTYPES)
def test_declare_refuses_in_one_line_and_writes_nothing(dtype: torch.dtype, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    weights = _save(_model(broken=True), tmp_path / "model.safetensors", dtype)
    out = tmp_path / "record.json"
    code = main(["declare", *ARCH, "--weights", str(weights), "--mode", "frozen", "--role", "train", "--rule", "ema",
                 "--momentum", "0.1", *DATA, "-o", str(out)])
    assert code == 1
    err = _one_line(capsys, "bnconvention: impossible statistics: ")
    assert f"{weights}: {NEGATIVE}; " in err and "nothing was declared" in err
    assert not out.exists()


SPEC = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
        "criteria": ["df <= 0.05"], "published_source": "spec", "replicates": 2, "refit": {"pool_size": 64},
        "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 4}}}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("command", ["audit", "census"])
def test_audit_and_census_refuse_a_shipped_state_that_cannot_be_evaluated(
        command: str, dtype: torch.dtype, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = _save(_model(broken=True), tmp_path / "model.safetensors", dtype)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC), encoding="utf-8")
    out = tmp_path / "out"
    assert main([command, str(weights), "--spec", str(spec), "--out", str(out), "--no-progress"]) == 1
    err = _one_line(capsys, "bnconvention: impossible statistics: ")
    assert f"{weights}: {NEGATIVE}; " in err
    assert "the shipped state cannot be evaluated as it is, so it is not audited" in err
    assert not (out / "census.json").exists() and not list(out.rglob("*.json"))
