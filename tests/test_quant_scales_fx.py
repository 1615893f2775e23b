"""FX-mode static post-training quantization (``prepare_fx``) is read, evaluated and refit like eager mode (issue
14, item 5): the observers are found by type in the GraphModule, whatever their names.

The model is a 1x1 convolution of weight 2 (no bias) and a BatchNorm layer at its initial buffers (mean 0, var 1,
eps 1e-5); ``prepare_fx`` in eval mode folds the BatchNorm into the convolution (weight w = 2 / sqrt(1 + 1e-5)) and
places two minmax quint8 observers, on the input (``activation_post_process_0``) and on the convolution's output
(``activation_post_process_1``). Hand-computed: calibrated on x in [-1, 3] the sites see [-1, 3] and [-w, 3w]
(scales 4/255 and 4w/255, zero points 64); refit on [0, 1] they see [0, 1] and [0, w] (torch's range always
includes 0: scales 1/255 and w/255, zero points 0).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.ao.quantization import QConfig, QConfigMapping, default_weight_observer
from torch.ao.quantization.observer import MinMaxObserver

from bnconvention.refitting.scales import fake_quantized, read_scales, refit_scales

W = 2 / math.sqrt(1 + 1e-5)
SITES = ("activation_post_process_0", "activation_post_process_1")


def _prepared_fx() -> torch.nn.Module:
    from torch.ao.quantization.quantize_fx import prepare_fx

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1, bias=False), torch.nn.BatchNorm2d(1)).eval()
    with torch.no_grad():
        model[0].weight.fill_(2.0)  # type: ignore[operator]
    qconfig = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8), weight=default_weight_observer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        prepared = prepare_fx(model, QConfigMapping().set_global(qconfig), example_inputs=(torch.zeros(1, 1, 1, 1),))
    with torch.no_grad():
        prepared(torch.linspace(-1.0, 3.0, 9).reshape(-1, 1, 1, 1))
    return prepared


def test_fx_observers_are_read_by_type() -> None:
    scales = read_scales(_prepared_fx())
    assert tuple(scales.sites) == SITES and scales.spec.observer == "minmax" and scales.spec.dtype == "quint8"
    assert scales.sites[SITES[0]] == (pytest.approx(4 / 255, rel=1e-6), 64)  # round(1 / (4/255)) = round(63.75)
    assert scales.sites[SITES[1]] == (pytest.approx(4 * W / 255, rel=1e-6), 64)


def test_fx_scales_refit_at_bit_identical_weights_and_evaluate() -> None:
    model = _prepared_fx()
    shipped = read_scales(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run = refit_scales(model, [torch.linspace(0.0, 1.0, 5).reshape(-1, 1, 1, 1)])
    assert run.refit.sites[SITES[0]] == (pytest.approx(1 / 255, rel=1e-6), 0)
    assert run.refit.sites[SITES[1]] == (pytest.approx(W / 255, rel=1e-6), 0)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert read_scales(model) == shipped  # the shipped observers were not fed by the refit
    x = torch.tensor([0.5]).reshape(1, 1, 1, 1)
    s0, z0 = shipped.sites[SITES[0]]
    s1, z1 = shipped.sites[SITES[1]]
    q_in = (round(0.5 / s0) + z0 - z0) * s0  # the input site: 32 steps of 4/255
    expected = (round(W * q_in / s1) + z1 - z1) * s1  # the folded convolution's output site
    with torch.no_grad(), fake_quantized(model, shipped):
        assert float(model(x)) == pytest.approx(expected, rel=1e-5)
