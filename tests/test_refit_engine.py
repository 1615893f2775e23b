"""The refit transaction and report: schema-valid records, channel absent, restoration after failures, bad input."""

from __future__ import annotations

import math
import re

import pytest
import torch
from helpers.refit_models import (
    GroupNormNet,
    LayerNormNet,
    SmallConvNet,
    WeightWritingNet,
    make_pool,
    seeded,
)

from bnconvention.authoring import refit_listeners
from bnconvention.authoring.declaration import make_transform
from bnconvention.errors import RefitError, UnsupportedModelError, WeightsChangedError
from bnconvention.formats.digests import model_digests
from bnconvention.refitting import refit, running_state
from bnconvention.refitting.engine import (
    PassOutcome,
    build_report,
    check_theta_unchanged,
    inspect_model,
    pool_warnings,
    run_pass,
)
from bnconvention.refitting.pool import PoolReader
from bnconvention.standard.models import DatasetRef, DataSplit, Producer, parse_record
from bnconvention.standard.schema import schema_validator

RULES = ["exact", "cumulative", "ema"]


def schema_errors(record: dict) -> list[str]:
    return [error.message for error in schema_validator().iter_errors(record)]


@pytest.mark.parametrize("rule", RULES)
def test_report_is_a_valid_declaration(rule) -> None:
    model = seeded(SmallConvNet)
    data = DataSplit(role="retain", dataset=DatasetRef(id="sklearn/digits"), subset="all classes except 3",
                     sampling_seed=7)
    transform = make_transform(mode="train", reference="train.py:train_transform", augmentations=["shift 1px"])
    report = refit(model, make_pool((3, 6, 6), [4, 4]), rule=rule, data=data, transform=transform,
                   producer=Producer(tool="tests", version="1"))
    record = report.to_dict()
    assert schema_errors(record) == []
    assert parse_record(record) == report.declaration
    convention = report.declaration.convention
    assert convention.buffer_update_mode == "refit"
    assert convention.name.startswith(f"refit/retain/train-transform/{rule}")
    assert (convention.data.record_count, convention.data.sampling_seed) == (8, 7)
    assert convention.accumulation.variance_estimator == "unbiased"
    assert convention.accumulation.precision == ("float64" if rule == "exact" else "float32")
    assert record["producer"] == {"tool": "tests", "version": "1"}
    assert report.channel == "present"
    details = record["refit"]
    assert details["trainable_sha256_before"] == details["trainable_sha256_after"]
    assert details["running_sha256_after"] == record["digests"]["running_sha256"]
    assert details["running_sha256_after"] == model_digests(model).running_sha256
    assert [layer["name"] for layer in details["staleness"]["layers"]] == ["bn1", "bn2", "bn3"]
    assert details["forward_passes"] == 1 and details["seconds"] > 0
    assert "deployed state refit under refit/retain/train-transform/" in record["reporting_line"]


def test_default_pool_description_is_honest() -> None:
    report = refit(seeded(SmallConvNet), make_pool((3, 6, 6), [5, 3]))
    convention = report.to_dict()["convention"]
    assert convention["data"] == {"role": "other", "dataset": {"id": "unspecified"},
                                  "subset": "caller-provided pool", "record_count": 8}
    assert convention["transform"]["mode"] == "eval"
    assert convention["transform"]["description"] == {"augmentations": []}
    assert convention["accumulation"] == {"rule": "exact", "batch_size": 5, "num_batches": 2,
                                          "variance_estimator": "unbiased", "precision": "float64"}
    assert convention["name"] == "refit/other/eval-transform/exact"


def test_record_count_mismatch_is_warned() -> None:
    data = DataSplit(role="retain", dataset=DatasetRef(id="d"), subset="s", record_count=100)
    report = refit(seeded(SmallConvNet), make_pool((3, 6, 6), [4]), data=data)
    assert "data.record_count is 100 but the pool yielded 4 samples" in report.warnings
    assert report.declaration.convention.data.record_count == 100


def test_staleness_measures_the_previous_state_against_the_refit() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(2))
    pool = [torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])]  # means (2, 3), unbiased variances (4, 4)
    with torch.no_grad():
        model[0].running_mean.copy_(torch.tensor([2.0 + 2.0, 3.0]))  # shifted by one refit std in one channel
        model[0].running_var.copy_(torch.tensor([4.0, 12.0]))
    report = refit(model, pool)
    layer = report.staleness.layers[0]
    assert layer.mean_distance == pytest.approx(2.0 / math.sqrt(8.0), rel=1e-12)  # ||(2,0)|| / ||(2,2)||
    assert layer.var_distance == pytest.approx(8.0 / math.sqrt(32.0), rel=1e-12)  # ||(0,8)|| / ||(4,4)||
    assert report.staleness.mean_distance == layer.mean_distance


