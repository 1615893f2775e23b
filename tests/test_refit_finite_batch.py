"""Batch weights of the train-mode rules and the batch-size-sensitivity warning of their refits.

The references are hand-computed: update_bn's cumulative average weighs each of K batches 1/K; an EMA with momentum
m weighs batch k of K m(1-m)^(K-k) and leaves (1-m)^K on the reset value.
"""

from __future__ import annotations

import math

import pytest
import torch

from bnconvention.errors import RefitError
from bnconvention.refitting import refit
from bnconvention.refitting.finite_batch import batch_size_warning, batch_weights


def test_cumulative_weighs_batches_not_records() -> None:
    sizes = [64] * 15 + [2]
    weighed = batch_weights("cumulative", sizes)
    assert weighed.weights == [1 / 16] * 16 and weighed.reset_weight == 0.0
    assert batch_weights("exact", sizes).weights[-1] == 2 / 962


def test_ema_weights_and_the_reset_value_sum_to_one() -> None:
    weighed = batch_weights("ema", [8] * 10, momentum=0.1)
    assert weighed.reset_weight == pytest.approx(0.9 ** 10)  # 0.34868
    assert weighed.weights[-1] == pytest.approx(0.1) and weighed.weights[0] == pytest.approx(0.1 * 0.9 ** 9)
    assert math.fsum(weighed.weights) + weighed.reset_weight == pytest.approx(1.0)
    with pytest.raises(RefitError, match="the ema rule needs a momentum in"):
        batch_weights("ema", [8], momentum=None)


def test_the_warning_quotes_the_over_weighting_of_a_ragged_last_batch() -> None:
    text = batch_size_warning("cumulative", [64] * 15 + [2])
    assert text is not None and text.startswith("the cumulative rule is batch-size sensitive")
    # 1/16 = 6.25% of the statistics for 2/962 = 0.21% of the records: 30.1x
    assert "b = 64 here" in text and "the batch of 2 weighs 6.25% of the statistics for 0.21% of the records " \
           "(30.1x its share)" in text
    assert "reset value" not in text
    assert batch_size_warning("exact", [64, 2]) is None


def test_the_warning_of_an_ema_refit_names_the_reset_weight() -> None:
    text = batch_size_warning("ema", [8] * 10, momentum=0.1)
    assert text is not None and "after 10 batches at momentum 0.1 the reset value (mean 0, variance 1) still " \
                                "weighs 34.87%" in text
    assert "x its share" not in text  # equal batches


def test_refit_reports_carry_it_under_the_train_mode_rules_only() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3), torch.nn.BatchNorm2d(3))
    pool = [torch.randn(8, 1, 6, 6), torch.randn(8, 1, 6, 6), torch.randn(3, 1, 6, 6)]
    cumulative = refit(model, pool, rule="cumulative")
    assert [w for w in cumulative.warnings if "batch-size sensitive" in w] == [batch_size_warning("cumulative",
                                                                                                  [8, 8, 3])]
    assert cumulative.declaration.refit is not None and any(
        "batch-size sensitive" in w for w in cumulative.declaration.refit.warnings)
    assert not any("batch-size sensitive" in w for w in refit(model, pool, rule="exact").warnings)
    absent = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.GroupNorm(2, 4))
    assert not any("batch-size sensitive" in w for w in refit(absent, pool, rule="cumulative").warnings)
