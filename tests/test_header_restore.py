"""A card that declares a convention for weights whose header no longer carries it (re-saved by another
tool) is named by the validator with the command that restores it, and that command restores it."""

from __future__ import annotations

import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from bnconvention import validate_paths
from bnconvention.authoring.stamp import read_stamped_record
from bnconvention.cli.main import main


def test_a_resaved_header_is_named_and_the_named_command_restores_it(tmp_path: Path) -> None:
    release = tmp_path / "release"
    shutil.copytree(Path(__file__).resolve().parent.parent / "bnconvention" / "examples" / "files" / "releases"
                    / "convnet-bn", release)
    weights = release / "model.safetensors"
    assert read_stamped_record(weights) is not None
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt"})  # what a library's save writes
    report = validate_paths([release])
    (issue,) = [i for i in report.issues if i.code == "release.header_missing_record"]
    command = issue.message.rsplit("restore it: ", 1)[1]
    assert command.startswith("bnconvention stamp ") and command.endswith("README.md")
    assert main(["stamp", str(weights), "--from-card", str(release / "README.md")]) == 0
    after = validate_paths([release], require_declaration=True)
    assert after.exit_code == 0 and not [i for i in after.issues if i.code == "release.header_missing_record"]
    assert read_stamped_record(weights) is not None
