"""Human-readable outputs count and sign through bnconvention.formats.text (`1 BatchNorm layers`, `-0.00pp`),
and `validate` names a missing path instead of counting it as a file checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bnconvention.authoring.card_stamp import render_refit_section
from bnconvention.cli.main import main
from bnconvention.report_html.sections import pp
from bnconvention.validation import render, validate_paths

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bnconvention"
RAW_SIGNED = re.compile(r":\+[0-9]*\.[0-9]+f")  # f"{x:+.2f}" prints -0.00 for a shift of -0.001
HEDGED_COUNT = re.compile(r"\{[^{}]+\}[\w -]*\w\(s\)")  # f"{n} error(s)"


def sources(*, outside_hub: bool) -> list[Path]:
    found = [p for p in PACKAGE.rglob("*.py") if p.name != "text.py"]
    return [p for p in found if not (outside_hub and "hub" in p.relative_to(PACKAGE).parts[:1])]


def test_no_signed_shift_is_formatted_by_hand() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources(outside_hub=False)
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if RAW_SIGNED.search(line)]
    assert offenders == []


def test_no_count_is_hedged_with_s_in_parentheses() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources(outside_hub=True)
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if HEDGED_COUNT.search(line)]
    assert offenders == []


@pytest.mark.parametrize(("shift", "shown"), [(-0.001, "+0.00"), (-0.004, "+0.00"), (-0.006, "-0.01"),
                                              (2.466, "+2.47")])
def test_shifts_that_round_to_zero_are_plus_zero(shift: float, shown: str) -> None:
    assert pp(shift) == shown
    section = render_refit_section([{"annotation": "a.json", "subject": "m.safetensors", "convention": "c",
                                     "cells": [{"metric": "df", "shipped": 0.5, "refit": 0.5, "shift_pp": shift,
                                                "decision": "equivalent"}]}])
    assert f"| {shown}pp |" in section


@pytest.fixture()
def one_layer(tmp_path: Path) -> Path:
    path = tmp_path / "one" / "model.safetensors"
    path.parent.mkdir()
    bn = torch.nn.BatchNorm2d(3)
    save_file({f"bn.{k}": v for k, v in bn.state_dict().items()} | {"conv.weight": torch.zeros(3, 1, 1, 1)},
              str(path))
    return path


def test_one_batchnorm_layer_is_singular(one_layer: Path) -> None:
    report = validate_paths([one_layer])
    text = render(report, "text")
    assert "1 BatchNorm layer, no declaration" in text
    assert "has running statistics of 1 BatchNorm layer (bn)" in text
    assert text.endswith("\n1 file checked: 0 errors, 1 warning\n")


def test_validate_names_a_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nosuch"
    assert main(["validate", f"{missing}/"]) == 2
    out = capsys.readouterr().out
    assert out.endswith(f"\nnothing checked: 1 path does not exist: {missing.as_posix()}\n")
    assert "file checked" not in out


def test_validate_counts_the_files_it_checked_apart_from_missing_paths(capsys: pytest.CaptureFixture[str]) -> None:
    releases = ROOT / "examples" / "releases" / "convnet-bn"
    assert main(["validate", str(releases), "nosuch.safetensors", "other.json"]) == 2
    assert capsys.readouterr().out.endswith(
        "\n2 files checked: 0 errors, 0 warnings; 2 paths do not exist: nosuch.safetensors, other.json\n")


def test_json_output_still_lists_the_missing_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--format", "json", "nosuch"]) == 2
    assert '"code": "input.unreadable"' in capsys.readouterr().out
