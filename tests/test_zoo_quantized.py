"""The zoo's quantized variants: float weights byte-identical to the zoo's, scales beside them, a 1.1
declaration binding both; the zoo itself unchanged; a retain-only refit at bit-identical θ and BatchNorm buffers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bnconvention.audit.census.run import discover_checkpoints
from bnconvention.audit.scales.cells import quantized_accuracy, scales_cells
from bnconvention.authoring.activation_scales import load_quantized, scales_state_of
from bnconvention.errors import DigestMismatchError, QuantizationError
from bnconvention.formats.digests import file_digests, model_digests
from bnconvention.refitting.scales import save_scales
from bnconvention.standard.models import parse_record
from bnconvention.validation.records import validate_record
from bnconvention.zoo.quantized import calibration_draw, quantize_variant
from bnconvention.zoo.variants import FORGET_CLASSES, split_tensors

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quantized(zoo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("quantized")
    return {name: quantize_variant(zoo, name, out, size=128) for name in ("bn-base", "gn-base")}


@pytest.mark.parametrize("name", ["bn-base", "gn-base"])
def test_the_variant_folder_binds_the_zoo_s_weights_and_its_scales(zoo, quantized: dict[str, Path],
                                                                    name: str) -> None:
    folder = quantized[name]
    assert (folder / "model.safetensors").read_bytes() == zoo.weights_path(name).read_bytes()
    data = json.loads((folder / "declaration.json").read_text(encoding="utf-8"))
    assert validate_record(data) == [] and data["spec_version"] == "1.1"
    record = parse_record(data)
    state = scales_state_of(record)  # type: ignore[arg-type]
    assert len(state.sites) == 9 and state.observer == "minmax" and state.calibration.record_count == 128
    assert record.digests.trainable_sha256 == file_digests(folder / "model.safetensors").trainable_sha256
    assert file_digests(folder / "activation_scales.safetensors").trainable_sha256 == state.scales_sha256
    assert discover_checkpoints([folder]) == [folder / "model.safetensors"]  # the scales file is not a checkpoint
    assert zoo.verify() == []  # the zoo's own files are as built


@pytest.mark.parametrize("name", ["bn-base", "gn-base"])
def test_retain_only_refit_cells_at_bit_identical_weights(zoo, quantized: dict[str, Path], name: str) -> None:
    model, shipped = load_quantized(zoo.load_model(name), quantized[name] / "declaration.json")
    before = model_digests(zoo.load_model(name))
    data = split_tensors(FORGET_CLASSES)
    splits = {role: (data.x[role], data.y[role]) for role in ("forget", "test")}
    pools = [[calibration_draw("retain", size=128, seed=s)[0]] for s in (1, 2)]
    audit = scales_cells(model, splits=splits, calibration_pools=pools, shipped=shipped)
    assert [c.metric for c in audit.cells] == ["df", "dt"]
    assert audit.cells[0].shipped == quantized_accuracy(model, *splits["forget"], shipped)
    assert all(math.isfinite(v) for ratios in audit.log_ratios for v in ratios.values())
    assert audit.log_ratios[0] != audit.log_ratios[1]  # two retain draws, two calibrations
    float_state = {k: v for k, v in model.state_dict().items() if "activation_post_process" not in k}
    assert float_state.keys() == zoo.load_model(name).state_dict().keys()
    from bnconvention.formats.digests import bn_layer_names, state_dict_digests

    after = state_dict_digests(float_state, bn_layer_names(model))
    assert (after.trainable_sha256, after.running_sha256) == (before.trainable_sha256, before.running_sha256)


def test_a_scales_file_that_disagrees_with_its_declaration_is_refused(zoo, quantized: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(quantized["bn-base"], folder)
    _, shipped = load_quantized(zoo.load_model("bn-base"), folder / "declaration.json")
    first = next(iter(shipped.sites))
    sites = dict(shipped.sites)
    sites[first] = (sites[first][0] * 2, sites[first][1])
    save_scales(folder / "activation_scales.safetensors", type(shipped)(spec=shipped.spec, sites=sites))
    with pytest.raises(QuantizationError, match="holds other sites or values than"):
        load_quantized(zoo.load_model("bn-base"), folder / "declaration.json")
    data = json.loads((folder / "declaration.json").read_text(encoding="utf-8"))
    data["deployed_state"][1]["sites"][0]["scale"] = sites[first][0]
    (folder / "declaration.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DigestMismatchError, match="do not give the declaration's scales_sha256"):
        load_quantized(zoo.load_model("bn-base"), folder / "declaration.json")
