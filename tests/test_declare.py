"""``bnconvention declare``: records from flags or from a recorder observation, accepted by ``validate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bnconvention.authoring.recorder import BNRecorder
from bnconvention.authoring.stamp import stamp_file
from bnconvention.cli.main import main
from bnconvention.formats.digests import file_digests
from bnconvention.standard.models import parse_record, to_dict
from bnconvention.validation import validate_paths
from bnconvention.zoo.models import convnet_bn

ARCH = ["--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}']
DATA = ["--dataset-id", "sklearn/digits", "--subset", "classes other than 3", "--transform-mode", "train",
        "--transform-reference", "train.py:train_transform", "--augmentation", "shift 1px"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A width-4 ConvNet whose buffers were updated on a 'retain'-tagged pass: its weights and observation."""
    root = tmp_path_factory.mktemp("declare")
    torch.manual_seed(0)
    model = convnet_bn(width=4)
    with BNRecorder(model, split="retain") as rec, torch.no_grad():
        model.train()
        model(torch.rand(8, 1, 16, 16))
        model(torch.rand(6, 1, 16, 16))
    weights = root / "model.safetensors"
    save_file(model.state_dict(), str(weights), metadata={"format": "pt"})
    observation = root / "observation.json"
    observation.write_text(json.dumps(to_dict(rec.observation())), encoding="utf-8")
    whole = root / "recorded-record.json"
    record = rec.declaration(dataset_id="sklearn/digits", subset="s", transform=_transform())
    whole.write_text(json.dumps(to_dict(record)), encoding="utf-8")
    return {"weights": weights, "observation": observation, "whole": whole, "root": root}


def _transform():  # type: ignore[no-untyped-def]
    from bnconvention.authoring.declaration import make_transform

    return make_transform(mode="train")


def declare(*args: str | Path) -> int:
    return main(["declare", *[str(a) for a in args]])


