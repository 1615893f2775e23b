"""The train-mode rules: ``cumulative`` is ``torch.optim.swa_utils.update_bn``; ``ema`` replays a training run."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.refit_models import SequenceNet, SmallConvNet, UnusedBatchNormNet, make_pool, seeded
from torch.optim.swa_utils import update_bn

from bnconvention.errors import RefitError
from bnconvention.formats.digests import model_digests
from bnconvention.refitting import refit


def running(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()
            if k.endswith(("running_mean", "running_var", "num_batches_tracked"))}


@pytest.mark.parametrize(("model_cls", "shape"), [
    pytest.param(SmallConvNet, (3, 6, 6), id="convnet"),
    pytest.param(SequenceNet, (2, 8), id="bn1d-bn3d-syncbn"),
])
def test_cumulative_equals_update_bn_with_a_short_last_batch(model_cls, shape) -> None:
    base = seeded(model_cls)
    # a DataLoader-like list of (input, label) with a short last batch
    pool = [(x, torch.zeros(len(x))) for x in make_pool(shape, [8, 8, 8, 3])]
    ours, theirs = copy.deepcopy(base), copy.deepcopy(base)
    torch.manual_seed(123)  # dropout runs in both (update_bn calls model.train()): same random stream
    report = refit(ours, pool, rule="cumulative")
    torch.manual_seed(123)
    update_bn(pool, theirs)
    mine, expected = running(ours), running(theirs)
    assert mine.keys() == expected.keys()
    # Bit-identical: the same training-mode forwards on the same batches with the same random stream (measured by
    # tests/helpers/measure_refit_errors.py, update_bn/*: 0 difference on every setting and seed; was rtol=1e-6).
    for key, value in expected.items():
        assert torch.equal(mine[key], value), key
    assert any("batches of unequal size (3 x 8, 1 x 3)" in w for w in report.warnings)
    accumulation = report.declaration.convention.accumulation
    assert (accumulation.rule, accumulation.batch_size, accumulation.num_batches) == ("cumulative", 8, 4)
    assert accumulation.precision == "float32"


def test_cumulative_over_weights_the_short_batch_like_update_bn() -> None:
    # One BatchNorm1d layer on raw data: the cumulative mean is the mean of the batch means, not the pool mean.
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(1))
    pool = [torch.zeros(8, 1), torch.full((2, 1), 10.0)]
    refit(model, pool, rule="cumulative")
    assert model[0].running_mean.item() == pytest.approx(5.0)  # (0 + 10) / 2, the pool mean is 2.0
    exact = torch.nn.Sequential(torch.nn.BatchNorm1d(1))
    refit(exact, pool, rule="exact")
    assert exact[0].running_mean.item() == pytest.approx(2.0)


def test_dropout_is_on_for_train_mode_rules_and_recorded() -> None:
    model = seeded(SmallConvNet).eval()
    report = refit(model, make_pool((3, 6, 6), [4, 4]), rule="cumulative")
    assert report.declaration.convention.other_modules.dropout == "on"
    assert not any(module.training for module in model.modules())  # the train() of the pass is undone


def test_ema_starts_from_reset_statistics_with_each_layer_momentum() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(1, momentum=0.5))
    with torch.no_grad():
        model[0].running_mean.fill_(100.0)  # must not leak into the result
    pool = [torch.tensor([[2.0], [4.0]]), torch.tensor([[6.0], [8.0]])]
    report = refit(model, pool, rule="ema")
    # reset: mean 0, var 1; batch means 3 and 7, unbiased batch variances 2 and 2
    assert model[0].running_mean.item() == pytest.approx(0.5 * (0.5 * 0 + 0.5 * 3) + 0.5 * 7)
    assert model[0].running_var.item() == pytest.approx(0.5 * (0.5 * 1 + 0.5 * 2) + 0.5 * 2)
    assert int(model[0].num_batches_tracked) == 2
    assert report.declaration.convention.name == "refit/other/eval-transform/ema-m0.5"
    assert report.declaration.convention.accumulation.momentum == 0.5
    assert model[0].momentum == 0.5


def test_ema_with_mixed_momenta_records_the_most_common_and_warns() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(2, momentum=0.1), torch.nn.BatchNorm1d(2, momentum=0.1),
                                torch.nn.BatchNorm1d(2, momentum=0.2))
    report = refit(model, make_pool((2,), [4, 4]), rule="ema")
    assert report.declaration.convention.accumulation.momentum == 0.1
    assert any("['2'] have a momentum other than 0.1" in w for w in report.warnings)


def test_ema_without_any_momentum_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(2, momentum=None))
    with pytest.raises(RefitError, match="every BatchNorm layer has momentum None"):
        refit(model, make_pool((2,), [4]), rule="ema")


@pytest.mark.parametrize("rule", ["cumulative", "ema"])
def test_batch_of_one_sample_is_refused_for_train_mode_rules(rule) -> None:
    model = seeded(SmallConvNet)
    before = model_digests(model)
    with pytest.raises(RefitError, match="pool batch 1 has 1 sample; train-mode BatchNorm"):
        refit(model, make_pool((3, 6, 6), [4, 1]), rule=rule)
    assert model_digests(model) == before


def test_chunk_size_is_refused_for_train_mode_rules() -> None:
    with pytest.raises(RefitError, match="chunk_size only applies to the exact rule"):
        refit(seeded(SmallConvNet), make_pool((3, 6, 6), [4]), rule="cumulative", chunk_size=2)


def test_layer_never_called_is_reset_like_update_bn() -> None:
    model = seeded(UnusedBatchNormNet)
    with torch.no_grad():
        model.unused.running_mean.fill_(7.0)
    report = refit(model, make_pool((3,), [4, 4]), rule="cumulative")
    assert model.unused.running_mean.tolist() == [0.0, 0.0, 0.0]
    assert any("['unused'] were not called by the forward; as in update_bn" in w for w in report.warnings)
