"""Snapshot/restore of running buffers and the staleness distances (docs/statistics.md#staleness)."""

from __future__ import annotations

import math

import pytest
import torch

from bnconvention.errors import RefitError
from bnconvention.refitting import LayerRunningState, restore_running_state, running_state, staleness_distance


def test_running_state_is_a_clone_and_restores_in_place() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(2), torch.nn.GroupNorm(1, 2),
                                torch.nn.BatchNorm1d(2, track_running_stats=False))
    saved = running_state(model)
    assert list(saved) == ["0"]  # only layers that track running statistics
    buffer = model[0].running_var
    with torch.no_grad():
        buffer.fill_(9.0)
        model[0].num_batches_tracked.fill_(4)
    assert saved["0"].var.tolist() == [1.0, 1.0]
    restore_running_state(model, saved)
    assert model[0].running_var is buffer and buffer.tolist() == [1.0, 1.0]
    assert int(model[0].num_batches_tracked) == 0


def test_restore_into_another_model_is_refused() -> None:
    saved = running_state(torch.nn.Sequential(torch.nn.BatchNorm1d(2)))
    with pytest.raises(RefitError, match=r"no BatchNorm layer with running statistics named \['0'\]"):
        restore_running_state(torch.nn.Sequential(torch.nn.Linear(2, 2)), saved)


def test_staleness_exact_values() -> None:
    shipped = {
        "a": (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0])),
        "b": LayerRunningState(torch.tensor([0.0]), torch.tensor([2.0]), None),
    }
    refit = {
        "a": (torch.tensor([1.0, 0.0]), torch.tensor([9.0, 16.0])),  # sigma_hat = (3, 4), ||.|| = 5
        "b": ([0.0], [2.0]),
    }
    result = staleness_distance(shipped, refit)
    assert [(layer.name, layer.mean_distance, layer.var_distance) for layer in result.layers] == [
        ("a", 2.0 / 5.0, math.sqrt(8.0**2 + 12.0**2) / math.sqrt(9.0**2 + 16.0**2)),
        ("b", 0.0, 0.0),
    ]
    assert result.mean_distance == pytest.approx(0.2, rel=1e-15)
    assert result.var_distance == pytest.approx(result.layers[0].var_distance / 2, rel=1e-15)


def test_staleness_without_layers_is_exactly_zero() -> None:
    result = staleness_distance({}, {})
    assert (result.mean_distance, result.var_distance, result.layers) == (0.0, 0.0, [])


def test_undefined_and_unmatched_layers_are_left_out_and_said() -> None:
    notes: list[str] = []
    shipped = {"zero": ([1.0], [1.0]), "nan": ([float("nan")], [1.0]), "only_shipped": ([0.0], [1.0])}
    refit = {"zero": ([0.0], [0.0]), "nan": ([0.0], [1.0]), "only_refit": ([0.0], [1.0])}
    result = staleness_distance(shipped, refit, warnings=notes)
    assert result.layers == [] and result.mean_distance == 0.0
    assert notes == [
        "layer 'zero': staleness undefined (refit variance zero in every channel, or NaN/inf statistics); left out "
        "of the layer averages",
        "layer 'nan': staleness undefined (refit variance zero in every channel, or NaN/inf statistics); left out of "
        "the layer averages",
        "layer 'only_refit' has refit statistics but no shipped ones; it is left out of the staleness",
        "layers ['only_shipped'] have shipped statistics but were not refit; they are left out of the staleness",
    ]


def test_mismatched_shapes_are_an_error() -> None:
    with pytest.raises(ValueError, match="statistics of different shapes"):
        staleness_distance({"a": ([0.0, 1.0], [1.0, 1.0])}, {"a": ([0.0], [1.0])})