def test_declare_from_an_observation_is_measured_and_validates(recorded: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "record.json"
    code = declare(*ARCH, "--weights", recorded["weights"], "--observation", recorded["observation"], *DATA,
                   "-o", out)
    assert code == 0
    assert capsys.readouterr().err == f"wrote {out}: train/retain/train-transform/ema-m0.1\n"
    record = parse_record(json.loads(out.read_text(encoding="utf-8")))
    assert record.kind == "declaration"
    assert record.convention.name == "train/retain/train-transform/ema-m0.1"
    assert (record.convention.accumulation.batch_size, record.convention.accumulation.num_batches) == (8, 2)
    assert record.convention.transform.description.augmentations == ["shift 1px"]
    digests = file_digests(recorded["weights"])
    assert (record.digests.trainable_sha256, record.digests.running_sha256) == (
        digests.trainable_sha256, digests.running_sha256)
    assert record.observation is not None and record.observation.contradictions == []
    assert main(["validate", str(out)]) == 0
    # the record stamps into the file it describes, and validate accepts the stamped file
    stamped = tmp_path / "model.safetensors"
    stamped.write_bytes(recorded["weights"].read_bytes())
    stamp_file(stamped, json.loads(out.read_text(encoding="utf-8")))
    report = validate_paths([stamped])
    assert (report.exit_code, report.issues) == (0, [])


def test_declared_mode_contradicting_the_observation_is_recorded(recorded: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    assert declare(*ARCH, "--weights", recorded["weights"], "--observation", recorded["observation"], *DATA,
                   "--mode", "frozen", "--role", "forget", "-o", out) == 0
    record = parse_record(json.loads(out.read_text(encoding="utf-8")))
    assert record.convention.buffer_update_mode == "train"  # observed wins
    assert record.convention.data.role == "forget"  # the author's split, contradicting the tag: flagged
    assert record.observation is not None
    assert [c.code for c in record.observation.contradictions] == ["declared-frozen-buffers-changed",
                                                                   "split-mismatch"]
    report = validate_paths([out])
    assert report.exit_code == 0
    assert [i.code for i in report.warnings] == ["record.observation_contradiction"] * 2


def test_strict_refuses_a_contradiction_and_leaves_the_output_alone(recorded: dict[str, Path], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "record.json"
    out.write_bytes(b"previous content\n")
    code = declare(*ARCH, "--weights", recorded["weights"], "--observation", recorded["observation"], *DATA,
                   "--mode", "frozen", "--strict", "-o", out)
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: invalid record: ")
    assert "[declared-frozen-buffers-changed]" in err
    assert out.read_bytes() == b"previous content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]  # no temporary file left behind


def test_a_whole_recorded_declaration_serves_as_observation(recorded: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    assert declare(*ARCH, "--weights", recorded["weights"], "--observation", recorded["whole"], *DATA, "-o", out) == 0
    assert parse_record(json.loads(out.read_text(encoding="utf-8"))).convention.name == (
        "train/retain/train-transform/ema-m0.1")


def test_declare_from_flags_alone(recorded: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    assert declare(*ARCH, "--weights", recorded["weights"], *DATA, "--mode", "frozen", "--role", "train",
                   "--rule", "ema", "--momentum", "0.1", "--batch-size", "64", "--num-batches", "300",
                   "--record-count", "1347", "--reporting-line", "deployed state as shipped", "-o", out) == 0
    record = parse_record(json.loads(out.read_text(encoding="utf-8")))
    assert record.convention.name == "frozen/train/train-transform/ema-m0.1"
    assert record.convention.data.record_count == 1347
    assert record.observation is None
    assert record.reporting_line == "deployed state as shipped"
    assert main(["validate", str(out)]) == 0


def test_record_goes_to_stdout_without_output(recorded: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert declare(*ARCH, "--weights", recorded["weights"], *DATA, "--mode", "untouched", "--role", "train",
                   "--rule", "cumulative") == 0
    record = parse_record(json.loads(capsys.readouterr().out))
    assert record.convention.name == "untouched/train/train-transform/cumulative"


@pytest.mark.parametrize(("extra", "code", "message"), [
    pytest.param(["--role", "train", "--rule", "ema"], 2, "without --observation, give --mode", id="no-mode"),
    pytest.param(["--mode", "frozen", "--role", "train", "--rule", "ema"], 1,
                 "the ema rule needs a momentum", id="ema-without-momentum"),
    pytest.param(["--mode", "frozen", "--role", "train", "--rule", "ema", "--momentum", "0"], 2,
                 "a flag value is not valid in a record: --momentum 0.0: Input should be greater than 0",
                 id="momentum-zero"),
    pytest.param(["--mode", "frozen", "--role", "train", "--rule", "exact", "--batch-size", "0"], 2,
                 "--batch-size 0: Input should be greater than or equal to 1", id="batch-size-zero"),
    pytest.param(["--mode", "frozen", "--role", "train", "--rule", "exact", "--ids-sha256", "abc"], 2,
                 "--ids-sha256 'abc': String should have at least 64 characters", id="bad-ids-digest"),
])
def test_bad_flags_are_refused(recorded: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               extra: list[str], code: int, message: str) -> None:
    out = tmp_path / "record.json"
    assert declare(*ARCH, "--weights", recorded["weights"], *DATA, *extra, "-o", out) == code
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_architecture_off_the_allowlist_is_refused_without_import(recorded: dict[str, Path],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = declare("--arch", "os:system", "--weights", recorded["weights"], *DATA, "--mode", "frozen", "--role",
                   "train", "--rule", "exact")
    assert code == 2
    assert "bnconvention: factory not allowed: model factory 'os:system' is not allowlisted" in capsys.readouterr().err


def test_weights_that_do_not_fit_the_architecture_are_refused(recorded: dict[str, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = declare("--arch", "zoo/convnet-bn", "--weights", recorded["weights"], *DATA, "--mode", "frozen",
                   "--role", "train", "--rule", "exact")  # default width 16, the file holds width 4
    assert code == 1
    assert "do not fit the model built by factory 'zoo/convnet-bn'" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "message"), [
    pytest.param(b'{"train_forwards": 1, "train_forwards": 2}', "duplicate object key 'train_forwards'",
                 id="duplicate-key"),
    pytest.param(b"\xff\xfe", "UTF-8", id="not-utf8"),
    pytest.param(b'{"train_forwards": -1}', "not a recorder observation: at train_forwards", id="not-an-observation"),
    pytest.param(b"[1, 2]", "not a recorder observation", id="a-list"),
])
def test_a_malformed_observation_is_unreadable_input(recorded: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str], content: bytes,
                                                     message: str) -> None:
    observation = tmp_path / "observation.json"
    observation.write_bytes(content)
    assert declare(*ARCH, "--weights", recorded["weights"], "--observation", observation, *DATA) == 2
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: unreadable input: ")
    assert message in err
    assert observation.read_bytes() == content


def test_an_observation_without_a_derived_mode_is_refused(recorded: dict[str, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    observation = tmp_path / "observation.json"
    observation.write_text(json.dumps({"train_forwards": 1, "eval_forwards": 0, "buffer_updates": 1,
                                       "buffers_changed": True}), encoding="utf-8")
    assert declare(*ARCH, "--weights", recorded["weights"], "--observation", observation, *DATA) == 1
    assert "not produced by bnconvention's recorder" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "code", "message"), [
    pytest.param(b"not a safetensors file at all", 2, "unreadable input", id="not-safetensors"),
    pytest.param(None, 2, "file not found", id="missing"),
])
def test_bad_weights_files_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None,
                                       code: int, message: str) -> None:
    weights = tmp_path / "model.safetensors"
    if content is not None:
        weights.write_bytes(content)
    assert declare(*ARCH, "--weights", weights, *DATA, "--mode", "frozen", "--role", "train", "--rule",
                   "exact") == code
    assert message in capsys.readouterr().err
    if content is not None:
        assert weights.read_bytes() == content


@pytest.mark.parametrize("kwargs", [pytest.param("{bad json", id="not-json"), pytest.param("[4]", id="a-list")])
def test_bad_arch_kwargs_are_a_usage_error(recorded: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                           kwargs: str) -> None:
    assert declare("--arch", "zoo/convnet-bn", "--arch-kwargs", kwargs, "--weights", recorded["weights"], *DATA,
                   "--mode", "frozen", "--role", "train", "--rule", "exact") == 2
    assert "--arch-kwargs" in capsys.readouterr().err


def test_cli_choices_are_the_standards_literals() -> None:
    import typing

    from bnconvention.cli import declare_cmd
    from bnconvention.standard import models

    assert {alias: typing.get_args(getattr(models, alias)) for alias in declare_cmd.CHOICES} == declare_cmd.CHOICES


def test_listing_the_commands_imports_no_authors_command_nor_pydantic_or_torch() -> None:
    # The CLI imports a command's module when that command runs (cli/commands.py): listing every command, as
    # `bnconvention --help` does, loads none of declare/inspect/publish nor what they need; `declare --help` does.
    import subprocess
    import sys

    code = ("import sys\n"
            "from bnconvention.cli.main import build_parser\n"
            "build_parser(load=sys.argv[1:])\n"
            "heavy = ('pydantic', 'torch', 'huggingface_hub')\n"
            "print(sorted(n.rsplit('.', 1)[-1] for n in sys.modules if n.startswith('bnconvention.cli.')\n"
            "             and n.endswith('_cmd')), any(name in sys.modules for name in heavy))")

    def loaded(*commands: str) -> str:
        return subprocess.run([sys.executable, "-c", code, *commands], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert loaded() == "[] False"
    assert loaded("declare") == "['declare_cmd'] True"  # the check sees a command module and what it imports