@pytest.mark.parametrize("model_cls, shape", [
    pytest.param(GroupNormNet, (3, 5, 5), id="groupnorm"),
    pytest.param(LayerNormNet, (12,), id="layernorm"),
])
@pytest.mark.parametrize("rule", RULES)
def test_models_without_running_statistics_are_channel_absent(model_cls, shape, rule) -> None:
    model = seeded(model_cls)
    before = model_digests(model)
    report = refit(model, make_pool(shape, [4, 4]), rule=rule)
    assert model_digests(model) == before
    assert (report.channel, report.path, report.forward_passes) == ("absent", "none", 0)
    assert report.staleness.model_dump() == {"mean_distance": 0.0, "var_distance": 0.0, "layers": [],
                                             "reference_band": None, "exceeds_band": None}
    record = report.to_dict()
    assert schema_errors(record) == []
    assert "running_sha256" not in record["digests"] and "running_sha256_before" not in record["refit"]
    assert record["deployed_state"] == [{"kind": "batchnorm", "layers": []}]
    assert any(w.startswith("channel absent") for w in report.warnings)
    assert "every shift is exactly 0.00" in record["reporting_line"]


def test_track_running_stats_false_has_nothing_to_refit() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3, track_running_stats=False))
    before = model_digests(model)
    report = refit(model, make_pool((3,), [4, 4]))
    assert report.channel == "absent" and model_digests(model) == before
    assert any("['1'] have track_running_stats=False" in w for w in report.warnings)
    assert report.declaration.deployed_state[0].layers[0].track_running_stats is False


def test_channel_absent_still_rejects_an_empty_pool() -> None:
    with pytest.raises(RefitError, match="the pool yielded no batches"):
        refit(seeded(GroupNormNet), [])


def _set_mixed_modes(model: SmallConvNet) -> dict[str, bool]:
    model.train()
    model.bn2.eval()
    model.drop.eval()
    return {name: module.training for name, module in model.named_modules()}


def _failing_pool(batches: list[torch.Tensor], fail_at: int):
    for index, batch in enumerate(batches):
        if index == fail_at:
            raise OSError("pool storage went away")
        yield batch


@pytest.mark.parametrize("rule", RULES)
def test_modes_and_momenta_restored_after_success(rule) -> None:
    model = seeded(SmallConvNet)
    flags = _set_mixed_modes(model)
    momenta = [model.bn1.momentum, model.bn2.momentum, model.bn3.momentum]
    refit(model, make_pool((3, 6, 6), [4, 4]), rule=rule)
    assert {name: module.training for name, module in model.named_modules()} == flags
    assert [model.bn1.momentum, model.bn2.momentum, model.bn3.momentum] == momenta == [0.1, None, 0.1]


@pytest.mark.parametrize("rule", RULES)
def test_exception_from_the_pool_restores_everything(rule) -> None:
    model = seeded(SmallConvNet)
    flags = _set_mixed_modes(model)
    before = model_digests(model)
    shipped = running_state(model)
    with pytest.raises(OSError, match="pool storage went away"):
        refit(model, _failing_pool(make_pool((3, 6, 6), [4, 4, 4]), fail_at=2), rule=rule)
    assert model_digests(model) == before
    assert all(torch.equal(running_state(model)[k].mean, v.mean) for k, v in shipped.items())
    assert {name: module.training for name, module in model.named_modules()} == flags
    assert [model.bn1.momentum, model.bn2.momentum, model.bn3.momentum] == [0.1, None, 0.1]


