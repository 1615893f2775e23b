"""Where a quantized release declares its activation scales: declaration.json, the weights header, the model card
(bnconvention/authoring/scales_sources.py), each checked the same way by the audit's scales stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bnconvention.audit.run.runner import prepare_audit
from bnconvention.audit.spec.audit_spec import AuditSpec, load_spec
from bnconvention.audit.spec.scales import QuantizationSpec
from bnconvention.authoring.card_stamp import stamp_card_file
from bnconvention.authoring.scales_sources import find_scales_declaration, read_quantized_release
from bnconvention.authoring.stamp import stamp_file
from bnconvention.errors import QuantizationError
from bnconvention.formats.atomic import file_sha256
from bnconvention.standard.models import SCALES_FILENAME
from bnconvention.zoo.population_quantized import DECLARATION_FILE
from bnconvention.zoo.population_spec import SPEC_FILE

NAME = "r10-s0-base"


@pytest.fixture
def release(tiny_quantized_population, tmp_path: Path) -> Path:
    """A copy of one quantized checkpoint's folder (with the population's task and spec), as a census root."""
    root = tiny_quantized_population.root
    folder = tmp_path / "pop" / "r10" / NAME
    shutil.copytree(root / "r10" / NAME, folder)
    for name in ("task.npz", SPEC_FILE):
        shutil.copy(root / name, tmp_path / "pop" / name)
    return folder


def _weights(folder: Path) -> Path:
    return folder / f"{NAME}.safetensors"


def _take_declaration(folder: Path) -> dict[str, Any]:
    """The population's declaration, removed from the folder (a release that keeps it elsewhere)."""
    path = folder / DECLARATION_FILE
    record = json.loads(path.read_text(encoding="utf-8"))
    path.unlink()
    return record


def _spec(folder: Path) -> AuditSpec:
    spec = load_spec(folder.parents[1] / SPEC_FILE)
    return spec.model_copy(update={"replicates": 2, "recoverability": None, "staleness": False,
                                   "quantization": QuantizationSpec(calibration_size=64)})


def test_a_declaration_stamped_in_the_header_is_found_and_audited(release: Path) -> None:
    # Regression: only declaration.json was read, so a stamped release was "ships scales but no declaration.json"
    record = _take_declaration(release)
    stamp_file(_weights(release), record)
    found, shipped = read_quantized_release(_weights(release))
    assert found.source == f"{_weights(release)} header" and found.scales_path == release / SCALES_FILENAME
    assert found.state.scales_sha256 == record["deployed_state"][1]["scales_sha256"]
    prepared = prepare_audit(_weights(release), _spec(release))
    assert prepared.scales is not None and prepared.scales.shipped.sites == shipped.sites


def test_a_declaration_in_the_card_is_found_with_its_own_scales_filename(release: Path) -> None:
    record = _take_declaration(release)
    record["deployed_state"][1]["filename"] = "scales-int8.safetensors"
    (release / SCALES_FILENAME).rename(release / "scales-int8.safetensors")
    card_before = (release / "README.md").read_text(encoding="utf-8")
    stamp_card_file(release / "README.md", record)
    assert "model-index" in (release / "README.md").read_text(encoding="utf-8") and "model-index" in card_before
    found = find_scales_declaration(_weights(release))
    assert found is not None and found.source == str(release / "README.md")
    assert found.scales_path == release / "scales-int8.safetensors"
    prepared = prepare_audit(_weights(release), _spec(release))
    assert prepared.scales is not None and prepared.scales.scales_file.name == "scales-int8.safetensors"


def test_header_and_card_that_agree_are_one_declaration(release: Path) -> None:
    record = _take_declaration(release)
    stamp_file(_weights(release), record)
    stamp_card_file(release / "README.md", record)
    found = find_scales_declaration(_weights(release))
    assert found is not None and found.source.endswith("header")  # the header comes before the card


def test_header_and_card_that_disagree_are_an_error_naming_both(release: Path) -> None:
    record = _take_declaration(release)
    stamp_file(_weights(release), record)
    record["reporting_line"] = "activation scales calibrated on something else"
    stamp_card_file(release / "README.md", record)
    weights_before = file_sha256(_weights(release))
    with pytest.raises(QuantizationError) as caught:
        prepare_audit(_weights(release), _spec(release))
    message = str(caught.value)
    assert f"{_weights(release)} header and {release / 'README.md'} declare different" in message
    assert "/reporting_line" in message and file_sha256(_weights(release)) == weights_before


def test_a_card_declaring_other_weights_is_refused_like_a_declaration_file(release: Path) -> None:
    record = _take_declaration(release)
    record["digests"]["trainable_sha256"] = "0" * 64
    stamp_card_file(release / "README.md", record)
    with pytest.raises(QuantizationError, match=r"README\.md declares other weights"):
        prepare_audit(_weights(release), _spec(release))


def test_a_scales_filename_outside_the_folder_is_refused(release: Path) -> None:
    record = _take_declaration(release)
    record["deployed_state"][1]["filename"] = "../activation_scales.safetensors"
    stamp_card_file(release / "README.md", record)
    with pytest.raises(QuantizationError, match="is not a file in"):
        read_quantized_release(_weights(release))


def test_scales_without_any_declaration_name_the_three_places(release: Path) -> None:
    _take_declaration(release)
    with pytest.raises(QuantizationError, match=r"neither declaration\.json, the header of .* nor README\.md"):
        prepare_audit(_weights(release), _spec(release))
