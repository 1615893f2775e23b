"""PyTorch pickles and zip checkpoints given to any command are named, with how to convert them, never unpickled.

Regression: ``pytorch_model.bin`` given to ``stamp``, ``refit``, ``audit`` or ``declare`` was reported as
``header length 578712552184433488 exceeds ...``. The recognition lives once, in the header reader
(:func:`bnconvention.formats.safetensors_header.header_length`), so every command that reads a header says the same.
Each file here is a pickle whose unpickling would create a marker folder: the marker must never appear.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bnconvention.cli.main import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class _Trap:
    """Unpickling this creates ``marker``: proof that something unpickled the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., object], tuple[str]]:
        return os.mkdir, (str(self.marker),)


def _torch_zip(path: Path, marker: Path) -> None:
    torch.save({"w": torch.ones(2), "trap": _Trap(marker)}, path)


def _torch_legacy(path: Path, marker: Path) -> None:
    torch.save({"w": torch.ones(2), "trap": _Trap(marker)}, path, _use_new_zipfile_serialization=False)


def _plain_pickle(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps({"trap": _Trap(marker)}, protocol=4))


FORMATS = [
    pytest.param("pytorch_model.bin", _torch_zip, "is a PyTorch checkpoint (torch.save's zip archive", id="torch-zip"),
    pytest.param("model.pth", _torch_legacy, "is a PyTorch checkpoint in torch.save's legacy pickle format",
                 id="torch-legacy"),
    pytest.param("weights.pkl", _plain_pickle, "is a Python pickle (protocol 4)", id="pickle"),
]


def _argv(command: str, weights: Path, tmp_path: Path) -> list[str]:
    """The command line of ``command`` on ``weights``, with whatever else it needs to get to reading it."""
    if command == "stamp":
        return ["stamp", str(weights), "--record", str(FIXTURES / "stamp" / "record.json")]
    if command == "declare":
        return ["declare", "--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}', "--weights", str(weights),
                "--dataset-id", "sklearn/digits", "--subset", "all", "--transform-mode", "train", "--mode", "frozen",
                "--role", "train", "--rule", "exact"]
    if command == "refit":
        pool = tmp_path / "pool.npz"
        np.savez(pool, x=np.zeros((4, 1, 16, 16), dtype=np.uint8), y=np.zeros(4, dtype=np.int64))
        return ["refit", str(weights), "--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}', "--pool",
                str(pool), "--out", str(tmp_path / "out.safetensors"), "--report", str(tmp_path / "report.json")]
    if command == "audit":
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump({
            "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
            "criteria": ["df <= 0.05"], "published_source": "spec", "replicates": 2, "model": {
                "factory": "zoo/convnet-bn"}}, sort_keys=False), encoding="utf-8")
        return ["audit", str(weights), "--spec", str(spec), "--out", str(tmp_path / "audit"), "--no-progress"]
    return [command, str(weights)]  # validate, inspect


@pytest.mark.parametrize("command", ["stamp", "declare", "refit", "audit", "validate", "inspect"])
@pytest.mark.parametrize(("name", "make", "fragment"), FORMATS)
def test_every_command_names_the_format_and_never_unpickles(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            command: str, name: str, make, fragment: str) -> None:
    marker = tmp_path / "UNPICKLED"
    work = tmp_path / "release"
    work.mkdir()
    weights = work / name
    make(weights, marker)
    before = weights.read_bytes()
    code = main(_argv(command, weights, tmp_path))
    out, err = capsys.readouterr()
    said = err if command not in ("validate", "inspect") else out + err
    assert code == 2, (out, err)
    assert f"{weights}: {fragment}" in said, said
    assert "never unpickles" in said and "exceeds" not in said
    if command not in ("validate", "inspect"):
        assert err.startswith("bnconvention: unreadable input: ") and err.count("\n") == 1
    assert not marker.exists()
    assert weights.read_bytes() == before and os.listdir(work) == [name]


def test_the_validator_gives_the_format_its_own_code(tmp_path: Path) -> None:
    from bnconvention.validation import validate_paths

    weights = tmp_path / "model.safetensors"  # a checkpoint under a safetensors name
    _torch_zip(weights, tmp_path / "UNPICKLED")
    report = validate_paths([str(weights)])
    assert [(i.code, i.file) for i in report.issues] == [("safetensors.not_safetensors", str(weights))]
    assert report.exit_code == 2 and not (tmp_path / "UNPICKLED").exists()


def test_the_hub_census_names_the_format(tmp_path: Path) -> None:
    from bnconvention.errors import SafetensorsHeaderError
    from bnconvention.hub.client import make_client
    from bnconvention.hub.headers import read_remote_header
    from bnconvention.hubserver import LocalHub

    local = tmp_path / "model.safetensors"
    _torch_zip(local, tmp_path / "UNPICKLED")
    with LocalHub(tmp_path / "hub", tokens={}, durable=False) as hub:
        hub.store.commit("lab/pickled", files={"model.safetensors": local.read_bytes()})
        client = make_client(endpoint=hub.endpoint)
        with pytest.raises(SafetensorsHeaderError) as info:
            read_remote_header(client, "lab/pickled", "model.safetensors", revision="main")
    assert str(info.value).startswith("lab/pickled/model.safetensors: is a PyTorch checkpoint (torch.save's zip")
    assert info.value.reason == "not_safetensors"


def test_a_trap_really_fires_when_unpickled(tmp_path: Path) -> None:
    # the marker check above means something only if unpickling these files does create it
    marker = tmp_path / "UNPICKLED"
    path = tmp_path / "weights.pkl"
    _plain_pickle(path, marker)
    pickle.loads(path.read_bytes())  # noqa: S301 - our own file, to prove the trap works
    assert marker.is_dir()
    shutil.rmtree(marker)