def test_keyboard_interrupt_mid_pass_restores_running_statistics() -> None:
    model = seeded(SmallConvNet)
    before = model_digests(model)
    calls = {"n": 0}

    def interrupt(module, args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    handle = model.bn2.register_forward_pre_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        refit(model, make_pool((3, 6, 6), [4, 4, 4]), rule="cumulative")
    handle.remove()
    assert model_digests(model) == before


BAD_POOLS = [
    pytest.param([], "the pool yielded no batches", id="empty"),
    pytest.param([torch.zeros(0, 3, 6, 6)], "pool batch 0 is a torch.float32 tensor of shape (0, 3, 6, 6) with no "
                 "samples", id="empty-batch"),
    pytest.param([torch.zeros(4, 3, 6, 6), torch.zeros(4, 3, 7, 7)], "pool batch 1 has samples of shape (3, 7, 7) "
                 "but batch 0 had (3, 6, 6)", id="shape-changes"),
    pytest.param([torch.zeros(4, 1, 6, 6)], "the model's forward failed on pool", id="wrong-channels"),
    pytest.param([torch.zeros(4, 3, 6, 6, dtype=torch.float64)], "pool batch 0 has dtype torch.float64 but the "
                 "model computes in torch.float32", id="float64-pool"),
    pytest.param([torch.zeros(4, 3, 6, 6, dtype=torch.uint8)], "x.float() / 255", id="uint8-pool"),
    pytest.param([torch.full((4, 3, 6, 6), float("nan"))], "non-finite activations (NaN or inf) reached "
                 "BatchNorm layer 'bn1'", id="nan-input"),
    pytest.param([torch.full((4, 3, 6, 6), 1e38)], "non-finite activations", id="inf-activations"),
    pytest.param(torch.zeros(4, 3, 6, 6), "the pool is a single tensor", id="bare-tensor"),
    pytest.param([{"x": torch.zeros(4, 3, 6, 6)}], "mapping without the key 'input' (keys: ['x'])",
                 id="dict-without-key"),
    pytest.param([("labels", torch.zeros(4, 3, 6, 6))], "whose first item is a str", id="tuple-label-first"),
    pytest.param([[torch.zeros(4, 3, 6, 6)], 5], "pool batch 1 is a int", id="int-batch"),
    pytest.param(5, "which is not iterable", id="not-iterable"),
]


@pytest.mark.parametrize(("pool", "message"), BAD_POOLS)
@pytest.mark.parametrize("rule", RULES)
def test_bad_pool_is_a_clear_error_and_changes_nothing(pool, message, rule) -> None:
    model = seeded(SmallConvNet)
    before = model_digests(model)
    with pytest.raises(RefitError, match=re.escape(message)):
        refit(model, pool, rule=rule)
    assert model_digests(model) == before


def test_half_precision_model_is_refused() -> None:
    model = seeded(SmallConvNet).half()
    before = model_digests(model)
    with pytest.raises(UnsupportedModelError, match="holds torch.float16 tensors \\(e.g. 'conv1.weight'\\)"):
        refit(model, [torch.zeros(4, 3, 6, 6, dtype=torch.float16)])
    assert model_digests(model) == before


@pytest.mark.parametrize("rule", RULES)
def test_forward_that_writes_its_own_tensors_raises_weights_changed(rule) -> None:
    model = seeded(WeightWritingNet)
    shipped = running_state(model)
    with pytest.raises(WeightsChangedError, match="trainable tensors changed during the refit"):
        refit(model, make_pool((3,), [4, 4]), rule=rule)
    assert all(torch.equal(running_state(model)[k].var, v.var) for k, v in shipped.items())


def test_bad_arguments() -> None:
    model, pool = seeded(SmallConvNet), make_pool((3, 6, 6), [4])
    with pytest.raises(RefitError, match="unknown rule 'swa'"):
        refit(model, pool, rule="swa")
    with pytest.raises(RefitError, match="unknown method 'fast'"):
        refit(model, pool, method="fast")
    with pytest.raises(RefitError, match="chunk_size must be a positive integer"):
        refit(model, pool, chunk_size=0)
    with pytest.raises(RefitError, match="memory_budget must be a positive number of bytes"):
        refit(model, pool, memory_budget=-1)
    with pytest.raises(RefitError, match="data must be a DataSplit"):
        refit(model, pool, data={"role": "retain"})
    with pytest.raises(UnsupportedModelError, match="refit needs a torch.nn.Module, got str"):
        refit("resnet18", pool)


def test_listeners_hear_about_successful_refits_only() -> None:
    heard = []

    def listener(model, report):
        heard.append((model, report))

    refit_listeners.add_refit_listener(listener)
    try:
        model = seeded(SmallConvNet)
        report = refit(model, make_pool((3, 6, 6), [4]))
        with pytest.raises(RefitError):
            refit(model, [])
    finally:
        refit_listeners.remove_refit_listener(listener)
    assert heard == [(model, report)]


def test_progress_bar_goes_to_stderr(capsys) -> None:
    refit(seeded(SmallConvNet), make_pool((3, 6, 6), [4, 4]), progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "exact refit (layer-major)" in captured.err


# --- the stages of refit(), each on its own -------------------------------------------------------------------------


def test_inspect_model_reads_layers_and_momentum_without_touching_the_model() -> None:
    model = seeded(SmallConvNet)  # bn1 and bn3 with momentum 0.1, bn2 with None
    before, shipped = model_digests(model), running_state(model)
    setup = inspect_model(model, rule="ema")
    assert (list(setup.layers), setup.momentum, setup.dtype, setup.device) == (
        ["bn1", "bn2", "bn3"], 0.1, torch.float32, torch.device("cpu"))
    assert setup.warnings == ["BatchNorm layers ['bn2'] have a momentum other than 0.1; each layer used its own, "
                              "the record names the most common one"]
    assert inspect_model(model, rule="exact").momentum is None
    assert model_digests(model) == before
    assert all(torch.equal(running_state(model)[k].mean, v.mean) for k, v in shipped.items())


def test_inspect_model_names_untracked_layers() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3, track_running_stats=False))
    setup = inspect_model(model, rule="exact")
    assert setup.layers == {}
    assert len(setup.warnings) == 1
    assert setup.warnings[0].startswith("BatchNorm layers ['1'] have track_running_stats=False: they store no")


