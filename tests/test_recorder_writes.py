"""The recorder's bad inputs: buffers written outside a forward (``load_state_dict``, by hand), BatchNorm
layers added or removed during the run, and a model with no BatchNorm (channel absent)."""

from __future__ import annotations

import copy

import pytest
import torch

from bnconvention import BNRecorder, make_transform
from bnconvention.authoring.observation import LAYERS_CHANGED, UNOBSERVED_BUFFER_WRITE

TRANSFORM = make_transform(mode="train", reference="test:identity")


def _net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.randn(8, 4)).square().mean().backward()
    optimizer.step()


def _codes(recorder: BNRecorder) -> list[str]:
    return [c.code for c in recorder.observation().contradictions]


def test_load_state_dict_after_the_last_update_makes_the_mode_unknown() -> None:
    model = _net()
    other = copy.deepcopy(model)
    other[1].running_mean.fill_(3.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with BNRecorder(model) as recorder:
        model.train()
        _step(model, optimizer)
        model.load_state_dict(other.state_dict())  # the buffers now come from elsewhere
    observation = recorder.observation()
    assert observation.mode == "unknown"
    assert observation.layers[0].mode == "unknown"
    assert UNOBSERVED_BUFFER_WRITE in _codes(recorder)


def test_a_write_by_hand_before_the_last_update_is_listed_and_the_mode_stands() -> None:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with BNRecorder(model) as recorder:
        model.train()
        _step(model, optimizer)
        with torch.no_grad():
            model[1].running_var.mul_(2.0)  # by hand, between two forwards
        _step(model, optimizer)
    observation = recorder.observation()
    assert observation.mode == "train"
    (found,) = [c for c in observation.contradictions if c.code == UNOBSERVED_BUFFER_WRITE]
    assert found.layers == ["1"] and "outside a forward" in found.message


def test_a_plain_training_run_has_no_external_write() -> None:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with BNRecorder(model) as recorder:
        model.train()
        for _ in range(3):
            _step(model, optimizer)
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 4))
    assert recorder.observation().mode == "train"
    assert _codes(recorder) == []


def test_a_refit_inside_the_recorder_is_not_an_external_write() -> None:
    from bnconvention import refit

    model = _net()
    with BNRecorder(model, split="retain") as recorder:
        refit(model, [torch.randn(8, 4) for _ in range(2)], rule="exact")
    assert recorder.observation().mode == "refit"
    assert _codes(recorder) == []


@pytest.mark.parametrize("change", ["add", "remove"])
def test_layers_added_or_removed_during_the_run_are_recorded(change: str) -> None:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with BNRecorder(model) as recorder:
        model.train()
        _step(model, optimizer)
        if change == "add":
            model.append(torch.nn.BatchNorm1d(2))
        else:
            model[1] = torch.nn.Identity()
        _step(model, optimizer)
    observation = recorder.observation()
    assert observation.mode == "unknown"
    (found,) = [c for c in observation.contradictions if c.code == LAYERS_CHANGED]
    assert found.layers == (["3"] if change == "add" else ["1"])
    record = recorder.declaration(dataset_id="d", subset="s", transform=TRANSFORM, role="train", rule="ema",
                                  momentum=0.1)
    assert record.convention.buffer_update_mode == "unknown"
    layers = [layer.name for layer in record.deployed_state[0].layers]
    assert layers == (["1", "3"] if change == "add" else [])  # the model as it is now


def test_a_model_without_batchnorm_declares_channel_absent() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GroupNorm(1, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with BNRecorder(model, split="train") as recorder:
        _step(model, optimizer)
    record = recorder.declaration(dataset_id="sklearn/digits", subset="all", transform=TRANSFORM)
    assert record.deployed_state[0].layers == []
    assert record.digests.running_sha256 is None
    assert record.convention.name == "untouched/train/train-transform/ema-m0.1"
