"""``--device auto|cpu|cuda|mps``: one list of names, ``auto`` falls back to the CPU, an unavailable
accelerator is a clear error before any work. These tests run on any machine: CUDA and MPS are hidden (monkeypatched)
where a test needs them absent, so a GPU machine runs the same checks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bnconvention.cli.commands import COMMANDS
from bnconvention.cli.main import main
from bnconvention.errors import DeviceUnavailableError
from bnconvention.refitting import refit
from bnconvention.refitting.devices import DEVICES, Device, available_accelerator, resolve_device
from bnconvention.refitting.moments import ChannelMoments
from bnconvention.zoo.models import convnet_bn


@pytest.fixture()
def no_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_device_names_are_one_literal() -> None:
    assert DEVICES == ("auto", "cpu", "cuda", "mps") == Device.__args__  # type: ignore[attr-defined]


@pytest.mark.usefixtures("no_accelerator")
def test_auto_is_the_cpu_without_an_accelerator() -> None:
    assert available_accelerator() is None
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_prefers_cuda_then_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


@pytest.mark.usefixtures("no_accelerator")
@pytest.mark.parametrize(("name", "message"), [
    pytest.param("cuda", "device 'cuda' is not available: torch ", id="cuda"),
    pytest.param("mps", "device 'mps' is not available", id="mps"),
    pytest.param("tpu", "unknown device 'tpu'; choose one of auto, cpu, cuda, mps", id="unknown"),
])
def test_unavailable_device_is_a_clear_error(name: str, message: str) -> None:
    with pytest.raises(DeviceUnavailableError, match=message):
        resolve_device(name)


def _device_choices(module_name: str) -> list[tuple[str, ...]]:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).register(parser.add_subparsers())
    found = []
    stack = [parser]
    while stack:
        current = stack.pop()
        for action in current._actions:
            if "--device" in action.option_strings:
                found.append(tuple(action.choices))  # type: ignore[arg-type]
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    return found


@pytest.mark.parametrize("module", ["refit_cmd", "audit_cmd", "census_cmd", "hub_cmd"])
def test_commands_take_the_devices_as_choices(module: str) -> None:
    name = f"bnconvention.cli.{module}"
    assert name in {command.module for command in COMMANDS.values()}
    assert _device_choices(name) and set(_device_choices(name)) == {DEVICES}


@pytest.fixture()
def refit_files(tmp_path: Path) -> list[str]:
    torch.manual_seed(0)
    weights = tmp_path / "model.safetensors"
    save_file(convnet_bn(width=4).state_dict(), str(weights))
    pool = tmp_path / "pool.npz"
    np.savez(pool, x=np.random.default_rng(0).integers(0, 256, size=(12, 1, 16, 16), dtype=np.uint8))
    return ["refit", str(weights), "--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}', "--pool", str(pool),
            "--out", str(tmp_path / "out.safetensors"), "--report", str(tmp_path / "r.json")]


@pytest.mark.usefixtures("no_accelerator")
def test_refit_cli_refuses_cuda_without_writing(refit_files: list[str], capsys, tmp_path: Path) -> None:
    assert main([*refit_files, "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: device unavailable: device 'cuda' is not available") and err.count("\n") == 1
    assert not (tmp_path / "out.safetensors").exists() and not (tmp_path / "r.json").exists()


@pytest.mark.usefixtures("no_accelerator")
def test_refit_cli_auto_runs_on_the_cpu_and_matches_the_default(refit_files: list[str], tmp_path: Path) -> None:
    assert main(refit_files) == 0
    default = json.loads((tmp_path / "r.json").read_text())
    assert main([*refit_files, "--device", "auto"]) == 0
    auto = json.loads((tmp_path / "r.json").read_text())
    assert auto["digests"] == default["digests"]


def test_moments_merge_on_the_device_the_sums_are_on() -> None:
    # Regression: the Chan merge built its counts on the CPU, so statistics accumulated on an accelerator
    # failed to combine ("Tensor on device cpu is not on the expected device"). The meta device stands in for an
    # accelerator here: it has no data, but it refuses mixed devices exactly as CUDA does.
    moments = ChannelMoments()
    for _ in range(2):
        moments.update(torch.empty(4, 3, 5, 5, device="meta"))
    mean, var = moments.mean_and_unbiased_var()
    assert (mean.device.type, var.device.type, tuple(var.shape), var.dtype) == ("meta", "meta", (3,), torch.float64)



def test_malloc_tuning_respects_the_users_choice() -> None:
    from bnconvention.refitting.allocator import tune_malloc

    assert tune_malloc({"BNC_MALLOC_TUNING": "0"}) is False
    assert tune_malloc({"MALLOC_TRIM_THRESHOLD_": "1000"}) is False
    assert tune_malloc({"LD_PRELOAD": "libjemalloc.so"}) is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a GPU machine)")
@pytest.mark.parametrize("rule", ["exact", "cumulative"])
def test_cuda_refit_matches_the_cpu(rule: str) -> None:
    # phi within 1e-5 relative between CPU and GPU (float32 convolutions differ by roundings; the exact
    # rule's sums are float64 on both), theta byte-identical on both
    from bnconvention.formats.digests import model_digests

    torch.manual_seed(0)
    cpu_model = convnet_bn(in_channels=3, num_classes=4, width=8)
    gpu_model = convnet_bn(in_channels=3, num_classes=4, width=8)
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model.to("cuda")
    pool = [torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    cpu_report = refit(cpu_model, pool, rule=rule)
    gpu_report = refit(gpu_model, pool, rule=rule)
    assert cpu_report.declaration.refit.trainable_sha256_after == gpu_report.declaration.refit.trainable_sha256_after
    assert model_digests(gpu_model).trainable_sha256 == model_digests(cpu_model).trainable_sha256
    for name, buffer in cpu_model.state_dict().items():
        if name.endswith(("running_mean", "running_var")):
            torch.testing.assert_close(gpu_model.state_dict()[name].cpu(), buffer, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("no_accelerator")
@pytest.mark.parametrize("command", [
    pytest.param(["audit", "missing.safetensors", "--spec", "missing.yaml"], id="audit"),
    pytest.param(["census", "missing-folder", "--spec", "missing.yaml", "--out", "census-out"], id="census"),
    pytest.param(["hub", "audit", "some-org", "--spec", "missing.yaml"], id="hub-audit"),
])
def test_compute_commands_refuse_an_unavailable_device_first(command: list[str], capsys, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # the device is checked before the spec, the checkpoint or the Hub is read (none of them exists here)
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--device", "cuda"]) == 2
    assert capsys.readouterr().err.startswith("bnconvention: device unavailable: device 'cuda' is not available")
    assert list(tmp_path.iterdir()) == []