@pytest.mark.parametrize(("model_cls", "rule", "expected"), [
    pytest.param(SmallConvNet, "exact", ("traced", 1, ["bn1", "bn2", "bn3"]), id="exact"),
    pytest.param(SmallConvNet, "cumulative", ("train-mode", 1, ["bn1", "bn2", "bn3"]), id="train-mode"),
    pytest.param(GroupNormNet, "exact", ("none", 0, []), id="channel-absent"),
])
def test_run_pass_takes_the_path_the_model_and_rule_call_for(model_cls, rule, expected) -> None:
    model = seeded(model_cls)
    setup = inspect_model(model, rule=rule)
    reader = PoolReader(make_pool((3, 6, 6) if model_cls is SmallConvNet else (3, 5, 5), [4, 4]),
                        dtype=torch.float32, min_batch_size=1 if rule == "exact" else 2)
    outcome = run_pass(model, reader, setup, rule=rule, chunk_size=None, method="auto", memory_budget=None,
                       progress=False, shipped=running_state(model))
    assert (outcome.path, outcome.passes, outcome.refit_names) == expected
    assert reader.batch_sizes == [4, 4]
    assert any(w.startswith("channel absent") for w in setup.warnings) == (expected[0] == "none")


def test_run_pass_on_an_absent_channel_still_rejects_an_empty_pool() -> None:
    model = seeded(GroupNormNet)
    with pytest.raises(RefitError, match="the pool yielded no batches"):
        run_pass(model, PoolReader([], dtype=torch.float32), inspect_model(model, rule="exact"), rule="exact",
                 chunk_size=None, method="auto", memory_budget=None, progress=False, shipped={})


def test_check_theta_unchanged_is_the_digest_comparison() -> None:
    check_theta_unchanged("a" * 64, "a" * 64)
    with pytest.raises(WeightsChangedError, match=f"digest {'a' * 64} became {'b' * 64}"):
        check_theta_unchanged("a" * 64, "b" * 64)


def test_pool_warnings_describe_the_pool_as_seen() -> None:
    assert pool_warnings(rule="exact", sizes=[4, 4, 3], samples=11, data=None) == []
    unequal = pool_warnings(rule="ema", sizes=[4, 4, 3], samples=11, data=None)
    assert len(unequal) == 1 and unequal[0].startswith("batches of unequal size (2 x 4, 1 x 3): the ema rule")
    data = DataSplit(role="retain", dataset=DatasetRef(id="d"), subset="s", record_count=12)
    assert pool_warnings(rule="exact", sizes=[4, 4, 3], samples=11, data=data) == [
        "data.record_count is 12 but the pool yielded 11 samples"]


def test_build_report_measures_staleness_on_the_layers_the_pass_refit() -> None:
    model = seeded(SmallConvNet)
    setup = inspect_model(model, rule="exact")
    reader = PoolReader(make_pool((3, 6, 6), [4, 4]), dtype=torch.float32)
    shipped = running_state(model)
    before = model_digests(model)
    outcome = run_pass(model, reader, setup, rule="exact", chunk_size=None, method="auto", memory_budget=None,
                       progress=False, shipped=shipped)
    partial = PassOutcome(path=outcome.path, passes=outcome.passes, refit_names=["bn1", "bn3"])
    report = build_report(model, setup, partial, rule="exact", data=None, transform=None, producer=None,
                          shipped=shipped, before=before, after=model_digests(model), reader=reader, started=0.0)
    assert [layer.name for layer in report.staleness.layers] == ["bn1", "bn3"]
    assert (report.channel, report.path, report.forward_passes) == ("present", "traced", 1)
    assert report.declaration.digests.running_sha256 == model_digests(model).running_sha256
    assert schema_errors(report.to_dict()) == []
