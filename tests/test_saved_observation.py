"""``recorder.save_observation`` and ``bnconvention declare --from-observation``: a complete record without
a model factory, equal to ``recorder.declaration(...)``; a malformed or truncated file, or weights that are not the
ones the recorder saw, are refused with one line and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from bnconvention.authoring.declaration import make_transform
from bnconvention.authoring.recorder import BNRecorder
from bnconvention.authoring.recorder_declaration import declaration_from_saved
from bnconvention.authoring.saved_observation import FORMAT, parse_saved_observation
from bnconvention.cli.main import main
from bnconvention.errors import JSONInputError, UsageError
from bnconvention.standard.models import to_dict
from bnconvention.validation import validate_paths

TRANSFORM = make_transform(mode="train", reference="train.py:train_transform", augmentations=["shift 1px"])
DATA = ["--dataset-id", "sklearn/digits", "--subset", "classes other than 3", "--transform-mode", "train",
        "--transform-reference", "train.py:train_transform", "--augmentation", "shift 1px"]
AUTHOR: dict[str, Any] = {"dataset_id": "sklearn/digits", "subset": "classes other than 3", "transform": TRANSFORM}
NONE_GIVEN: dict[str, Any] = dict.fromkeys(
    ("role", "declared_mode", "rule", "momentum", "batch_size", "num_batches", "precision", "dropout", "distributed",
     "record_count", "ids_sha256", "sampling_seed", "dataset_revision", "reporting_line"))


def _net(norm: type[torch.nn.Module] = torch.nn.BatchNorm1d) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = norm(6) if norm is torch.nn.BatchNorm1d else norm(2, 6)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), layer, torch.nn.ReLU(), torch.nn.Linear(6, 3))


def _run(model: torch.nn.Module, *, frozen: bool = False, split: str = "retain") -> BNRecorder:
    """Three SGD steps; ``frozen``: BatchNorm in eval mode while the weights move (an unlearning phase)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    with BNRecorder(model, split=split) as recorder:
        model.train()
        if frozen:
            model[1].eval()
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(8, 4, generator=g)).square().mean().backward()
            optimizer.step()
    return recorder


def _saved(tmp_path: Path, recorder: BNRecorder) -> tuple[Path, Path]:
    weights = tmp_path / "model.safetensors"
    save_file(recorder.model.state_dict(), str(weights))
    return recorder.save_observation(tmp_path / "observation.json"), weights


def declare(*args: str | Path) -> int:
    return main(["declare", *[str(a) for a in args]])


@pytest.mark.parametrize(("flags", "kwargs"), [
    pytest.param([], {}, id="as-observed"),
    pytest.param(["--mode", "frozen", "--role", "train", "--record-count", "40"],
                 {"declared_mode": "frozen", "role": "train", "record_count": 40}, id="contradicted"),
])
def test_declare_from_a_saved_observation_equals_the_recorders_declaration(
        tmp_path: Path, flags: list[str], kwargs: dict[str, Any]) -> None:
    recorder = _run(_net())
    observation, weights = _saved(tmp_path, recorder)
    out = tmp_path / "record.json"
    assert declare("--from-observation", observation, "--weights", weights, *DATA, *flags, "-o", out) == 0
    expected = to_dict(recorder.declaration(**AUTHOR, **kwargs))
    assert json.loads(out.read_text()) == expected
    assert bool(expected["observation"]["contradictions"]) == bool(flags)  # the claims were checked, as in Python
    assert main(["stamp", str(weights), "--record", str(out)]) == 0
    assert validate_paths([weights], require_declaration=True).exit_code == 0


@pytest.mark.parametrize(("norm", "frozen", "kwargs"), [
    pytest.param(torch.nn.BatchNorm1d, True, {"role": "train"}, id="frozen-phase-configured-rule"),
    pytest.param(torch.nn.GroupNorm, False, {}, id="channel-absent"),
])
def test_the_saved_file_holds_what_the_recorder_reads(tmp_path: Path, norm: type[torch.nn.Module], frozen: bool,
                                                      kwargs: dict[str, Any]) -> None:
    recorder = _run(_net(norm), frozen=frozen)
    path, _ = _saved(tmp_path, recorder)
    saved = parse_saved_observation(path.read_bytes(), source=str(path))
    assert saved.format == FORMAT and saved.split == "retain"
    given = {**NONE_GIVEN, **AUTHOR, **kwargs}
    assert declaration_from_saved(saved, **given, strict=False) == recorder.declaration(**AUTHOR, **kwargs)
    if norm is torch.nn.GroupNorm:
        assert saved.deployed_state.layers == []  # channel absent, said so
    else:
        assert saved.configured_rule == "ema" and saved.observation.mode == "frozen"
        assert [(layer.type, layer.eps, layer.affine) for layer in saved.deployed_state.layers] == [
            ("BatchNorm1d", 1e-5, True)]


def _plain_observation(path: Path, recorder: BNRecorder) -> bytes:
    return json.dumps(to_dict(recorder.observation())).encode()


@pytest.mark.parametrize(("damage", "message"), [
    pytest.param(lambda data, rec, path: data[: len(data) // 2], "line ", id="truncated"),
    pytest.param(lambda data, rec, path: _plain_observation(path, rec), "write it with recorder.save_observation",
                 id="plain-observation"),
    pytest.param(lambda data, rec, path: data.replace(b'"split": "retain"', b'"split": 3'), "at split",
                 id="wrong-type"),
    pytest.param(lambda data, rec, path: data.replace(b'"format": "' + FORMAT.encode(), b'"format": "other/9'),
                 "no \"format\"", id="other-format"),
])
def test_a_damaged_saved_observation_is_refused_and_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any, message: str) -> None:
    recorder = _run(_net())
    path, weights = _saved(tmp_path, recorder)
    path.write_bytes(damage(path.read_bytes(), recorder, path))
    out = tmp_path / "record.json"
    assert declare("--from-observation", path, "--weights", weights, *DATA, "-o", out) == 2
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: unreadable input: ") and message in err and err.count("\n") == 1
    assert not out.exists()
    with pytest.raises(JSONInputError):
        parse_saved_observation(path.read_bytes(), source="x")


def test_weights_other_than_the_observed_ones_are_refused_and_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorder = _run(_net())
    path, weights = _saved(tmp_path, recorder)
    state = recorder.model.state_dict()
    state["1.running_mean"] = state["1.running_mean"] + 0.5  # a BatchNorm refresh after the observation was saved
    save_file(state, str(weights))
    out = tmp_path / "record.json"
    out.write_text("the author's earlier record\n")
    assert declare("--from-observation", path, "--weights", weights, *DATA, "-o", out) == 1
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: digest mismatch: ") and "not the tensors the recorder saw" in err
    assert out.read_text() == "the author's earlier record\n"


def test_from_observation_and_a_model_factory_do_not_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorder = _run(_net())
    path, weights = _saved(tmp_path, recorder)
    assert declare("--from-observation", path, "--arch", "zoo/convnet-bn", "--weights", weights, *DATA) == 2
    assert "drop --arch" in capsys.readouterr().err
    assert declare("--weights", weights, *DATA) == 2  # neither a factory nor a saved observation
    assert "--from-observation" in capsys.readouterr().err


def test_a_recorder_that_never_ran_saves_nothing(tmp_path: Path) -> None:
    recorder = BNRecorder(_net())
    with pytest.raises(UsageError, match="has not run yet"):
        recorder.save_observation(tmp_path / "observation.json")
    assert list(tmp_path.iterdir()) == []
