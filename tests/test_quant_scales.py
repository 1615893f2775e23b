"""Activation scales as a deployed state: observe, declare, refit, store; bad input refused.

The tiny model is a 1x1 convolution of weight 2 (no bias) followed by a BatchNorm layer, prepared with
torch.ao.quantization's eager ``prepare`` and one activation observer on the convolution's output, so every
reference is hand-computed from the inputs: the site sees 2x.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from torch.ao.quantization import QConfig, default_weight_observer, prepare
from torch.ao.quantization.observer import HistogramObserver, MinMaxObserver

from bnconvention.authoring.activation_scales import declare_quantized, float_state
from bnconvention.authoring.declaration import make_convention, make_transform
from bnconvention.errors import QuantizationError
from bnconvention.formats.digests import model_digests
from bnconvention.refitting.observers import MSEObserver, PercentileObserver, observer_spec
from bnconvention.refitting.scales import (
    ScaleSet,
    fake_quantized,
    load_scales,
    read_scales,
    refit_scales,
    save_scales,
    scales_digests,
)
from bnconvention.standard.models import ActivationScalesState, DatasetRef, DataSplit, to_dict
from bnconvention.validation.records import validate_record

SITE = "0.activation_post_process"


def _float_model() -> torch.nn.Sequential:
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1, bias=False), torch.nn.BatchNorm2d(1))
    with torch.no_grad():
        model[0].weight.fill_(2.0)
    return model.eval()


def _prepared(observer: object) -> torch.nn.Sequential:
    model = _float_model()
    model[0].qconfig = QConfig(activation=observer, weight=default_weight_observer)  # type: ignore[assignment]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        return prepare(model)


def _calibrated(observer: object, values: torch.Tensor) -> torch.nn.Sequential:
    model = _prepared(observer)
    with torch.no_grad():
        model(values.reshape(-1, 1, 1, 1))
    return model


A = torch.linspace(-1.0, 3.0, 9)  # the site sees [-2, 6]
B = torch.linspace(0.0, 1.0, 5)  # the site sees [0, 2]


def test_minmax_and_absmax_scales_by_hand() -> None:
    minmax = read_scales(_calibrated(MinMaxObserver.with_args(dtype=torch.quint8), A))
    assert minmax.spec.observer == "minmax" and (minmax.spec.quant_min, minmax.spec.quant_max) == (0, 255)
    scale, zero_point = minmax.sites[SITE]
    assert scale == pytest.approx(8 / 255, rel=1e-6) and zero_point == 64  # round(2 / (8/255)) = round(63.75)
    absmax = read_scales(_calibrated(MinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric),
                                     A))
    assert absmax.spec.observer == "absmax" and absmax.sites[SITE] == (pytest.approx(6 / 127.5, rel=1e-6), 0)


def test_percentile_scale_by_hand() -> None:
    values = torch.arange(100, dtype=torch.float32) / 2  # the site sees 0, 1, ..., 99
    scales = read_scales(_calibrated(lambda: PercentileObserver(90.0), values))
    # nearest rank: the 90th of 100 values is 89, the 10th is 9; torch's range includes 0: [0, 89]
    assert scales.spec.observer == "percentile" and scales.spec.percentile == 90.0
    assert scales.sites[SITE] == (pytest.approx(89 / 255, rel=1e-6), 0)


def test_mse_keeps_a_range_that_holds_its_points_exactly() -> None:
    values = torch.tensor([0.0, 127.5] * 8)  # the site sees 0 and 255: exact at scale 1, clipped below it
    assert read_scales(_calibrated(lambda: MSEObserver(), values)).sites[SITE] == (pytest.approx(1.0), 0)
    # a bell of 4000 values and one outlier: mse picks a range no wider than minmax's, with no larger error on the
    # (at 8 bits one outlier is worth keeping: clipping it costs more than the finer steps save)
    # values (measured here with torch's own fake quantization; t = 1, the minmax range, is one of its candidates)
    bell = torch.randn(4000, generator=torch.Generator().manual_seed(0))
    spread = torch.cat([bell, torch.full((1,), 6.0)])
    chosen = read_scales(_calibrated(lambda: MSEObserver(), spread)).sites[SITE]
    full = read_scales(_calibrated(MinMaxObserver.with_args(dtype=torch.quint8), spread)).sites[SITE]

    def error(qparams: tuple[float, int]) -> float:
        seen = 2 * spread
        return float(((torch.fake_quantize_per_tensor_affine(seen, qparams[0], qparams[1], 0, 255) - seen) ** 2)
                     .mean())
    assert chosen[0] <= full[0] and error(chosen) <= error(full)


def test_histogram_observer_is_declared_as_histogram() -> None:
    assert read_scales(_calibrated(HistogramObserver, A)).spec.observer == "histogram"


def test_fake_quantized_rounds_each_site_at_its_scale_and_leaves_the_model_as_it_was() -> None:
    model = _calibrated(MinMaxObserver.with_args(dtype=torch.quint8), A)
    scales = ScaleSet(spec=observer_spec("minmax"), sites={SITE: (0.5, 10)})
    before = model[0].activation_post_process.state_dict()
    x = torch.tensor([0.1, 0.2, 1.0, 200.0]).reshape(-1, 1, 1, 1)
    with torch.no_grad(), fake_quantized(model, scales):
        out = model[0](x).reshape(-1)
    # 2x = 0.2, 0.4, 2, 400 -> round(2x / 0.5) + 10 clamped to [0, 255], back: 0.0, 0.5, 2.0, 122.5
    assert out.tolist() == [0.0, 0.5, 2.0, 122.5]
    after = model[0].activation_post_process.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # evaluating fed no observer
    with torch.no_grad():
        assert model[0](x).reshape(-1).tolist() == pytest.approx([0.2, 0.4, 2.0, 400.0])  # hooks removed


def test_refit_on_another_pool_at_bit_identical_weights_and_buffers() -> None:
    model = _calibrated(MinMaxObserver.with_args(dtype=torch.quint8), A)
    model.train()
    digests = model_digests(model)
    result = refit_scales(model, [B.reshape(-1, 1, 1, 1)])
    assert result.shipped.sites[SITE] == (pytest.approx(8 / 255, rel=1e-6), 64)
    assert result.refit.sites[SITE] == (pytest.approx(2 / 255, rel=1e-6), 0)
    assert result.shipped.log_ratios(result.refit)[SITE] == pytest.approx(math.log(1 / 4), rel=1e-6)
    assert model_digests(model) == digests and model.training  # observers restored, BN untouched, mode restored
    assert read_scales(model).sites == result.shipped.sites
    assert result.samples == 5


def test_declaration_binds_the_float_tensors_and_the_stored_scales(tmp_path: Path) -> None:
    model = _calibrated(MinMaxObserver.with_args(dtype=torch.quint8), A)
    convention = make_convention(buffer_update_mode="untouched", role="train", dataset_id="d", subset="s",
                                 transform=make_transform(mode="eval"), rule="ema", momentum=0.1, batch_size=9,
                                 num_batches=1)
    calibration = DataSplit(role="retain", dataset=DatasetRef(id="d"), subset="retain", record_count=9)
    record = declare_quantized(model, convention, calibration=calibration)
    assert validate_record(to_dict(record)) == []
    assert record.digests.trainable_sha256 == model_digests(_float_model()).trainable_sha256
    assert set(float_state(model)) == {"0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                       "1.num_batches_tracked"}
    state = record.deployed_state[1]
    assert isinstance(state, ActivationScalesState) and state.calibration.record_count == 9
    path = tmp_path / "activation_scales.safetensors"
    save_scales(path, read_scales(model))
    from bnconvention.formats.digests import file_digests

    assert file_digests(path).trainable_sha256 == state.scales_sha256 == scales_digests(read_scales(model))[0]
    assert load_scales(path) == {SITE: (pytest.approx(8 / 255, rel=1e-6), 64)}


# --- bad input: a clear error naming the site, nothing written, the model unchanged --------------------------------


def test_a_model_without_observers_is_refused() -> None:
    with pytest.raises(QuantizationError, match="the model has no activation observers"):
        read_scales(_float_model())


def test_an_observer_that_saw_no_data_is_named() -> None:
    with pytest.raises(QuantizationError, match=f"site '{SITE}': the observer saw no data") as info:
        read_scales(_prepared(MinMaxObserver.with_args(dtype=torch.quint8)))
    assert info.value.site == SITE


def test_nan_calibration_names_the_site_and_leaves_the_model_as_it_was() -> None:
    model = _calibrated(MinMaxObserver.with_args(dtype=torch.quint8), A)
    digests, shipped = model_digests(model), read_scales(model)
    with pytest.raises(QuantizationError, match=f"site '{SITE}': scale nan is not a finite positive number"):
        refit_scales(model, [torch.full((2, 1, 1, 1), math.nan)])
    assert model_digests(model) == digests and read_scales(model) == shipped


def test_a_stored_zero_scale_is_refused_with_its_site(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "activation_scales.safetensors"
    save_file({f"{SITE}.scale": torch.zeros(1), f"{SITE}.zero_point": torch.zeros(1, dtype=torch.int64)}, str(path))
    with pytest.raises(QuantizationError, match=f"site '{SITE}': scale 0.0 is not a finite positive number"):
        load_scales(path)
    target = tmp_path / "out.safetensors"
    with pytest.raises(QuantizationError):
        save_scales(target, ScaleSet(spec=observer_spec("minmax"), sites={SITE: (math.nan, 0)}))
    assert not target.exists()


# --- cells shipped vs refit -----------------------------------------------------------------------------------------


def test_scales_cells_by_hand() -> None:
    """Two logits (z, -z) of the site's value z = 2x after quantization: class 0 when z > 0, class 1 when z < 0. At the
    shipped scale 8/255 (calibrated on [-2, 6]) x = -0.004 gives round(-0.008 / 0.0314) = 0: the logits tie and argmax
    picks class 0, wrong; at the scale 0.08/255 refit on a pool seeing [-0.04, 0.04] it stays negative, right."""
    from bnconvention.audit.scales.cells import scales_cells

    class Signs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _calibrated(MinMaxObserver.with_args(dtype=torch.quint8), A)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.inner[0](x).reshape(-1, 1)  # the observed site: 2x
            return torch.cat([z, -z], dim=1)  # class 0 when z > 0, class 1 when z < 0

    model = Signs()
    x = torch.tensor([-0.004, 0.5, 1.0, -0.5]).reshape(-1, 1, 1, 1)
    y = torch.tensor([1, 0, 0, 1])
    pools = [[torch.tensor([-0.02, 0.02]).reshape(-1, 1, 1, 1)]] * 3
    audit = scales_cells(model, splits={"forget": (x, y)}, calibration_pools=pools)
    [cell] = audit.cells
    assert (cell.metric, cell.shipped, cell.replicate_values) == ("df", 0.75, [1.0, 1.0, 1.0])
    assert cell.replicate_shifts_pp == [25.0, 25.0, 25.0] and cell.decision.outcome == "undetermined"  # R = 3
    assert audit.log_ratios[0]["inner.0.activation_post_process"] == pytest.approx(math.log(0.08 / 8), rel=1e-5)
