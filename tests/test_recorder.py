"""BNRecorder on the digits zoo's methods: modes as observed, split tags, contradictions, records of the standard."""

from __future__ import annotations

import copy

import pytest
import torch

from bnconvention.authoring.observation import (
    DECLARED_FROZEN_BUFFERS_CHANGED,
    DECLARED_TRAIN_NO_BUFFER_UPDATE,
    SPLIT_MISMATCH,
    UNOBSERVED_BUFFER_WRITE,
)
from bnconvention.authoring.recorder import BNRecorder
from bnconvention.data.digits import DIGITS_DATASET_ID, DIGITS_TRAIN_TRANSFORM, digits_arrays
from bnconvention.errors import RecordError, UsageError
from bnconvention.formats.digests import model_digests
from bnconvention.refitting import refit
from bnconvention.standard.models import Observation, parse_record, to_dict
from bnconvention.standard.schema import schema_validator
from bnconvention.validation.records import check_record
from bnconvention.zoo import methods
from bnconvention.zoo.models import convnet_bn, convnet_gn

LAYERS = ["features.1", "features.4", "features.8", "features.11"]


@pytest.fixture(scope="module")
def digits() -> dict[str, torch.Tensor]:
    """A small slice of the digits: 240 training images, class 3 as the forget set."""
    arrays = digits_arrays()
    x = torch.from_numpy(arrays.x[:240].copy())
    y = torch.from_numpy(arrays.y[:240].copy())
    forget = y == 3
    return {"x": x, "y": y, "x_forget": x[forget], "y_forget": y[forget], "x_retain": x[~forget],
            "y_retain": y[~forget]}


