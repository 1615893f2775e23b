"""``bnconvention zoo build --quantized DIR`` and ``bnconvention zoo audit-scales`` end to end on one zoo variant
(the second deployed state): the quantized folder, the 1.1 annotation of its scales shipped vs refit, and bad
scales refused with one line and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bnconvention.cli.main import main
from bnconvention.formats.digests import file_digests
from bnconvention.validation.records import validate_record

pytestmark = pytest.mark.slow  # trains one zoo variant (about 10 s on a busy core)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli-scales")
    code = main(["zoo", "build", "--out", str(root / "zoo"), "--variant", "bn-base", "--quantized", str(root / "q8"),
                 "--calibration-size", "64", "--no-progress"])
    assert code == 0
    return root / "zoo", root / "q8" / "bn-base-q8"


def test_audit_scales_writes_a_valid_1_1_annotation_of_the_scales(built: tuple[Path, Path], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    zoo, folder = built
    out = tmp_path / "annotation.json"
    weights = (folder / "model.safetensors").read_bytes()
    code = main(["zoo", "audit-scales", str(folder), "--zoo", str(zoo), "--replicates", "2",
                 "--calibration-size", "64", "--out", str(out)])
    assert code == 0 and f"wrote {out}" in capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert validate_record(data) == [] and data["spec_version"] == "1.1"
    state = data["refit_state"]
    assert state["kind"] == "activation_scales" and state["observer"] == "minmax"
    assert state["calibration_seeds"] == [100, 101] and len(state["refit_scales_sha256"]) == 2
    declaration = json.loads((folder / "declaration.json").read_text(encoding="utf-8"))
    [scales] = [s for s in declaration["deployed_state"] if s["kind"] == "activation_scales"]
    assert state["shipped_scales_sha256"] == scales["scales_sha256"]
    assert data["subject"]["trainable_sha256"] == file_digests(folder / "model.safetensors").trainable_sha256
    assert [c["metric"] for c in data["cells"]] == ["df", "dr", "dt"]
    assert (folder / "model.safetensors").read_bytes() == weights  # θ and φ as shipped


def test_a_zero_scale_is_refused_in_one_line_and_nothing_is_written(built: tuple[Path, Path], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    zoo, folder = built
    broken = tmp_path / folder.name
    shutil.copytree(folder, broken)
    tensors = load_file(str(broken / "activation_scales.safetensors"))
    site = next(key for key in tensors if key.endswith(".scale"))
    tensors[site] = torch.zeros_like(tensors[site])
    save_file(tensors, str(broken / "activation_scales.safetensors"))
    code = main(["zoo", "audit-scales", str(broken), "--zoo", str(zoo), "--replicates", "1",
                 "--calibration-size", "64"])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and line.startswith("bnconvention: quantization refused: ")
    assert site.rpartition(".")[0] in line and "not a finite positive number" in line
    assert not (broken / "refit-scales.json").exists()


def test_a_folder_that_is_not_a_quantized_variant_is_bad_usage(built: tuple[Path, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    zoo, _ = built
    code = main(["zoo", "audit-scales", str(tmp_path), "--zoo", str(zoo)])
    assert code == 2 and "is not a quantized zoo variant" in capsys.readouterr().err
