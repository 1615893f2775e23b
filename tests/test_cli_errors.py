"""Every failure reaching the CLI is one line on stderr: model factories that cannot be imported or that
raise, for declare, refit, audit and census; and exceptions of unknown type. A factory that builds a half-precision
model is no failure: the model runs as a float32 copy."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import save_file

from bnconvention import errors
from bnconvention.architectures import build, factories
from bnconvention.cli import audit_cmd, validate_cmd
from bnconvention.cli import main as cli
from bnconvention.zoo.models import convnet_bn

# Each case is the source of a user's factory module and the start of the one line it must give.
FACTORY_CASES = {
    "missing-module": (None, 2, "bnconvention: cannot load factory: cannot import module '{module}' for factory "
                                "'{module}:make': no module named '{module}'; install it, or run from the folder "
                                "that holds it"),
    "raises-on-import": ("raise RuntimeError('boom at import')\n", 2,
                         "bnconvention: cannot load factory: module '{module}' of factory '{module}:make' raised "
                         "RuntimeError while being imported: boom at import; fix the module"),
    "missing-function": ("def other():\n    pass\n", 2,
                         "bnconvention: cannot load factory: module '{module}' has no attribute 'make' (factory "
                         "'{module}:make'); name a function it defines"),
    "raises-when-called": ("def make(**kwargs):\n    raise ValueError('no such width')\n", 1,
                           "bnconvention: model factory failed: model factory '{module}:make' raised ValueError: "
                           "no such width"),
}
HALF_FACTORY = ("from bnconvention.zoo.models import convnet_bn\n"
                "def make(**kwargs):\n    return convnet_bn(**kwargs).half()\n")


@pytest.fixture(autouse=True)
def _own_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factories, "_user_allowed", {})


def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str | None) -> str:
    """A fresh module name on sys.path holding ``source`` (None: the module does not exist)."""
    name = f"bnc_user_factory_{uuid.uuid4().hex[:12]}"
    if source is not None:
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A float32 and a float16 width-4 ConvNet, a population folder of each, and an .npz pool."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    paths: dict[str, Path] = {}
    for label, model in (("f32", convnet_bn(width=4)), ("f16", convnet_bn(width=4).half())):
        folder = root / label
        folder.mkdir()
        paths[label] = folder / "model.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(paths[label]))
    paths["pool"] = root / "pool.npz"
    np.savez(paths["pool"], x=np.zeros((8, 1, 16, 16), dtype=np.float32))
    return paths


def command(name: str, target: str, weights: Path, pool: Path, tmp_path: Path) -> list[str]:
    allow = ["--allow-factory", target] if ":" in target else []
    if name == "declare":
        return ["declare", "--arch", target, "--arch-kwargs", '{"width": 4}', *allow, "--weights", str(weights),
                "--mode", "frozen", "--role", "train", "--rule", "ema", "--momentum", "0.1", "--dataset-id", "x",
                "--subset", "all", "--transform-mode", "eval", "-o", str(tmp_path / "record.json")]
    if name == "refit":
        return ["refit", str(weights), "--arch", target, "--arch-kwargs", '{"width": 4}', *allow, "--pool", str(pool),
                "--out", str(tmp_path / "out.safetensors"), "--report", str(tmp_path / "report.json")]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
        "model": {"factory": target, "kwargs": {"width": 4}}, "criteria": ["df <= 0.05"], "replicates": 2,
        "refit": {"pool_size": 16}}), encoding="utf-8")
    if name == "audit":
        return ["audit", str(weights), "--spec", str(spec), *allow, "--out", str(tmp_path / "audit")]
    return ["census", str(weights.parent), "--spec", str(spec), *allow, "--out", str(tmp_path / "census")]


FAILING = [pytest.param(case, name, id=f"{case}-{name}") for case in FACTORY_CASES
           for name in ("declare", "refit", "audit", "census")]


@pytest.mark.parametrize(("case", "name"), FAILING)
def test_factory_failures_are_one_line(name: str, case: str, checkpoints: dict[str, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: these printed 24-60 lines of traceback
    source, code, start = FACTORY_CASES[case]
    module = user_module(tmp_path, monkeypatch, source)
    assert cli.main(command(name, f"{module}:make", checkpoints["f32"], checkpoints["pool"], tmp_path)) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(start.format(module=module)), err
    assert not (tmp_path / "audit").exists() and not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("name", ["refit", "audit", "census"])
def test_half_precision_factory_runs_as_a_float32_copy(name: str, checkpoints: dict[str, Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # "the model holds torch.float16 tensors ... refits and audits need float32 or float64" (refused)
    module = user_module(tmp_path, monkeypatch, HALF_FACTORY)
    assert cli.main(command(name, f"{module}:make", checkpoints["f16"], checkpoints["pool"], tmp_path)) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if name == "refit":
        assert "the model was built in float16; it runs as a float32 copy" in captured.err
        assert "the file stores F16 tensors, read exactly into float32" in captured.err


def test_declare_half_precision_model_is_declared(checkpoints: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    module = user_module(tmp_path, monkeypatch, HALF_FACTORY)
    argv = command("declare", f"{module}:make", checkpoints["f16"], checkpoints["pool"], tmp_path)
    assert cli.main(argv) == 0  # declare computes nothing, so half precision is fine there
    assert cli.main(["validate", str(tmp_path / "record.json")]) == 0


def test_factory_arguments_are_checked_before_the_call(checkpoints: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    argv = command("refit", "zoo/convnet-bn", checkpoints["f32"], checkpoints["pool"], tmp_path)
    argv[argv.index('{"width": 4}')] = '{"widht": 4}'
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        "bnconvention: bad factory arguments: model factory 'zoo/convnet-bn' does not accept the arguments "
        "{'widht': 4}: got an unexpected keyword argument 'widht'; it takes in_channels, num_classes, width\n")


def test_factory_errors_keep_their_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = user_module(tmp_path, monkeypatch, "raise KeyError('x')\n")
    factories.allow_user_factory(f"{module}:make")
    with pytest.raises(errors.FactoryImportError) as info:
        build.build_model(f"{module}:make")
    assert isinstance(info.value, ImportError) and isinstance(info.value.__cause__, KeyError)
    assert info.value.target == f"{module}:make"


def test_factory_must_return_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = user_module(tmp_path, monkeypatch, "def make():\n    return 'a model'\n")
    factories.allow_user_factory(f"{module}:make")
    with pytest.raises(errors.FactoryCallError, match=r"returned a str, not a torch.nn.Module"):
        build.build_model(f"{module}:make")


class Surprise(Exception):
    pass


def test_unknown_exception_is_one_line_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise Surprise("the unexpected\n  happened")

    monkeypatch.setattr(validate_cmd, "run", fail)
    assert cli.main(["validate", "x.json"]) == 1
    assert capsys.readouterr().err == ("bnconvention: internal error: Surprise: the unexpected happened (rerun with "
                                       "--traceback and report it)\n")
    assert cli.main(["--traceback", "validate", "x.json"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and 'raise Surprise("the unexpected' in err
    assert err.endswith("bnconvention: internal error: Surprise: the unexpected happened (rerun with --traceback "
                        "and report it)\n")


def test_missing_optional_dependency_names_the_commands_extra(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(audit_cmd, "run", fail)
    assert cli.main(["audit", "w.safetensors", "--spec", "s.yaml"]) == 1
    assert capsys.readouterr().err == ("bnconvention: missing dependency: bnconvention audit needs torch, which is "
                                       "not installed; install the extra: pip install 'bnconvention[audit]'\n")