@pytest.fixture(scope="module")
def base_state(digits: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ConvNet (width 8) trained for one epoch; each test starts from a copy of its state."""
    torch.manual_seed(0)
    model = convnet_bn(width=8)
    methods.train_classifier(model, digits["x"], digits["y"], epochs=1, lr=1e-2,
                             generator=torch.Generator().manual_seed(0))
    return copy.deepcopy(model.state_dict())


@pytest.fixture
def model(base_state: dict[str, torch.Tensor]) -> torch.nn.Module:
    net = convnet_bn(width=8)
    net.load_state_dict(base_state)
    return net


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1)


def assert_valid_declaration(record_dict: dict[str, object]) -> None:
    """Schema-valid, parses back to the same record, and the validator finds no error."""
    assert list(schema_validator().iter_errors(record_dict)) == []
    assert to_dict(parse_record(record_dict)) == record_dict
    _, issues = check_record(record_dict, source="record.json")
    assert [i.code for i in issues if i.severity == "error"] == []


# --- the zoo's methods ----------------------------------------------------------------------------------------------


def test_train_mode_unlearning_is_recorded_as_train(model: torch.nn.Module, digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model, split="train") as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=3, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
        methods.accuracy(model, digits["x"], digits["y"])  # evaluation under no_grad: not a step
    obs = rec.observation()
    assert (obs.mode, obs.last_write, obs.rule, obs.momentum) == ("train", "update", "ema", 0.1)
    assert (obs.train_forwards, obs.buffer_updates, obs.eval_forwards, obs.frozen_forwards) == (3, 3, 1, 0)
    assert (obs.batch_size_min, obs.batch_size_max) == (8, 8)
    assert (obs.split_tags, obs.last_update_split) == (["forget"], "forget")
    assert obs.buffers_changed and obs.trainable_changed
    assert [(layer.name, layer.mode, layer.buffer_updates, layer.momenta) for layer in obs.layers] == [
        (name, "train", 3, [0.1]) for name in LAYERS]
    assert obs.contradictions == []
    assert (obs.dropout, obs.precision) == ("absent", "float32")

    record = rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="class 3 of the first 240 images",
                             transform=DIGITS_TRAIN_TRANSFORM)
    assert record.convention.name == "train/forget/train-transform/ema-m0.1"
    assert (record.convention.accumulation.batch_size, record.convention.accumulation.num_batches) == (8, 3)
    assert record.digests.trainable_sha256 == model_digests(model).trainable_sha256
    assert record.observation is not None and to_dict(record.observation) == to_dict(obs)
    assert_valid_declaration(to_dict(record))


def test_finetune_on_retain_takes_its_role_from_the_tag(model: torch.nn.Module,
                                                        digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.finetune(model, digits["x_retain"][:64], digits["y_retain"][:64], epochs=1, lr=1e-3,
                         batch_size=32, generator=gen(), observer=rec)
    record = rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="retain", transform=DIGITS_TRAIN_TRANSFORM)
    assert record.convention.name == "train/retain/train-transform/ema-m0.1"
    assert record.observation is not None and record.observation.split_tags == ["retain"]


def test_eval_mode_distillation_is_recorded_as_frozen(model: torch.nn.Module,
                                                      digits: dict[str, torch.Tensor]) -> None:
    competent, incompetent = copy.deepcopy(model), convnet_bn(width=8)
    before = model_digests(model)
    with BNRecorder(model, split="train") as rec:
        methods.bad_teacher(model, digits["x_retain"][:32], digits["x_forget"][:16], competent=competent,
                            incompetent=incompetent, epochs=1, lr=1e-3, batch_size=16, generator=gen(),
                            observer=rec)
    obs = rec.observation()
    # one forget batch of 16 and 10 retain records (30 % of 32) in one batch: 2 frozen steps; the teachers'
    # forwards (under no_grad) are not the recorded model's
    assert (obs.mode, obs.last_write, obs.rule) == ("frozen", None, None)
    assert (obs.train_forwards, obs.buffer_updates, obs.eval_forwards, obs.frozen_forwards) == (0, 0, 2, 2)
    assert obs.split_tags == [] and obs.last_update_split is None
    assert not obs.buffers_changed and obs.trainable_changed
    assert model_digests(model).running_sha256 == before.running_sha256

    with pytest.raises(RecordError, match="name it with role="):
        rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="all", transform=DIGITS_TRAIN_TRANSFORM)
    record = rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="all", transform=DIGITS_TRAIN_TRANSFORM,
                             role="train")
    # the rule of the earlier fit defaults to the layers' momentum setting
    assert record.convention.name == "frozen/train/train-transform/ema-m0.1"
    assert_valid_declaration(to_dict(record))


def test_train_mode_distillation_is_recorded_as_train(model: torch.nn.Module,
                                                      digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.bad_teacher(model, digits["x_retain"][:32], digits["x_forget"][:16], competent=convnet_bn(width=8),
                            incompetent=convnet_bn(width=8), epochs=1, lr=1e-3, batch_size=16, bn_mode="train",
                            generator=gen(), observer=rec)
    obs = rec.observation()
    assert (obs.mode, obs.buffer_updates, obs.frozen_forwards) == ("train", 2, 0)
    assert obs.split_tags == ["forget", "retain"]


def test_exact_refit_is_recorded_as_refit_on_the_named_split(model: torch.nn.Module,
                                                              digits: dict[str, torch.Tensor]) -> None:
    from bnconvention.authoring.declaration import make_convention

    data = make_convention(buffer_update_mode="refit", role="retain", dataset_id=DIGITS_DATASET_ID,
                           subset="retain", transform=DIGITS_TRAIN_TRANSFORM.standard(), rule="exact").data
    with BNRecorder(model, split="forget") as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=2, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
        report = refit(model, [digits["x_retain"][:64], digits["x_retain"][64:128]], rule="exact",
                                    data=data, transform=DIGITS_TRAIN_TRANSFORM.standard())
        methods.accuracy(model, digits["x"], digits["y"])
    obs = rec.observation()
    assert (obs.mode, obs.last_write, obs.rule, obs.refits) == ("refit", "refit", "exact", 1)
    assert (obs.split_tags, obs.last_update_split) == (["forget", "retain"], "retain")
    assert [layer.mode for layer in obs.layers] == ["refit"] * 4

    record = rec.declaration(declared_mode="refit", role="retain")
    assert record.convention.name == "refit/retain/train-transform/exact"
    assert record.convention.data == report.declaration.convention.data
    assert record.refit == report.declaration.refit
    assert record.observation is not None and record.observation.contradictions == []
    assert_valid_declaration(to_dict(record))


def test_refit_on_another_split_is_a_split_mismatch(model: torch.nn.Module,
                                                    digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model, split="forget") as rec:
        refit(model, [digits["x_forget"]], rule="exact")  # no data named: the recorder's tag
    obs = rec.observation(declared_mode="refit", role="retain")
    assert obs.mode == "refit" and obs.last_update_split == "other"
    assert [c.code for c in obs.contradictions] == [SPLIT_MISMATCH]


# --- contradictions -------------------------------------------------------------------------------------------------


def test_a_run_declared_frozen_whose_buffers_changed_is_flagged(model: torch.nn.Module,
                                                                digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model, split="forget") as rec:
        methods.random_relabel(model, digits["x_forget"][:16], digits["y_forget"][:16], epochs=1, lr=1e-3,
                               batch_size=8, generator=gen(), observer=rec)
    record = rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="class 3", transform=DIGITS_TRAIN_TRANSFORM,
                             declared_mode="frozen", role="forget")
    assert record.convention.buffer_update_mode == "train"  # as observed, not as claimed
    assert record.observation is not None
    (contradiction,) = record.observation.contradictions
    assert contradiction.code == DECLARED_FROZEN_BUFFERS_CHANGED
    assert contradiction.layers == LAYERS
    assert contradiction.message.startswith("declared 'frozen' but the running buffers of 'features.1'")
    _, issues = check_record(to_dict(record), source="record.json")
    assert [(i.code, i.severity) for i in issues] == [("record.observation_contradiction", "warning")]
    with pytest.raises(RecordError, match=r"\[declared-frozen-buffers-changed\]"):
        rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="class 3", transform=DIGITS_TRAIN_TRANSFORM,
                        declared_mode="frozen", strict=True)


def test_a_refit_declared_on_retain_after_forget_updates_is_flagged(model: torch.nn.Module,
                                                                    digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model, split="retain") as rec:
        methods.train_classifier(model, digits["x_retain"][:16], digits["y_retain"][:16], epochs=1, lr=1e-3,
                                 batch_size=16, generator=gen(), split_tag="retain", observer=rec)
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=1, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
    obs = rec.observation(declared_mode="refit", role="retain")
    assert [c.code for c in obs.contradictions] == ["declared-refit-no-refit", SPLIT_MISMATCH]
    assert obs.split_tags == ["retain", "forget"]


def test_a_run_declared_train_without_buffer_updates_is_flagged(model: torch.nn.Module,
                                                                digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=2, lr=1e-3, batch_size=8,
                                bn_mode="eval", generator=gen(), observer=rec)
    obs = rec.observation(declared_mode="train")
    assert obs.mode == "frozen"
    assert [c.code for c in obs.contradictions] == [DECLARED_TRAIN_NO_BUFFER_UPDATE]


def test_buffers_written_behind_the_recorders_back_are_unknown(model: torch.nn.Module,
                                                               base_state: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        model.features[4].running_mean.add_(1.0)
    obs = rec.observation()
    assert obs.mode == "unknown"
    assert [(layer.name, layer.mode) for layer in obs.layers] == [
        ("features.1", "untouched"), ("features.4", "unknown"), ("features.8", "untouched"),
        ("features.11", "untouched")]
    assert [(c.code, c.layers) for c in obs.contradictions] == [(UNOBSERVED_BUFFER_WRITE, ["features.4"])]


def test_updates_then_restored_buffers_are_unknown(model: torch.nn.Module, digits: dict[str, torch.Tensor],
                                                  base_state: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=1, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
        running = {k: v for k, v in base_state.items() if "running" in k or "num_batches" in k}
        model.load_state_dict(running, strict=False)
    assert rec.observation().mode == "unknown"


# --- modes ------------------------------------------------------------------------------------------------------------


def test_train_steps_followed_by_frozen_steps_are_mixed(model: torch.nn.Module,
                                                        digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=2, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=2, lr=1e-3, batch_size=8,
                                bn_mode="eval", generator=gen(), observer=rec)
    obs = rec.observation()
    assert (obs.mode, obs.buffer_updates, obs.frozen_forwards) == ("mixed", 2, 2)


def test_frozen_steps_followed_by_train_steps_are_train(model: torch.nn.Module,
                                                        digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=2, lr=1e-3, batch_size=8,
                                bn_mode="eval", generator=gen(), observer=rec)
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=2, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
    assert rec.observation().mode == "train"


def test_some_layers_updated_and_others_not_is_mixed(model: torch.nn.Module,
                                                     digits: dict[str, torch.Tensor]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with BNRecorder(model) as rec:
        model.train()
        model.features[11].eval()  # the last layer frozen, the others updating
        loss = torch.nn.functional.cross_entropy(model(digits["x"][:8]), digits["y"][:8])
        loss.backward()
        optimizer.step()
    obs = rec.observation()
    assert obs.mode == "mixed"
    assert [layer.mode for layer in obs.layers] == ["train", "train", "train", "frozen"]


def test_cumulative_momentum_is_recorded_as_cumulative(model: torch.nn.Module,
                                                       digits: dict[str, torch.Tensor]) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None
    with BNRecorder(model, split="retain") as rec, torch.no_grad():
        model.train()
        model(digits["x_retain"][:20])
        model(digits["x_retain"][20:50])
    obs = rec.observation()
    assert (obs.mode, obs.rule, obs.momentum, obs.trainable_changed) == ("train", "cumulative", None, False)
    assert (obs.batch_size_min, obs.batch_size_max) == (20, 30)
    record = rec.declaration(dataset_id=DIGITS_DATASET_ID, subset="retain", transform=DIGITS_TRAIN_TRANSFORM)
    assert record.convention.name == "train/retain/train-transform/cumulative"


def test_a_momentum_change_mid_run_is_flagged(model: torch.nn.Module, digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec, torch.no_grad():
        model.train()
        model(digits["x"][:8])
        model.features[1].momentum = 0.5
        model(digits["x"][:8])
    obs = rec.observation()
    assert [(c.code, c.layers) for c in obs.contradictions] == [("momentum-varies", ["features.1"])]
    assert obs.layers[0].momenta == [0.1, 0.5]
    assert (obs.rule, obs.momentum) == ("ema", 0.1)  # the last update was of features.11, still at 0.1


def test_model_without_running_statistics_is_untouched(digits: dict[str, torch.Tensor]) -> None:
    model = convnet_gn(width=8)
    with BNRecorder(model) as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=1, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
    obs = rec.observation()
    assert (obs.mode, obs.layers, obs.buffer_updates, obs.trainable_changed) == ("untouched", [], 0, True)


def test_a_layer_without_running_statistics_takes_no_part() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                torch.nn.BatchNorm1d(3, track_running_stats=False), torch.nn.Dropout(0.5))
    with BNRecorder(model, split="retain") as rec, torch.no_grad():
        model(torch.randn(6, 4))
    obs = rec.observation()
    assert [(layer.name, layer.mode, layer.train_forwards, layer.buffer_updates) for layer in obs.layers] == [
        ("1", "train", 1, 1), ("2", None, 1, 0)]
    assert (obs.mode, obs.dropout) == ("train", "on")


# --- split tags, lifecycle, serialisation -----------------------------------------------------------------------------


def test_split_tags_follow_updates_in_order_of_first_appearance(model: torch.nn.Module) -> None:
    x = torch.rand(4, 1, 16, 16)
    with BNRecorder(model, split="warmup") as rec, torch.no_grad():
        model.eval()
        model(x)  # evaluation: no update, so "warmup" is never a fitting split
        model.train()
        rec.set_split("retain")
        model(x)
        with rec.tagged("forget"):
            model(x)
            assert rec.split == "forget"
        model(x)
    obs = rec.observation()
    assert (obs.split_tags, obs.last_update_split) == (["retain", "forget"], "retain")


def test_hooks_are_removed_on_exit_even_after_an_error(model: torch.nn.Module) -> None:
    with pytest.raises(ZeroDivisionError), BNRecorder(model) as rec:
        1 / 0  # noqa: B018
    assert all(not module._forward_pre_hooks for module in model.modules())
    model.train()
    model(torch.rand(4, 1, 16, 16))
    refit(model, [torch.rand(4, 1, 16, 16)])  # the refit listener is gone too
    obs = rec.observation()
    assert (obs.buffer_updates, obs.refits) == (0, 0)


def test_a_recorder_records_one_run(model: torch.nn.Module) -> None:
    rec = BNRecorder(model)
    with pytest.raises(UsageError, match="has not run yet"):
        rec.observation()
    with rec:
        pass
    with pytest.raises(UsageError, match="records one run"), rec:
        pass


@pytest.mark.parametrize("bad", [pytest.param("", id="empty"), pytest.param("  ", id="blank"),
                                 pytest.param(3, id="not-a-string")])
def test_bad_split_tags_are_refused(model: torch.nn.Module, bad: object) -> None:
    with pytest.raises(UsageError, match="split tag is a non-empty string"):
        BNRecorder(model, split=bad)  # type: ignore[arg-type]


def test_not_a_module_is_refused() -> None:
    with pytest.raises(UsageError, match="got dict"):
        BNRecorder({})  # type: ignore[arg-type]


def test_a_deep_copy_made_inside_the_block_is_not_recorded(model: torch.nn.Module) -> None:
    with BNRecorder(model) as rec, torch.no_grad():
        twin = copy.deepcopy(model)  # copies the hooks along with the modules
        twin.train()
        twin(torch.rand(4, 1, 16, 16))
    obs = rec.observation()
    assert (obs.train_forwards, obs.buffer_updates, obs.mode) == (0, 0, "untouched")


def test_observation_inside_the_block_reads_the_state_now(model: torch.nn.Module) -> None:
    with BNRecorder(model) as rec, torch.no_grad():
        model.train()
        model(torch.rand(4, 1, 16, 16))
        assert rec.observation().buffers_changed


def test_declaration_without_dataset_is_refused(model: torch.nn.Module) -> None:
    with BNRecorder(model) as rec:
        pass
    with pytest.raises(RecordError, match="declaration needs dataset_id, subset, transform"):
        rec.declaration(role="train")


def test_observation_round_trips_through_json(model: torch.nn.Module, digits: dict[str, torch.Tensor]) -> None:
    with BNRecorder(model) as rec:
        methods.gradient_ascent(model, digits["x_forget"], digits["y_forget"], steps=1, lr=1e-3, batch_size=8,
                                generator=gen(), observer=rec)
    obs = rec.observation(declared_mode="frozen")
    assert Observation.model_validate(to_dict(obs)) == obs
